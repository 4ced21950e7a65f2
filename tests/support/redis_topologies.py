"""Real Redis topologies on loopback for tests: a 3-master cluster (`redis-server
--cluster-enabled yes` + `redis-cli --cluster create`) and a master with a replica watched by
sentinels (`redis-server --sentinel`), each on free ports in a temporary directory, with
tight timeouts so a failover takes about a second. Never a fake (docs/style.md)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis

from demo.redis_launcher import free_port, redis_server_argv, redis_server_binary
from demo.redis_launcher import wait_until_listening as _listening

SERVICE = "gearbox-test"
NODE_TIMEOUT_MS = 500


@dataclass
class Processes:
    """Started processes, stopped (terminated, then killed) in reverse order."""

    running: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def spawn(self, args: list[str], port: int) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.running.append(process)
        _listening(port, process)
        return process

    def stop_all(self) -> None:
        for process in reversed(self.running):
            stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()  # a crash, as a failover test means it
        process.wait(timeout=10)
    if process.stderr and not process.stderr.closed:
        process.stderr.close()


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 15.0) -> None:
    """Poll `condition()` until true; RuntimeError after `timeout_s` (for the launchers,
    which run outside the event loop)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not happen within {timeout_s}s")
        time.sleep(0.05)


@dataclass
class Cluster:
    ports: list[int]
    url: str  # redis+cluster:// with every node as a seed

    def node_url(self, port: int) -> str:
        return f"redis+cluster://127.0.0.1:{port}"

    def owner_of(self, key: str) -> int:
        """The port of the master that owns `key`'s slot."""
        with redis.Redis(port=self.ports[0]) as client:
            slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
            for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    return int(master[1])
        raise AssertionError(f"no master owns slot {slot}")


def _cluster_ok(ports: list[int]) -> bool:
    for port in ports:
        with redis.Redis(port=port) as client:
            if b"cluster_state:ok" not in client.execute_command("CLUSTER", "INFO"):
                return False
    return True


@contextlib.contextmanager
def running_cluster(masters: int = 3) -> Iterator[Cluster]:
    """A cluster of `masters` masters (no replicas), every slot covered and state ok."""
    cli = shutil.which("redis-cli")
    if cli is None:
        raise RuntimeError("redis-cli is not installed; `make system-deps` installs it")
    processes = Processes()
    with tempfile.TemporaryDirectory(prefix="gearbox-cluster-") as tmp:
        try:
            ports = [free_port() for _ in range(masters)]
            for port in ports:
                workdir = Path(tmp) / str(port)
                workdir.mkdir()
                args = redis_server_argv(port, workdir)
                args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
                args += ["--cluster-node-timeout", str(NODE_TIMEOUT_MS)]
                # The bus is port + 10000 unless named: past 65535 for most free ports.
                args += ["--cluster-port", str(free_port())]
                processes.spawn(args, port)
            nodes = [f"127.0.0.1:{p}" for p in ports]
            create = [cli, "--cluster", "create", *nodes, "--cluster-replicas", "0"]
            subprocess.run([*create, "--cluster-yes"], check=True, capture_output=True)
            wait_for(lambda: _cluster_ok(ports), "cluster state ok")
            seeds = ",".join(nodes)
            yield Cluster(ports, f"redis+cluster://{seeds}")
        finally:
            processes.stop_all()


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
