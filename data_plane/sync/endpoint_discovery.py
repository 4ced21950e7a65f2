"""Endpoints are pods: the engine URLs of the routing table whose host is a name are
re-resolved at an interval, and each pair is served with one endpoint per address behind
the name (docs/data_plane.md, "Endpoint discovery").

The watcher swaps tables into a *source* store; this swaps the expanded table into the store
requests read. An endpoint `fam@q#0` at `http://vllm-fam-q.ns.svc:8000/` becomes
`fam@q#0/10.1.2.3:8000` at `http://10.1.2.3:8000/`, one per pod, so breakers, in-flight
counts, scrapes and power-of-two choices work per pod. A name is resolved per (name, port):
`engines.svc:8001` and `engines.svc:8002` are two sets of pods. A pod that disappears leaves
the table (Health.on_table forgets its breaker and load); one that appears after its name was
first resolved joins half-open. A name with no records falls back to the table's URL; a
failed lookup keeps the last known pods; a name with more than `max_per_name` addresses is
served with the first `max_per_name` of them in address order.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import Callable, Iterable, Mapping
from urllib.parse import urlsplit, urlunsplit

from data_plane.decision.endpoints import with_endpoints
from data_plane.domain import CompiledEndpoint, CompiledTable
from data_plane.sync.endpoint_resolver import LookupFailedError, Resolver, Target
from data_plane.table_store import TableStore

logger = logging.getLogger(__name__)
Name = tuple[str, int]  # (host name, the URL's port): what is resolved


def discoverable_name(url: str) -> Name | None:
    """(host name, port) of an http URL whose host is a name, else None (an IP, or https:
    a certificate names the Service, not the pod)."""
    parts = urlsplit(url)
    host = parts.hostname
    if parts.scheme != "http" or not host:
        return None
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host, parts.port or 80
    return None


def _pod(endpoint: CompiledEndpoint, target: Target) -> CompiledEndpoint:
    parts = urlsplit(endpoint.url)
    netloc = f"{target.address}:{target.port}"
    return CompiledEndpoint(
        id=f"{endpoint.id}/{netloc}", url=urlunsplit(parts._replace(netloc=netloc))
    )


def expand(
    table: CompiledTable, resolved: Mapping[Name, list[Target]]
) -> tuple[dict[str, tuple[CompiledEndpoint, ...]], dict[str, Name]]:
    """Per pair, its endpoints with every resolved (name, port) replaced by one endpoint per
    target; and the (name, port) each new endpoint id came from."""
    out: dict[str, tuple[CompiledEndpoint, ...]] = {}
    origin: dict[str, Name] = {}
    for pair in table.pairs:
        endpoints: list[CompiledEndpoint] = []
        for endpoint in pair.endpoints:
            named = discoverable_name(endpoint.url)
            targets = resolved.get(named, []) if named else []
            if not targets or named is None:
                endpoints.append(endpoint)
                continue
            for target in targets:
                pod = _pod(endpoint, target)
                endpoints.append(pod)
                origin[pod.id] = named
        out[pair.pair] = tuple(endpoints)
    return out, origin


def _ids(table: CompiledTable | None) -> set[str]:
    return set() if table is None else {e.id for p in table.pairs for e in p.endpoints}


class EndpointDiscovery:
    """Follows `source`, resolves its names every `interval_s`, serves the result in `served`."""

    def __init__(
        self,
        source: TableStore,
        served: TableStore,
        resolver: Resolver,
        on_new_endpoints: Callable[[Iterable[str]], None],
        interval_s: float,
        max_per_name: int,
    ) -> None:
        self._source, self._served = source, served
        self._resolver = resolver
        self._on_new = on_new_endpoints
        self._interval_s, self._max_per_name = interval_s, max_per_name
        self._resolved: dict[Name, list[Target]] = {}
        self._capped: set[Name] = set()  # names already warned about (once each)
        self._wake = asyncio.Event()
        source.on_swap(self._on_source)

    def _on_source(self, table: CompiledTable) -> None:
        self._publish(warm=set())
        self._wake.set()  # resolve the new table's names now, not at the next tick

    def _names(self) -> list[Name]:
        table = self._source.current
        names: dict[Name, None] = {}
        for endpoint in () if table is None else (e for p in table.pairs for e in p.endpoints):
            named = discoverable_name(endpoint.url)
            if named is not None:
                names[named] = None
        return list(names)

    async def _lookup(self, name: Name) -> list[Target] | None:
        try:
            found = await self._resolver.resolve(*name)
        except LookupFailedError as err:
            logger.warning("endpoint discovery: %s; keeping the last known pods", err)
            return None
        if len(found) > self._max_per_name and name not in self._capped:
            self._capped.add(name)
            logger.warning(
                "endpoint discovery: %s has %d addresses; serving the first %d",
                name[0],
                len(found),
                self._max_per_name,
            )
        return found[: self._max_per_name]

    async def refresh(self) -> bool:
        """Resolve every (name, port) once; serve the result if it changed. True when it did."""
        names = self._names()
        results = await asyncio.gather(*(self._lookup(n) for n in names))
        changed = {
            name: found
            for name, found in zip(names, results, strict=True)
            if found is not None and found != self._resolved.get(name)
        }
        stale = [n for n in self._resolved if n not in names]
        if not changed and not stale:
            return False
        warm = {n for n, known in self._resolved.items() if known}
        for name in stale:
            del self._resolved[name]
        self._resolved.update(changed)
        self._publish(warm)
        return True

    def _publish(self, warm: set[Name]) -> None:
        """Serve the source table with the known pods; pods new under a name that already
        had pods join half-open."""
        table = self._source.current
        if table is None:
            return
        endpoints, origin = expand(table, self._resolved)
        before = _ids(self._served.current)
        expanded = with_endpoints(table, endpoints)
        self._served.swap(expanded, self._source.created_at_s)
        fresh = [e for e in _ids(expanded) - before if origin.get(e) in warm]
        if fresh:
            self._on_new(sorted(fresh))
        logger.info(
            "endpoints: %d across %d pairs",
            sum(len(p.endpoints) for p in expanded.pairs),
            len(expanded.pairs),
            extra={"table_version": expanded.version},
        )

    async def run(self) -> None:
        """Refresh forever: every interval, and at once after a new source table."""
        while True:
            self._wake.clear()
            await self.refresh()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._interval_s)
