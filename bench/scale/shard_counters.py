"""What each redis-server did over a window, for `redis_cost.py`: its CPU to the nanosecond,
the time it waited for a CPU and its context switches (/proc/PID/schedstat and status), the
reads it processed (a round trip is one read when a client's batch arrives whole) and the
time spent in each command (INFO stats and commandstats, the same counters before and after).

/proc/PID/stat counts CPU in ticks of 10 ms; a 5 s window of an idle cluster node (about 3 ms
of CPU a second: its cron and the cluster bus) is then 1 or 2 ticks. The background a node
spends with no client (`idle_cpu_per_s`, measured before the replicas connect) is a cost per
second, not per exchange: at the nominal rate it is the same few milliseconds a second.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis


@dataclass(frozen=True, slots=True)
class Counters:
    """One redis-server's cumulative counters at one instant."""

    cpu_ns: int  # on a CPU (schedstat)
    wait_ns: int  # runnable, waiting for a CPU (schedstat)
    voluntary: int  # context switches: it slept (epoll_wait)
    involuntary: int  # ...it was preempted
    reads: int  # total_reads_processed
    calls: dict[str, tuple[int, int]]  # command -> (calls, usec)


def counters(pid: int, client: redis.Redis) -> Counters:
    with open(f"/proc/{pid}/schedstat") as stat:
        cpu_ns, wait_ns, _ = (int(v) for v in stat.read().split())
    switches: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name.endswith("ctxt_switches"):
                switches[name] = int(value)
    stats = client.info("stats")
    commands = client.info("commandstats")
    calls = {
        name.removeprefix("cmdstat_"): (int(row["calls"]), int(row["usec"]))
        for name, row in commands.items()
    }
    return Counters(
        cpu_ns,
        wait_ns,
        switches["voluntary_ctxt_switches"],
        switches["nonvoluntary_ctxt_switches"],
        int(stats["total_reads_processed"]),
        calls,
    )


@dataclass(frozen=True, slots=True)
class ShardProfile:
    """One redis-server over a window, per exchange (all replicas' exchanges in the window)."""

    cpu_us: float  # on a CPU, all of it
    commands_us: float  # inside commands (commandstats' usec), the rest is the round trips'
    reads: float  # reads processed: the round trips
    calls: dict[str, float]  # per command, the counters' own INFO calls left out
    command_us: dict[str, float]  # ...and the µs spent in it
    waited_us: float  # runnable but waiting for a CPU (other processes on the machine)
    switches: tuple[float, float]  # voluntary, involuntary
    idle_cpu_per_s: float  # CPU a second with no client, before the window (seconds)


def profile(
    before: Counters, after: Counters, exchanges: int, idle_cpu_per_s: float
) -> ShardProfile:
    per = max(exchanges, 1)
    calls: dict[str, float] = {}
    command_us: dict[str, float] = {}
    for name, (count, spent) in after.calls.items():
        was = before.calls.get(name, (0, 0))
        if name not in ("info", "config") and count > was[0]:
            calls[name] = (count - was[0]) / per
            command_us[name] = (spent - was[1]) / per
    return ShardProfile(
        cpu_us=(after.cpu_ns - before.cpu_ns) / 1e3 / per,
        commands_us=sum(command_us.values()),
        reads=(after.reads - before.reads) / per,
        calls=calls,
        command_us=command_us,
        waited_us=(after.wait_ns - before.wait_ns) / 1e3 / per,
        switches=(
            (after.voluntary - before.voluntary) / per,
            (after.involuntary - before.involuntary) / per,
        ),
        idle_cpu_per_s=idle_cpu_per_s,
    )


def idle_cpu_per_s(pids: list[int], seconds: float) -> list[float]:
    """Each server's CPU a second (seconds of CPU) with no client connected."""
    before = [_cpu_ns(pid) for pid in pids]
    start = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - start
    return [(_cpu_ns(pid) - b) / 1e9 / wall for pid, b in zip(pids, before, strict=True)]


def _cpu_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as stat:
        return int(stat.read().split()[0])
