"""A private redis-server on a free loopback port: its command line, the wait until it answers,
and stopping it. The one launcher of the repository: the demos (`demo/`), `bench/` and the tests
(`tests/support/redis_server.py`) all start Redis through it.

A development tool, not part of the product's planes: it lives with the demos, which run it from
an installed wheel too, and `bench/` and `tests/` import it from here.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class RedisTls:
    """Certificate files for a TLS-only listener (`--tls-port`, plain port off)."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def redis_server_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError(
            "redis-server is not installed; `make system-deps` installs it "
            "(infra/scripts/ensure-system-deps.sh)"
        )
    return binary


def redis_server_argv(
    port: int,
    workdir: Path,
    *,
    password: str | None = None,
    persist: bool = False,
    tls: RedisTls | None = None,
) -> list[str]:
    """redis-server on 127.0.0.1:`port` with its files in `workdir`. Without `persist` it keeps
    nothing (no RDB, no AOF); with it, every write is in the AOF (fsync always) before the
    reply, so a stop and start keeps what was written, as a production Redis does."""
    args = [redis_server_binary(), "--bind", "127.0.0.1", "--dir", str(workdir)]
    args += ["--save", "", "--appendonly", "yes" if persist else "no"]
    if persist:
        args += ["--appendfsync", "always"]
    args += ["--protected-mode", "no", "--loglevel", "warning"]
    if tls is None:
        args += ["--port", str(port)]
    else:
        args += ["--port", "0", "--tls-port", str(port), "--tls-auth-clients", "no"]
        args += ["--tls-cert-file", str(tls.server_cert), "--tls-key-file", str(tls.server_key)]
        args += ["--tls-ca-cert-file", str(tls.ca_cert)]
    if password:
        args += ["--requirepass", password]
    return args


def wait_until_listening(
    port: int, process: subprocess.Popen[bytes], timeout_s: float = 10.0
) -> None:
    """Return once 127.0.0.1:`port` accepts connections; RuntimeError when `process` exits
    first (with its stderr, when it was piped) or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err = process.stderr.read().decode(errors="replace") if process.stderr else ""
            raise RuntimeError(f"redis-server exited with {process.returncode}: {err.strip()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"redis-server did not listen on 127.0.0.1:{port} within {timeout_s}s")


def _spawn(port: int, workdir: Path, password: str | None) -> subprocess.Popen[bytes]:
    args = redis_server_argv(port, workdir, password=password)
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@dataclass
class RedisProcess:
    port: int
    process: subprocess.Popen[bytes]
    workdir: Path
    password: str | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        """Stop the server (tests use this to simulate an outage)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self.process.stderr and not self.process.stderr.closed:
            self.process.stderr.close()

    def start(self) -> None:
        """(Re)start on the same port, e.g. after `stop()`; waits until it listens."""
        self.stop()
        self.process = _spawn(self.port, self.workdir, self.password)
        wait_until_listening(self.port, self.process)


@contextlib.contextmanager
def running_redis(password: str | None = None) -> Iterator[RedisProcess]:
    """A fresh redis-server that keeps nothing, stopped on exit; RuntimeError if it cannot
    start."""
    with tempfile.TemporaryDirectory(prefix="gearbox-redis-") as tmp:
        port = free_port()
        proc = RedisProcess(port, _spawn(port, Path(tmp), password), Path(tmp), password)
        try:
            wait_until_listening(port, proc.process)
            yield proc
        finally:
            proc.stop()


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """Yield the URL of a fresh redis-server (see `running_redis`)."""
    with running_redis() as redis:
        yield redis.url
