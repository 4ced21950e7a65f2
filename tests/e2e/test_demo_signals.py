"""`python -m demo sim|real` stops everything it started when a process manager stops it
(issue 35): SIGTERM, and SIGINT even when it was started as a background job (`cmd &` in a
non-interactive shell starts it with SIGINT ignored). Before, the parent exited on SIGTERM and
the simulator, redis-server and both planes kept running; SIGINT did nothing."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]


def descendants(pid: int) -> set[int]:
    """Every process below `pid`, from /proc (children of children included)."""
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        with contextlib.suppress(OSError):
            for child in map(
                int, Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
            ):
                if child not in found:
                    found.add(child)
                    frontier.append(child)
    return found


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def kill_tree(process: subprocess.Popen[bytes]) -> None:
    """A demo the test did not stop (it failed first) goes with everything it started: killing
    the parent alone left its simulator and both planes running for the rest of the suite
    (seen beside a second suite at load 30, where the demo did not come up within 420 s)."""
    if process.poll() is not None:
        return
    started = descendants(process.pid)
    process.kill()
    for pid in started:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def read(log: Path) -> str:
    return log.read_text()


def start_demo(
    tmp: Path, sigint_ignored: bool, *extra: str
) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp / "demo.log"
    argv = [sys.executable, "-m", "demo", "sim", "--out", str(tmp / "out"), *extra]
    if sigint_ignored:
        argv = ["bash", "-c", "trap '' INT; exec \"$@\"", "bash", *argv]
    with log.open("wb") as sink:
        process = subprocess.Popen(
            argv, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    return process, log


async def stop_and_check(
    process: subprocess.Popen[bytes], log: Path, ready: str, sig: signal.Signals, minimum: int
) -> None:
    await eventually(lambda: ready in read(log), timeout_s=420, what=repr(ready))
    started = descendants(process.pid)
    assert len(started) >= minimum, read(log)[-2000:]
    process.send_signal(sig)
    code = await asyncio.to_thread(process.wait, 120)
    text = read(log)
    assert code == 128 + sig.value, text[-3000:]
    assert f"{sig.name}: stopping everything the demo started" in text
    assert "stopped; everything the demo started has been stopped" in text
    await eventually(lambda: not any(map(alive, started)), timeout_s=60, what="children gone")


@pytest.mark.timeout(600)
async def test_sigterm_on_a_kept_up_demo_stops_everything_it_started(tmp_path: Path) -> None:
    process, log = start_demo(tmp_path, False, "--keep-up", "--requests", "16")
    try:
        # simulator, redis-server, control plane, data plane
        await stop_and_check(process, log, "everything stays up", signal.SIGTERM, 4)
    finally:
        kill_tree(process)


@pytest.mark.timeout(600)
async def test_sigint_stops_a_demo_started_in_the_background_mid_profile(tmp_path: Path) -> None:
    process, log = start_demo(tmp_path, True, "--requests", "16")
    try:
        # simulator, redis-server, control plane, and the profilers already at work
        await stop_and_check(process, log, "== profile", signal.SIGINT, 3)
    finally:
        kill_tree(process)
