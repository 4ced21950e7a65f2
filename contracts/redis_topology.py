"""Which Redis a plane talks to, from one URL, and the one factory that builds its client
(docs/operations.md, "Redis topologies").

Three topologies, told apart by the URL's scheme:

- standalone: `redis://[[user]:password@]host:port/db`, `rediss://` (TLS) or `unix://`, exactly
  as redis-py's `from_url` reads them (unchanged for today's users);
- Sentinel: `redis+sentinel://[[user]:password@]host:port[,host:port...]/service_name[/db]`
  (`rediss+sentinel://` for TLS to the sentinels and the master): redis-py's `Sentinel` asks the
  sentinels where `service_name`'s master is, and asks again after a failover. The password is
  the master's; `?sentinel_password=...` is the sentinels' own, when they have one;
- Cluster: `redis+cluster://[[user]:password@]host:port[,host:port...]` (`rediss+cluster://`):
  redis-py's `RedisCluster` learns the slots' owners from these seed nodes and follows the
  cluster's redirects. A cluster has database 0 only.

Other query parameters (`ssl_ca_certs`, `ssl_cert_reqs`, ...) are redis-py's, as for `from_url`.
A URL that is none of these is a `ValueError` naming what is wrong, at startup (settings
validate it), never at the first command; the message never repeats the password.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, cast
from urllib.parse import parse_qsl, unquote, urlencode

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import SSLConnection, parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import ExponentialBackoff

SENTINEL_PORT = 26379
REDIS_PORT = 6379


class Topology(StrEnum):
    STANDALONE = "standalone"
    SENTINEL = "sentinel"
    CLUSTER = "cluster"


_SCHEMES = {
    "redis": Topology.STANDALONE,
    "rediss": Topology.STANDALONE,
    "unix": Topology.STANDALONE,
    "redis+sentinel": Topology.SENTINEL,
    "rediss+sentinel": Topology.SENTINEL,
    "redis+cluster": Topology.CLUSTER,
    "rediss+cluster": Topology.CLUSTER,
}


@dataclass(frozen=True, slots=True)
class RedisTarget:
    """A parsed URL: the topology, its nodes (sentinels or cluster seeds; none for
    standalone), the master's service name (Sentinel), the database, and the connection
    settings (credentials, TLS) redis-py takes as keyword arguments."""

    topology: Topology
    url: str
    nodes: tuple[tuple[str, int], ...] = ()
    service_name: str = ""
    db: int = 0
    connection: dict[str, Any] = field(default_factory=dict)
    sentinel_password: str | None = None


def parse_redis_url(url: str) -> RedisTarget:
    """The target `url` names; ValueError saying what is wrong with it (never the password)."""
    scheme, sep, rest = url.partition("://")
    topology = _SCHEMES.get(scheme.lower()) if sep else None
    if topology is None:
        raise ValueError(
            f"Redis URL must start with one of {', '.join(s + '://' for s in _SCHEMES)}"
            f" (got {scheme + sep if sep else 'no scheme'!r})"
        )
    if topology is Topology.STANDALONE:
        parse_url(url)  # raises ValueError on a bad query value, as from_url would
        return RedisTarget(topology, url)
    rest, _, query = rest.partition("?")
    netloc, _, path = rest.partition("/")
    auth, _, hosts = netloc.rpartition("@")
    default_port = SENTINEL_PORT if topology is Topology.SENTINEL else REDIS_PORT
    nodes = tuple(_node(item, default_port) for item in hosts.split(","))
    params = dict(parse_qsl(query, keep_blank_values=True))
    sentinel_password = params.pop("sentinel_password", None)
    if topology is Topology.CLUSTER and sentinel_password is not None:
        raise ValueError("Redis URL: sentinel_password is for redis+sentinel:// URLs only")
    service, db = _path_parts(topology, path)
    connection = _connection_kwargs(scheme, auth, db, params)
    return RedisTarget(topology, url, nodes, service, db, connection, sentinel_password)


def _node(item: str, default_port: int) -> tuple[str, int]:
    host, port = item.strip(), str(default_port)
    if host.startswith("["):  # [IPv6]:port
        head, _, after = host[1:].partition("]")
        host, port = head, after.removeprefix(":") or port
    elif ":" in host:
        host, port = host.rsplit(":", 1)
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"Redis URL: {item.strip()!r} is not host:port with a port 1-65535")
    return unquote(host), int(port)


def _path_parts(topology: Topology, path: str) -> tuple[str, int]:
    parts = [unquote(p) for p in path.split("/") if p]
    if topology is Topology.CLUSTER:
        if parts not in ([], ["0"]):
            raise ValueError("Redis URL: a cluster has database 0 only (no path after the nodes)")
        return "", 0
    if not parts or len(parts) > 2:
        raise ValueError(
            "Redis URL: redis+sentinel:// needs the master's service name after the sentinels: "
            "redis+sentinel://host:port[,host:port...]/service_name[/db]"
        )
    if len(parts) == 2 and not parts[1].isdigit():
        raise ValueError(f"Redis URL: database {parts[1]!r} is not a number")
    return parts[0], int(parts[1]) if len(parts) == 2 else 0


def _connection_kwargs(scheme: str, auth: str, db: int, params: dict[str, str]) -> dict[str, Any]:
    """Credentials, database and TLS as redis-py's own URL parser reads them."""
    plain = "rediss" if scheme.lower().startswith("rediss") else "redis"
    at = f"{auth}@" if auth else ""
    kwargs: dict[str, Any] = dict(parse_url(f"{plain}://{at}localhost/{db}?{urlencode(params)}"))
    kwargs.pop("host", None)
    if kwargs.pop("connection_class", None) is SSLConnection:
        kwargs["ssl"] = True
    return kwargs


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """How patient a client is: each socket step's timeout, retries of a failed command
    (`None`: redis-py's default), and the idle connections' health check (0 = none)."""

    timeout_s: float
    retries: int | None = None
    health_check_interval_s: int = 0

    def kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "socket_timeout": self.timeout_s,
            "socket_connect_timeout": self.timeout_s,
            "decode_responses": False,
            "health_check_interval": self.health_check_interval_s,
        }
        if self.retries is not None:
            out["retry"] = Retry(ExponentialBackoff(cap=0.2, base=0.02), self.retries)
        return out


