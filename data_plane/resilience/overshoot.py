"""How much later than the table's prediction this replica's answers reach their clients, per
pair: the margin `decision.capacity` takes off a budget before it seeks the sustainable load.

Each sample is one clean first-choice answer's observed latency (from its dispatch: a wait in
the flow queue is the router's, not the engine's) minus the prediction for the
tokens its engine reported at the load it met (the decision's, or more where requests joined
its endpoint after it: `telemetry.pair_totals.predicted_e2e_s`, as
the latency feedback compares them: a short answer is not counted as early), which holds the
router's own time and the prediction's error at that load. A sample is bounded to
[0, the prediction] (one stalled answer counts as a doubled one, not a minute), and a pair's
margin is the QUANTILE of its last SAMPLES samples, none before MIN_SAMPLES.

Other tenants' capacity is what a margin spends, so one client cannot set it: an identified
client gives at most the larger of the policy's `refit.max_client_share` (the latency
feedback's cap) and an equal share among the clients in the pair's samples, plus one; its own
slow requests (a slow network to it, prompts the prediction misjudges) then move the
quantile by at most that share. The equal share keeps a margin where few clients are seen
(two tenants give half each; 10% each would leave the samples too few to take a quantile),
and a client alone sets the margin alone, which other clients then outvote (or it decays).
Unknown clients (None) are not capped: nothing tells them apart. What else could explain a
margin: engines slower than profiled (a refit narrows it) or a slow network to them; both
make answers late, which is what it counts.
Event-loop thread only; the clock is injected; memory is SAMPLES per pair served.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable, Mapping

SAMPLES = 64  # the recent answers per pair that the margin is the quantile of
MIN_SAMPLES = 8  # fewer samples than this give no margin
QUANTILE = 0.9


class _Recent:
    """One pair's last samples and who gave them, and the same samples kept in order (the
    quantile is read after every answer: sorting the window each time cost ~3 us of the
    ~5 us an answer took here, one insertion and one removal in the kept order ~1 us)."""

    __slots__ = ("by_client", "ordered", "samples")

    def __init__(self) -> None:
        self.samples: deque[tuple[float, str | None]] = deque(maxlen=SAMPLES)
        self.by_client: dict[str, int] = {}
        self.ordered: list[float] = []  # the samples' values, ascending

    def quantile(self, q: float) -> float:
        ordered = self.ordered
        return ordered[int(q * (len(ordered) - 1))]

    def admits(self, client: str | None, max_share: float) -> bool:
        """Whether `client` may give one more sample: held + 1 <= share x (n + 1) + 1, share
        the larger of `max_share` and 1 / the clients in the samples, this one included."""
        if client is None:
            return True
        held = self.by_client.get(client, 0)
        clients = len(self.by_client) + (held == 0)
        share = max(max_share, 1.0 / clients)
        return held + 1 <= share * (len(self.samples) + 1) + 1

    def add(self, overshoot_s: float, client: str | None) -> None:
        if len(self.samples) == SAMPLES:
            value, old = self.samples[0]
            del self.ordered[bisect_left(self.ordered, value)]
            if old is not None:
                left = self.by_client[old] - 1
                if left:
                    self.by_client[old] = left
                else:
                    del self.by_client[old]
        self.samples.append((overshoot_s, client))
        insort(self.ordered, overshoot_s)
        if client is not None:
            self.by_client[client] = self.by_client.get(client, 0) + 1


class Overshoot:
    """pair -> (margin seconds as of `at`, at); read through `capacity.Seen.margin_s`."""

    __slots__ = ("_clock", "_margins", "_recent", "capped")

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._recent: dict[str, _Recent] = {}
        self._margins: dict[str, tuple[float, float]] = {}
        self.capped = 0  # samples left out because their client had its share

    def answered(
        self, pair: str, latency_s: float, predicted_s: float, client: tuple[str | None, float]
    ) -> None:
        """One answer from `pair` in `latency_s` against `predicted_s`; `client` = (who sent
        it, the policy's max share of one client)."""
        if predicted_s <= 0.0 or latency_s < 0.0:
            return
        who, max_share = client
        recent = self._recent.get(pair)
        if recent is None:
            recent = self._recent[pair] = _Recent()
        if not recent.admits(who, max_share):
            self.capped += 1
            return
        recent.add(min(max(0.0, latency_s - predicted_s), predicted_s), who)
        if len(recent.samples) >= MIN_SAMPLES:
            self._margins[pair] = (recent.quantile(QUANTILE), self._clock())

    def raw(self) -> Mapping[str, tuple[float, float]]:
        return self._margins
