"""The feasibility scan behind `choose_route`: a linear pass over an alias's flat rows.

PURE and the hottest loop of the data plane: the arithmetic of `feasibility.predict` and the
rules of `first_violation` are inlined over `ScanRow` tuples, no object is made per rejected
pair, and the pass stops once the table's cost order proves that no later row can undercut
the cheapest feasible pair (`CostFloor`). `Rest` finishes the pass later, from figures fixed
at decision time: as far as the chain's next candidates need (the proxy reads the second), or
whole for whoever reads the whole chain or the rejections.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

from data_plane.decision.chain import FeasibleRow
from data_plane.decision.feasibility import Limits, order_endpoints
from data_plane.domain import CompiledEndpoint, CostFloor, HealthView, ScanRow, load_terms

_INF = math.inf
_ceil = math.ceil

# (stop position, feasible, missed) of one scan; see `scan`.
Scanned = tuple[int, list[FeasibleRow], list[FeasibleRow]]


def _pick(
    row: ScanRow, ejected: frozenset[str], load: Mapping[str, float], rng: random.Random
) -> tuple[float, tuple[CompiledEndpoint, ...]] | None:
    """Load at the preferred endpoint and the endpoint order; None when all are ejected.
    (The scan inlines the common case: two endpoints, none ejected; two endpoints with one
    ejected leave the other alone, which `order_endpoints` returns as is.)"""
    endpoints = row.endpoints
    if len(endpoints) == 2:
        a, b = row.endpoint_ids
        if a in ejected:
            return None if b in ejected else (load.get(b, 0.0), endpoints[1:])
        if b in ejected:
            return load.get(a, 0.0), endpoints[:1]
    elif not ejected.isdisjoint(row.endpoint_ids):
        endpoints = tuple(e for e in endpoints if e.id not in ejected)
        if not endpoints:
            return None
    ordered = order_endpoints(endpoints, load, rng)
    return load.get(ordered[0].id, 0.0), ordered


def _stop(
    floors: tuple[CostFloor, ...], start: int, limit: int, chars: int, out: int, best_usd: float
) -> int:
    """The first position in [start, limit) from which no row can cost as little as
    `best_usd` (rounding is monotonic, so a floor never exceeds a real row's cost); `limit`
    when there is none. Positions sharing a floor are skipped together (`next_change`)."""
    k = start
    while k < limit:
        cpt, in_usd, out_usd, k_next = floors[k]
        if _ceil(chars / cpt) * in_usd + out * out_usd > best_usd:
            return k
        k = k_next
    return limit


def scan(
    rows: tuple[ScanRow, ...],
    floors: tuple[CostFloor, ...] | None,
    accuracy: tuple[float, ...],
    limits: Limits,
    input_chars: int,
    health: HealthView,
    rng: random.Random,
) -> Scanned:
    """Evaluate `rows` in order into (stop, feasible, missed): the pairs that meet every rule,
    and those that met context and floor but not latency or cost. Pairs failing context or
    floor, or with every endpoint ejected, are skipped (`rejections` explains them from the
    table). With `floors`, the pass stops at the first row whose cost floor is above the
    cheapest feasible pair found before it; `stop` is that position (len(rows) when it ran
    through). The floors ahead are read when the cheapest changes (`_stop`), not per row.

    The checks are `first_violation`'s in another order (cheapest first; feasibility does
    not depend on the order), the arithmetic is `predict`'s, and a None limit is infinity."""
    floor, out = limits.min_accuracy, limits.output_tokens
    latency_cap = _INF if limits.latency_s is None else limits.latency_s
    ttft_cap = _INF if limits.ttft_s is None else limits.ttft_s
    cost_cap = _INF if limits.max_cost_usd is None else limits.max_cost_usd
    # With a latency budget, a load beyond the profiled range gets no prediction it could
    # meet (`first_violation`): the row is missed, as too slow.
    budgeted = latency_cap < _INF or ttft_cap < _INF
    ejected, load = health.open_endpoints, health.load
    get = load.get
    feasible: list[FeasibleRow] = []
    missed: list[FeasibleRow] = []
    best_usd = _INF
    limit = len(rows)
    for k, row in enumerate(rows):
        if k == limit:
            return k, feasible, missed
        if accuracy[row[0]] < floor:  # most rows of `auto` fail here: read one field first
            continue
        (
            i,
            pair,
            endpoints,
            ids,
            swapped,
            cpt,
            ctx,
            in_usd,
            out_usd,
            tb,
            tpi,
            _,
            pb,
            _,
            top,
            steps,
        ) = row
        tokens = _ceil(input_chars / cpt)
        if tokens + out > ctx:
            continue
        if len(ids) == 2 and ids[0] not in ejected and ids[1] not in ejected:
            l0, l1 = get(ids[0], 0.0), get(ids[1], 0.0)
            first = l0 < l1 or (l0 == l1 and rng.random() < 0.5)  # = order_endpoints
            at = l0 + 1.0 if first else l1 + 1.0
            ordered = endpoints if first else swapped
        else:
            picked = _pick(row, ejected, load, rng)
            if picked is None:
                continue
            at, ordered = picked[0] + 1.0, picked[1]
        f = int(at)
        if f < len(steps):  # = load_terms, inlined for the usual in-range case
            w = at - f
            t0, dt, i0, di, p0, dp = steps[f]
            lt = t0 + dt * w + (i0 + di * w) * tokens
            lp = p0 + dp * w
        else:
            lt, lp = load_terms(pair, at, tokens)
        ttft = tb + tpi * tokens + lt
        latency = ttft + out * (pb + lp)
        cost = tokens * in_usd + out * out_usd
        found = (cost, latency, i, pair, ordered, tokens, ttft, at)
        if latency > latency_cap or ttft > ttft_cap or cost > cost_cap or (budgeted and at > top):
            missed.append(found)
        else:
            feasible.append(found)
            if floors and cost < best_usd:  # (without floors, nothing reads best_usd)
                best_usd = cost
                limit = _stop(floors, k + 1, limit, input_chars, out, cost)
    return len(rows), feasible, missed


