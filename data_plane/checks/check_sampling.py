"""Which answers become accuracy checks, beyond the sample rate: one client's share of a
pair's checks and of the check budget's dollars, and the pace of probes of demoted pairs.

No I/O; the clock comes in. A check is evidence about an engine, so no identified client
supplies more than a set share of one (pair, category)'s checks in an hour (`ClientShares`, the
rule of the latency feedback's `refit.max_client_share`). Checks are paid from one hourly
dollar budget per process, and a check costs what its prompt costs: a client's long prompts
would spend it for everyone, so no identified client spends more than the same share of it
(`ClientSpend`). A demoted (pair, category) gets no
client traffic when its demoted bound no longer meets the floors of its category, so fresh
checks of it come from requests other pairs answered: `probe_targets` names the demoted pairs a
request could have been routed to, and `ProbeSlots` spaces their probes at least an interval
apart per (pair, category) (docs/accuracy.md "Live checks").
"""

from __future__ import annotations

from collections.abc import Callable

from data_plane.domain import CompiledPair, CompiledTable

MAX_CLIENTS = 10_000  # clients counted per (pair, category) and hour; further ones uncounted
_HOUR_S = 3600.0
_Key = tuple[int, str, str]  # (table version, pair, category)


def probe_targets(
    table: CompiledTable, alias: str, category: str, served: str
) -> tuple[CompiledPair, ...]:
    """The pairs demoted in `category` that the request's `model` field (`alias`) allows,
    other than the pair that answered it (its own answer is checked the ordinary way), and
    with a reference pair of their own to be compared with."""
    demoted = table.demoted.get(category, ())
    if not demoted:
        return ()
    allowed = {p.pair for p in table.by_alias.get(alias, ())}
    return tuple(
        p
        for p in demoted
        if p.pair != served
        and p.pair in allowed
        and (ref := table.baselines.get(p.family)) is not None
        and ref.pair != p.pair
    )


class ClientShares:
    """Checks per identified client of each (table version, pair, category), in a fixed hour
    from the first use. Anonymous requests (None) are not told apart and not capped."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._started = clock()
        self._taken: dict[_Key, tuple[list[int], dict[str, int]]] = {}

    def admit(self, key: _Key, client: str | None, max_share: float) -> bool:
        """Whether one more check from `client` fits: taken from it + 1 <= max_share x
        (taken + 1) + 1 (a client may always give one). Counts it when it fits."""
        if self._clock() - self._started >= _HOUR_S:
            self._started, self._taken = self._clock(), {}
        taken, by_client = self._taken.setdefault(key, ([0], {}))
        if client is not None and (client in by_client or len(by_client) < MAX_CLIENTS):
            mine = by_client.get(client, 0)
            if mine + 1 > max_share * (taken[0] + 1) + 1:
                return False
            by_client[client] = mine + 1
        taken[0] += 1
        return True


class ClientSpend:
    """Dollars reserved (then settled) for each identified client's checks, in a fixed hour
    from the first use. Anonymous requests (None) are not told apart and not capped: one
    bucket for all of them would hold every check of a deployment without client identities
    to the share (docs/accuracy.md "Live checks")."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._started = clock()
        self._spent: dict[str, float] = {}

    def _roll(self) -> None:
        if self._clock() - self._started >= _HOUR_S:
            self._started, self._spent = self._clock(), {}

    def reserve(self, client: str | None, usd: float, limit_usd: float) -> bool:
        """Whether `client` may spend `usd` more this hour, its total staying within
        `limit_usd` (no allowance: a check dearer than a client's whole share is never
        sent for it); reserves it when so."""
        self._roll()
        if client is None:
            return True
        mine = self._spent.get(client)
        if mine is None and len(self._spent) >= MAX_CLIENTS:
            return True  # further clients uncounted, as `ClientShares`
        if (mine or 0.0) + usd > limit_usd:
            return False
        self._spent[client] = (mine or 0.0) + usd
        return True

    def settle(self, client: str | None, reserved_usd: float, spent_usd: float) -> None:
        """Replace a reservation by what the check cost (nothing when it was not sent)."""
        if client is not None and client in self._spent:
            self._spent[client] = max(0.0, self._spent[client] - reserved_usd + spent_usd)


class ProbeSlots:
    """When each demoted (pair, category) was last probed by this process."""

    def __init__(self, clock: Callable[[], float], interval_s: float) -> None:
        self._clock = clock
        self.interval_s = interval_s  # 0: no probes
        self._last: dict[tuple[str, str], float] = {}

    def first_open(self, pairs: tuple[CompiledPair, ...], category: str) -> CompiledPair | None:
        """The first of `pairs` not probed in `category` for `interval_s`; None when none is
        (or probes are off)."""
        if self.interval_s <= 0.0:
            return None
        now = self._clock()
        for pair in pairs:
            last = self._last.get((pair.pair, category))
            if last is None or now - last >= self.interval_s:
                return pair
        return None

    def take(self, pair: str, category: str) -> None:
        self._last[(pair, category)] = self._clock()