class SentinelRedis(aioredis.Redis):
    """A Sentinel master's client that also closes its connections to the sentinels."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        try:
            await super().aclose(close_connection_pool)
        finally:
            pool = self.connection_pool
            if isinstance(pool, SentinelConnectionPool):
                await pool.sentinel_manager.aclose()  # every sentinel's client, each once


def connect_redis(url: str, options: ClientOptions) -> aioredis.Redis:
    """The client for `url`'s topology; connections open on the first command.

    A cluster's client is a `RedisCluster`, which is not a subclass of `Redis` but answers
    the commands the planes send (single-key commands, same-slot transactions and scripts,
    pub/sub); the planes check for it where the two differ (sharded pub/sub, `CommandLink`).
    """
    target = parse_redis_url(url)
    common = options.kwargs()
    if target.topology is Topology.STANDALONE:
        return aioredis.Redis.from_url(url, **common)
    if target.topology is Topology.CLUSTER:
        seeds = [ClusterNode(host, port) for host, port in target.nodes]
        cluster = RedisCluster(startup_nodes=seeds, **target.connection, **common)
        return cast(aioredis.Redis, cluster)
    return _sentinel_master(target, common)


def as_cluster(client: object) -> RedisCluster | None:
    """`client` as a cluster's client (`connect_redis` types every client as `Redis`), None
    for a standalone or Sentinel one."""
    return client if isinstance(client, RedisCluster) else None


async def ready_for_pubsub(client: aioredis.Redis) -> None:
    """Before `client.pubsub()`: a cluster's pub/sub picks its node from the slots' owners,
    which its client learns on its first command; learn them now (no-op once known, and for
    standalone and Sentinel clients). Raises RedisError while no seed node answers."""
    cluster = as_cluster(client)
    if cluster is not None:
        _ = await cluster.initialize()  # returns the client itself


def _sentinel_master(target: RedisTarget, common: dict[str, Any]) -> aioredis.Redis:
    to_sentinels: dict[str, Any] = {
        "socket_timeout": common["socket_timeout"],
        "socket_connect_timeout": common["socket_connect_timeout"],
    }
    tls = {k: v for k, v in target.connection.items() if k == "ssl" or k.startswith("ssl_")}
    to_sentinels.update(tls)
    if target.sentinel_password is not None:
        to_sentinels["password"] = target.sentinel_password
    sentinel = Sentinel(  # type: ignore[no-untyped-call]  # untyped in redis-py
        list(target.nodes), sentinel_kwargs=to_sentinels
    )
    master = sentinel.master_for(
        target.service_name, redis_class=SentinelRedis, **target.connection, **common
    )
    return cast(aioredis.Redis, master)
