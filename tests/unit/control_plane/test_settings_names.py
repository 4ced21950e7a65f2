"""The control plane's grouped settings keep every flat name: each documented variable sets
its knob, the settings table lists every knob, and errors name the variable."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from contracts.knobs import KnobSpec, UnknownKnobsError, knob_name, knobs
from control_plane.cli import run
from control_plane.settings import RENAMED, ControlPlaneSettings, PublisherOptions
from tests.docs.repo_text import REPO_ROOT, section
from tests.support.knob_values import other_raw_value, value_at

KNOBS = knobs(ControlPlaneSettings)
_DOCS = [*sorted((REPO_ROOT / "docs").glob("*.md")), REPO_ROOT / "README.md"]
_SPECIAL = {
    "server_admin_token": "a-token-of-24-characters",
    "redis_key_prefix": "other",
    "data_plane_url": "http://dp.example:8080",
}


@pytest.mark.parametrize("spec", KNOBS, ids=[s.flat for s in KNOBS])
def test_every_environment_name_sets_its_knob(
    spec: KnobSpec, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    special = {**_SPECIAL, "policy_file": str(tmp_path / "policy.yaml")}
    default = value_at(ControlPlaneSettings(), spec.path)
    raw = other_raw_value(ControlPlaneSettings, spec, default, special)
    for env in spec.env:
        with monkeypatch.context() as m:
            m.setenv(env.upper(), raw)
            got = value_at(ControlPlaneSettings(), spec.path)
        assert got != default, f"{env.upper()} did not set {'.'.join(spec.path)}"


def test_every_documented_name_is_a_knob_and_every_knob_is_documented() -> None:
    text = "\n".join(p.read_text(encoding="utf-8") for p in _DOCS)
    documented = set(re.findall(r"\bGEARBOX_CP_[A-Z0-9_]*[A-Z0-9]\b", text))
    table = section(REPO_ROOT / "docs/control_plane.md", "Settings (`GEARBOX_CP_*`)")
    for row in table.splitlines():
        if row.startswith("| `"):
            cell = row.split(" | ")[0]
            documented |= {"GEARBOX_CP_" + n for n in re.findall(r"`([A-Z][A-Z0-9_]*)`", cell)}
    env = {e.upper() for s in KNOBS for e in s.env}
    example_typo = {"GEARBOX_CP_HISTORY_LIMITS"}  # named as what fails at startup
    old = {f"GEARBOX_CP_{name.upper()}" for name in RENAMED}  # named as what still works
    assert sorted(documented - env - example_typo - old) == []
    assert sorted(env - documented) == []


def test_keys_groups_and_error_names() -> None:
    s = ControlPlaneSettings.model_validate(
        {"publish_history_limit": 3, "build_allow_partial": True}
    )
    assert (s.publish.history_limit, s.build.allow_partial) == (3, True)
    assert ControlPlaneSettings(publish=PublisherOptions(lock_wait_s=1)).publish.lock_wait_s == 1
    with pytest.raises(ValidationError) as err:
        ControlPlaneSettings.model_validate({"publish_lock_ttl_s": 0})
    loc = tuple(err.value.errors()[0]["loc"])
    assert knob_name(ControlPlaneSettings, loc) == "publish_lock_ttl_s"
    with pytest.raises(ValidationError, match="extra"):
        ControlPlaneSettings.model_validate({"publish": {"ttl_s": 1}})


def test_an_unknown_variable_fails_with_the_closest_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GEARBOX_CP_HISTORY_LIMITS", "3")
    monkeypatch.setenv("GEARBOX_CP_NOPE", "1")
    with pytest.raises(UnknownKnobsError) as err:
        ControlPlaneSettings()
    assert err.value.problems == (
        (
            "GEARBOX_CP_HISTORY_LIMITS",
            "no such setting; did you mean GEARBOX_CP_PUBLISH_HISTORY_LIMIT?",
        ),
        ("GEARBOX_CP_NOPE", "no such setting, and none has a similar name"),
    )
    assert run(["build", "r.json", "-o", "-"]) == 1  # before any file is read
    assert capsys.readouterr().err == (
        "error: invalid settings: GEARBOX_CP_HISTORY_LIMITS: no such setting; did you mean "
        "GEARBOX_CP_PUBLISH_HISTORY_LIMIT?; "
        "GEARBOX_CP_NOPE: no such setting, and none has a similar name\n"
    )


def test_old_names_still_work_for_one_release_and_are_printed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("GEARBOX_CP_HISTORY_LIMIT", "4")
    monkeypatch.setenv("GEARBOX_CP_PRUNE_DOMINATED", "false")
    s = ControlPlaneSettings(admin_token="a-token-of-24-characters")  # type: ignore[call-arg]
    assert (s.publish.history_limit, s.build.prune) == (4, False)
    assert s.server.admin_token is not None
    assert run(["build", str(tmp_path / "missing.json"), "-o", "-"]) == 1
    assert capsys.readouterr().err.splitlines()[:2] == [
        "warning: GEARBOX_CP_HISTORY_LIMIT is renamed GEARBOX_CP_PUBLISH_HISTORY_LIMIT",
        "warning: GEARBOX_CP_PRUNE_DOMINATED is renamed GEARBOX_CP_BUILD_PRUNE",
    ]
    monkeypatch.setenv("GEARBOX_CP_HISTORY_LIMIT", "0")  # a bad value under the old name
    assert run(["build", str(tmp_path / "missing.json"), "-o", "-"]) == 1
    assert capsys.readouterr().err == (
        "error: invalid settings: GEARBOX_CP_PUBLISH_HISTORY_LIMIT: Input should be greater "
        "than or equal to 1 (GEARBOX_CP_HISTORY_LIMIT is renamed GEARBOX_CP_PUBLISH_HISTORY_LIMIT; "
        "GEARBOX_CP_PRUNE_DOMINATED is renamed GEARBOX_CP_BUILD_PRUNE)\n"
    )
