"""The composition root: `create_app(settings, deps)` builds and wires every part.

Only this module (and `__main__`) constructs adapters. Tests inject a clock, an rng, a fake
upstream, a Redis factory or a span exporter through `AppDeps`; nothing is patched.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from aiohttp import web
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter

from data_plane.background_tasks import BackgroundTasks
from data_plane.checks.accuracy_check import AccuracyChecker, CheckerConfig, CheckerParts
from data_plane.checks.canary_items import (
    SHIPPED_ITEMS,
    CanaryConfig,
    CanarySender,
    load_items,
)
from data_plane.checks.latency_probe import LatencyProbe
from data_plane.client_keys import client_keys
from data_plane.decision_step import DecisionStep, StepParts
from data_plane.engine_keys import EngineKeys
from data_plane.progress.pace import EnginePace
from data_plane.progress.stall_guard import StallGuard
from data_plane.prompt_counter import PromptCounter, counter_ctx, prompt_counter
from data_plane.resilience.band_arrivals import BandArrivals, kept_for
from data_plane.resilience.breaker import BreakerBoard
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.resilience.health import Health
from data_plane.resilience.output_length import OutputLengths
from data_plane.resilience.overshoot import Overshoot
from data_plane.resilience.retry import RetryBudget
from data_plane.resilience.tenant_load import TenantLoad
from data_plane.serving.attempt import AttemptRunner
from data_plane.serving.delivery import Delivery
from data_plane.serving.handlers import Handlers
from data_plane.serving.lifecycle import Finish
from data_plane.serving.middleware import ApiKeys, make_gateway
from data_plane.serving.proxy import Proxy, ProxyParts
from data_plane.settings import DataPlaneSettings
from data_plane.sync.breaker_announcements import BreakerAnnouncements
from data_plane.sync.endpoint_discovery import EndpointDiscovery
from data_plane.sync.feedback_writer import FeedbackWriter
from data_plane.sync.in_flight_sharing import InFlightSharing
from data_plane.sync.live_state import LiveStateWriter, build_state
from data_plane.sync.replica_identity import ReplicaIdentity
from data_plane.sync.table_watcher import TableWatcher
from data_plane.table_store import TableStore
from data_plane.telemetry.demand import SpilledDemand, pair_demand
from data_plane.telemetry.feedback import FeedbackAggregator
from data_plane.telemetry.metrics import DataPlaneMetrics
from data_plane.telemetry.span_pipelines import tracing_for
from data_plane.telemetry.tracing import Tracing
from data_plane.telemetry.traffic import TrafficStats
from data_plane.upstream.collector_post import CollectorPost
from data_plane.upstream.http1 import Http1Upstream
from data_plane.upstream.port import AiohttpUpstream, SessionLimits, UpstreamClient
from data_plane.wiring import (
    admission,
    endpoint_discovery,
    engine_client,
    engine_probe,
    engine_scraper,
    flow_queue,
    in_flight_sharing,
    new_metrics,
    package_version,
    probe_client,
    redis_client,
    scrape_client,
    sharing_intervals_s,
    table_watcher,
)

logger = logging.getLogger(__name__)

RedisFactory = Callable[[], aioredis.Redis]


@dataclass(frozen=True)
class AppDeps:
    """What tests may replace. None = build the production adapter from settings."""

    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    rng: random.Random = field(default_factory=random.Random)
    upstream: UpstreamClient | None = None
    redis_factory: RedisFactory | None = None
    span_exporter: SpanExporter | None = None
    # The benchmark's A/B rows: the SDK's span processor instead of the OTLP pipeline, and
    # metrics built on another exposition (docs/benchmarks.md).
    span_processor: SpanProcessor | None = None
    metrics: DataPlaneMetrics | None = None


SETTINGS = web.AppKey("gearbox_settings", DataPlaneSettings)
STORE = web.AppKey("gearbox_store", TableStore)
METRICS = web.AppKey("gearbox_metrics", DataPlaneMetrics)
HEALTH = web.AppKey("gearbox_health", Health)
WATCHER = web.AppKey("gearbox_watcher", TableWatcher)
TRAFFIC = web.AppKey("gearbox_traffic", TrafficStats)
TASKS = web.AppKey("gearbox_tasks", BackgroundTasks)
COUNTER = web.AppKey("gearbox_prompt_counter", PromptCounter)
TRACING = web.AppKey("gearbox_tracing", Tracing)
DISCOVERY = web.AppKey("gearbox_discovery", EndpointDiscovery)
ANNOUNCEMENTS = web.AppKey("gearbox_announcements", BreakerAnnouncements)
FEEDBACK = web.AppKey("gearbox_feedback", FeedbackAggregator)
OVERSHOOT = web.AppKey("gearbox_overshoot", Overshoot)
OUTPUTS = web.AppKey("gearbox_output_lengths", OutputLengths)
CHECKER = web.AppKey("gearbox_accuracy_checker", AccuracyChecker)
PROBE = web.AppKey("gearbox_latency_probe", LatencyProbe)
CANARY = web.AppKey("gearbox_canary_items", CanarySender)
SHARING = web.AppKey("gearbox_in_flight_sharing", InFlightSharing)
IDENTITY = web.AppKey("gearbox_replica_identity", ReplicaIdentity)
ARRIVALS = web.AppKey("gearbox_band_arrivals", BandArrivals)


def _session_limits(s: DataPlaneSettings) -> SessionLimits:
    """The engine client's pool; a call ends at the longest request deadline plus grace."""
    up = s.upstream
    return SessionLimits(
        connector_limit=up.connector_limit,
        connector_limit_per_host=up.connector_limit_per_host,
        connect_timeout_s=up.connect_timeout_s,
        read_timeout_s=up.read_timeout_s,
        total_timeout_s=s.proxy.default_timeout_s + s.proxy.grace_s,
        max_body_bytes=up.max_body_bytes,
    )


