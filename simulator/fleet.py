"""Many simulated engines in one process, one loopback port each, started and stopped at will.

`run_fleet(config)` is the in-process API tests and demos use; `python -m simulator serve` wraps
it. A pair can die (`stop_pair`: listener closed, connections dropped) and come back on the same
port (`start_pair`), or refuse connections through its faults.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import socket
from collections.abc import AsyncIterator, Mapping

from aiohttp import web

from simulator.answer_key import KnownAnswer, load_answer_keys
from simulator.config import FaultConfig, SimFleetConfig, SimPairConfig
from simulator.engine import Engine, PairStats, ReceivedRequest
from simulator.handlers import create_app

HOST = "127.0.0.1"
BACKLOG = 512
# Out of descriptors or memory (or a connection aborted before it was taken): the listener stays,
# accepting resumes after a pause (as asyncio's own servers do); any other error ends it.
_ACCEPT_RETRY_ERRNOS = frozenset(
    {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED}
)
logger = logging.getLogger(__name__)


def _close_if_cancelled(conn: socket.socket, task: asyncio.Task[None]) -> None:
    """A set-up task cancelled before its first step (the loop shuts down) never closes `conn`."""
    if task.cancelled():
        conn.close()


class PairServer:
    """One engine behind its own listening socket; the socket can close and reopen.

    Connections are accepted by a reader callback of ours (then `connect_accepted_socket`), not by
    `loop.create_server`: on Python 3.11, closing an `asyncio.Server` while a connection
    it has just accepted waits for its first step makes that step fail (`Server._attach` asserts
    the server is open) and leaks the socket, so an engine stopped under traffic left an unclosed
    transport behind (a `ResourceWarning` at some later garbage collection). Here a connection
    accepted before the listener closed is set up like any other, and dropped at once when the
    engine died (`stop(abort=True)`).
    """

    def __init__(self, config: SimPairConfig, answers: Mapping[str, KnownAnswer]) -> None:
        self.engine = Engine(config, answers)
        self.port = config.port
        self._runner = web.AppRunner(
            create_app(self.engine, self.apply_faults),
            handler_cancellation=True,
            access_log=None,
            shutdown_timeout=1.0,
        )
        self._sock: socket.socket | None = None
        self._connecting: set[asyncio.Task[None]] = set()
        # Listeners are numbered; connections accepted by listener <= this one are dropped.
        self._listener = 0
        self._aborted_through = 0

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def listening(self) -> bool:
        return self._sock is not None

    async def setup(self) -> None:
        await self._runner.setup()
        self.listen_now()
        if self.engine.faults.refuse_connections:
            self.stop(abort=False)

    def listen_now(self) -> None:
        """Bind and listen synchronously (connections queue in the backlog at once)."""
        if self._sock is not None:
            return
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((HOST, self.port))
            sock.listen(BACKLOG)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        self._sock = sock
        self._listener += 1
        self._watch(sock)

    def _watch(self, sock: socket.socket) -> None:
        if self._sock is sock:
            asyncio.get_running_loop().add_reader(sock, self._accept, sock)

    def _accept(self, sock: socket.socket) -> None:
        """Take every connection waiting in the backlog; each is set up by a task of its own.
        Only the current listener is watched (`stop` stops watching), so it is `_listener`."""
        loop = asyncio.get_running_loop()
        listener = self._listener
        for _ in range(BACKLOG):
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                loop.remove_reader(sock)
                if exc.errno not in _ACCEPT_RETRY_ERRNOS:
                    logger.error("%s: no longer accepting connections: %s", self.url, exc)
                    return
                logger.warning("%s: accept failed, retrying in %.1f s: %s", self.url, 1.0, exc)
                loop.call_later(1.0, self._watch, sock)
                return
            conn.setblocking(False)
            task = loop.create_task(self._connect(conn, listener))
            task.add_done_callback(functools.partial(_close_if_cancelled, conn))
            self._connecting.add(task)
            task.add_done_callback(self._connecting.discard)

    async def _connect(self, conn: socket.socket, listener: int) -> None:
        server = self._runner.server
        if server is None:  # cleaned up while the connection waited
            conn.close()
            return
        try:
            transport, _ = await asyncio.get_running_loop().connect_accepted_socket(server, conn)
        except OSError:  # the peer went away during set-up
            conn.close()
            return
        if listener <= self._aborted_through:
            transport.abort()

    def stop(self, abort: bool) -> None:
        """Close the listener now. `abort` drops every open connection (the engine died);
        otherwise connections close once their current response is done."""
        if self._sock is not None:
            asyncio.get_running_loop().remove_reader(self._sock)
            self._sock.close()
            self._sock = None
        if abort:
            self._aborted_through = self._listener
        web_server = self._runner.server
        for conn in web_server.connections if web_server is not None else []:
            if abort:
                conn.force_close()
            else:
                conn.close()

    def apply_faults(self, faults: FaultConfig) -> None:
        """Replace the engine's faults; open or close the listener for `refuse_connections`."""
        self.engine.set_faults(faults)
        if faults.refuse_connections:
            self.stop(abort=False)
        else:
            self.listen_now()

    async def close(self) -> None:
        self.stop(abort=True)
        # Connections accepted before the stop finish setting up, then are dropped.
        await asyncio.gather(*self._connecting, return_exceptions=True)
        await self._runner.cleanup()


