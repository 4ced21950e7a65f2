"""The scale section's target checks and tables (bench/scale/report.py), from figures alone."""

from __future__ import annotations

from bench.scale.build import BuildResult
from bench.scale.choose import ChooseResult
from bench.scale.fleet import FleetResult
from bench.scale.redis_cost import RedisCost
from bench.scale.report import scale_checks, scale_lines
from bench.scale.section import ScaleResult
from bench.scale.shard_counters import Counters, profile
from bench.scale.upstream_memory import HostileResult


def _result(cpu_per_exchange_us: float, choose_us: float, build_cpu_s: float) -> ScaleResult:
    fleet = FleetResult("sharing", 64, 200, 3.0, 0.002, 4.8, 40.0, cpu_per_exchange_us, 0.15)
    return ScaleResult(
        fleets=[fleet],
        exchange_profile=[("redis-py", 0.4), ("data plane (sharing, load tracker)", 0.3)],
        choose=[ChooseResult(200, choose_us, choose_us, 5, 500)],
        choose_profile=[("scan (scan.py:48)", 0.6)],
        builds=[BuildResult(200, 30_000, 50.0, build_cpu_s, 0.1, 0.3, 20.0, 172, "1")],
        hostile=[HostileResult("head", 128.0, 0.3, 0.0625, 0.001, "response_too_large")],
    )


def test_each_target_is_checked_at_the_nominal_rate_and_its_corner() -> None:
    checks = {c.name: c for c in scale_checks(_result(400.0, 9.0, 25.0))}
    sharing = checks["in-flight sharing CPU per replica, 64 x 200"]
    assert sharing.figure == 400.0 * 40.0 / 1e6 * 100  # 1.6% at 40 exchanges/s, not 0.2%
    assert all(c.passed for c in checks.values())
    missed = {c.name: c.passed for c in scale_checks(_result(600.0, 11.0, 31.0))}
    assert not any(v for k, v in missed.items() if "hostile" not in k)
    assert "scan (scan.py:48) 60%" in checks["choose_route median, 200 pairs"].detail
    assert "redis-py 40%" in sharing.detail


def test_the_tables_show_every_figure() -> None:
    text = "\n".join(scale_lines(_result(400.0, 9.0, 25.0)))
    assert "| sharing | 64 x 200 | 0.20% | 4.8 / 40 exchanges/s | 400 | 1.60% | 15.0% |" in text
    assert "| 200 | 30,000 | 50.0 | 25.0 | 0.10 | 0.30 | 20.0 | 172 | 1 |" in text
    assert "| head | 128 | 0.30 | 0.0625 | 0.001 | response_too_large |" in text
    assert "| redis-py | 40.0% |" in text


def _cost(shard_us: list[float], staleness: tuple[float, float, float]) -> RedisCost:
    """A fleet of 64 (2,560 exchanges/s nominal) run 4 times slower than nominal."""
    return RedisCost(
        "now", "cluster of 3", 64, 200, 5.0, 640.0, 2560.0, shard_us, 400.0, staleness, 4.0, 3
    )


def test_redis_cpu_is_checked_at_the_nominal_rate_on_the_busiest_shard() -> None:
    result = _result(400.0, 9.0, 25.0)
    result.redis_costs = [_cost([50.0, 190.0, 60.0], (100.0, 200.0, 240.0))]
    check = next(c for c in scale_checks(result) if c.name.startswith("Redis CPU"))
    assert check.figure == 190.0 * 2560 / 1e6 * 100  # 48.6% of a core, not at 640/s
    assert check.passed  # <= 50% per shard
    result.redis_costs = [_cost([50.0, 200.0, 60.0], (100.0, 200.0, 240.0))]
    assert not next(c for c in scale_checks(result) if c.name.startswith("Redis CPU")).passed
    text = "\n".join(scale_lines(result))
    # staleness as measured in the slowed run, and at the fleet's own speed (/ 4)
    assert "| 13% / 51% / 15% | 1.60% | 100 / 200 / 240 (25 / 50 / 60) |" in text


def test_a_shards_background_is_a_cost_per_second_not_per_exchange() -> None:
    """An idle cluster node spends about 3 ms a second (cron, cluster bus): at 100 exchanges
    a second that is 30 µs per exchange, at the nominal 2,560 a second 1.2 µs."""
    before = Counters(0, 0, 0, 0, 0, {"get": (10, 100), "info": (1, 50)})
    after = Counters(
        60_000_000, 5_000_000, 400, 100, 1_100, {"get": (1_010, 20_100), "info": (2, 99)}
    )
    shard = profile(before, after, 1_000, idle_cpu_per_s=0.003)
    assert (shard.cpu_us, shard.commands_us, shard.reads, shard.waited_us) == (60, 20, 1.1, 5)
    assert (shard.calls, shard.command_us) == ({"get": 1.0}, {"get": 20.0})  # INFO left out
    assert shard.switches == (0.4, 0.1)
    cost = RedisCost(
        "now",
        "cluster of 3",
        64,
        200,
        10.0,
        100.0,
        2560.0,
        [60.0],
        400.0,
        (1, 2, 3),
        25.6,
        3,
        [shard],
    )
    assert cost.per_exchange_us == [60.0 - 30.0]  # less 3 ms/s over 100 exchanges/s
    assert cost.redis_at_nominal == [0.003 + 30.0 * 2560 / 1e6]  # 8%, not 15%
