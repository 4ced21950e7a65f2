// The operator page: reads /ui/api/table once (and again when the current version moves),
// /ui/api/live every 3 s, /ui/api/loop every 10 s, and asks /ui/api/route for the explainer. Every value reaches the
// DOM as text (textContent), never as HTML. The admin token stays in this page's memory.
import { costLabel, drawFrontier } from "./chart.js";

const LIVE_INTERVAL_MS = 3000;
const LOOP_INTERVAL_MS = 10000;
const state = { overview: null, category: null, viewVersion: null, armed: null };
const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "class") node.className = value;
    else if (name.startsWith("data-")) node.setAttribute(name, value);
    else node[name] = value;
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const fmt = {
  num: (v, digits = 2) => (v === null || v === undefined ? "–" : Number(v).toFixed(digits)),
  usd: (v) => (v === null || v === undefined ? "–" : v >= 0.01 ? `$${v.toFixed(3)}` :
    `$${Number(v.toPrecision(3))}`),
  secs: (v) => (v === null || v === undefined ? "–" : v < 1 ? `${(v * 1000).toFixed(0)} ms` :
    `${v.toFixed(2)} s`),
  when: (iso) => (iso ? new Date(iso).toISOString().replace("T", " ").slice(0, 19) + " UTC" : "–"),
};

function authHeaders() {
  const token = $("admin-token").value.trim();
  return token ? { Authorization: `Bearer ${token}` } : {};
}

function banner(text, kind = "warn") {
  const node = $("banner");
  node.hidden = !text;
  node.className = `banner ${kind === "error" ? "error" : ""}`;
  node.textContent = text || "";
}

async function getJson(url) {
  const resp = await fetch(url, { headers: { Accept: "application/json", ...authHeaders() } });
  const body = await resp.json().catch(() => null);
  if (!resp.ok) {
    const message = body?.error?.message || `${resp.status} ${resp.statusText}`;
    throw new Error(resp.status === 401 ? `${message}. Reads need the admin token here: type ` +
      "it at the top right." : message);
  }
  return body;
}

// ---- table, chart and pairs ---------------------------------------------------------------

function renderMeta(table, overview) {
  const viewing = table.version !== overview.current_version;
  $("table-version").textContent = overview.current_version ? `current v${overview.current_version}`
    : "no table";
  $("table-title").textContent = `v${table.version}${viewing ? " (not current)" : ""}`;
  $("back-to-current").hidden = !viewing;
  const items = [
    ["created", fmt.when(table.created_at)],
    ["content", table.content_sha256.slice(0, 12)],
    ["latency quantile", `p${Math.round(table.latency_quantile * 100)}`],
    ["budget mode", table.budget_mode],
    ["default category", table.default_category],
    ["reference request", `${table.reference_input_tokens} in / ${table.reference_output_tokens} out tokens`],
    ["pairs", `${table.pairs.filter((p) => p.status === "served").length} served, ` +
      `${table.pairs.filter((p) => p.status === "pruned").length} pruned`],
    ["floors", `met at ${Math.round(table.floor_confidence * 100)}% confidence, ` +
      `unknown below ${table.min_eval_items} eval items`],
    ["fleet baseline", table.fleet_baseline || "–"],
  ];
  $("table-meta").replaceChildren(...items.map(([k, v]) => el("div", {}, el("dt", {}, k),
    el("dd", {}, v))));
  $("table-notes").replaceChildren(...table.notes.map((n) => el("li", {}, n)));
}

function renderCategories(table) {
  if (!table.categories.includes(state.category)) state.category = table.default_category;
  const options = table.categories.map((c) => el("option", { value: c, selected: c === state.category }, c));
  $("category").replaceChildren(...options);
  const explain = $("f-category");
  const chosen = explain.value;
  explain.replaceChildren(el("option", { value: "" }, "detect from the prompt"),
    ...table.categories.map((c) => el("option", { value: c, selected: c === chosen }, c)));
  const models = ["auto", ...new Set(table.pairs.filter((p) => p.status === "served")
    .flatMap((p) => [p.family, p.pair]))];
  $("model-options").replaceChildren(...models.map((m) => el("option", { value: m })));
}

