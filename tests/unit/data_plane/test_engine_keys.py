"""Engine API key settings: read from the environment or a file, checked at startup, and
never shown (repr, validation errors)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from data_plane.__main__ import build_parser
from data_plane.engine_keys import EngineKeys
from data_plane.settings import DataPlaneSettings

SECRET = "sk-engine-0123456789"


def test_env_key_is_read_and_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEARBOX_DP_ENGINE_KEYS_API_KEY", SECRET)
    settings = DataPlaneSettings()
    assert settings.engine_keys.api_key == SecretStr(SECRET)
    assert SECRET not in repr(settings)
    assert SECRET not in str(settings.model_dump())
    keys = EngineKeys.load(settings.engine_keys.api_key, None)
    assert keys is not None
    assert keys.authorization("a@b#0", "a@b") == f"Bearer {SECRET}"
    assert SECRET not in repr(keys)


def test_the_env_key_is_not_a_flag() -> None:
    help_text = build_parser().format_help() + str(build_parser()._actions)
    assert "--engine-api-key " not in help_text
    args = build_parser().parse_args(["serve", "--engine-keys-api-keys-file", "/x"])
    assert not hasattr(args, "engine_api_key")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("not json", "not a JSON document"),
        ('["k"]', "JSON object"),
        ('{"a@b": 7}', "must be a string"),
        (json.dumps({"a@b": f"{SECRET} x"}), "printable ASCII"),
        (json.dumps({"a@b": f"{SECRET}\r\nX-Evil: 1"}), "printable ASCII"),
        (json.dumps({"a@b": ""}), "non-empty"),
    ],
)
def test_a_bad_keys_file_stops_startup_without_echoing_keys(
    tmp_path: Path, content: str, problem: str
) -> None:
    path = tmp_path / "keys.json"
    path.write_text(content)
    with pytest.raises(ValidationError) as err:
        DataPlaneSettings.model_validate({"engine_api_keys_file": path})
    assert problem in str(err.value)
    assert SECRET not in str(err.value)


def test_a_missing_keys_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="cannot read"):
        DataPlaneSettings.model_validate({"engine_api_keys_file": tmp_path / "absent.json"})


def test_no_keys_means_no_header() -> None:
    assert EngineKeys.load(None, None) is None
