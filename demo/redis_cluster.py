"""Real Redis clusters on loopback: `redis-server --cluster-enabled yes` masters joined by
`redis-cli --cluster create`, on free ports in a temporary directory, with a tight node timeout
so a failover takes about a second. The tests (`tests/support/redis_topologies.py`) and the
scale bench (`bench/scale/redis_cost.py`) start clusters through it.

A development tool, not part of the product's planes, like `demo/redis_launcher.py`.
"""

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

from demo.redis_launcher import free_port, redis_server_argv
from demo.redis_launcher import wait_until_listening as _listening

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
    pids: list[int] = field(default_factory=list)  # the nodes' processes, as `ports`
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)  # as `ports`

    def kill(self, port: int) -> None:
        """Crash the node on `port` (SIGKILL), as a failover test means it."""
        stop(self.processes[self.ports.index(port)])

    def node_url(self, port: int) -> str:
        return f"redis+cluster://127.0.0.1:{port}"

    def owner_of(self, key: str) -> int:
        """The port of the master that owns `key`'s slot, as the first live node sees it."""
        for port in self.ports:
            try:
                with redis.Redis(port=port) as client:
                    slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
                    owners = client.execute_command("CLUSTER", "SLOTS")
            except redis.ConnectionError:
                continue  # a killed node
            for start, end, master, *_ in owners:
                if start <= slot <= end:
                    return int(master[1])
        raise AssertionError(f"no live node knows an owner of {key!r}")


def _cluster_ok(ports: list[int]) -> bool:
    for port in ports:
        with redis.Redis(port=port) as client:
            if b"cluster_state:ok" not in client.execute_command("CLUSTER", "INFO"):
                return False
    return True


def _replicas_synced(ports: list[int]) -> bool:
    for port in ports:
        with redis.Redis(port=port) as client:
            info = client.info("replication")
            if info.get("role") != "slave" or info.get("master_link_status") != "up":
                return False
    return True


@contextlib.contextmanager
def running_cluster(masters: int = 3, replicas: int = 0) -> Iterator[Cluster]:
    """A cluster of `masters` masters with `replicas` replicas each (in sync), every slot
    covered and state ok. `ports` and `pids` list the masters first."""
    cli = shutil.which("redis-cli")
    if cli is None:
        raise RuntimeError("redis-cli is not installed; `make system-deps` installs it")
    processes = Processes()
    with tempfile.TemporaryDirectory(prefix="gearbox-cluster-") as tmp:
        try:
            ports = [free_port() for _ in range(masters * (1 + replicas))]
            started = []
            for port in ports:
                workdir = Path(tmp) / str(port)
                workdir.mkdir()
                args = redis_server_argv(port, workdir)
                args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
                args += ["--cluster-node-timeout", str(NODE_TIMEOUT_MS)]
                # The bus is port + 10000 unless named: past 65535 for most free ports.
                args += ["--cluster-port", str(free_port())]
                started.append(processes.spawn(args, port))
            nodes = [f"127.0.0.1:{p}" for p in ports]
            create = [cli, "--cluster", "create", *nodes, "--cluster-replicas", str(replicas)]
            subprocess.run([*create, "--cluster-yes"], check=True, capture_output=True)
            wait_for(lambda: _cluster_ok(ports), "cluster state ok")
            if replicas:
                wait_for(lambda: _replicas_synced(ports[masters:]), "replicas in sync", 30.0)
            seeds = ",".join(nodes)
            yield Cluster(ports, f"redis+cluster://{seeds}", [p.pid for p in started], started)
        finally:
            processes.stop_all()
