"""Open-loop load: requests leave on a fixed schedule whatever the server does, and latency is
measured from the *scheduled* send time, so a stalled server cannot hide its stall
(no coordinated omission). Raw asyncio sockets keep the generator cheap.

Run as a separate, pinned process: `python -m bench.overhead.openloop --url ... --rate 1000`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from bench.common.stats import quantile

MAX_CONNECTIONS = 2048


@dataclass(frozen=True, slots=True)
class OpenLoopResult:
    rate_rps: float
    sent: int
    completed: int
    errors: int
    duration_s: float
    achieved_rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    connections_opened: int
    warmup_sent: int = 0  # requests sent before the measured part (not in the statistics)
    cpu_us_per_request: float | None = None  # the proxy's CPU time per answered request


def build_request(url: str, body: bytes, headers: Mapping[str, str]) -> tuple[str, int, bytes]:
    """(host, port, raw HTTP/1.1 request bytes) for a keep-alive JSON POST."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    lines = [
        f"POST {parts.path or '/'} HTTP/1.1",
        f"Host: {host}:{port}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return host, port, ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _header_value(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """Read one HTTP/1.1 response (Content-Length or chunked); (status, keep_alive)."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    encoding = _header_value(head, b"transfer-encoding")
    if encoding is not None and b"chunked" in encoding.lower():
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            await reader.readexactly(size + 2)
    else:
        length = _header_value(head, b"content-length")
        await reader.readexactly(int(length) if length is not None else 0)
    conn = _header_value(head, b"connection")
    return status, conn is None or conn.lower() != b"close"


class _Pool:
    """Idle keep-alive connections; a send with none idle opens a new one."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.opened = 0

    async def get(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.idle:
            return self.idle.pop()
        if self.opened >= MAX_CONNECTIONS:
            raise ConnectionError("open-loop connection cap reached")
        self.opened += 1
        return await asyncio.open_connection(self.host, self.port)

    def close_all(self) -> None:
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()


async def _send_one(
    pool: _Pool, request: bytes, scheduled: float, record: list[float] | None
) -> bool:
    loop = asyncio.get_running_loop()
    try:
        reader, writer = await pool.get()
        writer.write(request)
        status, keep = await read_response(reader)
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
        return False
    if keep:
        pool.idle.append((reader, writer))
    else:
        writer.close()
    if record is not None:
        record.append(loop.time() - scheduled)
    return 200 <= status < 300


async def run_open_loop(
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    rate_rps: float,
    duration_s: float,
    warmup_s: float = 1.0,
) -> OpenLoopResult:
    """Send at `rate_rps` for warm-up + `duration_s`; statistics cover the measured part."""
    host, port, request = build_request(url, body, headers)
    pool = _Pool(host, port)
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    tasks: list[asyncio.Task[bool]] = []
    n_warm, n_total = int(rate_rps * warmup_s), int(rate_rps * (warmup_s + duration_s))
    start = loop.time() + 0.05
    for i in range(n_total):
        scheduled = start + i / rate_rps
        delay = scheduled - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        record = latencies if i >= n_warm else None
        tasks.append(asyncio.create_task(_send_one(pool, request, scheduled, record)))
    measured = tasks[n_warm:]
    done, pending = await asyncio.wait(tasks, timeout=30.0)
    for task in pending:
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.gather(*pending, return_exceptions=True)
    pool.close_all()
    ok = sum(1 for t in measured if t in done and not t.cancelled() and t.result())
    result = summarize(latencies, rate_rps, len(measured), ok, duration_s, pool.opened)
    return replace(result, warmup_sent=n_warm)


def summarize(
    latencies_s: Sequence[float], rate: float, sent: int, ok: int, duration_s: float, conns: int
) -> OpenLoopResult:
    ordered = sorted(latencies_s)
    ms = [x * 1000 for x in ordered]
    return OpenLoopResult(
        rate_rps=rate,
        sent=sent,
        completed=ok,
        errors=sent - ok,
        duration_s=duration_s,
        achieved_rps=ok / duration_s if duration_s > 0 else 0.0,
        p50_ms=quantile(ms, 0.50),
        p90_ms=quantile(ms, 0.90),
        p99_ms=quantile(ms, 0.99),
        p999_ms=quantile(ms, 0.999),
        max_ms=ms[-1] if ms else float("nan"),
        connections_opened=conns,
    )


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.overhead.openloop", description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--rate", type=float, required=True, help="requests per second")
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--warmup-s", type=float, default=1.0)
    parser.add_argument("--body-file", type=Path, required=True)
    parser.add_argument("--header", action="append", default=[], help="'Name: value'")
    args = parser.parse_args(argv)
    headers = dict(h.split(":", 1) for h in args.header)
    headers = {k.strip(): v.strip() for k, v in headers.items()}
    _raise_fd_limit()
    result = asyncio.run(
        run_open_loop(
            args.url,
            args.body_file.read_bytes(),
            headers,
            args.rate,
            args.duration_s,
            args.warmup_s,
        )
    )
    sys.stdout.write(json.dumps(asdict(result)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
