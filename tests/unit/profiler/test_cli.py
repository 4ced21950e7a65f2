"""cli: flags become a PairPlan; bad flags are named before anything is sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiler.cli import build_parser, plan_from_args
from profiler.errors import InputError
from profiler.run.profiling import builtin_evalsets
from profiler.settings import ProfilerSettings

BASE = [
    "run", "--endpoint", "http://127.0.0.1:8000/", "--model", "m", "--family", "gemma-3-270m",
    "--quantization", "bf16",
]  # fmt: skip


def _plan(*extra: str, settings: ProfilerSettings | None = None) -> object:
    args = build_parser().parse_args([*BASE, *extra])
    return plan_from_args(args, settings or ProfilerSettings(), args.model)


def test_flags_become_a_plan() -> None:
    plan = _plan(
        "--hourly-usd", "2.5", "--hardware", "1x H100", "--concurrency", "1,4",
        "--input-tokens", "64", "--output-tokens", "16", "--requests-per-level", "5",
        "--warmup", "1", "--open-loop-rps", "3", "--out", "r.json",
    )  # fmt: skip
    from profiler.run.profiling import PairPlan

    assert isinstance(plan, PairPlan)
    assert plan.pair == "gemma-3-270m@bf16"
    assert plan.endpoints == ("http://127.0.0.1:8000",)
    assert plan.hardware.name == "1x H100"
    assert plan.hardware.hourly_usd == 2.5
    assert plan.prices is None
    assert [(lv.concurrency, lv.open_loop_rps) for lv in plan.sweep] == [
        (1, None), (4, None), (1, 3.0),
    ]  # fmt: skip
    assert plan.sweep[0].total == 6
    assert plan.evalsets == builtin_evalsets()
    assert plan.out == Path("r.json")


def test_defaults_for_out_hardware_and_explicit_prices() -> None:
    settings = ProfilerSettings(hardware="lab-box", engine_version="0.9.9")
    plan = _plan("--input-price", "0.1", "--output-price", "0.3", settings=settings)
    from profiler.run.profiling import PairPlan

    assert isinstance(plan, PairPlan)
    assert plan.out == Path("gemma-3-270m@bf16.json")
    assert plan.hardware.name == "lab-box"
    assert plan.prices is not None
    assert plan.prices.output_usd_per_mtok == 0.3
    assert plan.engine_version == "0.9.9"


def test_defaults_measure_more_than_one_prompt_length() -> None:
    # One length would leave TTFT per input token unidentifiable (fitted as 0).
    plan = _plan("--hourly-usd", "1")
    from profiler.run.profiling import PairPlan

    assert isinstance(plan, PairPlan)
    assert len({lv.input_tokens for lv in plan.sweep}) >= 2


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ((), "price: pass --hourly-usd"),
        (("--input-price", "1"), "--input-price and --output-price go together"),
        (("--hourly-usd", "1", "--output-tokens", "1"), "--output-tokens: every value"),
        (("--hourly-usd", "1", "--concurrency", "0"), "--concurrency: every value"),
        (("--hourly-usd", "-1"), "hourly_usd"),
        (("--hourly-usd", "1", "--endpoint", "ftp://x"), "--endpoint 'ftp://x'"),
        (("--hourly-usd", "1", "--endpoint", "http://127.0.0.1:8000"), "the same URL"),
    ],
)
def test_bad_flags_are_named(extra: tuple[str, ...], message: str) -> None:
    with pytest.raises(InputError, match=message):
        _plan(*extra)


def test_bad_family_is_named() -> None:
    args = build_parser().parse_args([*BASE[:-3], "Gemma 3", "--quantization", "bf16"])
    args.hourly_usd = 1.0
    with pytest.raises(InputError, match="--family 'Gemma 3'"):
        plan_from_args(args, ProfilerSettings(), "m")


def test_integer_lists_are_checked_by_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args([*BASE, "--concurrency", "1,two"])
    assert caught.value.code == 2
    assert "expected integers like 1,2,4" in capsys.readouterr().err


def test_until_decided_takes_its_target_from_the_flags_or_a_policy(tmp_path: Path) -> None:
    from profiler.run.profiling import PairPlan

    plan = _plan("--hourly-usd", "1", "--until-decided", "--floors", "0.75", "--first-items", "50")
    assert isinstance(plan, PairPlan)
    assert plan.decide is not None
    assert plan.decide.floors == (0.75,)
    assert plan.decide.confidence == 0.9
    assert plan.first_items == 50
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "floor_confidence: 0.95\nmin_eval_items: 30\n"
        "categories: {chat: {min_accuracy: 0.8}, math: {min_accuracy: 0.7}}\n"
    )
    plan = _plan("--hourly-usd", "1", "--until-decided", "--policy", str(policy))
    assert isinstance(plan, PairPlan)
    assert plan.decide is not None
    assert (plan.decide.floors, plan.decide.confidence, plan.decide.min_items) == (
        (0.7, 0.8),
        0.95,
        30,
    )
    assert _plan("--hourly-usd", "1").decide is None  # type: ignore[attr-defined]


def test_bad_decision_flags_are_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"--confidence 1\.5"):
        _plan("--hourly-usd", "1", "--until-decided", "--confidence", "1.5")
    bad = tmp_path / "p.yaml"
    bad.write_text("floor_confidence: 2\n")
    with pytest.raises(InputError, match="floor_confidence"):
        _plan("--hourly-usd", "1", "--until-decided", "--policy", str(bad))
    with pytest.raises(SystemExit):
        build_parser().parse_args([*BASE, "--floors", "1.2"])