function renderChart(table) {
  const category = state.category;
  const n = drawFrontier($("frontier"), table.pairs, category);
  const typical = table.typical_output_tokens[category];
  $("frontier-caption").textContent = `${n} pair(s). A typical ${category} request: ` +
    `${table.reference_input_tokens} input and ${typical} output tokens, predicted at load 1 ` +
    `(p${Math.round(table.latency_quantile * 100)}). Hover a point for its figures.`;
  const fast = Math.min(...table.pairs.filter((p) => p.categories[category])
    .map((p) => p.categories[category].latency_s));
  const slow = Math.max(...table.pairs.filter((p) => p.categories[category])
    .map((p) => p.categories[category].latency_s));
  $("frontier-legend").replaceChildren(
    el("span", {}, el("span", { class: "swatch frontier" }), "on the frontier (no pair is cheaper, faster and more accurate)"),
    el("span", {}, el("span", { class: "swatch served" }), "served"),
    el("span", {}, el("span", { class: "swatch pruned" }), "pruned (dominated)"),
    el("span", {}, `bars: accuracy interval at ${Math.round(table.floor_confidence * 100)}% ` +
      "confidence each side (a floor is met when the bar's bottom reaches it)"),
    el("span", {}, "latency ", fmt.secs(fast), el("span", { class: "ramp" }), fmt.secs(slow),
      " (larger = slower)"),
  );
  renderPairs(table);
}

function statusCell(p) {
  if (p.status === "pruned") {
    return el("td", { class: "status" }, el("span", { class: "pill pruned" }, `pruned: dominated by ${p.dominated_by}`));
  }
  return el("td", {}, el("span", { class: "pill served" }, p.baseline ? "served · baseline" : "served"));
}

function categoryCell(p, category) {
  const c = p.categories[category];
  const selected = category === state.category ? "selected num" : "num";
  if (!c) return el("td", { class: selected }, "–");
  const utility = c.utility === null ? "" : ` u ${fmt.num(c.utility)}`;
  const counts = c.n === null || c.n === undefined ? "" : ` ${c.right}/${c.n}`;
  const interval = c.bound === null || c.bound === undefined ? "" :
    ` [${fmt.num(c.bound, 3)}, ${c.upper === null || c.upper === undefined ? "–" : fmt.num(c.upper, 3)}]`;
  return el("td", { class: selected, title: c.frontier ? "on this category's frontier" : "",
    "data-n": c.n === null || c.n === undefined ? "" : String(c.n) },
    el("b", {}, fmt.num(c.accuracy)), el("span", { class: "muted interval" }, `${counts}${interval}`),
    el("span", { class: "muted" }, utility), c.frontier ? " ◆" : "");
}

function renderPairs(table) {
  const head = el("tr", {}, ...["pair", "status", "endpoints", "$ / Mtok in · out",
    "per 1k ref. requests", "latency (ref, load 1)"].map((h) => el("th", {}, h)),
    ...table.categories.map((c) => el("th", { class: c === state.category ? "selected num" : "num" },
      `${c} acc · right/n [bounds] · utility`)));
  $("pairs-table").tHead.replaceChildren(head);
  const rows = table.pairs.map((p) => el("tr", { class: p.status, "data-pair": p.pair },
    el("td", {}, p.pair), statusCell(p),
    el("td", { title: p.endpoints.join(", ") }, p.endpoints.length ? String(p.endpoints.length) : "–"),
    el("td", { class: "num" }, p.input_usd_per_mtok === null ? "–" :
      `${fmt.num(p.input_usd_per_mtok, 3)} · ${fmt.num(p.output_usd_per_mtok, 3)}`),
    el("td", { class: "num" }, p.reference_cost_usd === null ? "–" : costLabel(p.reference_cost_usd * 1000)),
    el("td", { class: "num" }, fmt.secs(p.reference_latency_s)),
    ...table.categories.map((c) => categoryCell(p, c))));
  $("pairs-table").tBodies[0].replaceChildren(...rows);
}

