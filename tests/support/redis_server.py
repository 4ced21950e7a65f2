"""A real redis-server on a free loopback port, for tests and demos (never a fake)."""

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
        """(Re)start on the same port, e.g. after `stop()`; waits until it answers PING."""
        self.stop()
        self.process = _spawn(self.port, self.workdir, self.password)
        _wait_ready(self.port, self.process)


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn(port: int, workdir: Path, password: str | None) -> subprocess.Popen[bytes]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError(
            "redis-server is not installed; `make test` installs it "
            "(infra/scripts/ensure-system-deps.sh)"
        )
    args = [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(workdir),
        "--protected-mode",
        "no",
        "--loglevel",
        "warning",
    ]
    if password:
        args += ["--requirepass", password]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait_ready(port: int, process: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err = process.stderr.read().decode(errors="replace") if process.stderr else ""
            raise RuntimeError(f"redis-server exited with {process.returncode}: {err.strip()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"redis-server did not listen on port {port} within {timeout_s}s")


@contextlib.contextmanager
def running_redis(password: str | None = None) -> Iterator[RedisProcess]:
    with tempfile.TemporaryDirectory(prefix="gearbox-redis-") as tmp:
        port = free_port()
        proc = RedisProcess(port, _spawn(port, Path(tmp), password), Path(tmp), password)
        try:
            _wait_ready(port, proc.process)
            yield proc
        finally:
            proc.stop()
