"""Child processes of a benchmark: start pinned, wait until they listen, read RSS and fds, stop.

Every process started here is stopped by the context manager that started it, so a failed
run leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path


class ProcessFailedError(RuntimeError):
    """A child exited early or never listened; the message carries its log tail."""


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_tail(path: Path, n_bytes: int = 3000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-n_bytes:].decode(errors="replace")


def wait_for_port(
    port: int, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 60.0
) -> None:
    """Return once 127.0.0.1:port accepts connections; raise if `proc` dies or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ProcessFailedError(f"exited with {proc.returncode}:\n{log_tail(log)}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise ProcessFailedError(f"did not listen on port {port} within {timeout_s}s:\n{log_tail(log)}")


def stop(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """SIGTERM the process group, then SIGKILL it if it lingers."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout_s)


@contextlib.contextmanager
def running(
    args: list[str],
    log: Path,
    env: Mapping[str, str] | None = None,
    port: int | None = None,
    timeout_s: float = 60.0,
    cwd: Path | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start `args` in its own process group, output to `log`; wait for `port` if given."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
    try:
        if port is not None:
            wait_for_port(port, proc, log, timeout_s)
        yield proc
    finally:
        stop(proc)


def rss_bytes(pid: int) -> int:
    """Resident set size of `pid` from /proc (Linux)."""
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise ProcessFailedError(f"no VmRSS for pid {pid}")


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{current}/task/{tid}/children", encoding="utf-8") as f:
                    todo += [int(c) for c in f.read().split()]
            except OSError:
                continue
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of `pid` and all its descendants (all threads), from /proc.

    On a shared machine this is a steadier measure of a proxy's cost than throughput: it
    does not move when other processes take the core for a while.
    """
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in _descendants(pid):
        try:
            with open(f"/proc/{p}/stat", encoding="utf-8") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / ticks
