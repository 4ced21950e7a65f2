"""The whole stack on loopback, served by an event loop in a background thread, so synchronous
clients (schemathesis drives `requests`) and raw sockets can attack it: simulated engines, a
data plane following a published table in Redis, and the control plane's admin API.

Also the list of secrets and internal addresses no answer may ever contain.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from aiohttp import web

from contracts.redis_keys import RedisKeys
from control_plane.app import AppDeps as CpDeps
from control_plane.app import create_app as create_cp_app
from control_plane.settings import PublisherOptions
from control_plane.store.publisher import Publisher
from data_plane.app import STORE, AppDeps, create_app
from simulator import SimFleetConfig, run_fleet
from tests.reliability.conftest import ADMIN_TOKEN, cp_settings
from tests.reliability.stack import CHEAP, PRICEY, dp_settings, fleet_table, served_name, sim_pair

START_TIMEOUT_S = 60.0


@dataclass
class LiveStack:
    """URLs of the running parts and the strings that must never leak to a client."""

    data_plane: str = ""
    control_plane: str = ""
    engines: tuple[str, ...] = ()
    redis_url: str = ""
    secrets: tuple[str, ...] = ()
    table_version: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def forbidden(self, engines: bool = True) -> tuple[str, ...]:
        """The Redis URL and host:port and every secret; with `engines`, the engine URLs and
        host:port too (the admin API shows operators the table, endpoint URLs included)."""
        out: list[str] = []
        for url in (*(self.engines if engines else ()), self.redis_url):
            host_port = url.split("://", 1)[1].split("/", 1)[0].rsplit("@", 1)[-1]
            out += [url, host_port]
        return (*out, *self.secrets)

    def leaks(self, texts: Iterable[str], engines: bool = True) -> list[str]:
        """Which forbidden strings occur in any of `texts`."""
        blob = "\n".join(texts)
        return sorted({s for s in self.forbidden(engines) if s and s in blob})


class ThreadedStack:
    """Starts everything in a thread on `start()`; `stop()` shuts it down cleanly."""

    def __init__(self, redis_url: str, prefix: str, workdir: Path, **dp_overrides: Any) -> None:
        self._redis_url = redis_url
        self._prefix = prefix
        self._workdir = workdir
        self._dp_overrides = dp_overrides
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="security-stack", daemon=True)
        self.live = LiveStack(redis_url=redis_url, secrets=(ADMIN_TOKEN,))

    def start(self) -> LiveStack:
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_S):
            raise RuntimeError("the stack did not start in time")
        if self._error is not None:
            raise RuntimeError("the stack failed to start") from self._error
        return self.live

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as err:  # reported to the starting thread
            self._error = err
            self._ready.set()

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        config = SimFleetConfig(pairs=[sim_pair(CHEAP), sim_pair(PRICEY)])
        async with run_fleet(config, answers={}) as fleet:
            urls = {q: [fleet.url(served_name(q))] for q in (CHEAP, PRICEY)}
            version = await self._publish(fleet_table(urls))
            dp_app = create_app(self._dp_settings(), AppDeps())
            cp_app = create_cp_app(cp_settings(self._redis_url, self._prefix), CpDeps())
            loaded = asyncio.Event()
            dp_app[STORE].on_swap(lambda table: loaded.set() if table.version == version else None)
            runners = [web.AppRunner(dp_app), web.AppRunner(cp_app)]
            try:
                dp_url, cp_url = [await _serve(r) for r in runners]
                await asyncio.wait_for(loaded.wait(), START_TIMEOUT_S)
                self.live.data_plane, self.live.control_plane = dp_url, cp_url
                self.live.engines = tuple(u for us in urls.values() for u in us)
                self.live.table_version = version
                self._ready.set()
                await self._stop.wait()
            finally:
                for runner in runners:
                    await runner.cleanup()

    def _dp_settings(self) -> Any:
        snapshot = self._workdir / "snapshot.json"
        return dp_settings(self._redis_url, self._prefix, snapshot, **self._dp_overrides)

    async def _publish(self, table: Any) -> int:
        client = aioredis.Redis.from_url(self._redis_url)
        try:
            publisher = Publisher(client, RedisKeys(self._prefix), PublisherOptions())
            return (await publisher.publish(table)).version
        finally:
            await client.aclose()


async def _serve(runner: web.AppRunner) -> str:
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    return f"http://{host}:{port}"