def _build_proxy(
    s: DataPlaneSettings, deps: AppDeps, runner: AttemptRunner, app: web.Application
) -> Proxy:
    metrics, health, tracing = app[METRICS], app[HEALTH], app[TRACING]
    parts = ProxyParts(
        runner=runner,
        delivery=Delivery(
            metrics, app[TRAFFIC], deps.clock, app[FEEDBACK], app[OVERSHOOT], app[OUTPUTS]
        ),
        health=health,
        retry_budget=RetryBudget(deps.clock, **s.retry_budget.model_dump()),
        metrics=metrics,
        tracing=tracing,
        clock=deps.clock,
        rng=deps.rng,
    )
    return Proxy(s.proxy, parts)


def _decision_step(app: web.Application, deps: AppDeps) -> DecisionStep:
    """The decision step, on this replica's health, spilled demand and tenants in flight."""
    parts = StepParts(
        app[STORE],
        app[HEALTH],
        app[METRICS],
        deps.rng,
        app[TRACING],
        _demand(app, deps.clock),
        app[FEEDBACK],
        admission(app[SETTINGS]),
        TenantLoad(deps.clock),
        app[OVERSHOOT],
        app[HEALTH].tracker,
        app[OUTPUTS],
        _arrivals(app, deps.clock),
    )
    app[METRICS].flow.watch_outputs(app[OUTPUTS].figures, parts.admission.labels.peek)
    return DecisionStep(parts)


def _arrivals(app: web.Application, clock: Callable[[], float]) -> BandArrivals:
    """Requests decided per pair and band, for the lines' reserves (shared with the other
    replicas by the in-flight sharing); a new table's pairs kept."""
    arrivals = app[ARRIVALS] = kept_for(app[STORE], clock)
    return arrivals


def _engine_pace(s: DataPlaneSettings, app: web.Application) -> EnginePace:
    """Each endpoint's observed pace, which its own limit allows for (`progress.pace`)."""
    pace = EnginePace(s.progress)
    app[STORE].on_swap(lambda table: pace.retain(e.id for p in table.pairs for e in p.endpoints))
    return pace


