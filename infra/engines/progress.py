"""Run a set-up command with its full output in a log file and a short summary on the terminal.

pip prints hundreds of lines per install; a person wants to know it is moving and how much it
fetched. Other commands show only lines they mark with `gearbox:`, plus a heartbeat.
"""

from __future__ import annotations

import os
import re
import select
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

HEARTBEAT_S = 20.0
PIP_STATUS_EVERY_S = 10.0
_SIZE = re.compile(r"\((\d+(?:\.\d+)?)\s*(kB|MB|GB)\)")
_UNITS = {"kB": 1e-3, "MB": 1.0, "GB": 1e3}
_LAYER = re.compile(r"\((\d+)/(\d+)\): Calibrating")

Summarizer = Callable[[str], str | None]


class CommandError(RuntimeError):
    """A set-up command exited non-zero; the message carries its last lines and the log path."""


def say(message: str) -> None:
    print(message, flush=True)


class PipSummary:
    """Turns pip's line stream into a status line every few seconds and a closing line."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.collected = 0
        self.downloaded = 0
        self.cached = 0
        self.local = 0
        self.megabytes = 0.0
        self.last_status = clock()

    def status(self) -> str:
        return (
            f"pip: {self.collected} requirements seen, {self.downloaded} downloaded "
            f"({self.megabytes:.0f} MB), {self.cached + self.local} local or cached"
        )

    def __call__(self, line: str) -> str | None:
        message = self._read(line.strip())
        if message is None and self.clock() - self.last_status >= PIP_STATUS_EVERY_S:
            message = self.status()
        if message is not None:
            self.last_status = self.clock()
        return message

    def _read(self, text: str) -> str | None:
        """Count one pip line; return a message for the lines a person should see."""
        if text.startswith("Collecting "):
            self.collected += 1
        elif text.startswith("Using cached "):
            self.cached += 1
        elif text.startswith("Processing /"):
            self.local += 1
        elif text.startswith("Downloading ") and (size := _SIZE.search(text)):
            self.downloaded += 1
            self.megabytes += float(size.group(1)) * _UNITS[size.group(2)]
        elif text.startswith("Installing collected packages:"):
            count = len(text.split(":", 1)[1].split(","))
            return f"{self.status()}; installing {count} packages"
        elif text.startswith("Successfully installed"):
            return f"pip: installed {len(text.split()) - 2} packages"
        elif text.startswith("Found existing installation:") and self.collected == 0:
            return f"pip: removing {text.split(':', 1)[1].strip()}"
        elif text.startswith("ERROR"):
            return text
        return None


class ScriptSummary:
    """Shows a script's own `gearbox:` lines and GPTQ's per-layer progress (first per layer)."""

    def __init__(self) -> None:
        self.layer = ""

    def __call__(self, line: str) -> str | None:
        text = line.strip()
        if text.startswith("gearbox:"):
            return text.removeprefix("gearbox:").strip()
        if text.startswith(("Traceback", "ERROR")):
            return text
        layer = _LAYER.search(text)
        if layer and layer.group(0) != self.layer:
            self.layer = layer.group(0)
            return f"GPTQ layer {layer.group(1)}/{layer.group(2)}"
        return None


def log_tail(log: Path, lines: int = 25) -> str:
    text = log.read_text(errors="replace").replace("\r", "\n")
    kept = [ln for ln in text.splitlines() if ln.strip()]
    return "\n".join(kept[-lines:])


def run_logged(
    cmd: list[str], log: Path, summarize: Summarizer, env: Mapping[str, str] | None = None
) -> None:
    """Run `cmd`, append its output to `log`, print summaries; raise CommandError on non-zero."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = last_print = time.monotonic()
    with log.open("ab") as sink:
        sink.write(f"\n$ {' '.join(cmd)}\n".encode())
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL
        )
        assert proc.stdout is not None
        pending = b""
        while True:
            ready, _, _ = select.select([proc.stdout], [], [], HEARTBEAT_S)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                sink.write(chunk)
                sink.flush()  # the log stays readable while the step runs
                *lines, pending = re.split(rb"[\r\n]", pending + chunk)
                for raw in lines:
                    if (message := summarize(raw.decode(errors="replace"))) is not None:
                        say(f"      {message}")
                        last_print = time.monotonic()
            if time.monotonic() - last_print >= HEARTBEAT_S:
                say(f"      ... still working ({time.monotonic() - start:.0f} s)")
                last_print = time.monotonic()
        code = proc.wait()
    if code != 0:
        raise CommandError(
            f"`{' '.join(cmd[:4])} ...` exited with {code}; last lines:\n"
            f"{log_tail(log)}\nfull log: {log}"
        )


def capture(cmd: list[str], env: Mapping[str, str] | None = None) -> str:
    """Run a short check command and return its stdout; raise CommandError with its output."""
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise CommandError(f"`{' '.join(cmd)}` failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return done.stdout


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment, offline for the Hugging Face libraries, unbuffered output."""
    env = dict(os.environ)
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "VLLM_NO_USAGE_STATS": "1",
        }
    )
    env.update(extra or {})
    return env
