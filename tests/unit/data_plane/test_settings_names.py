"""The grouped settings keep every flat name: each documented variable sets its knob, the
settings table lists every knob, and flags, keys and errors use the same names."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr, ValidationError

from contracts.knobs import KnobSpec, knob_name, knobs
from data_plane.__main__ import build_parser, load_settings
from data_plane.settings import RENAMED, BreakerConfig, DataPlaneSettings
from tests.docs.repo_text import REPO_ROOT, section
from tests.support.knob_values import other_raw_value, value_at

KNOBS = knobs(DataPlaneSettings)
_DOCS = [*sorted((REPO_ROOT / "docs").glob("*.md")), REPO_ROOT / "README.md"]
# Values a generic rule cannot pick (format checked by a validator, or a file that must exist).
_SPECIAL = {
    "server_api_keys": "key-one-1,key-two-2",
    "engine_keys_api_key": "engine-secret-1",
    "discovery_dns_servers": "10.0.0.10:5353",
    "redis_key_prefix": "other",
    "otel_otlp_headers": "k=v",
    "otel_resource_attributes": "team=ml",
}


def _value(spec: KnobSpec) -> Any:
    return value_at(DataPlaneSettings(), spec.path)


@pytest.mark.parametrize("spec", KNOBS, ids=[s.flat for s in KNOBS])
def test_every_environment_name_sets_its_knob(
    spec: KnobSpec, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    keys_file = tmp_path / "keys.json"
    keys_file.write_text('{"*": "engine-secret-2"}', encoding="utf-8")
    client_keys = tmp_path / "client-keys.json"
    client_keys.write_text('["client-secret-2"]', encoding="utf-8")
    files = {
        "engine_keys_api_keys_file": str(keys_file),
        "server_api_keys_file": str(client_keys),
        "table_snapshot_path": str(tmp_path / "t.json"),
    }
    default = _value(spec)
    raw = other_raw_value(DataPlaneSettings, spec, default, {**_SPECIAL, **files})
    for env in spec.env:
        with monkeypatch.context() as m:
            m.setenv(env.upper(), raw)
            got = _value(spec)
        assert got != default, f"{env.upper()} did not set {'.'.join(spec.path)}"


def _documented_names() -> set[str]:
    """Every GEARBOX_DP_* and OTEL_* variable any page names, and every row of the settings
    table (names there are without the GEARBOX_DP_ prefix, but for a standard's variables)."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in _DOCS)
    names = set(re.findall(r"\bGEARBOX_DP_[A-Z0-9_]*[A-Z0-9]\b", text))
    names |= {n for n in re.findall(r"\b(OTEL_[A-Z0-9_]*[A-Z0-9])\b", text)}
    for row in section(REPO_ROOT / "docs/data_plane.md", "Run it").splitlines():
        if row.startswith("| `"):
            cell = row.split(" | ")[0]
            head = "" if "(standard, no prefix)" in cell else "GEARBOX_DP_"
            names |= {head + n for n in re.findall(r"`([A-Z][A-Z0-9_]*)`", cell)}
    return names


def test_every_documented_name_is_a_knob_and_every_knob_is_documented() -> None:
    env = {e.upper() for s in KNOBS for e in s.env}
    documented = _documented_names()
    # OTEL_EXPORTER etc. are documented without their GEARBOX_DP_ prefix (the table's rows).
    ours = {n for n in documented if n.startswith("OTEL_") and "GEARBOX_DP_" + n in env}
    # Named as what fails at startup: retired names, and the example of a typo.
    not_knobs = {f"GEARBOX_DP_{old.upper()}" for old in RENAMED} | {"GEARBOX_DP_PROT"}
    assert sorted(documented - ours - env - not_knobs) == []
    assert sorted(env - documented) == []


def test_flags_keys_and_error_names_are_the_flat_names() -> None:
    flags = build_parser().parse_args(
        ["serve", "--breaker-max-cooldown-s", "90", "--server-port", "1"]
    )
    s = load_settings(flags)
    assert (s.breaker.max_cooldown_s, s.server.port) == (90.0, 1)
    given = DataPlaneSettings.model_validate({"breaker_cooldown_s": 7, "redis_url": ""})
    assert (given.breaker.cooldown_s, given.redis.url) == (7.0, "")
    with pytest.raises(ValidationError) as err:
        DataPlaneSettings.model_validate({"breaker_window_s": "-1"})
    loc = tuple(err.value.errors()[0]["loc"])
    assert loc == ("breaker", "window_s")
    assert knob_name(DataPlaneSettings, loc) == "breaker_window_s"


def test_unknown_names_are_rejected_flat_and_nested() -> None:
    with pytest.raises(ValidationError, match="extra"):
        DataPlaneSettings.model_validate({"breaker_cooldown": 5})
    with pytest.raises(ValidationError, match="extra"):
        DataPlaneSettings.model_validate({"breaker": {"cooldown": 5}})


def test_keys_given_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEARBOX_DP_BREAKER_COOLDOWN_S", "3")
    monkeypatch.setenv("GEARBOX_DP_BREAKER_WINDOW_S", "20")
    flat = DataPlaneSettings()
    assert (flat.breaker.cooldown_s, flat.breaker.window_s) == (3.0, 20.0)
    mixed = DataPlaneSettings(breaker_cooldown_s=4)  # type: ignore[call-arg]
    assert (mixed.breaker.cooldown_s, mixed.breaker.window_s) == (4.0, 20.0)
    whole = DataPlaneSettings(breaker=BreakerConfig(cooldown_s=2))
    assert (whole.breaker.cooldown_s, whole.breaker.window_s) == (2.0, 10.0)  # a whole group


def test_secrets_stay_out_of_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEARBOX_DP_ENGINE_KEYS_API_KEY", "engine-secret-9")
    s = DataPlaneSettings()
    assert s.engine_keys.api_key == SecretStr("engine-secret-9")
    assert "engine-secret-9" not in repr(s)
