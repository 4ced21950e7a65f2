"""The operator page's closed-loop view: latency drift, refit history, live agreement.

Adapter over the data planes' feedback stream (the window the refit loop reads), the current
table and the kept tables' `refit` provenance; the figures come from the same pure functions
the refit loop decides with (`drift`, `accuracy_drift`), so the page shows what the loop sees.
Read-only; bounded reads (XRANGE by time with a count, MGET of the kept versions).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contracts.latency_feedback import LatencyFeedback
from contracts.policy import Policy
from contracts.routing_table import RefitProvenance, RoutingTable
from control_plane.api.context import SERVICES_KEY, SETTINGS_KEY, Handler, json_response
from control_plane.loop import accuracy_drift, drift
from control_plane.runtime.services import Services
from control_plane.ui.evidence_view import EvidenceView, evidence_view

MAX_REPORTS = 5_000  # feedback entries read per view (as the refit loop)
MAX_REFITS = 50  # kept versions whose provenance is read


class _View(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DriftRow(_View):
    pair: str
    samples: int = Field(description="end-to-end observations in the window")
    e2e_ratio: float | None = Field(description="observed / predicted at the table quantile")
    ttft_ratio: float | None
    tpot_ratio: float | None
    drifting: bool = Field(description="enough samples and outside the policy's threshold")


class RefitRow(_View):
    version: int
    created_at: str | None
    note: str
    base_version: int
    samples: int
    window_s: float
    factors: dict[str, tuple[float, float]] = Field(description="pair -> (TTFT, TPOT) factor")
    demoted: dict[str, dict[str, float]] = Field(description="pair -> category -> accuracy")


class AgreementRow(_View):
    pair: str
    category: str
    checks: int
    agreed: int
    agreement: float
    lower: float = Field(
        description="lower bound of the agreement (policy confidence): a demotion lifts only "
        "when it reaches `expected`"
    )
    upper: float = Field(description="upper bound of the agreement (policy confidence)")
    expected: float = Field(
        description="the least agreement the pair's profile bound implies (docs/accuracy.md)"
    )
    drifting: bool
    demoted: bool = Field(description="a demotion of this pair and category is in force")


class DemotionRow(_View):
    """An accuracy demotion in force in the current table."""

    pair: str
    category: str
    profile_bound: float = Field(description="what the profiles gave (restored on lifting)")
    bound: float = Field(description="what floors compare with now: the live lower bound")
    checks: int
    agreed: int
    base_version: int = Field(description="the table the checks were about")


class LoopView(_View):
    table_version: int | None
    window_s: float
    min_samples: int
    drift_threshold_ratio: float
    refit_enabled: bool
    pinned_version: int | None
    drift: list[DriftRow]
    refits: list[RefitRow] = Field(description="kept versions made from live traffic, newest first")
    agreement: list[AgreementRow]
    demotions: list[DemotionRow] = Field(description="accuracy demotions in force")
    reports: int = Field(description="feedback reports in the window")
    evidence: EvidenceView = Field(description="provable share and evidence that moves traffic")


def loop_view(
    table: RoutingTable | None,
    policy: Policy,
    reports: Sequence[LatencyFeedback],
    refits: Sequence[RefitRow],
    now: datetime,
) -> LoopView:
    """PURE: the drift and agreement figures of `reports` about `table`, and the refits."""
    rows, agreements = [], []
    if table is not None:
        drifts = drift.merge_feedback(reports, table.version, table.policy.latency_quantile)
        rows = [
            DriftRow(
                pair=d.pair,
                samples=d.samples,
                e2e_ratio=d.e2e_ratio,
                ttft_ratio=d.ttft_ratio,
                tpot_ratio=d.tpot_ratio,
                drifting=drift.drifting(d, policy.refit),
            )
            for d in drifts.values()
        ]
        agreements = [
            AgreementRow(
                pair=a.pair,
                category=a.category,
                checks=a.checks,
                agreed=a.agreed,
                agreement=a.ratio,
                lower=a.lower,
                upper=a.upper,
                expected=a.expected,
                drifting=accuracy_drift.drifting(a, policy.accuracy_check),
                demoted=a.demoted,
            )
            for a in accuracy_drift.merge_agreement(
                reports, table, policy.accuracy_check.confidence
            )
        ]
    return LoopView(
        table_version=None if table is None else table.version,
        window_s=policy.refit.window_s,
        min_samples=policy.refit.min_samples,
        drift_threshold_ratio=policy.refit.drift_threshold_ratio,
        refit_enabled=policy.refit.enabled,
        pinned_version=policy.refit.pinned_version,
        drift=rows,
        refits=list(refits),
        agreement=agreements,
        demotions=[] if table is None else demotion_rows(table),
        reports=len(reports),
        evidence=evidence_view(table, reports, now, policy.refit.window_s),
    )


def demotion_rows(table: RoutingTable) -> list[DemotionRow]:
    """PURE: the demotions in force in `table`, with the number floors compare with now."""
    rows = []
    for pair, categories in sorted(table.demotions.items()):
        entry = table.entry(pair)
        if entry is None:
            continue
        basis = entry.accuracy_bound or entry.accuracy
        for category, d in sorted(categories.items()):
            kept = d.profile_accuracy if d.profile_bound is None else d.profile_bound
            rows.append(
                DemotionRow(
                    pair=pair,
                    category=category,
                    profile_bound=kept,
                    bound=basis.get(category, 0.0),
                    checks=d.checks,
                    agreed=d.agreed,
                    base_version=d.base_version,
                )
            )
    return rows


def refit_row(version: int, raw: bytes | str | None) -> RefitRow | None:
    """The provenance of stored table `version` when it was refit; None for a plain build or
    an unreadable document (the history table shows those)."""
    try:
        doc = json.loads(raw) if raw is not None else None
        found = doc.get("refit") if isinstance(doc, dict) else None
        refit = None if found is None else RefitProvenance.model_validate(found)
    except (ValueError, ValidationError):
        return None
    if refit is None:
        return None
    created = doc.get("created_at") if isinstance(doc, dict) else None
    return RefitRow(
        version=version,
        created_at=created if isinstance(created, str) else None,
        note=refit.note,
        base_version=refit.base_version,
        samples=refit.samples,
        window_s=refit.window_s,
        factors={p: (r.ttft_factor, r.tpot_factor) for p, r in sorted(refit.pairs.items())},
        demoted={p: dict(sorted(c.items())) for p, c in sorted(refit.demoted.items())},
    )


async def _refits(
    services: Services, versions: Sequence[int], key: Callable[[int], str]
) -> list[RefitRow]:
    if not versions:
        return []
    raws = await services.redis.mget([key(v) for v in versions])
    rows = (refit_row(v, raw) for v, raw in zip(versions, raws, strict=True))
    return [r for r in rows if r is not None]


async def _reports(services: Services, stream: str, since_s: float) -> list[LatencyFeedback]:
    raw = await services.redis.xrange(
        stream, min=str(int(since_s * 1000)), max="+", count=MAX_REPORTS
    )
    reports = []
    for _, fields in raw or ():
        try:
            reports.append(
                LatencyFeedback.model_validate_json((fields or {}).get(b"report") or b"")
            )
        except ValidationError:
            continue  # counted by the refit loop's own read; the page skips it
    return reports


def loop_handler(clock: Callable[[], datetime]) -> Handler:
    async def loop(request: web.Request) -> web.Response:
        services = request.app[SERVICES_KEY]
        keys = request.app[SETTINGS_KEY].redis.keys
        table = await services.tables.current()
        policy = (await services.policies.get()).policy
        now = clock()
        reports = await _reports(services, keys.feedback, now.timestamp() - policy.refit.window_s)
        _, versions = await services.tables.history()
        kept = [v.version for v in versions[:MAX_REFITS]]
        refits = await _refits(services, kept, keys.table_version)
        return json_response(loop_view(table, policy, reports, refits, now))

    return loop


def evidence_handler(clock: Callable[[], datetime]) -> Handler:
    """`GET /v1/evidence`: the closed-loop view's evidence part on its own."""

    async def get_evidence(request: web.Request) -> web.Response:
        services = request.app[SERVICES_KEY]
        keys = request.app[SETTINGS_KEY].redis.keys
        table = await services.tables.current()
        window_s = (await services.policies.get()).policy.refit.window_s
        now = clock()
        reports = await _reports(services, keys.feedback, now.timestamp() - window_s)
        return json_response(evidence_view(table, reports, now, window_s))

    return get_evidence
