"""A GEARBOX_DP_ variable that names no knob stops the settings load: a typo gets the closest
name, a renamed knob its successor and what changed; other variables are not ours to judge."""

from __future__ import annotations

import pytest

from contracts.knobs import UnknownKnobsError, knobs, unknown_variables
from data_plane.__main__ import build_parser, load_settings
from data_plane.settings import RENAMED, DataPlaneSettings
from data_plane.settings.renamed import GAP_CHANGE
from tests.docs.repo_text import REPO_ROOT, section


def _problems(monkeypatch: pytest.MonkeyPatch, **env: str) -> dict[str, str]:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(UnknownKnobsError) as err:
        DataPlaneSettings()
    return dict(err.value.problems)


def test_a_typo_fails_with_the_closest_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    problems = _problems(monkeypatch, GEARBOX_DP_BREAKER_COOLDOWN_SECS="3")
    assert problems == {
        "GEARBOX_DP_BREAKER_COOLDOWN_SECS": (
            "no such setting; did you mean GEARBOX_DP_BREAKER_COOLDOWN_S?"
        )
    }


def test_the_renamed_slack_names_its_successor_and_what_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problems = _problems(monkeypatch, GEARBOX_DP_ENGINE_DEADLINE_SLACK_S="5")
    assert problems == {
        "GEARBOX_DP_ENGINE_DEADLINE_SLACK_S": f"renamed GEARBOX_DP_PROGRESS_SLACK_S: {GAP_CHANGE}"
    }


def test_every_unknown_variable_is_listed_once_in_name_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GEARBOX_DP_SERVER_PORT", "8081")  # a knob: fine beside the others
    problems = _problems(
        monkeypatch,
        GEARBOX_DP_NOPE="1",
        gearbox_dp_prot="1",
        GEARBOX_DP_ENGINE_DEADLINE_SLACK_S="5",
    )
    assert list(problems) == [
        "GEARBOX_DP_ENGINE_DEADLINE_SLACK_S",
        "GEARBOX_DP_NOPE",
        "gearbox_dp_prot",  # read case-insensitively, like the knobs
    ]
    assert problems["GEARBOX_DP_NOPE"] == "no such setting, and none has a similar name"
    # The closest is an old name still read (PORT): the answer names its knob's new name.
    assert problems["gearbox_dp_prot"] == "no such setting; did you mean GEARBOX_DP_SERVER_PORT?"


def test_flags_do_not_excuse_an_unknown_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEARBOX_DP_REDIS_URLS", "redis://elsewhere:6379/0")
    with pytest.raises(UnknownKnobsError, match="did you mean GEARBOX_DP_REDIS_URL"):
        load_settings(build_parser().parse_args(["serve", "--redis-url", ""]))


def test_every_accepted_name_and_unprefixed_variables_pass() -> None:
    names = [e.upper() for spec in knobs(DataPlaneSettings) for e in spec.env]
    assert "OTEL_TRACES_SAMPLER" in names  # a standard variable, read without our prefix
    others = ["GEARBOX_CACHE_DIR", "GEARBOX_DPX", "OTEL_SERVICE_NAMEX", "PATH"]
    assert unknown_variables(DataPlaneSettings, [*names, *others]) is None


def test_the_renamed_table_is_consistent_and_documented() -> None:
    flat = {spec.flat for spec in knobs(DataPlaneSettings)}
    assert RENAMED["engine_deadline_slack_s"].new == "progress_slack_s"
    assert RENAMED["engine_deadline_slack_s"].change == GAP_CHANGE
    run_it = section(REPO_ROOT / "docs/data_plane.md", "Run it")
    for old, renamed in RENAMED.items():
        assert old not in flat
        assert renamed.new in flat
        if renamed.still_read:
            continue  # listed in data_plane/settings/renamed.py, which the docs point to
        migration = f"`GEARBOX_DP_{old.upper()}` -> `GEARBOX_DP_{renamed.new.upper()}`"
        assert migration in run_it, f"docs/data_plane.md 'Run it' lacks: {migration}"
