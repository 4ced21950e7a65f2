"""The parts both composition roots wire the same way: the HTTP data plane (`app.py`) and
gateway mode (`gateway_app.py`) report one version, follow the routing table from one Redis
client through one table watcher, and answer `/healthz`, `/readyz` and `/metrics` with the
same handlers (`serving/probes.py`), read tenants and shed requests the same way, and scrape
the engines' queues with the same scraper on a client of its own, per pod when endpoint
discovery is on; and the stall guard's reads of engines' token counters (`engine_probe`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from importlib import metadata
from weakref import WeakKeyDictionary

import redis.asyncio as aioredis

from contracts.redis_topology import ClientOptions, as_cluster, connect_redis
from data_plane.client_keys import client_keys, grants_of
from data_plane.decision_step import Admission, DecisionStep
from data_plane.domain import CompiledTable
from data_plane.flow.queue import FlowQueue
from data_plane.progress.engine_probe import EngineProbe
from data_plane.request.identity import Rights
from data_plane.resilience.band_arrivals import BandArrivals
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.settings import DataPlaneSettings, FlowSettings
from data_plane.sync.endpoint_discovery import EndpointDiscovery
from data_plane.sync.endpoint_resolver import DnsResolver
from data_plane.sync.engine_scrape import EngineScraper, ScrapeTarget
from data_plane.sync.in_flight_sharing import CLUSTER_GROUPS, GROUPS, InFlightSharing
from data_plane.sync.metrics_page import PageRefusals
from data_plane.sync.replica_identity import ReplicaIdentity
from data_plane.sync.shared_counts import SharedCounts
from data_plane.sync.table_watcher import TableWatcher
from data_plane.table_store import TableStore
from data_plane.telemetry.metrics import DataPlaneMetrics
from data_plane.telemetry.tenants import TenantLabels
from data_plane.upstream.http1 import Http1Upstream
from data_plane.upstream.port import AiohttpUpstream, SessionLimits

UNKNOWN_VERSION = "0+unknown"  # not installed as a distribution (run from a source tree)


def package_version() -> str:
    """The installed `gearbox` distribution's version (`gearbox_build_info`, OpenAPI)."""
    try:
        return metadata.version("gearbox")
    except metadata.PackageNotFoundError:
        return UNKNOWN_VERSION


def new_metrics(settings: DataPlaneSettings) -> DataPlaneMetrics:
    return DataPlaneMetrics(package_version(), settings.git_sha)


def admission(settings: DataPlaneSettings, gateway: bool = False) -> Admission:
    """Tenants (bounded labels, the key hash's key), who may claim which tenant and class
    (the client keys' grants; in `gateway` mode llm-d's objective header is the gateway's),
    and shedding, as configured."""
    a, server = settings.admission, settings.server
    salt = None if a.tenant_key_salt is None else a.tenant_key_salt.get_secret_value().encode()
    grants = grants_of(client_keys(server.api_keys, server.api_keys_file))
    rights = Rights(a.tenant_header, salt, grants, a.priority_header_trusted, gateway)
    return Admission(TenantLabels(a.tenant_top_n), rights, a.shed)


def flow_settings(settings: DataPlaneSettings) -> FlowSettings | None:
    """The queue's bounds (docs/data_plane.md, "Flow control"), or None when refusals or the
    queue are off."""
    if not (settings.admission.shed and settings.flow.queue):
        return None
    return settings.flow


def flow_queue(
    settings: DataPlaneSettings, step: DecisionStep, metrics: DataPlaneMetrics
) -> FlowQueue | None:
    """The HTTP door's queue, unless refusals or the queue are off."""
    limits = flow_settings(settings)
    return None if limits is None else FlowQueue(step, metrics.flow, limits)


def table_watcher(
    settings: DataPlaneSettings,
    store: TableStore,
    metrics: DataPlaneMetrics,
    wall_clock: Callable[[], float],
) -> TableWatcher:
    """The watcher that follows Redis's `current` table (or the snapshot alone) into `store`."""
    return TableWatcher(settings.table, settings.redis, store, metrics, wall_clock)


def redis_client(settings: DataPlaneSettings) -> aioredis.Redis:
    """A client for `settings.redis.url` (standalone, Sentinel or Cluster)."""
    return connect_redis(settings.redis.url, ClientOptions(settings.redis.timeout_s))


def in_flight_sharing(
    settings: DataPlaneSettings,
    client: aioredis.Redis,
    identity: ReplicaIdentity,
    tracker: LoadTracker,
    clock: Callable[[], float],
    arrivals: BandArrivals | None = None,
) -> InFlightSharing:
    """The exchange of `tracker`'s in-flight counts, and `arrivals`' counts of the higher
    bands, for the other replicas' (docs/data_plane.md, "In-flight sharing"), as
    `IN_FLIGHT_SHARE_*` configure it; `run` it with `sharing_intervals_s`."""
    share = settings.in_flight_share
    counts = SharedCounts(tracker, arrivals)
    return InFlightSharing(
        settings.redis.keys,
        identity,
        counts.own,
        counts.on_peers,
        share.ttl_s,
        clock,
        groups=share.groups or (CLUSTER_GROUPS if as_cluster(client) else GROUPS),
    )