function renderHistory(overview) {
  const shown = overview.table ? overview.table.version : null;
  const rows = overview.history.map((v) => {
    const actions = el("td", { class: "actions" });
    if (v.version !== shown) {
      actions.append(el("button", { type: "button", class: "secondary", "data-action": "view",
        onclick: () => loadOverview(v.current ? null : v.version) }, "view"));
    }
    if (!v.current) {
      const armed = state.armed === v.version;
      actions.append(el("button", { type: "button", class: armed ? "danger" : "secondary",
        "data-action": "rollback", onclick: () => rollback(v.version) },
        armed ? `confirm: make v${v.version} current` : "roll back to this"));
    }
    return el("tr", { class: v.current ? "current" : "", "data-version": String(v.version) },
      el("td", {}, `v${v.version}${v.current ? " (current)" : ""}`), el("td", {}, fmt.when(v.created_at)),
      el("td", {}, (v.content_sha256 || "unreadable").slice(0, 12)), el("td", {}, String(v.entries)),
      actions);
  });
  $("history-table").tBodies[0].replaceChildren(...rows);
}

async function loadOverview(version = state.viewVersion) {
  state.viewVersion = version;
  const query = version ? `?version=${encodeURIComponent(version)}` : "";
  try {
    const overview = await getJson(`/ui/api/table${query}`);
    state.overview = overview;
    banner(overview.table ? "" : "No routing table has been published yet: push profiles and POST /v1/tables.");
    $("explain-disabled").hidden = overview.explainer;
    $("explain-submit").disabled = !overview.explainer;
    renderHistory(overview);
    if (overview.table) {
      renderMeta(overview.table, overview);
      renderCategories(overview.table);
      renderChart(overview.table);
    }
  } catch (err) {
    banner(`Could not load the table: ${err.message}`, "error");
  }
}

async function rollback(version) {
  if (state.armed !== version) {
    state.armed = version;
    renderHistory(state.overview);
    return;
  }
  state.armed = null;
  const resp = await fetch("/v1/tables/rollback", {
    method: "POST",
    headers: { "Content-Type": "application/json", ...authHeaders() },
    body: JSON.stringify({ version }),
  });
  const body = await resp.json().catch(() => null);
  if (!resp.ok) {
    banner(`Rollback to v${version} failed: ${body?.error?.message || resp.status}`, "error");
    renderHistory(state.overview);
    return;
  }
  banner(`Rolled back: v${body.version} is current (was v${body.previous_version}).`);
  await loadOverview(null);
}

// ---- live state ---------------------------------------------------------------------------

function shareBar(share) {
  const bar = el("span", { class: "bar" });
  bar.style.width = `${Math.round(100 * share)}px`; // CSSOM: allowed by the style-src policy
  return bar;
}

function renderLive(live) {
  $("live-empty").hidden = live.instances.length > 0;
  $("live-updated").textContent = `updated ${new Date(live.generated_at).toLocaleTimeString()}` +
    (live.unreadable_states ? ` · ${live.unreadable_states} unreadable state(s)` : "");
  $("live-instances").tBodies[0].replaceChildren(...live.instances.map((i) => el("tr",
    { "data-instance": i.instance },
    el("td", {}, i.instance),
    el("td", {}, el("span", { class: `pill ${i.stale ? "stale" : "closed"}`,
      title: i.stale ? "serves another version than the current table" : "" },
      i.table_version === null ? "none" : `v${i.table_version}`)),
    el("td", { class: "num" }, `${i.age_s.toFixed(0)} s`),
    el("td", { class: "num" }, String(i.requests_total)),
    el("td", { class: "num" }, String(i.fallbacks_total)),
    el("td", { class: "num" }, String(i.open_breakers)))));
  $("live-endpoints").tBodies[0].replaceChildren(...live.endpoints.map((e) => el("tr",
    { "data-endpoint": e.endpoint_id },
    el("td", {}, e.endpoint_id),
    el("td", { class: "breaker" }, el("span", { class: `pill ${e.breaker}` }, e.breaker.replace("_", "-"))),
    el("td", { class: "num" }, String(e.in_flight)),
    el("td", { class: "muted small" }, Object.entries(e.breakers).map(([k, v]) => `${k}: ${v}`).join(", ")))));
  const total = Object.values(live.requests_by_pair).reduce((a, b) => a + b, 0);
  const traffic = Object.entries(live.requests_by_pair).map(([pair, n]) => el("tr",
    { "data-pair": pair }, el("td", {}, pair), el("td", { class: "num" }, String(n)),
    el("td", {}, shareBar(total ? n / total : 0), ` ${total ? ((100 * n) / total).toFixed(0) : 0}%`)));
  if (!traffic.length) traffic.push(el("tr", {}, el("td", { colSpan: 3, class: "muted" }, "no requests yet")));
  $("live-traffic").tBodies[0].replaceChildren(...traffic);
  renderPairsLive(live);
  return live.current_table_version;
}

