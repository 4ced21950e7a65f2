"""What one in-flight sharing exchange's commands cost Redis, command by command, at 256
replicas x 1,000 endpoints on 3 groups (docs/benchmarks.md, "Scale", Redis's CPU for in-flight
sharing; `python -m bench.scale.redis_ops`).

A fresh redis-server; one client on a plain socket sends each case's commands as one batch
and reads the replies (one round trip per call, as a replica's exchange does), `--calls` times.
Redis's CPU (user + system, /proc/PID/stat) over those calls, divided by the calls, is the
figure; a PING round trip is shown beside it (what any call costs Redis before its work).
A group's share of 1,000 endpoints is 333 counts of 4 bytes (1,332 bytes, 1,340 with a
snapshot's fingerprint). The cases:

- `mget 255 snapshots`: today's read (`in_flight_sharing.py`): one MGET of the 255 other
  replicas' snapshots.
- `set snapshot`: today's write of one replica's own snapshot (SET ... PX).
- `bitfield k + get sums`: a design where Redis keeps the group's sums: one BITFIELD INCRBY of
  the k counts that changed (k = 1, 10, 50) and one GET of the 1,332-byte sums.
  k = 33 is the fleet harness's churn (a tenth of 1,000 endpoints move per exchange, a third of
  them in each group); `2 x bitfield 33 + 2 gets` is the same written to two keys with a
  second small GET (an exchange while the sums change epoch).
- `bitfield 333`: every count added at once (a replica joining the sums).
- `exchange x K clients`: one exchange of today's sums (BITFIELD of 33 changes, GET, SCARD)
  on each of K connections, all K sent before any reply is read, so Redis finds K clients
  ready per wake-up; the figure is per exchange (per call / K). K = 1 is a lone replica's
  round trip; at 10,240 exchanges a second a shard finds more than one client ready
  whenever an exchange arrives while it is busy with another.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from demo.redis_launcher import running_redis

COUNTS = 333  # one of 3 groups' share of 1,000 endpoints
REPLICAS = 256


def redis_cpu_s(pid: int) -> float:
    """A process's CPU, from /proc/PID/schedstat (ns; /proc/PID/stat counts 10 ms ticks)."""
    with open(f"/proc/{pid}/schedstat") as stat:
        return int(stat.read().split()[0]) / 1e9


def _pack(commands: Sequence[Sequence[bytes]]) -> bytes:
    parts: list[bytes] = []
    for command in commands:
        parts.append(b"*%d\r\n" % len(command))
        parts += [b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in command]
    return b"".join(parts)


class _Link:
    """One socket; sends a packed batch, reads until `replies` top-level replies arrived."""

    def __init__(self, port: int) -> None:
        self._sock = socket.create_connection(("127.0.0.1", port))
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, packed: bytes, replies: int) -> bytes:
        self.send(packed)
        return self.receive(replies)

    def send(self, packed: bytes) -> None:
        self._sock.sendall(packed)

    def receive(self, replies: int) -> bytes:
        buffer = b""
        while _complete(buffer) < replies:
            chunk = self._sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            buffer += chunk
        return buffer

    def close(self) -> None:
        self._sock.close()


def _complete(buffer: bytes) -> int:
    """How many whole top-level replies `buffer` holds (enough RESP for these cases)."""
    count, at = 0, 0
    while at < len(buffer):
        end = _skip(buffer, at)
        if end is None:
            break
        count, at = count + 1, end
    return count


def _skip(buffer: bytes, at: int) -> int | None:
    line_end = buffer.find(b"\r\n", at)
    if line_end < 0:
        return None
    kind, head = buffer[at : at + 1], buffer[at + 1 : line_end]
    at = line_end + 2
    if kind == b"$":
        size = int(head)
        return at if size < 0 else (at + size + 2 if at + size + 2 <= len(buffer) else None)
    if kind == b"*":
        for _ in range(max(int(head), 0)):
            end = _skip(buffer, at)
            if end is None:
                return None
            at = end
        return at
    return at  # +, -, :


Cases = dict[str, list[list[bytes]]]


