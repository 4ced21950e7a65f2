"""Real Redis topologies on loopback for tests: a 3-master cluster (`redis-server
--cluster-enabled yes` + `redis-cli --cluster create`) and a master with a replica watched by
sentinels (`redis-server --sentinel`), each on free ports in a temporary directory, with
tight timeouts so a failover takes about a second. Never a fake (docs/style.md)."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

from demo.redis_cluster import NODE_TIMEOUT_MS, Processes, wait_for
from demo.redis_launcher import free_port, redis_server_argv, redis_server_binary

SERVICE = "gearbox-test"


@dataclass
class SentinelGroup:
    master_port: int
    replica_port: int
    sentinel_ports: list[int]
    master: subprocess.Popen[bytes]  # the first master's process (`stop` crashes it)

    @property
    def url(self) -> str:
        sentinels = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"redis+sentinel://{sentinels}/{SERVICE}/0"

    def current_master(self) -> int:
        """The master's port as the first sentinel reports it."""
        with redis.Redis(port=self.sentinel_ports[0]) as sentinel:
            _, port = sentinel.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        return int(port)


def _sentinel_conf(workdir: Path, port: int, master_port: int, quorum: int) -> Path:
    conf = workdir / f"sentinel-{port}.conf"
    conf.write_text(
        f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {workdir}\n"
        f"sentinel monitor {SERVICE} 127.0.0.1 {master_port} {quorum}\n"
        f"sentinel down-after-milliseconds {SERVICE} {NODE_TIMEOUT_MS}\n"
        f"sentinel failover-timeout {SERVICE} 2000\n"
        f"sentinel parallel-syncs {SERVICE} 1\n"
    )
    return conf


def _replica_synced(port: int) -> bool:
    with redis.Redis(port=port) as client:
        return bool(client.info("replication").get("master_link_status") == "up")


@contextlib.contextmanager
def running_sentinels(sentinels: int = 3) -> Iterator[SentinelGroup]:
    """A master, a replica in sync with it, and `sentinels` sentinels (quorum: a majority)
    that know both."""
    processes = Processes()
    with tempfile.TemporaryDirectory(prefix="gearbox-sentinel-") as tmp:
        work = Path(tmp)
        try:
            master, replica = free_port(), free_port()
            first = processes.spawn(redis_server_argv(master, _mkdir(work / "m")), master)
            replica_args = redis_server_argv(replica, _mkdir(work / "r"))
            processes.spawn([*replica_args, "--replicaof", "127.0.0.1", str(master)], replica)
            wait_for(lambda: _replica_synced(replica), "replica in sync")
            ports = [free_port() for _ in range(sentinels)]
            for port in ports:
                conf = _sentinel_conf(work, port, master, sentinels // 2 + 1)
                processes.spawn([redis_server_binary(), str(conf), "--sentinel"], port)
            group = SentinelGroup(master, replica, ports, first)
            wait_for(lambda: _knows_replica(ports), "sentinels found the replica")
            yield group
        finally:
            processes.stop_all()


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def _knows_replica(ports: list[int]) -> bool:
    for port in ports:
        with redis.Redis(port=port) as sentinel:
            if not sentinel.execute_command("SENTINEL", "REPLICAS", SERVICE):
                return False
    return True
