"""Session fixtures: one real redis-server per test session (fails, never skips, if absent),
and how `make test` spreads the suite over pytest-xdist workers (docs/style.md, "Tests")."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from itertools import count
from typing import Any

import pytest
import redis.asyncio as aioredis
from hypothesis import settings
from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

from contracts.redis_keys import RedisKeys
from tests.support.loop_dump import watchdog
from tests.support.redis_server import RedisProcess, running_redis
from tests.support.shared_engine import SharedEngine

_prefixes = count()

# Hypothesis fails an example slower than 200 ms by default: a wall-clock assertion, which a
# loaded machine fails (269 ms for an example that then ran in 0.7 ms, test_stats.py, in make
# test's -n 4 run). Each module that set deadline=None for that reason is covered here.
settings.register_profile("gearbox", deadline=None)
settings.load_profile("gearbox")

# The modules of tests/hostile/ whose verdicts ride on latencies the machine's load can stretch
# (the `latency` group, TIMING_BOUND). The others (engine blame, counters and stall, idle
# admission, image size, tenant burst) run on virtual time (tests/support/virtual_time.py): their
# simulated engines, data plane and clients share one loop whose clock only the timers move.
LATENCY_MODULES = tuple(
    f"tests/hostile/test_{name}.py"
    for name in (
        "accuracy_evidence",
        "canary_load",
        "check_budget",
        "engine_pages",
        "latency_evidence",
        "prompt_size",
        "publish_race",
        "replica_identity",
        "tokenizer_count",
    )
)

# Units of work that run one module after another on one worker under `--dist loadfile` (`make
# test`), scheduled first, longest first (`_GROUP_ORDER`): xdist gives each worker one unit to
# start with, in that order. `heavy` and `heavy-variants`: the modules that start real vLLM
# engines (about 5.5 GiB each: one at a time per unit, two units side by side; as one unit they
# were 20 of a CI run's 27 minutes). `demo` (the whole demo on simulated engines) and `browser`
# (chromium) take CPU for a while but little memory, so they run beside the engines on other
# workers rather than after them. `latency`: modules whose assertions ride on latencies measured
# from simulated engines (refits, stall and blame verdicts), kept from measuring beside one
# another. `faults`: tests/reliability, which kills and restarts redis-server, Sentinel and
# Cluster processes and engines (one module at a time, as before they ran after the other
# tests). `wheel`: the longest module alone (it builds the wheel and installs it in a fresh
# venv: 380 to 600 s of set-up on a loaded machine), given out early rather than after the short
# ones.
GROUPS = {
    "tests/e2e/test_wheel_install.py": "wheel",
    "tests/e2e/test_real_engine.py": "heavy",
    "tests/integration/data_plane/test_real_prefill.py": "heavy",
    "tests/e2e/test_real_variants.py": "heavy-variants",
    "tests/e2e/test_demo_sim.py": "demo",
    "tests/ui/": "browser",
    **dict.fromkeys(LATENCY_MODULES, "latency"),
    "tests/integration/data_plane/test_refit.py": "latency",
    "tests/reliability/": "faults",
}


# The order groups are given out in: the longest first (a quiet fresh-clone make test, a119808:
# `heavy` about 6.5 min, its engine set-ups 137, 125 and 106 s; `heavy-variants` about 4.5 min,
# 73 to 89 s a variant; the wheel's set-up 77 s; 485 s of pytest in all).
_GROUP_ORDER = {
    group: i
    for i, group in enumerate(
        ("heavy", "heavy-variants", "wheel", "latency", "faults", "demo", "browser")
    )
}
assert set(_GROUP_ORDER) == set(GROUPS.values())


def unit_of_work(nodeid: str) -> str:
    """The group of `GROUPS` the test's module is in, else the module's path."""
    path = nodeid.split("::", 1)[0]
    return next((g for prefix, g in GROUPS.items() if path.startswith(prefix)), path)


class _UnitsOfWork(LoadFileScheduling):  # type: ignore[misc]  # xdist ships no types
    """`--dist loadfile` with each group of `GROUPS` one unit (xdist's own `loadgroup`
    renames node ids, which pytest 9 ignores: its groups were split over workers)."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of_work(nodeid)


