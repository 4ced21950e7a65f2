"""The composition root of gateway mode, `python -m data_plane extproc` (docs/gateway.md).

The ext_proc gRPC service on `extproc_port`, fed by the same table watcher as the HTTP data
plane (Redis, or the snapshot file alone); the engines' queues scraped from their `/metrics`
as the data plane scrapes them, one endpoint per pod when endpoint discovery is on; its own
requests in flight exchanged with the other gateway replicas' through Redis as the data plane
shares them (`IN_FLIGHT_SHARE_*`; the load gateway mode sees: docs/gateway.md, "Load and
shedding"); and a small HTTP side on `port` for `/healthz`, `/readyz` and `/metrics`. No
engine calls, breakers or retries: those are the gateway's.
"""

from __future__ import annotations

import asyncio
import logging
import random
import signal
import time
from collections.abc import Callable

import redis.asyncio as aioredis
from aiohttp import web
from pydantic import SecretStr

from data_plane.background_tasks import BackgroundTasks
from data_plane.gateway.protos import ProcessingMode
from data_plane.gateway.router import gateway_router
from data_plane.gateway.service import ExternalProcessor, ServiceConfig, start_server
from data_plane.prompt_counter import prompt_counter
from data_plane.resilience.band_arrivals import kept_for
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.serving.probes import Probes
from data_plane.settings import DataPlaneSettings
from data_plane.sync.in_flight_sharing import InFlightSharing
from data_plane.sync.replica_identity import ReplicaIdentity
from data_plane.table_store import TableStore
from data_plane.telemetry.metrics import DataPlaneMetrics
from data_plane.upstream.http1 import Http1Upstream
from data_plane.upstream.port import AiohttpUpstream
from data_plane.wiring import (
    admission,
    endpoint_discovery,
    engine_scraper,
    flow_settings,
    in_flight_sharing,
    new_metrics,
    redis_client,
    scrape_client,
    sharing_intervals_s,
    table_watcher,
)

logger = logging.getLogger(__name__)


_BODY_MODES = {
    "buffered": ProcessingMode.BUFFERED,
    "full_duplex_streamed": ProcessingMode.FULL_DUPLEX_STREAMED,
}


def _side_app(
    store: TableStore, metrics: DataPlaneMetrics, metrics_token: SecretStr | None
) -> web.Application:
    """Probes and metrics for the kubelet and Prometheus."""
    app = web.Application()
    app.add_routes(Probes(store, metrics, metrics_token=metrics_token).routes())
    return app


class GatewayProcess:
    """Everything one `extproc` process runs; `run` returns once `stop` is called."""

    def __init__(self, settings: DataPlaneSettings, rng: random.Random | None = None) -> None:
        self.settings = s = settings
        self.metrics = new_metrics(s)
        self.store = TableStore()
        # Pods join routable at once: gateway mode keeps no breakers (the picker owns them).
        source, self.discovery = endpoint_discovery(s, self.store, lambda _: None)
        self.watcher = table_watcher(s, source, self.metrics, time.time)
        self.tracker = LoadTracker()
        self.arrivals = kept_for(self.store, time.monotonic)  # shared with the other replicas
        # large prompts counted by the alias's tokenizer, as the HTTP door counts them
        self.counter = prompt_counter(self.store, s.table.tokenizer_dir, s.table.tokenize_min_bytes)
        self.router = router = gateway_router(
            self.store,
            self.metrics,
            rng or random.Random(),
            s.extproc.pair_header,
            admission(s, gateway=True),
            self.tracker,
            flow_settings(s),
            s.extproc.max_hold_s,
            arrivals=self.arrivals,
            counter=self.counter,
        )
        service = ServiceConfig(_BODY_MODES[s.extproc.body_mode], s.server.max_body_bytes)
        self.processor = ExternalProcessor(router, self.metrics, service, time.monotonic)
        self.identity = ReplicaIdentity(
            s.instance_id, self.metrics.instance_id_clashes.inc, time.monotonic
        )
        self.sharing: InFlightSharing | None = None  # while `run` shares in-flight counts
        self._stopped = asyncio.Event()
        # the table watch, in-flight sharing, the scrape, endpoint discovery
        self.tasks = BackgroundTasks()

    def stop(self) -> None:
        self._stopped.set()

    async def run(self) -> None:
        s, tasks = self.settings, self.tasks
        self.watcher.load_snapshot()
        if self.store.current is not None:  # the snapshot's tokenizers start loading
            self.counter.want(self.store.current)
        client = redis_client(s) if s.redis.url else None
        if client is not None:
            tasks.start("table_watch", self.watcher.run(client))
            self._start_sharing(client)
        scrape = self._start_scrape()
        if self.discovery is not None:
            tasks.start("endpoint_discovery", self.discovery.run())
        host = s.server.host
        server, grpc_port = await start_server(self.processor, host, s.extproc.port)
        runner = web.AppRunner(
            _side_app(self.store, self.metrics, s.server.metrics_token), access_log=None
        )
        await runner.setup()
        await web.TCPSite(runner, host, s.server.port).start()
        logger.info(
            "gateway mode up: ext_proc on %s:%d",
            host,
            grpc_port,
            extra={"instance": s.instance_id, "table_version": self.store.version},
        )
        try:
            await self._stopped.wait()
        finally:
            await tasks.stop("endpoint_discovery", "engine_scrape")
            if scrape is not None:
                await scrape.close()
            await server.stop(s.server.shutdown_timeout_s)
            await runner.cleanup()
            await tasks.stop("table_watch", "in_flight_sharing")
            await self.counter.close()
            if client is not None:
                await client.aclose()

    def _start_sharing(self, client: aioredis.Redis) -> None:
        """The exchange of this replica's in-flight counts for the other replicas', as the
        HTTP data plane's (not started when `IN_FLIGHT_SHARE_INTERVAL_MS` is 0: off)."""
        s = self.settings
        if s.in_flight_share.interval_ms <= 0:
            return
        self.sharing = in_flight_sharing(
            s, client, self.identity, self.tracker, time.monotonic, self.arrivals
        )
        self.tasks.start("in_flight_sharing", self.sharing.run(client, *sharing_intervals_s(s)))

    def _start_scrape(self) -> AiohttpUpstream | Http1Upstream | None:
        """The engine scrape into `tracker`, every `SCRAPE_INTERVAL_S`; its client (None when
        0: off), closed once the task is stopped."""
        s = self.settings
        if s.scrape.interval_s <= 0:
            return None
        client = scrape_client(s)
        client.open()
        scraper = engine_scraper(s, self.store, self.tracker, self.metrics, client)
        self.tasks.start("engine_scrape", scraper.run(s.scrape.interval_s))
        return client


def run_gateway(settings: DataPlaneSettings) -> None:
    """Run until SIGTERM or SIGINT (plain asyncio: grpc.aio brings its own loop integration)."""

    async def main() -> None:
        process = GatewayProcess(settings)
        loop = asyncio.get_running_loop()
        stop: Callable[[], None] = process.stop
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop)
        await process.run()

    asyncio.run(main())
