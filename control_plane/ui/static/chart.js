// The frontier chart: one SVG point per pair with figures, drawn from the /ui/api/table view.
// x = estimated cost of the category's typical request, y = accuracy in the category,
// size and colour = predicted latency at load 1. Frontier pairs get a dark ring, pruned pairs
// are hollow and dashed. A vertical error bar runs from the accuracy's lower bound (what floors
// are compared with) to its upper bound, when the table carries them. No library: plain DOM calls, so nothing is fetched from elsewhere.

const SVG_NS = "http://www.w3.org/2000/svg";
const WIDTH = 920;
const HEIGHT = 420;
const MARGIN = { left: 64, right: 28, top: 18, bottom: 52 };
const SEPARATORS = "-._/";

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

function niceStep(span, count) {
  const raw = span / Math.max(1, count);
  const power = Math.pow(10, Math.floor(Math.log10(raw)));
  const unit = raw / power;
  return (unit >= 5 ? 10 : unit >= 2 ? 5 : unit >= 1 ? 2 : 1) * power;
}

function linearTicks(lo, hi, count) {
  const step = niceStep(hi - lo, count);
  const ticks = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(t);
  return ticks;
}

function logTicks(lo, hi) {
  const ticks = [];
  for (let p = Math.floor(Math.log10(lo)); p <= Math.ceil(Math.log10(hi)); p++) {
    for (const m of [1, 2, 5]) {
      const t = m * Math.pow(10, p);
      if (t >= lo && t <= hi) ticks.push(t);
    }
  }
  return ticks;
}

function padded(lo, hi, share) {
  const span = hi - lo || Math.abs(hi) * 0.2 || 1;
  return [lo - span * share, hi + span * share];
}

// The x scale: logarithmic when costs span more than a factor of 4, else linear.
function costScale(values, x0, x1) {
  const lo = Math.min(...values);
  const hi = Math.max(...values);
  if (lo > 0 && hi / lo > 4) {
    const [a, b] = padded(Math.log10(lo), Math.log10(hi), 0.08);
    const map = (v) => x0 + ((Math.log10(v) - a) / (b - a)) * (x1 - x0);
    return { map, ticks: logTicks(10 ** a, 10 ** b), log: true };
  }
  const [a, b] = padded(lo, hi, 0.1);
  const lower = Math.max(0, a);
  const map = (v) => x0 + ((v - lower) / (b - lower)) * (x1 - x0);
  return { map, ticks: linearTicks(lower, b, 6), log: false };
}

function accuracyScale(values, y0, y1) {
  let [lo, hi] = padded(Math.min(...values), Math.max(...values), 0.15);
  lo = Math.max(0, lo);
  hi = Math.min(1, hi);
  if (hi - lo < 0.05) [lo, hi] = [Math.max(0, hi - 0.1), Math.min(1, lo + 0.1)];
  const map = (v) => y0 - ((v - lo) / (hi - lo)) * (y0 - y1);
  return { map, ticks: linearTicks(lo, hi, 6) };
}

export function latencyColour(share) {
  const hue = 130 - 130 * Math.min(1, Math.max(0, share));
  return `hsl(${hue.toFixed(0)}, 60%, 46%)`;
}

export function costLabel(usd) {
  if (usd >= 100) return `$${usd.toFixed(0)}`;
  if (usd >= 1) return `$${usd.toFixed(2)}`;
  return `$${Number(usd.toPrecision(2))}`;
}

// Short names for labels: the family part that differs between families, plus the quantization.
export function shortNames(pairs) {
  const families = [...new Set(pairs.map((p) => p.family))];
  let head = 0;
  let tail = 0;
  if (families.length > 1) {
    const first = families[0];
    const shortest = Math.min(...families.map((f) => f.length));
    while (head < shortest && families.every((f) => f[head] === first[head])) head++;
    while (tail < shortest - head &&
           families.every((f) => f[f.length - 1 - tail] === first[first.length - 1 - tail])) tail++;
    // Cut at separators only: "llama-3.1-8b-instruct" and "llama-3.1-70b-instruct" give 8b, 70b.
    while (head > 0 && !SEPARATORS.includes(first[head - 1])) head--;
    while (tail > 0 && !SEPARATORS.includes(first[first.length - tail])) tail--;
  }
  const names = {};
  for (const p of pairs) {
    const core = families.length > 1 ? p.family.slice(head, p.family.length - tail) : "";
    names[p.pair] = core ? `${core}@${p.quantization}` : p.quantization;
  }
  return names;
}

function axes(root, xs, ys, box, category) {
  const [x0, x1, y0, y1] = box;
  const grid = svg("g", { class: "axis" });
  for (const t of ys.ticks) {
    const y = ys.map(t);
    grid.append(svg("line", { class: "gridline", x1: x0, x2: x1, y1: y, y2: y }));
    grid.append(svg("text", { x: x0 - 8, y: y + 4, "text-anchor": "end" }, t.toFixed(2)));
  }
  for (const t of xs.ticks) {
    const x = xs.map(t);
    grid.append(svg("line", { class: "gridline", x1: x, x2: x, y1: y1, y2: y0 }));
    grid.append(svg("text", { x, y: y0 + 18, "text-anchor": "middle" }, costLabel(t)));
  }
  grid.append(svg("line", { x1: x0, x2: x1, y1: y0, y2: y0 }));
  grid.append(svg("line", { x1: x0, x2: x0, y1: y1, y2: y0 }));
  const scale = xs.log ? ", log scale" : "";
  grid.append(svg("text", { class: "axis-title", x: (x0 + x1) / 2, y: HEIGHT - 8,
    "text-anchor": "middle" }, `estimated cost per 1,000 typical ${category} requests (USD${scale})`));
  grid.append(svg("text", { class: "axis-title", x: 14, y: (y0 + y1) / 2, "text-anchor": "middle",
    transform: `rotate(-90 14 ${(y0 + y1) / 2})` }, `accuracy on ${category}`));
  root.append(grid);
}