def _demand(app: web.Application, clock: Callable[[], float]) -> SpilledDemand:
    """Spilled requests, counted and exported with the in-flight ones as demand per pair."""
    metrics, store, tracker = app[METRICS], app[STORE], app[HEALTH].tracker
    spilled = SpilledDemand(clock, lambda pair: metrics.pair_spilled.labels(pair).inc())
    metrics.watch_demand(lambda: pair_demand(store.current, tracker.in_flight, spilled))
    store.on_swap(lambda table: metrics.watch_pairs(p.pair for p in table.pairs))
    return spilled


def _discovery(app: web.Application, s: DataPlaneSettings) -> TableStore:
    """With endpoint discovery on, the watcher fills a source store and discovery serves it
    expanded to one endpoint per pod in the app's store; else the watcher fills that store."""
    source, discovery = endpoint_discovery(s, app[STORE], app[HEALTH].probation)
    if discovery is not None:
        app[DISCOVERY] = discovery
    return source


async def _discovery_ctx(app: web.Application) -> AsyncIterator[None]:
    """Endpoint discovery's resolve loop (only when enabled)."""
    discovery = app.get(DISCOVERY)
    if discovery is None:
        yield
        return
    app[TASKS].start("endpoint_discovery", discovery.run())
    yield
    await app[TASKS].stop("endpoint_discovery")


def create_app(settings: DataPlaneSettings, deps: AppDeps | None = None) -> web.Application:
    """A ready-to-run data-plane app; background work starts with the app (cleanup_ctx)."""
    deps = deps or AppDeps()
    metrics = deps.metrics or new_metrics(settings)
    store = TableStore()
    tracker = LoadTracker()
    metrics.watch_in_flight(tracker.in_flight_all)
    health = Health(BreakerBoard(settings.breaker), tracker, metrics, deps.clock)
    store.on_swap(health.on_table)
    tracing = tracing_for(
        settings.otel,
        metrics.count_dropped_spans,
        deps.span_exporter,
        deps.span_processor,
        CollectorPost(),
    )
    server = settings.server
    keys = tuple(key for key, _ in client_keys(server.api_keys, server.api_keys_file))
    app = web.Application(client_max_size=server.max_body_bytes)
    app[SETTINGS], app[STORE], app[METRICS], app[HEALTH] = settings, store, metrics, health
    app[TRACING], app[TRAFFIC], app[TASKS] = tracing, TrafficStats(), BackgroundTasks()
    app[FEEDBACK] = FeedbackAggregator(deps.wall_clock())
    app[OVERSHOOT] = Overshoot(deps.clock)
    app[OUTPUTS] = OutputLengths()
    app[IDENTITY] = ReplicaIdentity(
        settings.instance_id, metrics.instance_id_clashes.inc, deps.clock
    )
    source = _discovery(app, settings)  # the store the watcher fills
    app[WATCHER] = table_watcher(settings, source, metrics, deps.wall_clock)
    adapter: AiohttpUpstream | Http1Upstream | None = None
    upstream: UpstreamClient
    if deps.upstream is None:
        upstream = adapter = _upstream_adapter(settings)
    else:
        upstream = deps.upstream
    # Read once: the attempts and the latency probe send the same keys.
    engine_keys = EngineKeys.load(settings.engine_keys.api_key, settings.engine_keys.api_keys_file)
    runner = AttemptRunner(
        upstream,
        health,
        metrics,
        tracing,
        deps.clock,
        engine_keys=engine_keys,
        pace=_engine_pace(settings, app),
    )
    stall = runner.stall
    store.on_swap(lambda table: stall.retain(e.id for p in table.pairs for e in p.endpoints))
    app.cleanup_ctx.append(_counters_ctx(stall))
    checker_parts = CheckerParts(runner, health, app[FEEDBACK], metrics, deps.rng, deps.clock)
    app[CANARY] = _canary_sender(settings, checker_parts)
    app[CHECKER] = AccuracyChecker(
        checker_parts,
        CheckerConfig(
            settings.proxy.default_timeout_s,
            settings.feedback.accuracy_probe_interval_s,
            on_disagree=app[CANARY].raise_rate,
        ),
    )
    app[PROBE] = LatencyProbe(
        upstream,
        store,
        app[FEEDBACK],
        app[HEALTH].view,
        deps.clock,
        engine_keys,
    )
    step = _decision_step(app, deps)
    proxy = _build_proxy(settings, deps, runner, app)
    flow = flow_queue(settings, step, metrics)
    if flow is not None:  # client requests waiting for a pair come before its canary items
        app[CANARY].yield_to(flow.waits_for)
    counter = app[COUNTER] = prompt_counter(
        store, settings.table.tokenizer_dir, settings.table.tokenize_min_bytes
    )
    handlers = Handlers(
        store,
        step,
        proxy,
        metrics,
        server.max_body_bytes,
        package_version(),
        deps.clock,
        body_read_timeout_s=server.body_read_timeout_s,
        open_api=not keys,
        identity=(settings.instance_id, app[IDENTITY].warnings),
        metrics_token=server.metrics_token,
        flow=flow,
        counter=counter,
    )
    app.cleanup_ctx.append(counter_ctx(counter, store))
    # The door: every request created, ended and counted by one middleware (`lifecycle`).
    # Its requests start on the app's clock; their served answers go to the live checks.
    finish = Finish(metrics, step, flow, deps.clock, app[CHECKER])
    app.middlewares.append(make_gateway(finish, tracing, ApiKeys(keys)))
    app.add_routes(handlers.routes())
    app.cleanup_ctx.append(_lifecycle(adapter))
    app.cleanup_ctx.append(_redis_ctx(deps))
    app.cleanup_ctx.append(_scrape_ctx)
    app.cleanup_ctx.append(_discovery_ctx)
    return app


