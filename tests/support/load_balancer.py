"""A real load balancer for tests: Debian's nginx on a free loopback port, proxying to
weighted loopback servers round robin (`weight` = share of requests)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from bench.common.backend import load_balancer_conf
from tests.support.redis_server import free_port


@contextlib.contextmanager
def running_nginx(workdir: Path, servers: Sequence[tuple[int, int]]) -> Iterator[int]:
    """nginx in front of `servers` ((port, weight), ...); yields the port it listens on."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(binary).exists():
        raise RuntimeError("nginx is not installed (infra/scripts/ensure-system-deps.sh nginx)")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf = workdir / "nginx.conf"
    conf.write_text(load_balancer_conf(workdir, port, servers), encoding="utf-8")
    process = subprocess.Popen(
        [binary, "-c", str(conf), "-p", str(workdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            if process.poll() is not None:
                err = process.stderr.read().decode() if process.stderr else ""
                raise RuntimeError(f"nginx exited with {process.returncode}: {err}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"nginx did not listen on {port}")
            time.sleep(0.05)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        if process.stderr is not None:
            process.stderr.close()
