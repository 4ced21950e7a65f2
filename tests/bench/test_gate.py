"""bench/overhead/gate.py (CI's overhead gate): the rounds' ratios and their median per mode
and connection count, the verdict at 64 connections, the figures the threshold was set
against (main passes, the slowed data plane fails), and the slowed variant's busy loop."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import pytest

from bench.common.dp_variant import SLOWED_US, SlowedMetrics, variant_deps
from bench.overhead.gate import GATE_RATIO, gate_rows, gate_table
from bench.overhead.gate_rounds import GATE_CONNECTIONS
from bench.overhead.section import TargetRun
from bench.overhead.wrk import ClosedLoopResult


def closed(conns: int, rps: float, cpu: float | None = None) -> ClosedLoopResult:
    return ClosedLoopResult(conns, int(rps * 2), 2.0, rps, 1.0, 1.5, 2.0, 1.0, 2.0, 0, cpu)


Pairs = Sequence[tuple[float, float]]  # (minimal, Gearbox) req/s per round, 64 connections


@dataclass(frozen=True, slots=True)
class Recorded:
    """One run of `python -m bench.overhead.gate` on the loaded 2-core machine."""

    name: str
    load_average: float  # 1-minute, at its start
    plain: Pairs
    streaming: Pairs


# The runs GATE_RATIO was set against (docs/benchmarks.md, "The CI overhead gate"): 9d5d48c;
# "yes": beside 2 busy loops (`yes > /dev/null`), "yes6": beside 6.
MAIN_RUNS = (
    Recorded(
        "main-1",
        11.7,
        ((867, 437), (619, 323), (612, 303), (637, 308)),
        ((667, 358), (793, 388), (878, 467), (518, 259)),
    ),
    Recorded(
        "main-2",
        10.6,
        ((527, 282), (638, 286), (858, 399), (611, 325)),
        ((1021, 571), (1105, 601), (702, 406), (1085, 609)),
    ),
    Recorded(
        "main-3",
        9.8,
        ((1037, 526), (1475, 698), (1004, 497), (1165, 630)),
        ((1042, 544), (867, 465), (793, 419), (779, 431)),
    ),
    Recorded(
        "main-4",
        8.3,
        ((814, 406), (716, 379), (956, 496), (685, 326)),
        ((760, 384), (639, 360), (613, 319), (770, 371)),
    ),
    Recorded(
        "main-5",
        8.5,
        ((727, 394), (751, 416), (681, 372), (689, 354)),
        ((519, 244), (893, 486), (815, 406), (946, 527)),
    ),
    Recorded(
        "main-6",
        9.4,
        ((700, 311), (636, 313), (609, 324), (670, 319)),
        ((786, 359), (538, 255), (656, 319), (605, 331)),
    ),
    Recorded(
        "main-7",
        9.9,
        ((1077, 572), (869, 416), (844, 505), (1142, 618)),
        ((893, 494), (1008, 548), (813, 432), (703, 359)),
    ),
    Recorded(
        "yes-main-1",
        8.9,
        ((844, 406), (637, 343), (896, 468), (708, 354)),
        ((750, 379), (777, 388), (796, 387), (697, 335)),
    ),
    Recorded(
        "yes6-main-1",
        7.5,
        ((828, 399), (787, 395), (749, 365), (646, 327)),
        ((611, 307), (663, 339), (614, 310), (652, 364)),
    ),
    Recorded(
        "main-8",
        6.8,
        ((1352, 662), (1390, 674), (1196, 602), (958, 483)),
        ((1435, 732), (876, 458), (939, 489), (1246, 644)),
    ),
    Recorded(
        "main-9",
        7.3,
        ((856, 452), (1183, 599), (1346, 692), (1051, 546)),
        ((990, 540), (696, 339), (601, 319), (843, 434)),
    ),
    Recorded(
        "main-10",
        8.9,
        ((223, 133), (378, 201), (909, 433), (1195, 618)),
        ((910, 497), (497, 248), (618, 330), (1033, 521)),
    ),
    Recorded(
        "main-11",
        9.7,
        ((1201, 625), (1201, 640), (1158, 608), (1203, 630)),
        ((897, 495), (866, 491), (867, 447), (872, 497)),
    ),
)
SLOWED_RUNS = (  # `--slowed`: Gearbox + a 300 us busy loop per routed request
    Recorded(
        "slowed-1",
        5.6,
        ((1190, 359), (1022, 344), (768, 249), (783, 239)),
        ((750, 240), (865, 272), (894, 295), (767, 247)),
    ),
    Recorded(
        "slowed-2",
        7.2,
        ((954, 280), (693, 208), (706, 221), (680, 194)),
        ((642, 198), (713, 230), (531, 180), (525, 187)),
    ),
    Recorded(
        "slowed-3",
        8.5,
        ((606, 175), (721, 217), (683, 199), (1096, 326)),
        ((1047, 291), (962, 283), (750, 227), (800, 233)),
    ),
    Recorded(
        "yes-slowed-1",
        9.5,
        ((1189, 312), (930, 268), (900, 275), (803, 228)),
        ((678, 207), (685, 223), (770, 232), (747, 233)),
    ),
    Recorded(
        "yes6-slowed-1",
        12.4,
        ((819, 230), (720, 213), (848, 256), (939, 283)),
        ((674, 205), (878, 271), (551, 169), (820, 275)),
    ),
    Recorded(
        "slowed-4",
        9.1,
        ((985, 292), (1049, 291), (1346, 418), (1192, 346)),
        ((1250, 395), (1395, 435), (1102, 340), (838, 274)),
    ),
)


def rounds(pairs: Pairs, stream: bool) -> list[TargetRun]:
    """One round per (minimal, Gearbox) req/s pair at 64 connections (twice it at 1), both
    targets at the same CPU time per second of load, so each round's CPU ratio is its ratio."""
    runs = []
    for round_, (m, g) in enumerate(pairs):
        for target, rps in (("minimal", m), ("gearbox", g)):
            cells = (closed(1, 2 * rps, 5e5 / rps), closed(GATE_CONNECTIONS, rps, 1e6 / rps))
            runs.append(TargetRun(target, target[0], stream, cells, round=round_))
    return runs


