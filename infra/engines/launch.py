"""How one vLLM CPU engine is started: its command line, its environment, its memory check.

Pure functions over the layout and `/proc/meminfo` text; `engines.py start` execs the result.
Figures: one gemma-3-270m engine measured ~5.6 GiB RSS with a 1 GiB KV cache (docs/engines.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from layout import MARKER, MODEL_NAME, Layout, variant_spec

ENGINE_BASE_GIB = 4.8  # RSS of one engine without its KV cache (API server + core + worker)
HEADROOM_GIB = 1.0  # left for redis, the planes, the profiler and the OS
GIB = 1024**3


@dataclass(frozen=True, slots=True)
class ServeOptions:
    port: int
    kv_gib: int = 1  # vLLM reads VLLM_CPU_KVCACHE_SPACE as whole GiB
    eager: bool = True
    all_cpus: bool = False
    max_model_len: int = 2048
    served_model_name: str | None = None
    host: str = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class MemoryCheck:
    ok: bool
    needed_gib: float
    available_gib: float
    message: str


def needed_gib(engines: int, kv_gib: float) -> float:
    """Memory that `engines` engines with `kv_gib` KV cache each need, headroom included."""
    return engines * (ENGINE_BASE_GIB + kv_gib) + HEADROOM_GIB


def available_gib(meminfo: str) -> float:
    """MemAvailable from `/proc/meminfo` text, in GiB."""
    match = re.search(r"^MemAvailable:\s+(\d+)\s+kB", meminfo, re.MULTILINE)
    if match is None:
        raise ValueError("/proc/meminfo has no MemAvailable line")
    return int(match.group(1)) * 1024 / GIB


def check_memory(engines: int, kv_gib: float, meminfo: str) -> MemoryCheck:
    """Whether `engines` engines fit in what is available now, with a message for a person."""
    need, have = needed_gib(engines, kv_gib), available_gib(meminfo)
    what = f"{engines} vLLM engine(s) with a {kv_gib:g} GiB KV cache each"
    if have >= need:
        return MemoryCheck(True, need, have, f"memory ok: {what} need ~{need:.1f} GiB, "
                           f"{have:.1f} GiB available")  # fmt: skip
    return MemoryCheck(
        False,
        need,
        have,
        f"not enough memory: {what} need ~{need:.1f} GiB, but only {have:.1f} GiB is available "
        f"(MemAvailable). Stop other engines or large processes, or run `make demo-sim`, "
        f"the same flow on the engine simulator.",
    )


def default_served_name(variant: str) -> str:
    return f"{MODEL_NAME}-{variant}"


def serve_command(layout: Layout, variant: str, opts: ServeOptions) -> list[str]:
    """`vllm serve` argv for `variant` with the flags measured to work on this CPU."""
    _, extra = variant_spec(variant)
    argv = [
        str(layout.vllm_binary()),
        "serve",
        str(layout.checkpoint(variant)),
        "--served-model-name",
        opts.served_model_name or default_served_name(variant),
        "--host",
        opts.host,
        "--port",
        str(opts.port),
        "--max-model-len",
        str(opts.max_model_len),
        "--dtype",
        "bfloat16",
        *extra,
    ]
    if opts.eager:
        argv.append("--enforce-eager")
    return argv


def serve_env(opts: ServeOptions) -> dict[str, str]:
    """Variables set on top of the caller's environment. The KV space is always explicit."""
    env = {
        "VLLM_CPU_KVCACHE_SPACE": str(opts.kv_gib),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    if opts.all_cpus:
        # vLLM keeps a core for the API server by default; on 2 cores that halves the model.
        env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
    return env


def missing_checkpoint(layout: Layout, variant: str) -> str | None:
    """A message when the variant's checkpoint or the engine venv is not set up, else None."""
    needed = [layout.engine_venv, layout.checkpoint(variant)]
    for folder in needed:
        if not (folder / MARKER).is_file():
            setup = "python3 infra/engines/engines.py setup --variants "
            return f"{folder} is not set up; run `{setup}{variant_spec(variant)[0]}`"
    return None


def read_meminfo(path: Path = Path("/proc/meminfo")) -> str:
    return path.read_text()
