"""Floor attainment against TRUE accuracy: the point estimate vs the table's confidence bound.

`python -m bench.floors.attainment [--quick] [--draws N] [--items N]`

An offline experiment on the accuracy half of routing only (no latency, load or classifier:
those belong to `make bench`'s quality section). A six-pair fleet whose true accuracies sit
2-4 points from the policy's floors is "profiled" many times: each draw asks `--items` (100)
eval items per category; a family's reference answers each right with its true accuracy, and
each quantized variant shares its reference's answers except for a few flips (the paired
structure real quantized variants have). Per draw and category the router picks the cheapest
pair that meets the floor, (a) by the measured point estimate (the old rule) and (b) by the
table's bound (`control_plane.build.floor_bounds`, docs/accuracy.md). Reported: the share of
decisions whose pair is truly at or above the floor (floor attainment), and the mean price
relative to an oracle that knows the true accuracies.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contracts.policy import Policy
from contracts.profile_report import CategoryAccuracy, ProfileReport
from control_plane.build.floor_bounds import floor_bounds

CATEGORIES = ("chat", "extraction", "code", "math", "reasoning")
FLOORS = {"chat": 0.80, "extraction": 0.85, "code": 0.65, "math": 0.70, "reasoning": 0.60}
ITEMS = 100


@dataclass(frozen=True, slots=True)
class TruePair:
    family: str
    quantization: str
    usd_per_mtok: float
    accuracy: tuple[float, ...]  # true accuracy per CATEGORIES

    @property
    def pair(self) -> str:
        return f"{self.family}@{self.quantization}"


# fmt: off
FLEET = (
    TruePair("small", "fp16",     0.20, (0.84, 0.88, 0.69, 0.74, 0.63)),
    TruePair("small", "fp8",      0.15, (0.83, 0.88, 0.68, 0.73, 0.63)),
    TruePair("small", "int8",     0.13, (0.82, 0.87, 0.67, 0.72, 0.62)),
    TruePair("small", "awq-int4", 0.12, (0.77, 0.83, 0.62, 0.67, 0.57)),
    TruePair("large", "awq-int4", 0.60, (0.90, 0.92, 0.80, 0.85, 0.76)),
    TruePair("large", "fp8",      0.90, (0.92, 0.94, 0.83, 0.88, 0.79)),
)
# fmt: on


def _draw(rng: random.Random, reference: list[bool], p_ref: float, p_var: float) -> list[bool]:
    """A variant's answers: its reference's, with right answers lost (or wrong ones gained) at
    the rate that makes its true accuracy p_var."""
    if p_var <= p_ref:
        loss = (p_ref - p_var) / p_ref if p_ref > 0 else 0.0
        return [r and rng.random() >= loss for r in reference]
    gain = (p_var - p_ref) / (1 - p_ref)
    return [r or rng.random() < gain for r in reference]


def _answers(rng: random.Random, p: float, items: int) -> list[bool]:
    return [rng.random() < p for _ in range(items)]


def _category(name: str, outcomes: Sequence[bool]) -> CategoryAccuracy:
    right = sum(outcomes)
    return CategoryAccuracy(
        category=name,
        accuracy=right / len(outcomes),
        n=len(outcomes),
        ci_low=0.0,
        ci_high=1.0,
        right=right,
        items=tuple(f"{name}-{i}" for i in range(len(outcomes))),
        outcomes="".join("1" if o else "0" for o in outcomes),
    )


def profile_once(rng: random.Random, items: int = ITEMS) -> list[ProfileReport]:
    """One simulated profiling of the fleet (only the fields the bound reads are set)."""
    answers: dict[str, list[CategoryAccuracy]] = {p.pair: [] for p in FLEET}
    for c, name in enumerate(CATEGORIES):
        for family in sorted({p.family for p in FLEET}):
            members = [p for p in FLEET if p.family == family]
            reference = max(members, key=lambda p: p.usd_per_mtok)  # the most precise here
            ref_p = reference.accuracy[c]
            ref = _answers(rng, ref_p, items)
            for p in members:
                own = (
                    ref if p is reference else _draw(rng, ref, reference.accuracy[c], p.accuracy[c])
                )
                answers[p.pair].append(_category(name, own))
    fields: list[dict[str, Any]] = [
        {"family": p.family, "quantization": p.quantization, "accuracy": tuple(answers[p.pair])}
        for p in FLEET
    ]
    return [ProfileReport.model_construct(**f) for f in fields]


def choose(scores: dict[str, float], floor: float) -> TruePair:
    """The cheapest pair whose score meets the floor; else the highest-scoring one."""
    by_price = sorted(FLEET, key=lambda p: p.usd_per_mtok)
    meeting = [p for p in by_price if scores[p.pair] >= floor]
    return meeting[0] if meeting else max(by_price, key=lambda p: scores[p.pair])


@dataclass
class Tally:
    met: int = 0
    decisions: int = 0
    usd: float = 0.0

    def add(self, pair: TruePair, category: int, floor: float) -> None:
        self.met += pair.accuracy[category] >= floor
        self.decisions += 1
        self.usd += pair.usd_per_mtok


def run(draws: int, seed: int, policy: Policy, items: int = ITEMS) -> dict[str, Tally]:
    rng = random.Random(seed)
    tallies = {"point estimate": Tally(), "confidence bound": Tally(), "oracle": Tally()}
    for _ in range(draws):
        bounds = floor_bounds(profile_once(rng, items), policy)
        for c, name in enumerate(CATEGORIES):
            floor = FLOORS[name]
            point = {p: m[name].accuracy for p, m in bounds.items()}
            bound = {p: m[name].bound for p, m in bounds.items()}
            truth = {p.pair: p.accuracy[c] for p in FLEET}
            tallies["point estimate"].add(choose(point, floor), c, floor)
            tallies["confidence bound"].add(choose(bound, floor), c, floor)
            tallies["oracle"].add(choose(truth, floor), c, floor)
    return tallies


def render(tallies: dict[str, Tally], draws: int, policy: Policy, items: int = ITEMS) -> str:
    oracle = tallies["oracle"].usd
    lines = [
        f"{draws} simulated profilings x {len(CATEGORIES)} categories, {items} items each; "
        f"floors {FLOORS}; bound at {policy.floor_confidence:.0%}",
        f"{'rule':<18} {'floor attainment':>17} {'price vs oracle':>16}",
    ]
    for name, t in tallies.items():
        lines.append(f"{name:<18} {t.met / t.decisions:>17.3f} {t.usd / oracle:>16.3f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.floors.attainment")
    parser.add_argument("--quick", action="store_true", help="50 draws instead of 1000")
    parser.add_argument("--draws", type=int, help="number of simulated profilings")
    parser.add_argument("--items", type=int, default=ITEMS, help="eval items per category")
    parser.add_argument("--seed", type=int, default=20261125)
    args = parser.parse_args(argv)
    draws = args.draws or (50 if args.quick else 1000)
    if draws < 1 or args.items < 1:
        parser.error("--draws and --items must be at least 1")
    policy = Policy()
    print(render(run(draws, args.seed, policy, args.items), draws, policy, args.items))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