class SeededOnUse(random.Random):
    """`random.Random(seed)` that seeds itself on its first draw: seeding costs ~4 us, and
    the scan of the rest draws only for a pair whose two endpoints tie on load, which most
    completions never meet. Its draws are `random.Random(seed)`'s."""

    def __init__(self, seed: int) -> None:  # no super().__init__: that would seed now
        self._pending: int | None = seed

    def random(self) -> float:
        if self._pending is not None:
            self.seed(self._pending)
            self._pending = None
        return super().random()

    def getrandbits(self, k: int) -> int:
        if self._pending is not None:
            self.seed(self._pending)
            self._pending = None
        return super().getrandbits(k)


class Rest:
    """The rows a bounded scan did not reach, scanned when first needed and only as far as
    needed: with the loads and breaker state of decision time (a copy) and an rng seeded at
    decision time, so the result does not depend on when, how far, or whether it is read.
    The rows are scanned in order with one rng, in as many pieces as readers ask for, so the
    pieces draw what one pass over them would."""

    __slots__ = (
        "_accuracy",
        "_chars",
        "_done",
        "_ejected",
        "_feasible",
        "_floors",
        "_limits",
        "_load",
        "_missed",
        "_pos",
        "_rng",
        "_rows",
        "_seed",
    )

    def __init__(
        self,
        rows: tuple[ScanRow, ...],
        floors: tuple[CostFloor, ...] | None,
        accuracy: tuple[float, ...],
        limits: Limits,
        input_chars: int,
        scanned: Scanned,
        health: HealthView,
        rng: random.Random,
    ) -> None:
        self._rows, self._accuracy, self._limits, self._chars = rows, accuracy, limits, input_chars
        self._floors = floors or ()
        self._pos, self._feasible, self._missed = scanned
        self._done: tuple[list[FeasibleRow], list[FeasibleRow]] | None = None
        self._rng: random.Random | None = None
        self._seed, self._ejected, self._load = 0, health.open_endpoints, health.load
        if self._pos < len(rows):  # the view is made on first use; the loads are copied now
            self._seed = rng.getrandbits(64)
            self._load = dict(health.load)

    def _advance(self, end: int) -> None:
        """Scan the rows from where the last scan stopped up to `end` (new lists: the
        decision's own are never changed)."""
        if self._rng is None:
            self._rng = SeededOnUse(self._seed)
        view = HealthView(self._ejected, self._load)
        rows, limits, chars = self._rows[self._pos : end], self._limits, self._chars
        _, more, also = scan(rows, None, self._accuracy, limits, chars, view, self._rng)
        self._feasible, self._missed, self._pos = self._feasible + more, self._missed + also, end

    def _find(self, n: int) -> None:
        """Scan on until `n` pairs are feasible or the rows end, in pieces of 1, 2, 4, ...
        rows (a piece may run past the n-th: that scans sooner what a later read would)."""
        piece, total = 1, len(self._rows)
        while len(self._feasible) < n and self._pos < total:
            self._advance(min(total, self._pos + piece))
            piece *= 2

    def leading(self, n: int) -> list[FeasibleRow]:
        """The chain's first `n` rows (`n` >= 1), or more, or all of it when it is shorter.
        Rows are scanned until n feasible pairs are found, then up to the first position whose
        cost floor is above the n-th cheapest of them (as `scan` stops for the first): no row
        from there on can rank among the first n, nor before any row cheaper than that floor."""
        if self._done is not None:
            return self._done[0]
        total, out = len(self._rows), self._limits.output_tokens
        self._find(n)
        if self._pos == total:
            return self.complete()[0]
        ranked = sorted(self._feasible)
        end = _stop(self._floors, self._pos, total, self._chars, out, ranked[n - 1][0])
        if end == total:
            return self.complete()[0]
        if end > self._pos:
            self._advance(end)
            ranked = sorted(self._feasible)
        cpt, in_usd, out_usd, _ = self._floors[end]
        floor_usd = _ceil(self._chars / cpt) * in_usd + out * out_usd
        known = n
        while known < len(ranked) and ranked[known][0] < floor_usd:
            known += 1
        return ranked[:known]

    def complete(self) -> tuple[list[FeasibleRow], list[FeasibleRow]]:
        """(feasible in chain order, missed) over every row."""
        if self._done is None:
            if self._pos < len(self._rows):
                self._advance(len(self._rows))
            self._done = sorted(self._feasible), self._missed
        return self._done