def test_the_gated_figure_is_the_median_of_the_rounds_ratios() -> None:
    # The machine's load moves both targets alike from round to round; the ratio stays.
    plain = ((4000, 2000), (1000, 600), (3000, 1650), (2000, 1200))
    runs = rounds(plain, False) + rounds(((4000, 3000), (2000, 1400)), True)
    rows = {(r.stream, r.connections): r for r in gate_rows(runs)}
    row = rows[False, GATE_CONNECTIONS]
    assert [x.ratio for x in row.rounds] == pytest.approx([0.5, 0.6, 0.55, 0.6])
    assert row.ratio == pytest.approx(0.575)
    assert row.cpu_ratio == pytest.approx(0.575)
    assert row.median("minimal") == 2500
    assert rows[True, GATE_CONNECTIONS].ratio == pytest.approx(0.725)
    assert all(r.passed for r in rows.values())
    assert "| 0.50 0.60 0.55 0.60 | 0.575 | 0.575 |" in gate_table(list(rows.values()))


def test_either_mode_below_the_threshold_at_64_connections_fails() -> None:
    slid = 0.9 * GATE_RATIO * 4000
    runs = rounds(((4000, 3000),) * 3, False) + rounds(((4000, slid),) * 3, True)
    rows = gate_rows(runs)
    failed = [(r.stream, r.connections) for r in rows if not r.passed]
    assert failed == [(True, GATE_CONNECTIONS)]
    table = gate_table(rows)
    assert f"< {GATE_RATIO:.2f}" in table
    assert f"| streaming | {GATE_CONNECTIONS} |" in table


def test_a_round_pairs_only_results_of_the_same_seconds() -> None:
    runs = rounds(((4000, 1000), (4000, 3000), (4000, 3000)), False)
    gone = [r for r in runs if not (r.target == "gearbox" and r.round == 0)]  # its wrk failed
    failed = TargetRun("gearbox", "g", False, error="wrk exited 1", round=0)
    row = gate_rows([*gone, failed])[1]
    assert [x.ratio for x in row.rounds] == [0.75, 0.75]  # not round 0's minimal with another


def test_errors_answered_fast_do_not_count_as_throughput() -> None:
    # Gearbox answers as many requests as the minimal proxy, but 3 in 4 of them are 503s.
    runs = rounds(((4000, 4000),) * 3, False) + rounds(((4000, 4000),) * 3, True)
    broken = [
        replace(r, closed=tuple(replace(c, errors=c.requests * 3 // 4) for c in r.closed))
        if r.target == "gearbox" and r.stream
        else r
        for r in runs
    ]
    rows = {(r.stream, r.connections): r for r in gate_rows(broken)}
    assert rows[False, GATE_CONNECTIONS].ratio == 1.0
    assert rows[True, GATE_CONNECTIONS].ratio == pytest.approx(0.25)
    assert not rows[True, GATE_CONNECTIONS].passed


def test_one_connection_is_shown_but_not_gated() -> None:
    runs = rounds(((4000, 3000),) * 2, False) + rounds(((4000, 3000),) * 2, True)
    runs = [r for r in runs if not (r.target == "gearbox" and r.stream)]  # streaming Gearbox failed
    rows = {(r.stream, r.connections): r for r in gate_rows(runs)}
    assert rows[True, 1].passed
    assert rows[True, 1].ratio is None
    assert not rows[True, GATE_CONNECTIONS].passed  # unmeasured: never a pass
    assert "| - | - | - |" in gate_table(list(rows.values()))


@pytest.mark.parametrize("run", MAIN_RUNS, ids=lambda r: r.name)
def test_main_as_measured_on_the_loaded_machine_passes(run: Recorded) -> None:
    rows = gate_rows(rounds(run.plain, False) + rounds(run.streaming, True))
    assert all(r.passed for r in rows)


@pytest.mark.parametrize("run", SLOWED_RUNS, ids=lambda r: r.name)
def test_the_slowed_data_plane_as_measured_fails_in_both_modes(run: Recorded) -> None:
    rows = gate_rows(rounds(run.plain, False) + rounds(run.streaming, True))
    assert [(r.stream, r.connections) for r in rows if not r.passed] == [
        (False, GATE_CONNECTIONS),
        (True, GATE_CONNECTIONS),
    ]


def test_the_slowed_variant_spends_its_busy_loop_per_decision() -> None:
    deps = variant_deps("slowed", None)
    assert isinstance(deps.metrics, SlowedMetrics)
    start = time.perf_counter_ns()
    for _ in range(10):
        deps.metrics.count_decision("p", "cheapest_feasible", "chat", 0.5)
    assert time.perf_counter_ns() - start >= 10 * SLOWED_US * 1000
    assert deps.metrics.decisions.labels("p", "cheapest_feasible").value == 10
