"""__main__: settings from GEARBOX_PROF_*, one-line errors and exit codes, compare."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profiler.__main__ import main
from profiler.settings import ProfilerSettings

EXAMPLES = Path(__file__).parents[3] / "examples" / "profiles"
RUN = [
    "run", "--endpoint", "http://127.0.0.1:9", "--model", "m", "--family", "gemma-3-270m",
    "--quantization", "bf16", "--hourly-usd", "1", "--quiet",
]  # fmt: skip


def test_settings_come_from_the_gearbox_prof_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEARBOX_PROF_EVAL_CONCURRENCY", "3")
    monkeypatch.setenv("GEARBOX_PROF_CONTROL_PLANE_TOKEN", "s3cret")
    settings = ProfilerSettings()
    assert settings.eval_concurrency == 3
    assert settings.control_plane_token is not None
    assert settings.control_plane_token.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(settings)


def test_bad_settings_are_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GEARBOX_PROF_EVAL_CONCURRENCY", "0")
    assert main(RUN) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: GEARBOX_PROF_EVAL_CONCURRENCY:")
    assert len(err.strip().splitlines()) == 1


def test_an_unknown_variable_is_a_bad_setting_naming_the_closest(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GEARBOX_PROF_SEEDS", "7")
    assert main(RUN) == 2
    err = capsys.readouterr().err
    assert err == "error: GEARBOX_PROF_SEEDS: no such setting; did you mean GEARBOX_PROF_SEED?\n"


def test_push_without_token_fails_before_anything_is_measured(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("GEARBOX_PROF_CONTROL_PLANE_TOKEN", raising=False)
    # the endpoint is unreachable: reaching it first would say "cannot reach"
    assert main([*RUN, "--push", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "error: --push needs a token: --token or GEARBOX_PROF_CONTROL_PLANE_TOKEN"


def test_missing_price_is_a_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    args = [a for a in RUN if a not in ("--hourly-usd", "1")]
    assert main(args) == 2
    assert "price: pass --hourly-usd" in capsys.readouterr().err


def test_compare_prints_a_row_per_report(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    reports = sorted(EXAMPLES.glob("*.json"))
    assert main(["compare", *map(str, reports), "--plots", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    table = out.split("\npair ")[-1].split("\n\n")[0].splitlines()[2:]
    assert len(table) == len(reports)
    assert "Decisions at 90% confidence against floors 0.70, 0.80, 0.90" in out
    assert "llama-3.1-8b-instruct@awq-int4           246/300 in [0.788, 0.848] vs floor 0.80" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["accuracy_cost.png", "latency.png"]


def test_compare_names_a_broken_report(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "ProfileReport"}')
    assert main(["compare", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: family: Field required" in err
    assert "Traceback" not in err


def test_inprocess_refuses_until_decided(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["inprocess", "--model", "m", "--family", "f", "--quantization", "bf16",
            "--endpoint", "http://127.0.0.1:9", "--hourly-usd", "1", "--until-decided"]  # fmt: skip
    assert main(args) == 2
    assert "--until-decided: not supported by inprocess" in capsys.readouterr().err


def test_compare_with_traffic_ranks_undecided_pairs_by_what_they_would_move(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Chat traffic at 0.80 served as best effort: every pair undecided there would move all
    of it; the example reports carry no explicit prices, so no dollars (docs/profiler.md)."""
    cell = {
        "category": "chat", "floor": 0.8, "pair": "llama-3.1-70b-instruct@fp8",
        "requests": 50, "proven": 0, "input_tokens": 25_000, "output_tokens": 10_000,
        "cost_usd": 1.0,
    }  # fmt: skip
    traffic = tmp_path / "evidence.json"
    traffic.write_text(json.dumps({"window_s": 3600, "mix": [cell]}))
    reports = sorted(EXAMPLES.glob("*.json"))
    assert main(["compare", *map(str, reports), "--traffic", str(traffic)]) == 0
    out = capsys.readouterr().out
    section = out.split("Evidence where it moves traffic (50 requests over 3600 s)")[1]
    rows = section.splitlines()[1:]
    assert "249/300 floors 0.80: 100.0% of traffic, no price, ~13 more items" in rows[0]
    assert any("@awq-int4" in r and "246/300" in r for r in rows)  # more items: later


def test_an_item_budget_needs_until_decided(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*RUN, "--item-budget", "10"]) == 2
    assert "--item-budget: only with --until-decided" in capsys.readouterr().err
