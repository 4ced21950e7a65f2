"""The production entry points as real processes, for attacks that need a socket of their own
and a process to measure: `python -m simulator serve` and `python -m data_plane serve` (static
mode, from a snapshot of the table the control plane builds for those engines)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from simulator import SimFleetConfig
from tests.reliability.stack import CHEAP, PRICEY, fleet_table, sim_pair
from tests.support.redis_server import free_port

START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Target:
    url: str
    host: str
    port: int
    pid: int
    engines: tuple[str, ...]

    def rss_bytes(self) -> int:
        with open(f"/proc/{self.pid}/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))


def _wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited: {log.read_text(errors='replace')[-3000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"not listening on {port}: {log.read_text(errors='replace')[-3000:]}")


@contextlib.contextmanager
def _child(args: list[str], log: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_listening(port, proc, log)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


@contextlib.contextmanager
def running_target(workdir: Path, **dp_flags: str) -> Iterator[Target]:
    """Engines for both pairs, then a data plane serving their table from a snapshot."""
    pairs = [sim_pair(q, port=free_port()) for q in (CHEAP, PRICEY)]
    fleet_file = workdir / "fleet.json"
    fleet_file.write_text(SimFleetConfig(pairs=pairs).model_dump_json(), encoding="utf-8")
    urls = {p.quantization: [f"http://127.0.0.1:{p.port}"] for p in pairs}
    snapshot = workdir / "table.json"
    snapshot.write_text(fleet_table(urls).model_dump_json(), encoding="utf-8")
    port = free_port()
    sim_args = [sys.executable, "-m", "simulator", "serve", "--fleet", str(fleet_file)]
    dp_args = [sys.executable, "-m", "data_plane", "serve", "--server-host", "127.0.0.1"]
    dp_args += [
        "--server-port",
        str(port),
        "--redis-url",
        "",
        "--table-snapshot-path",
        str(snapshot),
    ]
    for name, value in dp_flags.items():
        dp_args += ["--" + name.replace("_", "-"), value]
    with _child(sim_args, workdir / "sim.log", pairs[0].port) as sim:
        _wait_listening(pairs[1].port, sim, workdir / "sim.log")
        with _child(dp_args, workdir / "dp.log", port) as dp:
            engines = tuple(u for us in urls.values() for u in us)
            yield Target(f"http://127.0.0.1:{port}", "127.0.0.1", port, dp.pid, engines)


def raw_exchange(target: Target, request: bytes, timeout_s: float = 10.0) -> bytes:
    """Send raw bytes, read until the server closes or goes quiet; the whole answer."""
    with socket.create_connection((target.host, target.port), timeout_s) as sock:
        with contextlib.suppress(OSError):
            sock.sendall(request)
        chunks: list[bytes] = []
        with contextlib.suppress(TimeoutError, OSError):
            while chunk := sock.recv(65536):
                chunks.append(chunk)
                if _complete(b"".join(chunks)):
                    break
        return b"".join(chunks)


def _complete(data: bytes) -> bool:
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value.strip())
    return False


def parse_answer(data: bytes) -> tuple[int, dict[str, str], bytes]:
    """(status, headers with lower-case names, body) of one raw HTTP/1.x answer."""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body


def json_body(body: bytes) -> object:
    return json.loads(body)