class Fleet:
    """Handle on a running fleet: URLs, stats, faults, and stopping/starting pairs by name."""

    def __init__(self, servers: dict[str, PairServer]) -> None:
        self._servers = servers

    @property
    def names(self) -> list[str]:
        return list(self._servers)

    def _pair(self, name: str) -> PairServer:
        try:
            return self._servers[name]
        except KeyError:
            raise KeyError(f"no simulated pair {name!r}; known: {self.names}") from None

    def url(self, name: str) -> str:
        """Base URL of the pair, like `http://127.0.0.1:PORT` (no `/v1`)."""
        return self._pair(name).url

    def urls(self) -> dict[str, str]:
        return {name: server.url for name, server in self._servers.items()}

    def engine(self, name: str) -> Engine:
        return self._pair(name).engine

    def stats(self, name: str) -> PairStats:
        return self._pair(name).engine.stats()

    def last_request(self, name: str) -> ReceivedRequest | None:
        """The last generation request the pair received (path, headers, raw body)."""
        return self._pair(name).engine.last_request

    def set_faults(self, name: str, faults: FaultConfig) -> None:
        """Replace the pair's faults now (refuse_connections closes/opens its listener)."""
        self._pair(name).apply_faults(faults)

    def reset(self, name: str) -> None:
        """Stats, faults (back to the configured ones) and RNGs of the pair start over."""
        server = self._pair(name)
        server.engine.reset()
        server.apply_faults(server.engine.faults)

    def stop_pair(self, name: str) -> None:
        """The engine dies: its port refuses connections and open requests are dropped."""
        self._pair(name).stop(abort=True)

    async def start_pair(self, name: str) -> None:
        """The engine returns on the same port (and no longer refuses connections)."""
        server = self._pair(name)
        if server.engine.faults.refuse_connections:
            server.engine.set_faults(
                server.engine.faults.model_copy(update={"refuse_connections": False})
            )
        server.listen_now()


@contextlib.asynccontextmanager
async def run_fleet(
    config: SimFleetConfig, answers: Mapping[str, KnownAnswer] | None = None
) -> AsyncIterator[Fleet]:
    """Start every pair of `config` on loopback; stop them all on exit.

    `answers` defaults to the answer keys the config names.
    """
    known = dict(answers) if answers is not None else load_answer_keys(config.answer_keys)
    servers: dict[str, PairServer] = {}
    try:
        for pair in config.pairs:
            server = PairServer(pair, known)
            servers[pair.name] = server
            await server.setup()
        yield Fleet(servers)
    finally:
        for server in servers.values():
            await server.close()
