"""One smoke completion on every variant `make demo` would start on this machine, beside bf16
(whose smoke completion is test_real_engine.py's stack: the same `start_real_engines` call).

A module of its own so that xdist runs it on another worker than the real stack and the prefill
test (tests/conftest.py GROUPS: `heavy` and `heavy-variants`; at most two engines at a time).
The fixtures run the idempotent engine set-up and FAIL, never skip, when the set-up, the memory
check or the engine start fails. A variant is skipped only where the demo itself would drop it
up front, with the demo's reason (issue 35: `make test` passed on a machine where `make demo`
died on its W4A16 engine).
"""

from __future__ import annotations

import asyncio
from contextlib import ExitStack
from pathlib import Path

import pytest

from demo.fleet import FleetPair, check_engine_memory, engine_capabilities, start_real_engines
from demo.variants import DEMO_VARIANTS, REAL_VARIANTS, REPLACEMENTS, VariantPlan, plan_variants
from tests.e2e.test_real_engine import run_setup

pytestmark = [pytest.mark.engine, pytest.mark.timeout(1800)]

SMOKED_BY_THE_STACK = "bf16"


@pytest.fixture(scope="module")
def demo_problems() -> dict[str, str | None]:
    """Per variant, why this machine cannot serve it (None: it can), as demo.flow asks."""
    problem = check_engine_memory(1, 1)
    if problem is not None:
        pytest.fail(problem)
    run_setup(",".join(DEMO_VARIANTS))
    caps = asyncio.run(engine_capabilities(tuple(REAL_VARIANTS)))
    problems: dict[str, str | None] = caps["variants"]
    return problems


@pytest.fixture(scope="module")
def demo_plan(demo_problems: dict[str, str | None]) -> VariantPlan:
    """What `make demo` starts here: the same set-up, capabilities and plan as demo.flow."""
    return plan_variants(DEMO_VARIANTS, demo_problems)


@pytest.mark.parametrize("variant", [v for v in REAL_VARIANTS if v != SMOKED_BY_THE_STACK])
def test_every_variant_the_demo_starts_answers_a_smoke_completion(
    demo_plan: VariantPlan, demo_problems: dict[str, str | None], variant: str, tmp_path: Path
) -> None:
    """Also every stand-in that runs here: the demo starts one when a variant dies at its
    smoke completion (fp8kv on this AVX-512 machine without AMX)."""
    stand_in = any(variant in options for options in REPLACEMENTS.values())
    if variant not in demo_plan.start and not (stand_in and demo_problems[variant] is None):
        dropped = [d.line().strip() for d in demo_plan.dropped if d.variant == variant]
        reason = dropped[0] if dropped else demo_problems.get(variant)
        pytest.skip(reason or f"make demo does not start {variant} here")

    async def smoke() -> tuple[list[FleetPair], list[str]]:
        with ExitStack() as children:  # one engine at a time, as the memory check allows
            fleet, dropped = await start_real_engines(
                children, (variant,), tmp_path, 1, ("--all-cpus",)
            )
        return fleet, [d.line() for d in dropped]

    fleet, dropped = asyncio.run(smoke())
    assert dropped == []
    (pair,) = fleet
    assert pair.quantization == REAL_VARIANTS[variant]
    assert pair.smoke_tokens_per_s > 0
