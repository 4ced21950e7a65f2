"""Code items scored by their tests: the answer's code is run with the item's asserts in a
sandboxed interpreter, and is right when every assert passes (docs/accuracy.md "Code items").

Shared by the profiler (eval items) and the data plane (canary items), so both score a code
item the same way. An eval line may carry `tests`: Python source (asserts) run after the
answer's code. The program is, for a completion item, its prompt followed by the answer cut
where the function ends (`completion_code`); for a chat item, the first fenced code block of
the answer, else the whole answer. `score_answer` scores by the tests where the item has
them, else by the item's text scorer (`contracts.answer_scoring.score`).

The answer is a model's output: untrusted code. `CodeTestRunner` runs it in
`sys.executable -I -S -B` (no user site, no site-packages, no environment: `env={}`) in a
fresh temporary directory and its own session; the child sets its own limits before it reads
the code (CPU seconds, address space, file size, processes, no core file), installs an audit
hook that refuses process creation, signals, sockets, ctypes and writes to files, and sends
its stdout and stderr to /dev/null. It is right only when the code and the tests ran to their
end and the child wrote back a random token on a descriptor kept aside (so `os._exit(0)` or
`sys.exit(0)` in the answer is wrong). A child still running after the wall limit is killed
with its whole process group. At most `at_once` programs run at a time per runner; the data
plane awaits them as asyncio subprocesses and never blocks its loop on one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

from contracts.answer_scoring import Scorer, score

# A completion continues the prompt's function; it ends at the next top-level statement, as
# HumanEval cuts completions (a new def/class/if/print/comment at column 0).
_COMPLETION_END = re.compile(r"\n(?:def |class |if |print\(|#|@|assert |```)")
_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)(?:```|\Z)", re.S | re.I)

# Run by the child before the answer: limits, the audit hook, stdout/stderr to /dev/null,
# then the program from stdin (first line: the token to write back on success).
_PRELUDE = """
import os, resource, sys
cpu, memory = int(sys.argv[1]), int(sys.argv[2])
for limit, value in ((resource.RLIMIT_CPU, (cpu, cpu + 1)), (resource.RLIMIT_AS, (memory, memory)),
                     (resource.RLIMIT_FSIZE, (0, 0)), (resource.RLIMIT_CORE, (0, 0)),
                     (resource.RLIMIT_NPROC, (0, 0))):
    resource.setrlimit(limit, value)
token, _, code = sys.stdin.buffer.read().decode("utf-8", "replace").partition("\\n")
back = os.dup(1)
null = os.open(os.devnull, os.O_WRONLY)
os.dup2(null, 1)
os.dup2(null, 2)
REFUSED = ("os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
           "os.kill", "os.killpg", "os.remove", "os.rmdir", "os.rename", "os.truncate",
           "os.chmod", "os.chown", "os.symlink", "os.link", "os.mkdir", "subprocess.",
           "socket.", "ctypes.", "shutil.", "pty.", "signal.pthread_kill", "resource.setrlimit")
WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
def hook(event, args):
    if event.startswith(REFUSED):
        raise RuntimeError("refused: " + event)
    if event == "open" and len(args) > 2:
        mode, flags = args[1], args[2]
        if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & WRITES):
            raise RuntimeError("refused: writing a file")
sys.addaudithook(hook)
try:
    exec(compile(code, "<answer>", "exec"), {"__name__": "__main__"})
except BaseException:
    os._exit(1)
os.write(back, token.encode())
os._exit(0)
"""


@dataclass(frozen=True, slots=True)
class CodeLimits:
    """What one program may use: CPU seconds (then SIGXCPU, SIGKILL a second later), seconds
    of wall clock (then its process group is killed), bytes of address space."""

    cpu_s: int = 2
    wall_s: float = 30.0  # only for code that sleeps or blocks: CPU hogs meet `cpu_s` first
    memory_bytes: int = 512 * 1024 * 1024


def check_tests(tests: Any) -> str:
    """`tests` as an item carries them: non-empty Python source that compiles (it is not run).
    Raises ValueError saying what is wrong."""
    if not isinstance(tests, str) or not tests.strip():
        raise ValueError("`tests` must be non-empty Python source (asserts)")
    try:
        compile(tests, "<tests>", "exec", dont_inherit=True)
    except SyntaxError as err:
        raise ValueError(f"`tests` is not valid Python: {err.msg} (line {err.lineno})") from err
    return tests


def completion_code(answer: str) -> str:
    """A completion's continuation of its prompt, up to the next top-level statement."""
    end = _COMPLETION_END.search(answer)
    return answer if end is None else answer[: end.start()]