CleanupCtx = Callable[[web.Application], AsyncIterator[None]]


def _upstream_adapter(settings: DataPlaneSettings) -> AiohttpUpstream | Http1Upstream:
    """The client of engine calls."""
    return engine_client(settings, _session_limits(settings))


def _canary_sender(settings: DataPlaneSettings, parts: CheckerParts) -> CanarySender:
    """Canary items from the configured file, else the shipped held-out items (a bad file
    fails startup with the line named)."""
    feedback = settings.feedback
    path = feedback.canary_items_file
    items = load_items([Path(path) if path else SHIPPED_ITEMS])
    config = CanaryConfig(
        feedback.canary_items_per_minute,
        feedback.canary_usd_per_hour,
        settings.proxy.default_timeout_s,
        feedback.canary_capacity_share,
    )
    return CanarySender(parts, items, config)


def _lifecycle(adapter: AiohttpUpstream | Http1Upstream | None) -> CleanupCtx:
    """The upstream session, the snapshot table, and the trace exporter (started, then
    flushed and closed)."""

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        if adapter is not None:
            adapter.open()
        tracing = app[TRACING]
        if tracing.enabled:
            app[TASKS].start("trace_export", tracing.run())
        app[TASKS].start("accuracy_check", app[CHECKER].run())
        if app[SETTINGS].feedback.probe_interval_s > 0:
            probe = app[PROBE].run(app[SETTINGS].feedback.probe_interval_s)
            app[TASKS].start("latency_probe", probe)
        app[WATCHER].load_snapshot()
        logger.info(
            "data plane up (instance %s)",
            app[SETTINGS].instance_id,
            extra={"instance": app[SETTINGS].instance_id, "table_version": app[STORE].version},
        )
        yield
        if adapter is not None:
            await adapter.close()
        await app[TASKS].stop("trace_export", "accuracy_check")
        await tracing.shutdown()

    return lifecycle


