"""Latency feedback: per pair and load bucket, observed latency against the prediction routed on.

Counting only (no I/O): `observe` adds three ratios to fixed histograms in memory, O(1) per
request; `drain` hands the window's summaries to the writer (`sync/feedback_writer.py`) and
starts a new window. Memory is bounded by table versions x pairs x load buckets x buckets.
"""

from __future__ import annotations

from datetime import UTC, datetime

from contracts.latency_feedback import (
    RATIO_BUCKETS,
    AgreementCell,
    LatencyFeedback,
    MixCell,
    PairLoadFeedback,
    RatioHistogram,
    load_bucket,
    ratio_bucket,
)
from data_plane.domain import Candidate, RouteDecision, RouteReason

_PROVEN = frozenset({RouteReason.CHEAPEST_FEASIBLE, RouteReason.MOST_PRECISE_FEASIBLE})

# (table version, pair, load bucket) -> [ttft, tpot, e2e] counts per ratio bucket
_Cells = dict[tuple[int, str, int], list[list[int]]]


def _ratio(observed_s: float, predicted_s: float) -> float | None:
    return observed_s / predicted_s if predicted_s > 0.0 and observed_s >= 0.0 else None


class FeedbackAggregator:
    """Observations of this process since the last `drain`."""

    __slots__ = ("_agreement", "_cells", "_mix", "_since")

    def __init__(self, now: float) -> None:
        self._cells: _Cells = {}
        # (version, category, floor, pair) -> [requests, proven, input, output tokens, cost]
        self._mix: dict[tuple[int, str, float, str], list[float]] = {}
        self._agreement: dict[tuple[int, str, str], list[int]] = {}  # -> [checks, agreed]
        self._since = now

    def observe_agreement(self, version: int, pair: str, category: str, agreed: bool) -> None:
        """One shadow re-ask of `pair`'s answer on its reference pair."""
        counts = self._agreement.setdefault((version, pair, category), [0, 0])
        counts[0] += 1
        counts[1] += agreed

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

    def observe(
        self,
        version: int,
        cand: Candidate,
        latency_s: float,
        ttft_s: float | None,
        output_tokens: int,
    ) -> None:
        """One answer served by `cand` in `latency_s` (first token after `ttft_s` when it
        was streamed) with `output_tokens` tokens. The predictions are the candidate's, at
        the load it was routed on; e2e is compared with the prediction for the tokens the
        engine actually produced (answers often stop before max_tokens)."""
        planned = max(cand.output_tokens, 1)
        tpot_pred = (cand.predicted_latency_s - cand.predicted_ttft_s) / planned
        key = (version, cand.pair.pair, load_bucket(cand.load))
        cell = self._cells.get(key)
        if cell is None:
            cell = self._cells[key] = [[0] * RATIO_BUCKETS for _ in range(3)]
        e2e = _ratio(latency_s, cand.predicted_ttft_s + output_tokens * tpot_pred)
        if e2e is not None:
            cell[2][ratio_bucket(e2e)] += 1
        if ttft_s is None:
            return
        ttft = _ratio(ttft_s, cand.predicted_ttft_s)
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
        mix, self._mix = self._mix, {}
        start, self._since = self._since, now
        by_version: dict[int, list[PairLoadFeedback]] = {v: [] for v, _, _ in agreement}
        by_version.update({v: [] for v, _, _, _ in mix if v not in by_version})
        mixed = _mix_cells(mix)
        agreed: dict[int, list[AgreementCell]] = {}
        for (version, pair, category), (checks, same) in sorted(agreement.items()):
            cell = AgreementCell(pair=pair, category=category, checks=checks, agreed=same)
            agreed.setdefault(version, []).append(cell)
        for (version, pair, bucket), (ttft, tpot, e2e) in sorted(cells.items()):
            by_version.setdefault(version, []).append(
                PairLoadFeedback(
                    pair=pair,
                    load_bucket=bucket,
                    ttft=_histogram(ttft),
                    tpot=_histogram(tpot),
                    e2e=_histogram(e2e),
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