def chat_code(answer: str) -> str:
    """A chat answer's code: its first fenced block (```python ... ```), else the answer."""
    fenced = _FENCE.search(answer)
    return answer if fenced is None else fenced.group(1)


def program(prompt: str, answer: str, tests: str) -> str:
    """The program run for an answer: a completion item's prompt and its continuation (a
    chat item, `prompt == ""`: the answer's code), then the tests."""
    code = prompt + completion_code(answer) if prompt else chat_code(answer)
    return f"{code}\n\n{tests}\n"


class CodeTestRunner:
    """Runs programs in a sandboxed child interpreter (the module's docstring), `at_once` at
    most at a time; a program is right when it ran to its end."""

    def __init__(self, limits: CodeLimits = CodeLimits(), at_once: int = 2) -> None:
        self.limits = limits
        self._slots = asyncio.Semaphore(at_once)

    def _command(self) -> list[str]:
        memory = str(self.limits.memory_bytes)
        return [sys.executable, "-I", "-S", "-B", "-c", _PRELUDE, str(self.limits.cpu_s), memory]

    async def passes(self, code: str) -> bool:
        """Whether `code` runs to its end (every assert passes) within the limits."""
        async with self._slots:
            with tempfile.TemporaryDirectory(prefix="gearbox-code-") as folder:
                return await self._run(code, folder)

    async def _run(self, code: str, folder: str) -> bool:
        token = secrets.token_hex(16)
        proc = await asyncio.create_subprocess_exec(
            *self._command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=folder,
            env={},
            start_new_session=True,
        )
        try:
            async with asyncio.timeout(self.limits.wall_s):
                assert proc.stdin is not None
                assert proc.stdout is not None
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    proc.stdin.write(f"{token}\n{code}".encode())
                    await proc.stdin.drain()
                proc.stdin.close()
                said = await proc.stdout.read(len(token))
                status = await proc.wait()
        except TimeoutError:
            return False
        finally:
            _kill_group(proc.pid)
            if proc.returncode is None:
                await proc.wait()
        return status == 0 and said == token.encode()

    def passes_blocking(self, code: str) -> bool:
        """`passes` for callers without an event loop (the profiler's in-process mode)."""
        token = secrets.token_hex(16)
        with (
            tempfile.TemporaryDirectory(prefix="gearbox-code-") as folder,
            subprocess.Popen(
                self._command(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd=folder,
                env={},
                start_new_session=True,
            ) as proc,
        ):
            try:
                said, _ = proc.communicate(f"{token}\n{code}".encode(), self.limits.wall_s)
            except subprocess.TimeoutExpired:
                return False
            finally:
                _kill_group(proc.pid)
            return proc.returncode == 0 and said == token.encode()


def _kill_group(pid: int) -> None:
    """Kill what is left of a child's session (it and anything it started)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


@dataclass(frozen=True, slots=True)
class Scoring:
    """What an item is scored by: its text scorer, and its tests where it carries them."""

    prompt: str  # "" for a chat item
    expected: Any
    scorer: Scorer
    tolerance: float = 0.0
    tests: str | None = None


async def score_answer(runner: CodeTestRunner, answer: str, item: Scoring) -> bool:
    """Right or wrong: by the item's tests where it carries them, else its text scorer."""
    if item.tests is not None:
        return await runner.passes(program(item.prompt, answer, item.tests))
    return score(answer, item.expected, item.scorer, item.tolerance)


def score_answer_blocking(runner: CodeTestRunner, answer: str, item: Scoring) -> bool:
    """`score_answer` without an event loop."""
    if item.tests is not None:
        return runner.passes_blocking(program(item.prompt, answer, item.tests))
    return score(answer, item.expected, item.scorer, item.tolerance)