def _redis_ctx(deps: AppDeps) -> CleanupCtx:
    """The table watcher and the live-state writer on one Redis client (when configured)."""

    async def redis_ctx(app: web.Application) -> AsyncIterator[None]:
        s = app[SETTINGS]
        if deps.redis_factory is None and not s.redis.url:
            yield  # static mode: the snapshot file is the table
            return
        client = deps.redis_factory() if deps.redis_factory else redis_client(s)
        store, health, traffic = app[STORE], app[HEALTH], app[TRAFFIC]

        def state() -> Any:
            now = deps.wall_clock()
            classes = app[METRICS].tenant_totals()
            tracker = health.tracker
            return build_state(s.instance_id, store, tracker, health.state, traffic, now, classes)

        keys, live = s.redis.keys, s.live_state
        writer = LiveStateWriter(client, keys, app[IDENTITY], live.ttl_s, state)
        tasks = app[TASKS]
        tasks.start("table_watcher", app[WATCHER].run(client))
        tasks.start("live_state", writer.run(live.interval_s))
        if s.feedback.interval_s > 0:
            feedback = FeedbackWriter(client, keys, s.instance_id, app[FEEDBACK], deps.wall_clock)
            tasks.start("feedback", feedback.run(s.feedback.interval_s))
            if s.feedback.canary_items_per_minute > 0:  # their counts go out with feedback
                tasks.start("canary_items", app[CANARY].run(lambda: app[STORE].current))
        if s.announcements.enabled:
            _start_announcements(app, client)
        if s.in_flight_share.interval_ms > 0:
            _start_sharing(app, client, deps.clock)
        yield
        await tasks.stop(
            "table_watcher",
            "live_state",
            "feedback",
            "canary_items",
            *_ANNOUNCEMENT_TASKS,
            *_SHARING_TASKS,
        )
        await client.aclose()

    return redis_ctx


_ANNOUNCEMENT_TASKS = ("breaker_announce", "breaker_listen")


def _start_announcements(app: web.Application, client: aioredis.Redis) -> None:
    """Announce this replica's opened breakers; eject what the others announce."""
    s, health = app[SETTINGS], app[HEALTH]
    announcements = BreakerAnnouncements(
        s.redis.keys.breaker_events, app[IDENTITY], health.eject_for, s.announcements.max_ttl_s
    )
    health.on_open(announcements.announce)
    app[ANNOUNCEMENTS] = announcements
    app[TASKS].start(_ANNOUNCEMENT_TASKS[0], announcements.send_forever(client))
    app[TASKS].start(_ANNOUNCEMENT_TASKS[1], announcements.listen_forever(client))


_SHARING_TASKS = ("in_flight_sharing",)


def _start_sharing(
    app: web.Application, client: aioredis.Redis, clock: Callable[[], float]
) -> None:
    """Exchange this replica's in-flight counts and band arrivals for the others'; merge
    those into the load and the lines' reserves."""
    s = app[SETTINGS]
    tracker, arrivals = app[HEALTH].tracker, app.get(ARRIVALS)
    sharing = in_flight_sharing(s, client, app[IDENTITY], tracker, clock, arrivals)
    app[SHARING] = sharing
    app[CANARY].count_replicas(lambda: sharing.replicas_held)  # the capacity share is split
    app[TASKS].start(_SHARING_TASKS[0], sharing.run(client, *sharing_intervals_s(s)))


def _counters_ctx(stall: StallGuard) -> CleanupCtx:
    """The stall guard's reads of engines' token counters, on a client and pool of their own
    (only when enabled: `PROGRESS_PROBE_TIMEOUT_S` > 0)."""

    async def counters_ctx(app: web.Application) -> AsyncIterator[None]:
        s = app[SETTINGS]
        if s.progress.probe_timeout_s <= 0:
            yield
            return
        client = probe_client(s)
        client.open()
        probe = engine_probe(s, app[STORE], client, app[METRICS])
        stall.set_probe(probe.read, s.progress.still_windows)
        yield
        await stall.close()
        await client.close()

    return counters_ctx


async def _scrape_ctx(app: web.Application) -> AsyncIterator[None]:
    """Engine queue-depth scraping, on a client and pool of its own (only when enabled)."""
    s = app[SETTINGS]
    if s.scrape.interval_s <= 0:
        yield
        return
    client = scrape_client(s)
    client.open()
    scraper = engine_scraper(s, app[STORE], app[HEALTH].tracker, app[METRICS], client)
    app[TASKS].start("engine_scrape", scraper.run(s.scrape.interval_s))
    yield
    await app[TASKS].stop("engine_scrape")
    await client.close()
