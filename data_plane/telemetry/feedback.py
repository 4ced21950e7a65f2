"""Latency feedback: per pair, load and size bucket, observed latency against the prediction
for what the engine was asked to do.

Counting only (no I/O): `observe` adds three ratios to fixed histograms in memory, O(1) per
request; `drain` hands the window's summaries to the writer (`sync/feedback_writer.py`) and
starts a new window. Memory is bounded by table versions x pairs x buckets x ratio buckets, plus
one count per identified client and pair in the window (at most MAX_CLIENTS per pair).
"""

from __future__ import annotations

from datetime import UTC, datetime

from contracts.latency_feedback import (
    RATIO_BUCKETS,
    AgreementCell,
    CanaryCell,
    LatencyFeedback,
    MixCell,
    PairLoadFeedback,
    RatioHistogram,
    load_bucket,
    ratio_bucket,
    size_bucket,
)
from data_plane.domain import Candidate, CompiledPair, RouteDecision, RouteReason, load_terms

_PROVEN = frozenset({RouteReason.CHEAPEST_FEASIBLE, RouteReason.MOST_PRECISE_FEASIBLE})

MAX_CLIENTS = 10_000  # clients counted per pair and window; further ones go uncounted
# (table version, pair, load bucket, size bucket) -> [ttft, tpot, e2e] counts per ratio
# bucket, then [budget met, budget missed]
_Cells = dict[tuple[int, str, int, int], list[list[int]]]


def _ratio(observed_s: float, predicted_s: float) -> float | None:
    return observed_s / predicted_s if predicted_s > 0.0 and observed_s >= 0.0 else None


def predicted_lines(pair: CompiledPair, load: float, input_tokens: int) -> tuple[float, float]:
    """(TTFT, TPOT) the table predicts for `input_tokens` prompt tokens at `load`, in seconds:
    the same lines routing uses (`decision/feasibility.predict`), fed the engine's own counts."""
    ttft_load_s, tpot_load_s = load_terms(pair, load, input_tokens)
    ttft_s = pair.ttft_base_s + pair.ttft_per_input_token_s * input_tokens + ttft_load_s
    return ttft_s, pair.tpot_base_s + tpot_load_s


