"""`import-guidellm`: a GuideLLM benchmark report (its `--output kind=json`) -> load levels.

GuideLLM runs one benchmark per load level (a `concurrent` stream count, `synchronous`, a
`constant` or `poisson` arrival rate, `throughput`) and keeps every finished request with its
timings. Each request becomes the profiler's own `RequestTiming` (start, first token, end,
output and prompt tokens from the server's usage) and each benchmark goes through
`summarize_level`, so the levels are the same fit inputs as the profiler's own sweep: TTFT,
TPOT = (e2e - TTFT) / (tokens - 1), e2e, throughput over the measured window, and for an
arrival rate the concurrency by Little's law. GuideLLM's report holds no engine counters
(preemptions, queue depth): those stay unset.

Reading the file is here; `levels` is pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contracts.profile_report import LatencySample
from profiler.errors import InputError
from profiler.stats import RequestTiming, summarize_level

OPEN_LOOP = frozenset({"constant", "poisson"})


@dataclass(frozen=True, slots=True)
class GuideLLMReport:
    version: str | None
    model: str | None
    levels: tuple[LatencySample, ...]


def _timing(request: Mapping[str, Any], where: str) -> RequestTiming:
    try:
        times = request["info"]["timings"]
        start, first = float(times["request_start"]), float(times["first_token_iteration"])
        end = float(times["request_end"])
        tokens = int(request["output_metrics"]["text_tokens"])
        prompt = (request.get("input_metrics") or {}).get("text_tokens")
    except (KeyError, TypeError, ValueError) as err:
        raise InputError([f"{where}: a request without its timings or token counts"]) from err
    ttft, e2e = max(first - start, 0.0), max(end - start, 0.0)
    tpot = (e2e - ttft) / (tokens - 1) if tokens > 1 else None
    return RequestTiming(
        ttft_s=ttft,
        e2e_s=e2e,
        output_tokens=max(tokens, 1),
        tpot_s=None if tpot is None else max(tpot, 0.0),
        started_s=start,
        finished_s=end,
        prompt_tokens=int(prompt) if prompt else None,
    )


def _load(strategy: Mapping[str, Any], where: str) -> tuple[int, float | None]:
    """(concurrency, open-loop rate) of one benchmark's strategy."""
    kind = strategy.get("type_")
    if kind in OPEN_LOOP:
        return 1, float(strategy["rate"])
    if kind == "synchronous":
        return 1, None
    streams = strategy.get("streams") or strategy.get("max_concurrency")
    if kind in {"concurrent", "throughput"} and isinstance(streams, int) and streams >= 1:
        return streams, None
    raise InputError([f"{where}: strategy {kind!r} is not a load level the profiler fits"])


def levels(document: Mapping[str, Any], source: str) -> tuple[LatencySample, ...]:
    """One LatencySample per benchmark with at least one finished request."""
    out = []
    for index, bench in enumerate(document.get("benchmarks") or []):
        where = f"{source}: benchmarks[{index}]"
        concurrency, rate = _load(bench.get("config", {}).get("strategy", {}), where)
        requests = bench.get("requests") or {}
        finished = [_timing(r, where) for r in requests.get("successful") or []]
        prompts = [t.prompt_tokens for t in finished if t.prompt_tokens]
        sample = summarize_level(
            finished,
            len(requests.get("errored") or []),
            concurrency=concurrency,
            input_tokens=max(1, round(sum(prompts) / len(prompts))) if prompts else 1,
            open_loop_rate_rps=rate,
        )
        if sample is not None:
            out.append(sample)
    if not out:
        raise InputError(
            [
                f"{source}: no benchmark with a finished request (is it GuideLLM's "
                "JSON output, with its requests?)"
            ]
        )
    return tuple(sorted(out, key=lambda s: (s.open_loop_rate_rps or 0.0, s.concurrency)))


def _model(document: Mapping[str, Any]) -> str | None:
    """The model the requests asked for (GuideLLM picks the served one when not told)."""
    for bench in document.get("benchmarks") or []:
        for request in (bench.get("requests") or {}).get("successful") or []:
            try:
                model = json.loads(request["request_args"])["body"]["model"]
            except (KeyError, TypeError, ValueError):
                continue
            if isinstance(model, str) and model:
                return model
    backend = document.get("config", {}).get("spec", {}).get("backend", {})
    return backend.get("model") or None


def read_report(path: Path) -> GuideLLMReport:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError([f"{path}: cannot read: {err.strerror}"]) from err
    except json.JSONDecodeError as err:
        problem = f"{path}: not JSON ({err.msg}); write it with --output kind=json"
        raise InputError([problem]) from err
    if not isinstance(document, dict) or "benchmarks" not in document:
        raise InputError([f"{path}: not a GuideLLM benchmarks report (no `benchmarks`)"])
    version = (document.get("metadata") or {}).get("guidellm_version")
    return GuideLLMReport(version, _model(document), levels(document, str(path)))
