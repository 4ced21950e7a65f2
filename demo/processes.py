"""Child processes of the demo: started in their own session, logged to a file, always stopped.

Every part of the demo (redis-server, vLLM engines, the simulator, the planes) runs as the
command an operator would type; this module only starts, waits for and stops them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp


class StartupError(RuntimeError):
    """A child process exited or did not become ready in time; the message says which and why."""


def log_tail(path: Path, lines: int = 15) -> str:
    if not path.is_file():
        return "(no log)"
    kept = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    return "\n".join(kept[-lines:])


@dataclass
class Child:
    """One started command; `stop()` ends its whole process group (vLLM forks workers)."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, grace_s: float = 20.0) -> None:
        if not self.running():
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=grace_s)

    def failure(self) -> str:
        return f"{self.name} exited with {self.process.returncode}; log {self.log}:\n" + log_tail(
            self.log
        )


def start_child(
    name: str, argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None
) -> Child:
    """Start `argv` in a new session with stdout+stderr appended to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as sink:
        process = subprocess.Popen(
            list(argv),
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    return Child(name, process, log)


async def wait_http_ok(url: str, child: Child, timeout_s: float) -> float:
    """Poll `url` until it answers 200; return the seconds waited. Fails fast if `child` dies."""
    start = time.monotonic()
    timeout = aiohttp.ClientTimeout(total=5)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while time.monotonic() - start < timeout_s:
            if not child.running():
                raise StartupError(child.failure())
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(url) as response:
                    if response.status == 200:
                        return time.monotonic() - start
            await asyncio.sleep(1.0)
    raise StartupError(
        f"{child.name} did not answer {url} within {timeout_s:.0f} s; log {child.log}"
    )


def rss_bytes(pid: int) -> int:
    """Resident memory of a process and all its descendants, from /proc (0 when it is gone)."""
    total = 0
    for task in _descendants(pid) | {pid}:
        with contextlib.suppress(OSError, ValueError):
            status = Path(f"/proc/{task}/status").read_text()
            line = next(ln for ln in status.splitlines() if ln.startswith("VmRSS:"))
            total += int(line.split()[1]) * 1024
    return total


def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
            for child in map(int, children):
                if child not in found:
                    found.add(child)
                    frontier.append(child)
    return found
