"""The A/B rows of the overhead section: Gearbox as built against the same data plane with one
hand-written piece replaced by the library it stands in for (`targets.AB_ROWS`). PURE.

A piece's *share* is what it adds to Gearbox's ratio against the minimal aiohttp proxy, the
ratio the throughput targets are about: (Gearbox - variant) / minimal, per connection count,
in req/s and in req per CPU-second; the median over the rounds in which all three ran, with
the lowest and highest. A piece whose share changes sign between rounds does not buy a
measurable share of the ratio.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.common.stats import median_low
from bench.common.targets import AB, AB_ROWS
from bench.overhead.section import TargetRun
from bench.overhead.wrk import ClosedLoopResult

Figure = Callable[[ClosedLoopResult], float | None]


@dataclass(frozen=True, slots=True)
class Share:
    median: float
    low: float
    high: float
    runs: int

    @property
    def measurable(self) -> bool:
        """The same sign in every run (and more than one run)."""
        return self.runs > 1 and (self.low > 0 or self.high < 0)


@dataclass(frozen=True, slots=True)
class ABRow:
    piece: str
    ours: str
    theirs: str
    stream: bool
    connections: int
    ours_rps: float
    theirs_rps: float
    ours_cpu_us: float | None
    theirs_cpu_us: float | None
    share: Share  # of the throughput ratio
    cpu_share: Share | None  # of the per-CPU-second ratio


def requests_per_s(c: ClosedLoopResult) -> float | None:
    return c.requests_per_s or None


def requests_per_cpu_s(c: ClosedLoopResult) -> float | None:
    """What one busy core would serve: 1e6 / the proxy's CPU us per request."""
    return 1e6 / c.cpu_us_per_request if c.cpu_us_per_request else None


def _share(cells: Sequence[tuple[ClosedLoopResult, ...]], figure: Figure) -> Share | None:
    shares = []
    for ours, theirs, minimal in cells:
        o, t, m = figure(ours), figure(theirs), figure(minimal)
        if o is not None and t is not None and m:
            shares.append((o - t) / m)
    if not shares:
        return None
    return Share(median_low(shares), min(shares), max(shares), len(shares))


def _by_round(runs: Sequence[TargetRun], name: str, stream: bool) -> dict[int, TargetRun]:
    return {r.round: r for r in runs if r.target == name and r.stream == stream and not r.error}


def _row(ab: AB, runs: Sequence[TargetRun], stream: bool, connections: int) -> ABRow | None:
    rounds = [_by_round(runs, n, stream) for n in ("gearbox", ab.target, "minimal")]
    cells = []
    for round_ in sorted(set.intersection(*(set(r) for r in rounds))):
        found = [r[round_].closed_at(connections) for r in rounds]
        if all(f is not None for f in found):
            cells.append(tuple(f for f in found if f is not None))
    share = _share(cells, requests_per_s)
    if share is None:
        return None
    cpu = [(c[0].cpu_us_per_request, c[1].cpu_us_per_request) for c in cells]
    ours_cpu = [o for o, _ in cpu if o is not None]
    theirs_cpu = [t for _, t in cpu if t is not None]
    return ABRow(
        ab.piece,
        ab.ours,
        ab.theirs,
        stream,
        connections,
        median_low([c[0].requests_per_s for c in cells]),
        median_low([c[1].requests_per_s for c in cells]),
        median_low(ours_cpu) if ours_cpu else None,
        median_low(theirs_cpu) if theirs_cpu else None,
        share,
        _share(cells, requests_per_cpu_s),
    )


def ab_rows(runs: Sequence[TargetRun]) -> list[ABRow]:
    rows = []
    for ab in AB_ROWS:
        for stream in (False, True):
            first = _by_round(runs, "gearbox", stream).get(0)
            for c in first.closed if first else ():
                row = _row(ab, runs, stream, c.connections)
                if row is not None:
                    rows.append(row)
    return rows


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a hand-written piece earns its place against the library it replaces."""

    piece: str
    rows: int
    gains: int  # rows where its share of req per CPU-second is measurable and positive
    losses: int  # ... measurable and negative

    @property
    def keep(self) -> bool:
        """A measurable gain in at least half the rows (streaming x connections), a measurable
        loss in none: the rule docs/benchmarks.md states for deleting a piece."""
        return self.rows > 0 and self.losses == 0 and 2 * self.gains >= self.rows


def verdicts(rows: Sequence[ABRow]) -> list[Verdict]:
    found: list[Verdict] = []
    for piece in dict.fromkeys(r.piece for r in rows):
        shares = [r.cpu_share for r in rows if r.piece == piece and r.cpu_share is not None]
        gains = sum(1 for s in shares if s.measurable and s.low > 0)
        losses = sum(1 for s in shares if s.measurable and s.high < 0)
        found.append(Verdict(piece, len(shares), gains, losses))
    return found