const pct = (v) => (v === null || v === undefined ? "–" : `${(100 * v).toFixed(1)}%`);
const ratio = (v) => (v === null || v === undefined ? "–" : `${v.toFixed(2)}×`);
const none = (cols, text) => el("tr", {}, el("td", { colSpan: cols, class: "muted" }, text));

function renderPairsLive(live) {
  const pairs = live.pairs || [];
  const rows = pairs.map((p) => el("tr", { "data-pair": p.pair },
    el("td", {}, p.pair),
    el("td", { class: "num requests" }, String(p.requests)),
    el("td", { class: "num observed" }, fmt.secs(p.observed_mean_s)),
    el("td", { class: "num predicted" }, fmt.secs(p.predicted_mean_s)),
    el("td", { class: "num ratio" }, `${ratio(p.ratio_p50)} · ${ratio(p.ratio_p95)}`),
    el("td", { class: "num attainment", title: `${p.budget_met} met, ${p.budget_missed} missed` },
      pct(p.budget_attainment)),
    el("td", { class: "num errors", title: `${p.errors} failed attempt(s)` }, pct(p.error_rate)),
    el("td", { class: "num retries", title: `${p.retries} retr(ies)` }, pct(p.retry_rate)),
    el("td", { class: "num cost" }, fmt.usd(p.cost_usd)),
    el("td", { class: "num saved" }, fmt.usd(p.cost_saved_usd)),
    el("td", { class: "num fleet-saved" }, fmt.usd(p.fleet_cost_saved_usd))));
  if (!rows.length) rows.push(none(11, "no data plane has reported per-pair counters yet"));
  $("live-pairs").tBodies[0].replaceChildren(...rows);
  const scopes = live.fleet_cost ? [["fleet", live.fleet_cost],
    ...Object.entries(live.family_cost).map(([f, c]) => [f, c])] : [];
  const cost = scopes.map(([scope, c]) => el("tr", { "data-scope": scope },
    el("td", {}, scope),
    el("td", { class: "num" }, String(c.requests)),
    el("td", { class: "num cost" }, fmt.usd(c.cost_usd)),
    el("td", { class: "num" }, fmt.usd(c.baseline_cost_usd)),
    el("td", { class: "num saved" }, fmt.usd(c.cost_saved_usd)),
    el("td", { class: "num" }, fmt.usd(c.fleet_baseline_cost_usd)),
    el("td", { class: "num fleet-saved" }, fmt.usd(c.fleet_cost_saved_usd))));
  if (!cost.length) cost.push(none(7, "no cost counted yet"));
  $("live-cost").tBodies[0].replaceChildren(...cost);
  renderClasses("live-priorities", live.priorities || [], "data-priority", true);
  renderClasses("live-tenants", live.tenants || [], "data-tenant", false);
}

// The queue's columns: requests that had to wait (both tables); per priority class also
// those waiting now and the queue's refusals, their reasons in the cell's title.
function queueCells(c, perClass) {
  const cells = [el("td", { class: "num queued" }, String(c.queued || 0))];
  if (!perClass) return cells;
  const refused = Object.entries(c.queue_refused || {});
  const total = refused.reduce((n, [, k]) => n + k, 0);
  const why = refused.map(([reason, k]) => `${k} ${reason}`).join(", ") || "none";
  cells.push(el("td", { class: "num waiting" }, String(c.waiting || 0)),
    el("td", { class: "num queue-refused", title: why }, String(total)));
  return cells;
}

