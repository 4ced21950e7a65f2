"""Markdown and target checks of section 7's engine rows (`bench.hostile.engines`) (PURE)."""

from __future__ import annotations

import math

from bench.common.check import Check
from bench.hostile.engines import ORDINARY, PREFILL_S, EngineRows, PageRow, ToolsRow
from bench.hostile.segments import Paired, Pooled

P99_WITHIN = 1.2  # the ordinary clients' p99, as a multiple of the same run's clean figure
MiB = 1024 * 1024


def _statuses(statuses: dict[int, int]) -> str:
    return ", ".join(f"{n} x {'no answer' if s == -1 else s}" for s, n in sorted(statuses.items()))


def _ratio(figure: float, base: float) -> float:
    return figure / base if base > 0 else math.inf


def _pooled(kind: str, p: Pooled | None) -> str:
    if p is None:
        return ""
    slowest = ", ".join(f"{ms:.0f}" for ms in p.slowest_ms)
    return (
        f"; {kind}: {p.n} requests, p50 {p.p50_ms:.0f} ms, p99 {p.p99_ms:.0f} ms, "
        f"slowest {slowest} ms"
    )


def _paired(p: Paired | None) -> str:
    if p is None or not p.ratios:
        return ""
    return (
        f"; paired segments' p99 ratio: median {p.median:.2f}x of {len(p.ratios)} "
        f"({p.low:.2f}-{p.high:.2f}x)"
    )


def _tools_line(t: ToolsRow) -> str:
    openings = ", ".join(f"{e} {n}" for e, n in t.openings.items())
    prefill_s = t.prompt_tokens * PREFILL_S
    return (
        f"| tools-heavy prompts (about {t.prompt_tokens:,} tokens, {prefill_s:.1f} s of "
        f"prefill) | tools-heavy requests: {_statuses(t.heavy) or 'none'}; breaker "
        f"openings: {openings}; engine's prompt tokens / estimate {t.estimate_ratio:.3f} "
        f"(mean of {t.estimate_n} answers); ordinary p99 {t.p99_ms_with:.0f} ms, "
        f"{_ratio(t.p99_ms_with, t.p99_ms_without):.2f}x the run without "
        f"({t.p99_ms_without:.0f} ms); process CPU per ordinary request "
        f"{t.cpu_ms_with:.1f} ms against {t.cpu_ms_without:.1f} ms"
        f"{_pooled('with', t.pooled_with)}{_pooled('without', t.pooled_without)}"
        f"{_paired(t.paired)} | 0 openings, all "
        f"answered, p99 <= {P99_WITHIN:g}x |"
    )


def _page_line(p: PageRow) -> str:
    return (
        f"| one engine's `/metrics` page is {p.page_bytes // MiB} MiB | request p99 "
        f"{p.p99_ms_page:.0f} ms, {_ratio(p.p99_ms_page, p.p99_ms_clean):.2f}x the clean page's "
        f"({p.p99_ms_clean:.0f} ms; {p.requests[1]} and {p.requests[0]} requests, {p.non_200} "
        f"not 200); {p.scrape_errors} scrape errors counted; each page left after "
        f"{p.pages_left_at_mib:.1f} MiB; process CPU per ordinary request "
        f"{p.cpu_ms_page:.1f} ms against {p.cpu_ms_clean:.1f} ms"
        f"{_pooled('big page', p.pooled_page)}{_pooled('clean', p.pooled_clean)}"
        f"{_paired(p.paired)} | p99 <= {P99_WITHIN:g}x, "
        "errors counted |"
    )


def engine_lines(rows: EngineRows | None) -> list[str]:
    if rows is None:
        return []
    return [
        f"Engines that size or report differently ({rows.seconds:g} s per run, {ORDINARY} "
        "closed-loop ordinary clients; bench/hostile/engines.py):",
        "",
        "| row | measured | target |",
        "|---|---|---|",
        _tools_line(rows.tools),
        _page_line(rows.page),
        "",
    ]


def _tools_checks(t: ToolsRow) -> list[Check]:
    openings = sum(t.openings.values())
    sent = sum(t.heavy.values())
    answered = t.heavy.get(200, 0) / sent if sent else 0.0
    p99 = _ratio(t.p99_ms_with, t.p99_ms_without)
    ordinary_ok = set(t.ordinary) == {200}
    detail = f"{_statuses(t.heavy)}; estimate ratio {t.estimate_ratio:.3f}"
    return [
        Check(
            "hostile", "tools-heavy prompts: breaker openings of engines prefilling as profiled",
            float(openings), 0.0, math.nan, "", "0", openings == 0 and sent > 0, detail,
        ),
        Check(
            "hostile", "tools-heavy prompts: share answered (200), ordinary requests all 200",
            answered, 1.0, answered, "", "1.0", answered >= 1.0 and ordinary_ok,
            f"ordinary: {_statuses(t.ordinary)}",
        ),
        Check(
            "hostile", "tools-heavy prompts: ordinary clients' p99, x the run without them",
            p99, P99_WITHIN, p99 / P99_WITHIN, "x", f"<= {P99_WITHIN:g}",
            p99 <= P99_WITHIN and ordinary_ok,
            f"{t.p99_ms_with:.0f} ms against {t.p99_ms_without:.0f} ms",
        ),
    ]  # fmt: skip


def _page_check(p: PageRow) -> Check:
    p99 = _ratio(p.p99_ms_page, p.p99_ms_clean)
    ok = p99 <= P99_WITHIN and p.non_200 == 0 and p.scrape_errors > 0 and min(p.requests) > 0
    return Check(
        "hostile", f"a {p.page_bytes // MiB} MiB /metrics page: request p99, x the clean page's",
        p99, P99_WITHIN, p99 / P99_WITHIN, "x", f"<= {P99_WITHIN:g}", ok,
        f"{p.p99_ms_page:.0f} ms against {p.p99_ms_clean:.0f} ms; {p.scrape_errors} scrape "
        f"errors; {p.non_200} answers not 200",
    )  # fmt: skip


def engine_checks(rows: EngineRows | None) -> list[Check]:
    return [] if rows is None else [*_tools_checks(rows.tools), _page_check(rows.page)]