def _cases(rng: random.Random) -> tuple[Callable[[_Link], None], Cases]:
    """What Redis holds before the cases, and each case's commands."""
    body = bytes(4 * COUNTS)
    snapshot = bytes(8) + body
    others = [b"{g}:snap:%d" % r for r in range(1, REPLICAS)]

    def fill(link: _Link) -> None:
        link.call(_pack([[b"SET", key, snapshot] for key in others]), len(others))
        link.call(_pack([[b"SET", b"{g}:sums", body]]), 1)

    def bitfield(k: int, key: bytes = b"{g}:sums") -> list[bytes]:
        ops: list[bytes] = [b"BITFIELD", key]
        for i in rng.sample(range(COUNTS), k):
            ops += [b"INCRBY", b"u32", b"#%d" % i, b"1" if rng.random() < 0.5 else b"-1"]
        return ops

    cases: Cases = {
        "ping": [[b"PING"]],
        "mget 255 snapshots": [[b"MGET", *others]],
        "set snapshot": [[b"SET", b"{g}:snap:0", snapshot, b"PX", b"2000"]],
    }
    for k in (1, 10, 33, 50):
        cases[f"bitfield {k} + get sums"] = [bitfield(k), [b"GET", b"{g}:sums"]]
    two = [bitfield(33), bitfield(33, b"{g}:sums2"), [b"GET", b"{g}:sums"], [b"GET", b"{g}:e"]]
    cases["2 x bitfield 33 + 2 gets"] = two
    cases[f"bitfield {COUNTS}"] = [bitfield(COUNTS)]
    return fill, cases


CLIENTS = (1, 8, 64)  # the `exchange x K clients` cases


def _exchange(rng: random.Random) -> list[list[bytes]]:
    ops: list[bytes] = [b"BITFIELD", b"{g}:sums"]
    for i in rng.sample(range(COUNTS), 33):
        ops += [b"INCRBY", b"i32", b"#%d" % i, b"1" if rng.random() < 0.5 else b"-1"]
    return [ops, [b"GET", b"{g}:sums"], [b"SCARD", b"{g}:joined"]]


def _per_exchange(links: list[_Link], pid: int, commands: list[list[bytes]], calls: int) -> float:
    """Redis CPU per exchange with every link's exchange sent before any reply is read."""
    packed = _pack(commands)
    calls = max(1, calls // len(links))
    before = redis_cpu_s(pid)
    for _ in range(calls):
        for link in links:
            link.send(packed)
        for link in links:
            link.receive(len(commands))
    return (redis_cpu_s(pid) - before) / (calls * len(links)) * 1e6


def measure(calls: int, rounds: int) -> dict[str, list[float]]:
    """Redis CPU in µs per call, per case and round (a fresh redis-server for all of them;
    the cases take turns within each round, so a machine whose load drifts shifts them
    alike)."""
    rng = random.Random(34)
    results: dict[str, list[float]] = {}
    with running_redis() as redis:
        links = [_Link(redis.port) for _ in range(max(CLIENTS))]
        link, exchange = links[0], _exchange(rng)
        try:
            fill, cases = _cases(rng)
            fill(link)
            for _ in range(rounds):
                for name, commands in cases.items():
                    us = _per_call(link, redis.process.pid, commands, calls)
                    results.setdefault(name, []).append(us)
                for k in CLIENTS:
                    us = _per_exchange(links[:k], redis.process.pid, exchange, calls)
                    results.setdefault(f"exchange x {k} clients", []).append(us)
        finally:
            for each in links:
                each.close()
    return results


def _per_call(link: _Link, pid: int, commands: list[list[bytes]], calls: int) -> float:
    packed = _pack(commands)
    for _ in range(min(calls, 200)):  # warm up
        link.call(packed, len(commands))
    before = redis_cpu_s(pid)
    for _ in range(calls):
        link.call(packed, len(commands))
    return (redis_cpu_s(pid) - before) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=4000, help="calls per case and round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (the median is shown)")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    started = time.monotonic()
    results = measure(args.calls, args.rounds)
    for name, us in results.items():
        low, mid, high = min(us), statistics.median(us), max(us)
        print(f"{name:28s} {mid:7.1f} µs of Redis CPU per call (rounds {low:.1f}-{high:.1f})")
    print(
        f"({args.rounds} rounds of {args.calls} calls per case, {time.monotonic() - started:.0f} s)"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
