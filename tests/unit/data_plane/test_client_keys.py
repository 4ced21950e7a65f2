"""client_keys.py: the API keys file maps each key to its tenant, classes and default class;
a bad file stops startup naming the entry and field, never a key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from data_plane.client_keys import PLAIN_KEY, KeyGrant, client_keys, grants_of, read_client_keys
from data_plane.settings import DataPlaneSettings
from data_plane.wiring import admission

SECRET = "sk-very-secret-0001"


def _write(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "keys.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def test_a_file_maps_keys_to_tenants_classes_and_defaults(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        [
            "plain-key-0001",
            {
                "key": SECRET,
                "tenant": "auth0|5f3c2a1b",
                "priorities": ["critical", "standard"],
                "default_priority": "standard",
            },
            {"key": "gateway-key-01", "trusted_gateway": True},
        ],
    )
    found = read_client_keys(path)
    assert [k.get_secret_value() for k, _ in found] == ["plain-key-0001", SECRET, "gateway-key-01"]
    assert found[0][1] == PLAIN_KEY
    assert found[1][1] == KeyGrant(
        "auth0|5f3c2a1b", frozenset({"critical", "standard"}), "standard"
    )
    assert found[2][1] == KeyGrant(trusted_gateway=True)
    settings = DataPlaneSettings.model_validate({"api_keys_file": path})
    assert settings.server.api_keys_file == path


def test_api_keys_and_the_file_add_up_and_the_file_grant_wins(tmp_path: Path) -> None:
    path = _write(tmp_path, [{"key": SECRET, "tenant": "acme"}])
    keys = client_keys((SecretStr("env-key-00001"), SecretStr(SECRET)), path)
    grants = grants_of(keys)
    assert len(keys) == 2
    assert sorted(g.tenant or "" for g in grants.values()) == ["", "acme"]


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("not json", "not a JSON document"),
        ({"k": SECRET}, "JSON list"),
        ([7], "entry 0 must be a key"),
        (["short"], "entry 0: each API key must be at least 8"),
        ([f"{SECRET} x"], "printable ASCII"),
        ([{"tenant": "acme"}], "entry 0.key must be a string"),
        ([{"key": SECRET, "tenants": "acme"}], "unknown field(s) ['tenants']"),
        ([{"key": SECRET, "tenant": "x" * 257}], "entry 0.tenant must be 1-256 bytes"),
        ([{"key": SECRET, "priorities": "critical"}], "entry 0.priorities must be a list"),
        ([{"key": SECRET, "default_priority": "Gold"}], "default_priority must be a priority"),
        (
            [{"key": SECRET, "priorities": ["critical"], "default_priority": "batch"}],
            "'batch' is not in its priorities",
        ),
        ([{"key": SECRET, "trusted_gateway": "yes"}], "trusted_gateway must be true or false"),
        (["plain-key-0001", SECRET, SECRET], "entry 2: the same key appears twice"),
    ],
)
def test_a_bad_keys_file_stops_startup_naming_the_entry_never_a_key(
    tmp_path: Path, content: object, problem: str
) -> None:
    path = _write(tmp_path, content)
    with pytest.raises(ValidationError) as err:
        DataPlaneSettings.model_validate({"api_keys_file": path})
    assert "api_keys_file" in str(err.value)
    assert problem in str(err.value)
    assert SECRET not in str(err.value)


def test_a_missing_keys_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="cannot read"):
        DataPlaneSettings.model_validate({"api_keys_file": tmp_path / "absent.json"})


def test_a_metrics_token_must_fit_a_header() -> None:
    with pytest.raises(ValidationError, match="printable ASCII"):
        DataPlaneSettings.model_validate({"metrics_token": "two words"})


def test_both_doors_read_the_same_grants_and_only_gateway_mode_trusts_the_objective(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path, [{"key": SECRET, "tenant": "acme"}])
    settings = DataPlaneSettings.model_validate(
        {"api_keys": "env-key-00001", "api_keys_file": path, "priority_header_trusted": True}
    )
    http, gateway = admission(settings), admission(settings, gateway=True)
    assert http.rights.grants == gateway.rights.grants
    assert len(http.rights.grants) == 2
    assert (http.rights.objective_trusted, gateway.rights.objective_trusted) == (False, True)
    assert http.rights.priority_header_trusted