def sharing_intervals_s(settings: DataPlaneSettings) -> tuple[float, float]:
    """The in-flight sharing's interval and longest wait, in seconds."""
    share = settings.in_flight_share
    return share.interval_ms / 1000, share.longest_ms / 1000


def engine_client(
    settings: DataPlaneSettings, limits: SessionLimits
) -> AiohttpUpstream | Http1Upstream:
    """A client to engines of the kind `upstream_client` names: lean HTTP/1.1 (aiohttp for
    https), or aiohttp for everything (the upstream-client A/B row of `make bench`)."""
    if settings.upstream.client == "aiohttp":
        return AiohttpUpstream(limits)
    return Http1Upstream(limits, AiohttpUpstream(limits))


def scrape_client(settings: DataPlaneSettings) -> AiohttpUpstream | Http1Upstream:
    """The engine scrape's client: a pool of its own, every step bounded by the scrape
    timeout."""
    return _metrics_client(settings, settings.scrape.timeout_s)


def probe_client(settings: DataPlaneSettings) -> AiohttpUpstream | Http1Upstream:
    """The stall guard's counter reads' client: a pool of its own (a scrape round or engine
    calls filling theirs never delays a read), every step bounded by the probe's timeout."""
    return _metrics_client(settings, settings.progress.probe_timeout_s)


def engine_probe(
    settings: DataPlaneSettings,
    store: TableStore,
    client: AiohttpUpstream | Http1Upstream,
    metrics: DataPlaneMetrics,
) -> EngineProbe:
    """Reads of the token counters of `store`'s endpoints (by id, the table current then)."""
    targets: dict[str, ScrapeTarget] = {}

    def index(table: CompiledTable) -> None:
        targets.clear()
        targets.update(
            (e.id, ScrapeTarget(e, p.served_model_name)) for p in table.pairs for e in p.endpoints
        )

    if store.current is not None:
        index(store.current)
    store.on_swap(index)
    return EngineProbe(
        client,
        targets.get,
        settings.progress.probe_timeout_s,
        settings.scrape.max_page_bytes,
        page_refusals(metrics),
    )


_REFUSALS: WeakKeyDictionary[DataPlaneMetrics, PageRefusals] = WeakKeyDictionary()


def page_refusals(metrics: DataPlaneMetrics) -> PageRefusals:
    """Refused engine pages into `gearbox_engine_scrape_errors_total`, logged once per endpoint
    whichever reader met the page first: the scrape and the stall probe share one record per
    data plane (its metrics), so a huge page is one warning, not one per reader."""
    refusals = _REFUSALS.get(metrics)
    if refusals is None:
        refusals = PageRefusals(lambda reason: metrics.scrape_errors.labels(reason).inc())
        _REFUSALS[metrics] = refusals
    return refusals


def _metrics_client(
    settings: DataPlaneSettings, timeout_s: float
) -> AiohttpUpstream | Http1Upstream:
    limits = SessionLimits(
        connector_limit=100,  # aiohttp's default connector limit, which the scrape had
        connector_limit_per_host=0,
        connect_timeout_s=timeout_s,
        read_timeout_s=timeout_s,
        total_timeout_s=timeout_s,
    )
    return engine_client(settings, limits)


def engine_scraper(
    settings: DataPlaneSettings,
    store: TableStore,
    tracker: LoadTracker,
    metrics: DataPlaneMetrics,
    client: AiohttpUpstream | Http1Upstream,
) -> EngineScraper:
    """The scrape of every endpoint of `store`'s current table into `tracker` (and
    `gearbox_engine_queue_depth`)."""

    def endpoints() -> list[ScrapeTarget]:
        table = store.current
        if table is None:
            return []
        return [ScrapeTarget(e, p.served_model_name) for p in table.pairs for e in p.endpoints]

    return EngineScraper(
        client,
        endpoints,
        tracker,
        lambda eid, depth: metrics.queue_depth.labels(eid).set(depth),
        settings.scrape.timeout_s,
        settings.scrape.max_page_bytes,
        page_refusals(metrics),
    )


def endpoint_discovery(
    settings: DataPlaneSettings,
    served: TableStore,
    on_new_endpoints: Callable[[Iterable[str]], None],
) -> tuple[TableStore, EndpointDiscovery | None]:
    """With endpoint discovery on: a source store for the watcher to fill, and the discovery
    that serves it in `served` expanded to one endpoint per pod. Off: `served` itself, None."""
    d = settings.discovery
    if d.interval_s <= 0:
        return served, None
    source = TableStore()
    resolver = DnsResolver(d.dns_server_list, d.dns_timeout_s)
    discovery = EndpointDiscovery(
        source, served, resolver, on_new_endpoints, d.interval_s, d.max_addresses_per_name
    )
    return source, discovery