@pytest.hookimpl(optionalhook=True)  # a run with `-p no:xdist` has no such hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None  # xdist's own
    return _UnitsOfWork(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On xdist's workers the groups' tests come first, in `_GROUP_ORDER` (stable: the order
    is kept within them and after them), which `--no-loadscope-reorder` makes the order units
    are given out. A run without xdist keeps pytest's order."""
    for item in items:
        if item.nodeid.startswith(TIMING_BOUND):
            item.add_marker(pytest.mark.flaky(reruns=1))
    if not hasattr(config, "workerinput"):
        return
    items.sort(key=lambda item: _GROUP_ORDER.get(unit_of_work(item.nodeid), len(_GROUP_ORDER)))


# Tests whose verdict rides on latencies measured from engines that share the machine's two
# cores with the rest of the suite (simulated engines in the test's own process at a few ms a
# token, real engines, subprocess stacks): a refit published, a stall judged, a 504 or a 429 at
# a budget. Each passed alone in every failure we traced (closing notes of 2026-12-07), and a
# CPU-starved run fails them at random: one failure of such a test is run once more
# (pytest-rerunfailures, shown as R in the summary), the second fails the suite. A test whose
# verdict does not ride on time is never rerun.
TIMING_BOUND = (
    *LATENCY_MODULES,
    "tests/integration/data_plane/test_refit.py",
    "tests/integration/data_plane/test_replica_admission.py",
    "tests/integration/data_plane/test_real_prefill.py",
    "tests/integration/profiler/test_fleet_push_and_table.py",
    "tests/integration/profiler/test_bad_endpoints_and_interrupts.py",
    "tests/e2e/test_demo_sim.py",
    "tests/reliability/test_soak_smoke.py",
)


# CPU priority per group under `make test` (root only: raising a priority, or restoring one,
# needs it; elsewhere priorities are left alone). The real engines and the wheel build are
# background CPU work, minutes of imports, weights and pip on 2 cores, whose verdicts do not ride
# on wall-clock time: they run at nice 10 (their children inherit it) and take what the rest
# leaves, which is most of it (the rest mostly waits). The modules whose verdicts do ride on
# wall-clock latencies of simulated engines get the CPU first: `latency` (engines in the test's
# own process, 5 ms per token), `faults` and `demo` (processes of their own). Before this, a
# quiet-machine make test failed three of them beside the engines (a refit published, a 504, a
# 429) that pass alone. A worker's priority is restored after each module.
GROUP_NICENESS = {
    "heavy": 10,
    "heavy-variants": 10,
    "wheel": 10,
    "latency": -15,
    "faults": -10,
    "demo": -10,
}
# A module whose verdict rides on sampling a real engine while it works keeps the default
# priority inside its group: the chunked-prefill test reads the engine's /metrics every 200 ms
# during a prefill and saw no KV-cache step in one make test with its engine at nice 10.
MODULE_NICENESS = {"tests/integration/data_plane/test_real_prefill.py": 0}


@pytest.fixture(scope="module", autouse=True)
def _group_priority(request: pytest.FixtureRequest) -> Iterator[None]:
    module = request.node.nodeid
    niceness = MODULE_NICENESS.get(module, GROUP_NICENESS.get(unit_of_work(module)))
    if niceness is None or not hasattr(request.config, "workerinput") or os.geteuid() != 0:
        yield
        return
    before = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, niceness)
    try:
        yield  # the module's own fixtures (its engines, servers, venv) end before this one
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, before)


def _timeout_s(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    return float(item.config.getini("timeout") or 0)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with watchdog(_timeout_s(item)):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with watchdog(_timeout_s(item)):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    with watchdog(_timeout_s(item)):
        return (yield)


@pytest.fixture(scope="session")
def shared_bf16_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedEngine]:
    """The real bf16 engine the stack test and the prefill test's one-step case share
    (tests/support/shared_engine.py): started by its first user, stopped by its last."""
    engine = SharedEngine(tmp_path_factory.mktemp("shared-engine") / "logs")
    try:
        yield engine
    finally:
        engine.stop()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisProcess]:
    """A real redis-server on a free loopback port for the whole session."""
    with running_redis() as proc:
        yield proc


@pytest.fixture
def redis_keys() -> RedisKeys:
    """A fresh key prefix per test, so tests share the server but never each other's keys."""
    return RedisKeys(prefix=f"t{next(_prefixes)}")


@pytest.fixture
async def redis_client(redis_server: RedisProcess) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url, decode_responses=False)
    try:
        yield client
    finally:
        await client.aclose()