function renderClasses(id, rows, key, perClass) {
  const body = rows.map((c) => el("tr", { [key]: c.name },
    el("td", {}, c.name),
    el("td", { class: "num requests" }, String(c.requests)),
    el("td", { class: "num shed", title: `${c.shed} shed` }, `${c.shed} (${pct(c.shed_rate)})`),
    el("td", { class: "num attainment", title: `${c.budget_met} met, ${c.budget_missed} missed` },
      pct(c.budget_attainment)),
    el("td", { class: "num cost" }, fmt.usd(c.cost_usd)),
    ...queueCells(c, perClass)));
  if (!body.length) body.push(none(perClass ? 8 : 6, "no requests counted yet"));
  $(id).tBodies[0].replaceChildren(...body);
}

function flag(drifting) {
  return el("span", { class: `pill ${drifting ? "open" : "closed"}` }, drifting ? "drifting" : "ok");
}

function renderLoop(loop) {
  $("loop-updated").textContent = `${loop.reports} feedback report(s) in the last ` +
    `${(loop.window_s / 60).toFixed(0)} min`;
  $("loop-policy").textContent = `Refit ${loop.refit_enabled ? "on" : "off"}` +
    (loop.pinned_version === null ? "" : `, pinned at v${loop.pinned_version}`) +
    ` · drifts beyond ±${(100 * loop.drift_threshold_ratio).toFixed(0)}% with ≥ ${loop.min_samples} samples`;
  const drift = loop.drift.map((d) => el("tr", { "data-pair": d.pair },
    el("td", {}, d.pair), el("td", { class: "num" }, String(d.samples)),
    el("td", { class: "num e2e" }, ratio(d.e2e_ratio)), el("td", { class: "num" }, ratio(d.ttft_ratio)),
    el("td", { class: "num" }, ratio(d.tpot_ratio)), el("td", { class: "drift" }, flag(d.drifting))));
  if (!drift.length) drift.push(none(6, "no latency feedback about the current table"));
  $("loop-drift").tBodies[0].replaceChildren(...drift);
  const agreement = loop.agreement.map((a) => el("tr", { "data-pair": a.pair, "data-category": a.category },
    el("td", {}, a.pair), el("td", {}, a.category), el("td", { class: "num" }, String(a.checks)),
    el("td", { class: "num live" }, fmt.num(a.agreement, 3)),
    el("td", { class: "num bounds" }, `${fmt.num(a.lower, 3)} … ${fmt.num(a.upper, 3)}`),
    el("td", { class: "num expected" }, fmt.num(a.expected, 3)),
    el("td", { class: "drift" }, a.demoted ? el("span", { class: "pill open" }, "demoted") : flag(a.drifting))));
  if (!agreement.length) agreement.push(none(7, "no accuracy checks about the current table"));
  $("loop-agreement").tBodies[0].replaceChildren(...agreement);
  const demotions = loop.demotions.map((d) => el("tr", { "data-pair": d.pair, "data-category": d.category },
    el("td", {}, d.pair), el("td", {}, d.category), el("td", { class: "num" }, fmt.num(d.profile_bound, 3)),
    el("td", { class: "num demoted" }, fmt.num(d.bound, 3)),
    el("td", { class: "num" }, `${d.agreed} / ${d.checks}`), el("td", {}, `v${d.base_version}`)));
  if (!demotions.length) demotions.push(none(6, "no accuracy demotion in force"));
  $("loop-demotions").tBodies[0].replaceChildren(...demotions);
  const refits = loop.refits.map((r) => el("tr", { "data-version": String(r.version) },
    el("td", {}, `v${r.version}`), el("td", {}, fmt.when(r.created_at)), el("td", {}, `v${r.base_version}`),
    el("td", { class: "note" }, r.note),
    el("td", { class: "small" }, Object.entries(r.factors).map(([p, [t, o]]) =>
      `${p}: ${t.toFixed(2)} · ${o.toFixed(2)}`).join(", ") || "–"),
    el("td", { class: "small" }, Object.entries(r.demoted).map(([p, cats]) => `${p}: ` +
      Object.entries(cats).map(([c, v]) => `${c} ${v.toFixed(3)}`).join(", ")).join("; ") || "–")));
  if (!refits.length) refits.push(none(6, "no kept version was refit from live traffic"));
  $("loop-refits").tBodies[0].replaceChildren(...refits);
  renderEvidence(loop.evidence);
}

