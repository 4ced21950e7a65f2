"""One real bf16 vLLM engine for the two `heavy` modules whose flags agree (tests/conftest.py,
`shared_bf16_engine`).

`tests/e2e/test_real_engine.py` (the real stack) and the one-step case of
`tests/integration/data_plane/test_real_prefill.py` each started their own bf16 engine, about
50 CPU-s and 100-150 s of wall time a start on the 2-core machine (docs/engines.md, "Figures
measured here"). Both now use one, started with the prefill test's one-step flags: one core for
the model (the prefill test's premise: a ~2,700-token prompt prefilled for longer than the
silence that ejects a hung engine), a 4,096-token context and 4,096 tokens per step (the whole
prompt in ONE step). The stack's checks hold on it; its table's context is 4,096.

The first module to ask starts it; the prefill test's one-step case, its last user, stops it
(`stop`) before the chunked case starts its own engine, so the `heavy` group still has one
engine up at a time. Run alone, either module starts it, and the session stops it at its end.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from demo.engine_check import Working, check_engines
from demo.fleet import ENGINE_STARTUP_TIMEOUT_S, launch_engines

VARIANT = "bf16"
# One core (no --all-cpus), a 4,096-token context, the whole prompt in one prefill step.
ONE_STEP_FLAGS = ("--max-model-len", "4096", "--", "--max-num-batched-tokens", "4096")
CONTEXT_TOKENS = 4096


class SharedEngine:
    """The engine, started on first use (`working`), stopped by `stop` or the session's end."""

    def __init__(self, logs: Path) -> None:
        self._logs = logs
        self._children = ExitStack()
        self._working: Working | None = None
        self.starts = 0

    async def working(self) -> Working:
        """The running engine, started (and its smoke completion answered) if it is not up.
        A start-up failure raises, with the log's tail: the tests error, never skip."""
        if self._working is None:
            started = launch_engines(self._children, (VARIANT,), self._logs, 1, ONE_STEP_FLAGS)
            working, dropped = await check_engines(started, ENGINE_STARTUP_TIMEOUT_S)
            if dropped:
                self.stop()
                raise AssertionError([d.line() for d in dropped])
            (self._working,) = working
            self.starts += 1
        return self._working

    def stop(self) -> None:
        self._working = None
        children, self._children = self._children, ExitStack()
        children.close()
