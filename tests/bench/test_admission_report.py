"""The admission section's pure parts (`bench/admission/`): its target checks and tables, the
router's wait histogram read back, the bulk tenant's variants, the seeded burst schedule and
the tables its scenarios serve."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from bench.admission import burst as b
from bench.admission.burst import BurstRun, capacity_rps, schedule
from bench.admission.idle import IdleResult, example_table, grid, served_name
from bench.admission.report import admission_checks, admission_lines, attainment
from bench.admission.section import QUICK, AdmissionResult
from bench.admission.stack import Busy, Sample, bucket_quantile, sample_sum, wait_histogram
from bench.admission.steady import SteadyRun, truth_table
from bench.admission.tenants import KEYED, KEYS, SOLO, VARIANTS, TenantRun, bulk_headers, keys_file
from bench.common.check import Check
from bench.quality import fleet as qf
from data_plane.client_keys import grants_of, key_digest, read_client_keys

B = b.BUDGET_MS / 1000
BUSY = Busy(5.5, 8)


def ok(tenant: str, n: int, seconds: float = 0.2, priority: str = "standard") -> list[Sample]:
    return [Sample(tenant, priority, 200, seconds, B, True) for _ in range(n)]


def no(tenant: str, n: int, seconds: float = 0.2, priority: str = "standard") -> list[Sample]:
    return [Sample(tenant, priority, 429, seconds, B, True) for _ in range(n)]


def burst_run(samples: list[Sample], cpu_s: float, queued: float, p99: float) -> BurstRun:
    return BurstRun("flow control", tuple(samples), cpu_s, queued, p99, p99 / 2, BUSY)


def result(
    light_beside: list[Sample], burst: list[Sample], steady_on: list[Sample], p99: float = 0.25
) -> AdmissionResult:
    idle = IdleResult(3, tuple((2000, 16, s) for s in ok("idle", 3)))
    tenants = (
        TenantRun(SOLO, tuple(ok("light", 50)), Busy(2.0, 2)),
        *(TenantRun(v, tuple(light_beside + no("bulk", 20)), BUSY) for v in VARIANTS),
    )
    steady = (
        SteadyRun(1.0, True, tuple(steady_on), 3.0, BUSY),
        SteadyRun(1.0, False, tuple(ok("trace", 100)), 0.0, BUSY),
    )
    on = burst_run(burst, 1.0, 200.0, p99)
    off = burst_run(burst, 0.9, 0.0, math.nan)
    return AdmissionResult(QUICK, idle, tenants, steady, on, off)


def test_attainment_counts_late_answers_and_refusals_as_missed() -> None:
    assert attainment([*ok("t", 6), *ok("t", 2, seconds=0.5), *no("t", 2)]) == 0.6
    assert math.isnan(attainment([]))


def test_every_target_passes_when_the_router_does_what_issue_32_asks() -> None:
    burst = [*ok("bursty", 100, priority="critical"), *no("bursty", 300, seconds=0.23)]
    checks = admission_checks(result(ok("light", 49) + ok("light", 1, 0.39), burst, ok("t", 100)))
    assert [c.name for c in checks if not c.passed] == []
    # idle, four variants, refusals and attainment at one load, critical, late 429s, wait,
    # CPU per queued request: (1.0 - 0.9) s over 200 queued
    assert len(checks) == 11
    assert checks[-1].figure == pytest.approx(0.5)
    text = "\n".join(admission_lines(result(ok("light", 50), burst, ok("t", 100))))
    assert "| bulk over 12 tenant names | 50 | 100.0% | 0 |" in text
    assert "| 20 | 0.0% | 20 | 5.5, 8 |" in text  # the bulk tenant, the engine
    assert "| 1x | flow control | 100 | 100.0% | 0 | none | 200 ms | 3 | 5.5, 8 |" in text


def test_a_light_tenant_served_late_a_refusal_at_1x_and_a_late_429_fail() -> None:
    light = [*ok("light", 45), *ok("light", 5, seconds=0.41)]  # 10 points below solo
    burst = [*ok("bursty", 98, priority="critical"), *no("bursty", 2, priority="critical")]
    burst += no("bursty", 3, seconds=0.4)  # at the deadline: too late to be useful
    steady = [*ok("t", 98), *no("t", 1), Sample("t", "standard", 504, 0.4, B)]
    checks = {c.name: c for c in admission_checks(result(light, burst, steady, p99=0.5))}
    failed = sorted(n.removeprefix("admission: ") for n, c in checks.items() if not c.passed)
    assert failed == [
        "attainment at 1x, points below admission off",
        "critical class's attainment during the 3x burst",
        "light tenant's attainment, points below solo (bulk as one tenant)",
        "light tenant's attainment, points below solo (bulk claiming critical)",
        "light tenant's attainment, points below solo (bulk over 12 tenant names)",
        "light tenant's attainment, points below solo (bulk over 12 tenant names, API keys)",
        "p99 queue wait during the burst (histogram bucket bound)",
        "refusals at 1x of a mixed trace",
        "refusals issued at or after their request's deadline (burst)",
    ]
    light_check = checks[
        "admission: light tenant's attainment, points below solo (bulk as one tenant)"
    ]
    assert light_check.figure == pytest.approx(10.0)
    text = "\n".join(admission_lines(result(light, burst, steady, p99=0.5)))
    assert "| 1x | flow control | 100 | 98.0% | 1 | 1 x 504 |" in text


PAGE = """\
# HELP gearbox_flow_queue_wait_seconds Time a request waited in the queue
gearbox_flow_queue_wait_seconds_bucket{le="0.1",outcome="dispatched",priority="standard"} 60.0
gearbox_flow_queue_wait_seconds_bucket{le="0.25",outcome="dispatched",priority="standard"} 90.0
gearbox_flow_queue_wait_seconds_bucket{le="+Inf",outcome="dispatched",priority="standard"} 90.0
gearbox_flow_queue_wait_seconds_bucket{le="0.1",outcome="refused",priority="batch"} 0.0
gearbox_flow_queue_wait_seconds_bucket{le="0.25",outcome="refused",priority="batch"} 9.0
gearbox_flow_queue_wait_seconds_bucket{le="+Inf",outcome="refused",priority="batch"} 10.0
gearbox_flow_queue_wait_seconds_count{outcome="dispatched",priority="standard"} 90.0
gearbox_flow_queued_total{priority="standard",tenant="bulk"} 90.0
gearbox_flow_queued_total{priority="batch",tenant="light"} 10.0
"""


def test_the_wait_histogram_is_summed_over_series_and_read_as_a_bucket_bound() -> None:
    buckets = wait_histogram(PAGE, "gearbox_flow_queue_wait_seconds")
    assert buckets == [(0.1, 60.0), (0.25, 99.0), (math.inf, 100.0)]
    assert bucket_quantile(buckets, 0.5) == 0.1
    assert bucket_quantile(buckets, 0.99) == 0.25  # 99 of 100 waited 250 ms at most
    assert bucket_quantile(buckets, 1.0) == math.inf
    assert math.isnan(bucket_quantile([], 0.99))
    assert sample_sum(PAGE, "gearbox_flow_queued_total") == 100.0
    assert sample_sum(PAGE, "gearbox_flow_queued_total", tenant="light") == 10.0


def test_the_bulk_tenant_variants_differ_only_in_what_the_issue_names() -> None:
    assert bulk_headers(VARIANTS[0], 3) == {"x-gearbox-tenant": "bulk"}
    names = {bulk_headers(VARIANTS[1], i)["x-gearbox-tenant"] for i in range(12)}
    assert len(names) == 12
    assert "light" not in names
    assert bulk_headers(VARIANTS[2], 0) == {"x-gearbox-tenant": "bulk", "X-Priority": "critical"}
    # With keys: the same twelve names, each request carrying the bulk tenant's one key.
    keyed = [bulk_headers(KEYED, i) for i in range(12)]
    assert {h["x-gearbox-tenant"] for h in keyed} == names
    assert {h["Authorization"] for h in keyed} == {f"Bearer {KEYS['bulk']}"}


def test_the_keyed_variant_s_keys_file_is_one_the_data_plane_reads(tmp_path: Path) -> None:
    grants = grants_of(read_client_keys(keys_file(tmp_path / "tenants")))
    assert {g.tenant for g in grants.values()} == {"bulk", "light"}
    assert grants[key_digest(KEYS["bulk"])].tenant == "bulk"


def test_the_burst_schedule_is_seeded_and_bursts_only_in_the_middle_third() -> None:
    cap = capacity_rps()
    assert cap == pytest.approx(41.03, abs=0.01)  # two engines at 8 in flight, 0.39 s each
    tenants = {"steady": 0.3 * cap, "bursty": 0.3 * cap}
    first = schedule(30.0, tenants, 3 * cap)
    assert first == schedule(30.0, tenants, 3 * cap)
    in_burst = [a for a in first if a.tenant == "bursty" and a.in_burst]
    outside = [a for a in first if a.tenant == "bursty" and not a.in_burst]
    assert all(10.0 <= a.at_s < 20.0 for a in in_burst)
    assert len(in_burst) > 5 * len(outside)  # 3x capacity for 10 s against 0.3x for 20 s


def test_the_scenarios_tables_are_valid_and_say_what_the_engines_do() -> None:
    idle = example_table({q: f"http://127.0.0.1:{9000 + i}" for i, q in enumerate(("fp8", "fp16"))})
    assert {e.served_model_name for e in idle.entries} >= {served_name("fp8")}
    assert len(grid()) == 12
    table = truth_table({p.name: f"http://127.0.0.1:{9100 + i}" for i, p in enumerate(qf.PAIRS)})
    assert len(table.entries) == 6
    assert {e.family for e in table.entries} == {qf.SMALL, qf.LARGE}
    fp16 = next(e for e in table.entries if e.pair == f"{qf.SMALL}@fp16")
    # At a load of L the simulator's TPOT is base + per-running x (L - 1): the table's at L.
    assert fp16.latency.tpot_base_s + fp16.latency.tpot_per_load_s == pytest.approx(0.0030)


def test_the_critical_check_pools_every_seeds_window_and_states_its_interval() -> None:
    """One seed's 100 critical requests cannot show 99% (its interval reaches below it);
    pooled with another seed's 500 the check counts all 600, the one miss included, and the
    table gives each seed a row and the pool its 95% interval."""
    light, steady = ok("light", 50), ok("trace", 100)
    one = result(light, ok("bursty", 100, priority="critical"), steady)
    more = [*ok("bursty", 499, priority="critical"), *no("bursty", 1, priority="critical")]
    pooled = replace(one, burst_more=(replace(burst_run(more, 1.0, 0.0, 0.25), seed=24),))

    def critical(r: AdmissionResult) -> Check:
        return next(c for c in admission_checks(r) if "critical class" in c.name)

    assert critical(one).detail.startswith("100 of 100 critical requests in 1 seeds'")
    assert "interval 96.4% to 100.0%" in critical(one).detail
    check = critical(pooled)
    assert check.figure == pytest.approx(599 / 6)
    assert check.passed
    assert check.detail.startswith("599 of 600 critical requests in 2 seeds'")
    text = "\n".join(admission_lines(pooled))
    assert "| 24 | 500 | 499 | 99.8% | 0, 0, 0, 0, 0, 1, 0, 0 |" in text
    assert "| all | 600 | 599 | 99.8% (95%: 99.1% to 100.0%) |" in text