function renderEvidence(ev) {
  $("evidence-summary").textContent = ev.requests === 0
    ? "No decisions in the feedback window yet: the data planes count them per category, floor and pair."
    : `Provable share ${pct(ev.provable_share)} of ${ev.requests} request(s) in the last ` +
      `${(ev.window_s / 60).toFixed(0)} min (some pair's bound meets the floor); more eval items ` +
      `could raise it to ${pct(ev.decidable_share)}; served under the guarantee ${pct(ev.proven_share)}.`;
  const rows = ev.rows.map((r) => el("tr", { "data-pair": r.pair, "data-category": r.category },
    el("td", {}, r.pair), el("td", {}, r.category), el("td", { class: "num" }, `${r.right}/${r.n}`),
    el("td", { class: "num" }, `${fmt.num(r.bound, 3)} … ${fmt.num(r.upper, 3)}`),
    el("td", { class: "num floors" }, r.floors.map((f) => f.toFixed(2)).join(", ")),
    el("td", { class: "num share" }, pct(r.share_moved)),
    el("td", { class: "num usd" }, r.usd_per_day >= 0 ? fmt.usd(r.usd_per_day) : `−${fmt.usd(-r.usd_per_day)}`),
    el("td", { class: "num items" }, r.items_needed === null ? "> 100,000" : String(r.items_needed)),
    el("td", {}, r.likely_pass ? "passes" : "fails")));
  if (!rows.length) rows.push(none(9, "every pair is decided against every floor of the mix"));
  $("evidence-rows").tBodies[0].replaceChildren(...rows);
}

async function refreshLoop() {
  try {
    renderLoop(await getJson("/ui/api/loop"));
  } catch (err) {
    $("loop-updated").textContent = `closed-loop view unavailable: ${err.message}`;
  }
}

async function refreshLive() {
  try {
    const live = await getJson("/ui/api/live");
    const current = renderLive(live);
    $("refreshed").textContent = `refreshed ${new Date().toLocaleTimeString()}`;
    if (state.overview && current !== state.overview.current_version && state.viewVersion === null) {
      await loadOverview(null);
    }
  } catch (err) {
    $("live-updated").textContent = `live state unavailable: ${err.message}`;
  }
}

// ---- decision explainer -------------------------------------------------------------------

function explainRequest() {
  const body = { model: $("f-model").value.trim() || "auto",
    messages: [{ role: "user", content: $("f-prompt").value }] };
  const maxTokens = $("f-max-tokens").value;
  if (maxTokens) body.max_tokens = Number(maxTokens);
  const headers = { "Content-Type": "application/json", ...authHeaders() };
  const fields = [["f-latency", "X-Latency-Budget-Ms"], ["f-ttft", "X-TTFT-Budget-Ms"],
    ["f-accuracy", "X-Min-Accuracy"], ["f-cost", "X-Max-Cost-Usd"], ["f-mode", "X-Budget-Mode"],
    ["f-category", "X-Task-Category"], ["f-api-key", "X-Gearbox-Api-Key"]];
  for (const [id, header] of fields) {
    const value = $(id).value.trim();
    if (value) headers[header] = value;
  }
  return { body, headers };
}

