"""The upstream client's memory under a hostile engine (`python -m bench.scale.upstream_memory`).

Each case runs in a fresh process: a hostile engine (a bare TCP server in a child process)
and the data plane's `Http1Upstream` with its default limits. The process warms up with one
normal answer, resets its peak RSS (`/proc/self/clear_refs`), makes one attempt, and reports
the peak RSS above where it started, the CPU the attempt took and how it ended. Cases: a head
with one 128 MiB header line, a 1 GiB non-streamed body, and a 1 GiB streamed body read
through (relayed piece by piece).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.common.processes import free_port, wait_for_port
from data_plane.upstream.http1 import Http1Upstream
from data_plane.upstream.http1_wire import HIGH_WATER, MAX_HEAD_BYTES
from data_plane.upstream.port import AiohttpUpstream, AttemptError, SessionLimits, UpstreamRequest

MIB = 1024 * 1024
FILL = b"x" * (256 * 1024)
CASES = {
    # name: (reply head, bytes after it, how the client reads)
    "head": (b"HTTP/1.1 200 OK\r\nX-Junk: ", 128 * MIB, "read"),
    "body": (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (1024 * MIB), 1024 * MIB, "read"),
    "stream": (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n"
        % (1024 * MIB),
        1024 * MIB,
        "chunks",
    ),
}
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


@dataclass(frozen=True, slots=True)
class HostileResult:
    case: str
    sent_mib: float  # what the engine meant to send
    peak_growth_mib: float  # peak RSS above the warmed-up RSS
    bound_mib: float  # what the limits allow: the limit itself
    cpu_s: float  # CPU of the attempt
    outcome: str


async def _engine(port: int, case: str) -> None:
    head, extra, _ = CASES[case]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(OK)  # the warm-up
            await reader.readuntil(b"\r\n\r\n")
            writer.write(head)
            sent = 0
            while sent < extra:
                writer.write(FILL)
                await writer.drain()
                sent += len(FILL)
            await reader.read()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def _status(field: str) -> int:
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    """The peak RSS (VmHWM) starts again from the current RSS (Linux; a procfs write)."""
    Path("/proc/self/clear_refs").write_text("5")


async def _attempt(client: Http1Upstream, url: str, how: str) -> str:
    resp = await client.send(UpstreamRequest(url, b"{}", {}))
    try:
        if how == "read":
            return f"read {len(await resp.read())} bytes"
        total = 0
        async for piece in resp.chunks():
            total += len(piece)
        return f"streamed {total // MIB} MiB"
    finally:
        resp.close()


async def _client(port: int, case: str) -> dict[str, object]:
    limits = SessionLimits(10, 0, 5.0, 30.0, 300.0)  # the default body cap
    client = Http1Upstream(limits, AiohttpUpstream(limits))
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    await _attempt(client, url, "read")  # warm-up: a normal answer on the same connection
    start = _status("VmRSS:")
    _reset_peak()
    cpu = time.process_time()
    try:
        outcome = await _attempt(client, url, CASES[case][2])
    except AttemptError as err:
        outcome = str(err)
    cpu = time.process_time() - cpu
    await client.close()
    bound = {"head": MAX_HEAD_BYTES, "body": limits.max_body_bytes, "stream": HIGH_WATER}[case]
    return {
        "case": case,
        "sent_mib": CASES[case][1] / MIB,
        "peak_growth_mib": (_status("VmHWM:") - start) / MIB,
        "bound_mib": bound / MIB,
        "cpu_s": cpu,
        "outcome": outcome,
    }


def measure_hostile(case: str) -> HostileResult:
    """One case in a fresh process (its peak RSS is its own)."""
    args = [sys.executable, "-m", "bench.scale.upstream_memory", case]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"hostile-engine case {case} failed: {done.stderr[-2000:]}")
    data = json.loads(done.stdout.strip().splitlines()[-1])
    return HostileResult(**data)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scale.upstream_memory")
    parser.add_argument("case", choices=sorted(CASES))
    parser.add_argument("--engine-port", type=int, help="run only the hostile engine")
    args = parser.parse_args(argv)
    if args.engine_port:
        asyncio.run(_engine(args.engine_port, args.case))
        return
    port = free_port()
    engine_args = [sys.executable, "-m", "bench.scale.upstream_memory", args.case, "--engine-port"]
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "engine.log"
        with log.open("wb") as out:
            engine = subprocess.Popen([*engine_args, str(port)], stdout=out, stderr=out)
        try:
            wait_for_port(port, engine, log)
            print(json.dumps(asyncio.run(_client(port, args.case))), flush=True)
        finally:
            engine.kill()
            engine.wait()


if __name__ == "__main__":
    main()
