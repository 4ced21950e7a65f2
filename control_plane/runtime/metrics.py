"""Every Prometheus object of the control plane (names in docs/METRICS.md), in its own registry.

No decision logic here: callers set and count; `render()` serves /metrics.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from control_plane.loop.accuracy_drift import PairAgreement
from control_plane.loop.canary_evidence import PairCanary
from control_plane.loop.drift import PairDrift, RefitCheck
from control_plane.loop.validation import Rejection
from control_plane.store.publisher import PublishOutcome

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def package_version() -> str:
    try:
        return version("gearbox")
    except PackageNotFoundError:
        return "0.0.0+unknown"


class ControlPlaneMetrics:
    def __init__(self, git_sha: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        reg = self.registry
        self.build_info = Gauge(
            "gearbox_build_info", "Build identity", ["version", "git_sha"], registry=reg
        )
        self.build_info.labels(version=package_version(), git_sha=git_sha).set(1)
        self.admin_requests = Counter(
            "gearbox_cp_admin_requests", "Admin API requests", ["route", "status"], registry=reg
        )
        self.profiles = Gauge("gearbox_cp_profiles", "Stored profile reports", registry=reg)
        self.publishes = Counter(
            "gearbox_cp_publishes", "Publish attempts by outcome", ["outcome"], registry=reg
        )
        for outcome in PublishOutcome:
            self.publishes.labels(outcome=outcome.value)
        self.published_version = Gauge(
            "gearbox_cp_published_table_version", "Current table version in Redis", registry=reg
        )
        self.last_publish = Gauge(
            "gearbox_cp_last_publish_timestamp_seconds",
            "Unix time of the last successful publish",
            registry=reg,
        )
        self.redis_up = Gauge(
            "gearbox_cp_redis_up", "1 when the last Redis call succeeded", registry=reg
        )
        self.latency_drift = Gauge(
            "gearbox_cp_latency_drift_ratio",
            "Observed / predicted latency at the table quantile over the feedback window",
            ["pair", "phase"],
            registry=reg,
        )
        self.feedback_samples = Gauge(
            "gearbox_cp_latency_feedback_samples",
            "End-to-end observations of a pair in the feedback window",
            ["pair"],
            registry=reg,
        )
        self.refit_checks = Counter(
            "gearbox_cp_refit_checks", "Latency refit checks by outcome", ["outcome"], registry=reg
        )
        for check in RefitCheck:
            self.refit_checks.labels(outcome=check.value)
        self.refits_rejected = Counter(
            "gearbox_cp_refits_rejected",
            "Pairs whose refit was not published, by why (control_plane/loop/validation.py)",
            ["reason"],
            registry=reg,
        )
        for rejection in Rejection:
            self.refits_rejected.labels(reason=rejection.value)
        self.live_agreement = Gauge(
            "gearbox_cp_live_agreement_ratio",
            "Share of shadow re-asks that agreed with the reference pair, in the window",
            ["pair", "category"],
            registry=reg,
        )
        self.live_agreement_upper = Gauge(
            "gearbox_cp_live_agreement_upper_ratio",
            "Upper bound of the live agreement (accuracy_check.confidence)",
            ["pair", "category"],
            registry=reg,
        )
        self.live_agreement_lower = Gauge(
            "gearbox_cp_live_agreement_lower_ratio",
            "Lower bound of the live agreement (accuracy_check.confidence); a demotion is "
            "lifted when it reaches the expected agreement",
            ["pair", "category"],
            registry=reg,
        )
        self.expected_agreement = Gauge(
            "gearbox_cp_expected_agreement_ratio",
            "The least agreement the pair's profile bound implies (docs/accuracy.md)",
            ["pair", "category"],
            registry=reg,
        )
        self.accuracy_checks = Gauge(
            "gearbox_cp_accuracy_checks",
            "Shadow re-asks of a pair and category in the window",
            ["pair", "category"],
            registry=reg,
        )
        self.canary_items = Gauge(
            "gearbox_cp_canary_items",
            "Canary items of a pair and category scored in the window (docs/accuracy.md)",
            ["pair", "category"],
            registry=reg,
        )
        self.canary_bound = Gauge(
            "gearbox_cp_canary_accuracy_bound_ratio",
            "Clopper-Pearson bounds of a pair's accuracy from its canary items "
            "(accuracy_check.confidence); a demotion needs the upper below the profile bound",
            ["pair", "category", "side"],
            registry=reg,
        )
        self.last_refit = Gauge(
            "gearbox_cp_last_refit_timestamp_seconds",
            "Unix time of the last refit table published",
            registry=reg,
        )

    def count_publish(self, outcome: PublishOutcome) -> None:
        self.publishes.labels(outcome=outcome.value).inc()

    def set_drift(self, drifts: Iterable[PairDrift]) -> None:
        """Export the window's drift (pairs no longer reported disappear)."""
        self.latency_drift.clear()
        self.feedback_samples.clear()
        for d in drifts:
            self.feedback_samples.labels(pair=d.pair).set(d.samples)
            for phase, ratio in (
                ("ttft", d.ttft_ratio),
                ("tpot", d.tpot_ratio),
                ("e2e", d.e2e_ratio),
            ):
                if ratio is not None:
                    self.latency_drift.labels(pair=d.pair, phase=phase).set(ratio)

    def set_agreement(self, agreements: Iterable[PairAgreement]) -> None:
        """Export the window's live agreement (pairs no longer checked disappear)."""
        gauges = (
            self.live_agreement,
            self.live_agreement_upper,
            self.live_agreement_lower,
            self.expected_agreement,
            self.accuracy_checks,
        )
        for gauge in gauges:
            gauge.clear()
        for a in agreements:
            labels = {"pair": a.pair, "category": a.category}
            self.live_agreement.labels(**labels).set(a.ratio)
            self.live_agreement_upper.labels(**labels).set(a.upper)
            self.live_agreement_lower.labels(**labels).set(a.lower)
            self.expected_agreement.labels(**labels).set(a.expected)
            self.accuracy_checks.labels(**labels).set(a.checks)

    def set_canary(self, canaries: Iterable[PairCanary]) -> None:
        """Export the window's canary evidence (pairs no longer reported disappear)."""
        self.canary_items.clear()
        self.canary_bound.clear()
        for c in canaries:
            self.canary_items.labels(pair=c.pair, category=c.category).set(c.n)
            for side, value in (("lower", c.lower), ("upper", c.upper)):
                self.canary_bound.labels(pair=c.pair, category=c.category, side=side).set(value)

    def render(self) -> bytes:
        return generate_latest(self.registry)