function candidatesTable(candidates) {
  return el("table", { class: "grid", id: "explain-candidates" },
    el("thead", {}, el("tr", {}, ...["#", "pair", "predicted latency", "predicted TTFT", "estimated cost",
      "accuracy", "load"].map((h) => el("th", {}, h)))),
    el("tbody", {}, ...candidates.map((c, i) => el("tr", { "data-pair": c.pair },
      el("td", {}, i === 0 ? "chosen" : `fallback ${i}`), el("td", {}, c.pair),
      el("td", { class: "num" }, fmt.secs(c.predicted_latency_s)), el("td", { class: "num" }, fmt.secs(c.predicted_ttft_s)),
      el("td", { class: "num" }, fmt.usd(c.estimated_cost_usd)), el("td", { class: "num" }, fmt.num(c.accuracy)),
      el("td", { class: "num" }, String(c.load))))));
}

function rejectedTable(rejected) {
  if (!rejected.length) return el("p", { class: "muted" }, "No pair was rejected.");
  return el("table", { class: "grid", id: "explain-rejected" },
    el("thead", {}, el("tr", {}, el("th", {}, "rejected pair"), el("th", {}, "reason"), el("th", {}, "detail"))),
    el("tbody", {}, ...rejected.map((r) => el("tr", { "data-pair": r.pair }, el("td", {}, r.pair),
      el("td", {}, r.reason.replaceAll("_", " ")), el("td", { class: "muted" }, r.detail)))));
}

function renderDecision(d) {
  const out = $("explain-result");
  if (!d.routed) {
    out.replaceChildren(el("div", { class: "chosen none", id: "explain-pair" }, `No route (${d.reason})`),
      el("p", { class: "summary", id: "explain-summary" }, d.summary), rejectedTable(d.rejected));
    return;
  }
  const budget = d.budget;
  out.replaceChildren(
    el("div", { class: "chosen", id: "explain-pair" }, `→ ${d.pair}`),
    el("div", { class: "muted small" }, `reason ${d.reason} · category ${d.category} · complexity ` +
      `${fmt.num(d.complexity)} · ${d.tokens.input} in / ${d.tokens.output} out tokens · table v${d.table_version}` +
      ` · ${budget.mode}, floor ${fmt.num(budget.min_accuracy)}, budget ${fmt.secs(budget.latency_s)}`),
    el("p", { class: "summary", id: "explain-summary" }, d.summary),
    el("h3", {}, "Candidates, in fallback order"), candidatesTable(d.candidates),
    el("h3", {}, "Rejected"), rejectedTable(d.rejected));
}

async function explain(event) {
  event.preventDefault();
  const { body, headers } = explainRequest();
  const out = $("explain-result");
  out.hidden = false;
  out.replaceChildren(el("p", { class: "muted" }, "asking the data plane…"));
  try {
    const resp = await fetch("/ui/api/route", { method: "POST", headers, body: JSON.stringify(body) });
    const answer = await resp.json().catch(() => null);
    if (!resp.ok || !answer || answer.error) {
      const e = answer?.error;
      out.replaceChildren(el("p", { class: "error", id: "explain-error" },
        e ? `${resp.status} ${e.code}: ${e.message}${e.param ? ` (${e.param})` : ""}` : `${resp.status} ${resp.statusText}`));
      return;
    }
    renderDecision(answer);
  } catch (err) {
    out.replaceChildren(el("p", { class: "error", id: "explain-error" }, `request failed: ${err.message}`));
  }
}

// ---- wiring -------------------------------------------------------------------------------

$("category").addEventListener("change", (e) => {
  state.category = e.target.value;
  if (state.overview?.table) renderChart(state.overview.table);
});
$("back-to-current").addEventListener("click", () => loadOverview(null));
$("explain-form").addEventListener("submit", explain);
// A typed token matters for reads only where reads are protected (or the last load failed).
$("admin-token").addEventListener("change", () => {
  if (state.overview === null || state.overview.protect_reads) {
    loadOverview();
    refreshLive();
    refreshLoop();
  }
});
await loadOverview(null);
await refreshLive();
await refreshLoop();
setInterval(refreshLive, LIVE_INTERVAL_MS);
setInterval(refreshLoop, LOOP_INTERVAL_MS);
document.body.dataset.ready = "true";