class FeedbackAggregator:
    """Observations of this process since the last `drain`."""

    __slots__ = ("_agreement", "_canary", "_cells", "_clients", "_mix", "_since", "capped")

    def __init__(self, now: float) -> None:
        self._cells: _Cells = {}
        # (version, category, floor, pair) -> [requests, proven, input, output tokens, cost]
        self._mix: dict[tuple[int, str, float, str], list[float]] = {}
        self._agreement: dict[tuple[int, str, str], list[int]] = {}  # -> [checks, agreed]
        self._canary: dict[tuple[int, str, str], list[int]] = {}  # -> [n, right]
        # (table version, pair) -> (samples taken, client -> samples taken from it)
        self._clients: dict[tuple[int, str], tuple[list[int], dict[str, int]]] = {}
        self._since = now
        self.capped = 0  # samples left out because their client had its share (since start)

    def observe_agreement(self, version: int, pair: str, category: str, agreed: bool) -> None:
        """One shadow re-ask of `pair`'s answer on its reference pair."""
        counts = self._agreement.setdefault((version, pair, category), [0, 0])
        counts[0] += 1
        counts[1] += agreed

    def observe_canary(self, version: int, pair: str, category: str, right: bool) -> None:
        """One canary item of `pair` scored (docs/accuracy.md "Canary items")."""
        counts = self._canary.setdefault((version, pair, category), [0, 0])
        counts[0] += 1
        counts[1] += right

    def observe_decision(self, version: int, decision: RouteDecision) -> None:
        """One served decision in the traffic mix: its category, floor and first pair, whether
        it was decided under the guarantee, and its estimated tokens and cost (the recent mix
        of `contracts.evidence`)."""
        first = decision.candidates[0]
        key = (version, decision.category, round(decision.min_accuracy, 2), first.pair.pair)
        row = self._mix.get(key)
        if row is None:
            row = self._mix[key] = [0, 0, 0, 0, 0.0]
        row[0] += 1
        row[1] += decision.reason in _PROVEN
        row[2] += first.input_tokens
        row[3] += first.output_tokens
        row[4] += first.estimated_cost_usd

    def _admit(self, version: int, pair: str, client: str | None, max_share: float) -> bool:
        """Whether a sample from `client` fits its share of `pair`'s samples in this window:
        taken from it + 1 <= max_share x (taken + 1) + 1 (each client may give one sample to
        a window whatever its share). Unknown clients (None) are not capped: nothing tells
        them apart (docs/control_plane.md "Latency feedback")."""
        taken, by_client = self._clients.setdefault((version, pair), ([0], {}))
        if client is not None and (client in by_client or len(by_client) < MAX_CLIENTS):
            mine = by_client.get(client, 0)
            if mine + 1 > max_share * (taken[0] + 1) + 1:
                self.capped += 1
                return False
            by_client[client] = mine + 1
        taken[0] += 1
        return True

    def observe(
        self,
        version: int,
        cand: Candidate,
        timing: tuple[float, float | None],
        tokens: tuple[int, int],
        budget_met: bool | None = None,
        client: tuple[str | None, float] = (None, 1.0),
    ) -> None:
        """One answer served by `cand`: `timing` = (latency, TTFT when it was streamed, else
        None), `tokens` = the (prompt, completion) tokens its engine reported in `usage`;
        `budget_met` None when the request had no latency budget; `client` = (who sent it,
        the policy's max share of one client). Each ratio is against the prediction for those
        tokens at the load the request met (answers stop before max_tokens; prompts hold
        images and tools the request's character count misses)."""
        client_id, max_share = client
        pair = cand.pair
        if not self._admit(version, pair.pair, client_id, max_share):
            return
        latency_s, ttft_s = timing
        input_tokens, output_tokens = tokens
        ttft_pred, tpot_pred = predicted_lines(pair, cand.load, input_tokens)
        key = (
            version,
            pair.pair,
            load_bucket(cand.load),
            size_bucket(input_tokens + output_tokens),
        )
        cell = self._cells.get(key)
        if cell is None:
            cell = self._cells[key] = [[0] * RATIO_BUCKETS for _ in range(3)] + [[0, 0]]
        if budget_met is not None:
            cell[3][0 if budget_met else 1] += 1
        e2e = _ratio(latency_s, ttft_pred + output_tokens * tpot_pred)
        if e2e is not None:
            cell[2][ratio_bucket(e2e)] += 1
        if ttft_s is None:
            return
        ttft = _ratio(ttft_s, ttft_pred)
        if ttft is not None:
            cell[0][ratio_bucket(ttft)] += 1
        if output_tokens > 1:
            tpot = _ratio((latency_s - ttft_s) / (output_tokens - 1), tpot_pred)
            if tpot is not None:
                cell[1][ratio_bucket(tpot)] += 1

    def drain(self, instance: str, now: float) -> list[LatencyFeedback]:
        """The window's summaries, one per table version seen (none when nothing was served),
        and a fresh window from `now` (wall-clock seconds)."""
        cells, self._cells = self._cells, {}
        agreement, self._agreement = self._agreement, {}
        canary, self._canary = self._canary, {}
        mix, self._mix = self._mix, {}
        self._clients = {}
        start, self._since = self._since, now
        by_version: dict[int, list[PairLoadFeedback]] = {v: [] for v, _, _ in agreement}
        by_version.update({v: [] for v, _, _, _ in mix if v not in by_version})
        by_version.update({v: [] for v, _, _ in canary if v not in by_version})
        mixed = _mix_cells(mix)
        agreed: dict[int, list[AgreementCell]] = {}
        for (version, pair, category), (checks, same) in sorted(agreement.items()):
            cell = AgreementCell(pair=pair, category=category, checks=checks, agreed=same)
            agreed.setdefault(version, []).append(cell)
        scored: dict[int, list[CanaryCell]] = {}
        for (version, pair, category), (n, right) in sorted(canary.items()):
            scored.setdefault(version, []).append(
                CanaryCell(pair=pair, category=category, n=n, right=right)
            )
        for (version, pair, load, size), (ttft, tpot, e2e, budget) in sorted(cells.items()):
            by_version.setdefault(version, []).append(
                PairLoadFeedback(
                    pair=pair,
                    load_bucket=load,
                    size_bucket=size,
                    ttft=_histogram(ttft),
                    tpot=_histogram(tpot),
                    e2e=_histogram(e2e),
                    budget_met=budget[0],
                    budget_missed=budget[1],
                )
            )
        return [
            LatencyFeedback(
                instance=instance,
                table_version=version,
                window_start=datetime.fromtimestamp(start, UTC),
                window_end=datetime.fromtimestamp(now, UTC),
                cells=tuple(found),
                agreement=tuple(agreed.get(version, ())),
                canary=tuple(scored.get(version, ())),
                mix=tuple(mixed.get(version, ())),
            )
            for version, found in by_version.items()
        ]


def _mix_cells(mix: dict[tuple[int, str, float, str], list[float]]) -> dict[int, list[MixCell]]:
    out: dict[int, list[MixCell]] = {}
    for (version, category, floor, pair), (n, proven, inp, outp, cost) in sorted(mix.items()):
        out.setdefault(version, []).append(
            MixCell(
                category=category,
                floor=floor,
                pair=pair,
                requests=int(n),
                proven=int(proven),
                input_tokens=int(inp),
                output_tokens=int(outp),
                cost_usd=cost,
            )
        )
    return out


def _histogram(counts: list[int]) -> RatioHistogram:
    return RatioHistogram(counts={i: c for i, c in enumerate(counts) if c})
