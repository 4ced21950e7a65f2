"""The overhead section's rounds, its p99-at-one-connection target and its A/B rows (pure
parts), and the A/B variants' swapped pieces against the pieces they replace."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, fields

import pytest
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from prometheus_client import generate_latest

from bench.common.dp_variant import PlainExposition, variant_deps
from bench.common.targets import AB_ROWS
from bench.overhead.ab import ab_rows, verdicts
from bench.overhead.metric_cost import measure_metric_cost, metric_cost_note, one_request
from bench.overhead.section import TargetRun
from bench.overhead.value_cost import (
    REQUEST_VALUES,
    _frozen_twin,
    measure_value_cost,
    value_cost_note,
)
from bench.overhead.verdicts import overhead_checks, p99_at_one_connection, throughput_vs_minimal
from bench.overhead.wrk import ClosedLoopResult
from bench.report import overhead_lines
from data_plane.telemetry.metrics import DataPlaneMetrics


def closed(conns: int, rps: float, p99: float = 2.0, cpu: float | None = None) -> ClosedLoopResult:
    return ClosedLoopResult(conns, int(rps * 8), 8.0, rps, 1.0, 1.5, p99, 1.0, p99, 0, cpu)


def run(target: str, round_: int, *cells: ClosedLoopResult, stream: bool = False) -> TargetRun:
    return TargetRun(target, target, stream, cells, round=round_)


def test_the_throughput_ratio_is_the_median_of_the_rounds() -> None:
    runs = [run("direct", 0, closed(1, 9000), closed(64, 50_000))]
    for round_, (one, many) in enumerate(((2000, 3000), (3000, 2400), (2600, 2800))):
        runs.append(run("minimal", round_, closed(1, 4000), closed(64, 4000)))
        runs.append(run("gearbox", round_, closed(1, one), closed(64, many)))
    check = throughput_vs_minimal(runs, stream=False)
    # worst per round: 0.50 (1 conn), 0.60 (64 conns), 0.65 (1 conn): the median is 0.60
    assert check.ratio == pytest.approx(0.60)
    assert (check.figure, check.baseline) == (2400, 4000)
    assert check.passed
    assert "median of 3 runs" in check.detail
    assert "0.500 (1 conns)" in check.detail
    runs[-1] = run("gearbox", 2, closed(1, 2000), closed(64, 2000))  # now 0.50, 0.60, 0.50
    assert not throughput_vs_minimal(runs, stream=False).passed


def test_added_p99_at_one_connection_is_held_to_twice_the_minimal_proxys() -> None:
    def runs(gearbox_p99: float) -> list[TargetRun]:
        found = [run("direct", 0, closed(1, 9000, p99=1.0))]
        for round_ in range(3):
            found.append(run("minimal", round_, closed(1, 4000, p99=1.5 + 0.1 * round_)))
            found.append(run("gearbox", round_, closed(1, 2000, p99=gearbox_p99 + round_)))
        return found

    bad = p99_at_one_connection(runs(1.8), stream=False)  # added 0.8, 1.8, 2.8 vs 0.6
    assert (bad.figure, bad.baseline) == pytest.approx((1.8, 0.6))
    assert not bad.passed  # 3x
    good = p99_at_one_connection(runs(1.0), stream=False)  # added 0, 1, 2: median 1.0
    assert good.ratio == pytest.approx(1.0 / 0.6)
    assert good.passed
    missing = p99_at_one_connection(runs(1.0)[1:], stream=False)  # no direct run
    assert (missing.passed, missing.detail) == (False, "not measured")
    names = [c.name for c in overhead_checks(runs(1.0))]
    assert "Gearbox added p99 at 1 connection / minimal proxy's (non-streaming)" in names


def test_ab_rows_give_each_pieces_share_of_the_ratio() -> None:
    ab = AB_ROWS[0]
    runs = []
    for round_, (theirs, cpu) in enumerate(((2600, 400.0), (2700, 380.0), (2500, 420.0))):
        runs.append(run("minimal", round_, closed(64, 4000, cpu=200.0)))
        runs.append(run("gearbox", round_, closed(64, 3000, cpu=300.0)))
        runs.append(run(ab.target, round_, closed(64, theirs, cpu=cpu)))
    (row,) = ab_rows(runs)
    assert (row.piece, row.connections, row.ours_rps, row.theirs_rps) == (ab.piece, 64, 3000, 2600)
    assert (row.share.median, row.share.low, row.share.high) == pytest.approx((0.1, 0.075, 0.125))
    assert row.share.measurable
    assert row.cpu_share is not None
    # per CPU-second: 1e6/300 vs 1e6/400 over 1e6/200 = 0.5 - 0.5 * 300/400... = 0.1667
    assert row.cpu_share.median == pytest.approx(200 / 300 - 200 / 400)
    (kept,) = verdicts([row])
    assert (kept.gains, kept.losses, kept.keep) == (1, 0, True)
    assert f"- {ab.piece}: earns its place" in "\n".join(overhead_lines(runs))
    runs[2] = run(ab.target, 0, closed(64, 3100, cpu=290.0))  # this round the library wins
    (row,) = ab_rows(runs)
    assert not row.share.measurable
    text = "\n".join(overhead_lines(runs))
    assert "not measurable" in text
    assert ab.theirs in text
    (doubtful,) = verdicts([row])
    assert (doubtful.gains, doubtful.keep) == (0, False)
    assert f"- {ab.piece}: **candidate for deletion**" in text


def without_created(metrics: DataPlaneMetrics) -> list[bytes]:
    lines = generate_latest(metrics.registry).splitlines()
    return [line for line in lines if b"_created" not in line]


def test_the_plain_metrics_variant_exposes_the_same_bytes() -> None:
    ours, plain = DataPlaneMetrics("v", "sha"), DataPlaneMetrics("v", "sha", PlainExposition())
    for metrics in (ours, plain):
        metrics.observe_attempt("llama@fp8#0", "ok", 0.2)
        metrics.pair("llama@fp8").ttfb.observe(0.05)
        metrics.count_retry("status_5xx")
        metrics.table_version.set(7)
        metrics.count_dropped_spans("unencodable", 2)
    # `_created` samples: prometheus_client's own metrics add them unless the process disables
    # them (the data plane does, in __main__); series.py never writes them.
    assert without_created(plain) == without_created(ours)
    assert b"gearbox_spans_dropped_total" in generate_latest(ours.registry)


def test_the_sdk_spans_variant_uses_the_sdks_batch_processor() -> None:
    deps = variant_deps("sdk-spans", "http://127.0.0.1:9/v1/traces")
    assert isinstance(deps.span_processor, BatchSpanProcessor)
    deps.span_processor.shutdown()  # type: ignore[no-untyped-call]  # untyped in the SDK
    plain = variant_deps("plain-metrics", None)
    assert plain.metrics is not None
    assert plain.span_processor is None


def test_the_metric_cost_is_measured_for_both_kinds() -> None:
    cost = measure_metric_cost(requests=200, rounds=3)
    assert cost.series_us > 0
    assert cost.prometheus_client_us > 0
    note = metric_cost_note(cost)
    assert "series.py" in note
    assert "prometheus_client" in note
    ours, plain = DataPlaneMetrics("v", "s"), DataPlaneMetrics("v", "s", PlainExposition())
    for m in (ours, plain):
        one_request(m)
    assert without_created(ours) == without_created(plain)  # the same updates in both
    assert b'gearbox_requests_total{outcome="ok",route="chat_completions"} 1.0' in b"\n".join(
        without_created(ours)
    )


def test_the_value_cost_compares_the_same_fields_frozen_and_per_request() -> None:
    cost = measure_value_cost(requests=200, rounds=3)
    assert cost.values == len(REQUEST_VALUES)
    assert cost.fields == sum(len(fields(cls)) for cls in REQUEST_VALUES)
    assert cost.frozen_us > 0
    assert cost.per_request_us > 0
    note = value_cost_note(cost)
    assert "frozen dataclasses" in note
    assert "per_request" in note
    for cls in REQUEST_VALUES:  # what the note compares against: the frozen form of each
        twin = _frozen_twin(cls)
        made = twin(*(None,) * len(fields(cls)))
        with pytest.raises(FrozenInstanceError):
            made.__setattr__(fields(cls)[0].name, 1)