function overlaps(a, b) {
  return a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1;
}

// Place a label right of its point, else nudged up/down or to the left, avoiding earlier ones.
function placeLabel(placed, point, text, right) {
  const width = text.length * 6.4;
  const tries = [0, -13, 13, -26, 26];
  for (const side of [1, -1]) {
    for (const dy of tries) {
      const x = side > 0 ? point.x + point.r + 4 : point.x - point.r - 4 - width;
      const box = { x0: x, x1: x + width, y0: point.y + dy - 9, y1: point.y + dy + 4 };
      if (box.x1 > right && side > 0) continue;
      if (!placed.some((b) => overlaps(b, box))) {
        placed.push(box);
        return { x, y: point.y + dy + 4 };
      }
    }
  }
  return { x: point.x + point.r + 4, y: point.y + 4 };
}

function tooltip(p, c, category) {
  const status = p.status === "pruned" ? `pruned (dominated by ${p.dominated_by})` :
    c.frontier ? "on the frontier" : "served, not on the frontier";
  const counts = c.n === null || c.n === undefined ? "" : ` (${c.right}/${c.n})`;
  const bounds = c.bound === null || c.bound === undefined || c.upper === null ||
    c.upper === undefined ? "" : `\ninterval [${c.bound.toFixed(3)}, ${c.upper.toFixed(3)}]`;
  return `${p.pair}: ${status}\naccuracy on ${category} ${c.accuracy.toFixed(3)}${counts}${bounds}\n` +
    `cost per 1,000 requests ${costLabel(c.cost_usd * 1000)}\n` +
    `predicted latency at load 1 ${c.latency_s.toFixed(2)} s`;
}

function hasBar(c) {
  return c.bound !== null && c.bound !== undefined && c.upper !== null && c.upper !== undefined;
}

// A vertical bar from the lower to the upper bound, with short caps.
function errorBar(x, yLow, yHigh, pair) {
  const bar = svg("g", { class: "error-bar", "data-pair": pair });
  bar.append(svg("line", { x1: x.toFixed(1), x2: x.toFixed(1), y1: yLow.toFixed(1), y2: yHigh.toFixed(1) }));
  for (const y of [yLow, yHigh]) {
    bar.append(svg("line", { x1: (x - 5).toFixed(1), x2: (x + 5).toFixed(1), y1: y.toFixed(1), y2: y.toFixed(1) }));
  }
  return bar;
}

// Draw the chart for `category` into `container`; returns the number of points drawn.
export function drawFrontier(container, pairs, category) {
  container.replaceChildren();
  const shown = pairs.filter((p) => p.categories[category]);
  if (shown.length === 0) {
    container.append(document.createTextNode("No pair has figures for this category."));
    return 0;
  }
  const root = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, "data-category": category });
  const box = [MARGIN.left, WIDTH - MARGIN.right, HEIGHT - MARGIN.bottom, MARGIN.top];
  const points = shown.map((p) => ({ pair: p, c: p.categories[category] }));
  const xs = costScale(points.map((q) => q.c.cost_usd * 1000), box[0], box[1]);
  const spans = points.flatMap((q) => [q.c.accuracy, ...(hasBar(q.c) ? [q.c.bound, q.c.upper] : [])]);
  const ys = accuracyScale(spans, box[2], box[3]);
  axes(root, xs, ys, box, category);
  const lat = points.map((q) => q.c.latency_s);
  const [lo, hi] = [Math.min(...lat), Math.max(...lat)];
  const names = shortNames(shown);
  const placed = [];
  const bars = svg("g", { class: "error-bars" });
  const layer = svg("g", { class: "points" });
  const labels = svg("g", { class: "labels" });
  // Slow (large) points first, so small ones stay visible on top.
  points.sort((a, b) => b.c.latency_s - a.c.latency_s);
  for (const { pair: p, c } of points) {
    const share = hi > lo ? (c.latency_s - lo) / (hi - lo) : 0;
    const r = 6 + 9 * Math.sqrt(share);
    const x = xs.map(c.cost_usd * 1000);
    const y = ys.map(c.accuracy);
    const kind = p.status === "pruned" ? "pruned" : c.frontier ? "served frontier" : "served";
    if (hasBar(c)) bars.append(errorBar(x, ys.map(c.bound), ys.map(c.upper), p.pair));
    const circle = svg("circle", { class: `point ${kind}`, cx: x.toFixed(1), cy: y.toFixed(1),
      r: r.toFixed(1), "data-pair": p.pair, fill: kind === "pruned" ? "none" : latencyColour(share) });
    circle.append(svg("title", {}, tooltip(p, c, category)));
    layer.append(circle);
    const spot = placeLabel(placed, { x, y, r }, names[p.pair], box[1]);
    labels.append(svg("text", { class: "label", x: spot.x.toFixed(1), y: spot.y.toFixed(1),
      "data-pair": p.pair }, names[p.pair]));
  }
  root.append(bars, layer, labels);
  container.append(root);
  return points.length;
}
