"""Names retired when each knob's name became its path (issue 31) still set their knob for
one release, as variable, flag and key, and the entry point logs the new name; a new name
given beside an old one wins. One test per kind of rename: a bare server name, a group's
alias, a standard variable's flag, and a field moved to a group of its own."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from contracts.knobs import KnobSpec, knobs, renamed_in_use, unknown_variables
from data_plane.__main__ import build_parser, load_settings, log_renamed, main, renamed_flags
from data_plane.settings import RENAMED, DataPlaneSettings
from tests.support.knob_values import other_raw_value, value_at

_SPECS = {s.flat: s for s in knobs(DataPlaneSettings)}
_STILL_READ = sorted(old for old, was in RENAMED.items() if was.still_read)
_SPECIAL = {
    "server_api_keys": "key-one-1,key-two-2",
    "engine_keys_api_key": "engine-secret-1",
    "discovery_dns_servers": "10.0.0.10:5353",
    "otel_otlp_headers": "k=v",
}


def _raw(spec: KnobSpec, tmp_path: Path) -> str:
    keys_file = tmp_path / "keys.json"
    keys_file.write_text('{"*": "engine-secret-2"}', encoding="utf-8")
    client_keys = tmp_path / "client-keys.json"
    client_keys.write_text('["client-secret-2"]', encoding="utf-8")
    files = {
        "engine_keys_api_keys_file": str(keys_file),
        "server_api_keys_file": str(client_keys),
        "table_snapshot_path": str(tmp_path / "t.json"),
    }
    default = value_at(DataPlaneSettings(), spec.path)
    return other_raw_value(DataPlaneSettings, spec, default, {**_SPECIAL, **files})


@pytest.mark.parametrize("old", _STILL_READ)
def test_every_old_name_still_sets_its_knob_as_variable_and_key(
    old: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    spec = _SPECS[RENAMED[old].new]
    raw = _raw(spec, tmp_path)
    wanted = value_at(DataPlaneSettings.model_validate({spec.flat: raw}), spec.path)
    assert wanted != value_at(DataPlaneSettings(), spec.path)
    assert value_at(DataPlaneSettings.model_validate({old: raw}), spec.path) == wanted
    if spec.env[0].startswith("gearbox_dp_"):  # a standard's variables never had our prefix
        monkeypatch.setenv(f"GEARBOX_DP_{old.upper()}", raw)
        assert value_at(DataPlaneSettings(), spec.path) == wanted


def test_a_bare_server_name_sets_the_server_group_and_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GEARBOX_DP_PORT", "8181")
    monkeypatch.setenv("GEARBOX_DP_ENGINE_DEADLINE_FACTOR", "5")
    s = DataPlaneSettings()
    assert (s.server.port, s.progress.factor) == (8181, 5.0)
    assert renamed_in_use(DataPlaneSettings) == (
        ("GEARBOX_DP_ENGINE_DEADLINE_FACTOR", "GEARBOX_DP_PROGRESS_FACTOR"),
        ("GEARBOX_DP_PORT", "GEARBOX_DP_SERVER_PORT"),
    )


def test_the_new_name_wins_over_the_old_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEARBOX_DP_TENANT_TOP_N", "5")
    monkeypatch.setenv("GEARBOX_DP_ADMISSION_TENANT_TOP_N", "7")
    assert DataPlaneSettings().admission.tenant_top_n == 7
    assert DataPlaneSettings.model_validate({"port": 1, "server_port": 2}).server.port == 2
    args = build_parser().parse_args(["serve", "--port", "3", "--server-port", "4"])
    assert load_settings(args).server.port == 4


def test_old_flags_set_their_knob_hidden_from_help(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(
        ["serve", "--port", "9", "--otel-traces-sampler", "always_off", "--redis-url", ""]
    )
    s = load_settings(args)
    assert (s.server.port, s.otel.sampler, s.redis.url) == (9, "always_off", "")
    assert renamed_flags(args) == [
        ("--otel-traces-sampler", "--otel-sampler"),
        ("--port", "--server-port"),
    ]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    shown = capsys.readouterr().out
    assert "--server-port" in shown
    assert "--port " not in shown
    assert "--otel-traces-sampler" not in shown


def test_each_old_name_given_is_logged_with_its_new_name(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("GEARBOX_DP_SNAPSHOT_PATH", "/tmp/t.json")
    args = build_parser().parse_args(["serve", "--tenant-header", "x-team"])
    assert load_settings(args).admission.tenant_header == "x-team"
    with caplog.at_level(logging.WARNING):
        log_renamed(args)
    assert [r.getMessage() for r in caplog.records] == [
        "setting GEARBOX_DP_SNAPSHOT_PATH is renamed GEARBOX_DP_TABLE_SNAPSHOT_PATH; "
        "the old name goes in the next release",
        "setting --tenant-header is renamed --admission-tenant-header; "
        "the old name goes in the next release",
    ]


def test_a_bad_value_under_an_old_name_says_which_name_it_is(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GEARBOX_DP_ENGINE_DEADLINE_FACTOR", "-1")
    assert main(["serve", "--port", "many"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "invalid setting server_port: Input should be a valid integer, unable to parse string "
        "as an integer",
        "invalid setting progress_factor: Input should be greater than or equal to 0",
        "note: GEARBOX_DP_ENGINE_DEADLINE_FACTOR is renamed GEARBOX_DP_PROGRESS_FACTOR",
        "note: --port is renamed --server-port",
    ]


def test_an_old_name_of_a_standard_variable_was_never_a_variable() -> None:
    err = unknown_variables(DataPlaneSettings, ["GEARBOX_DP_OTEL_TRACES_SAMPLER"])
    assert err is not None
    assert err.problems == (("GEARBOX_DP_OTEL_TRACES_SAMPLER", "renamed OTEL_TRACES_SAMPLER"),)


def test_the_moved_flow_knobs_keep_their_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEARBOX_DP_FLOW_QUEUE_MAX", "10")
    monkeypatch.setenv("GEARBOX_DP_ADMISSION_SHED", "false")
    s = DataPlaneSettings()
    assert (s.flow.queue_max, s.admission.shed) == (10, False)
