"""`python -m control_plane build` offline, and one-line errors with exit code 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.routing_table import RoutingTable
from control_plane.cli import run

REPORTS = sorted(str(p) for p in Path("examples/profiles").glob("*.json"))


def test_build_writes_a_valid_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "table.json"
    assert run(["build", *REPORTS, "--policy", "examples/policy.yaml", "-o", str(out)]) == 0
    table = RoutingTable.model_validate_json(out.read_text())
    assert table.version == 0
    printed = capsys.readouterr().out
    assert "llama-3.1-8b-instruct@fp8" in printed
    assert "pruned: llama-3.1-8b-instruct@int8-w8a8" in printed


def test_build_to_stdout_and_no_prune(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["build", *REPORTS, "--no-prune", "-o", "-"]) == 0
    captured = capsys.readouterr()
    table = RoutingTable.model_validate(json.loads(captured.out))
    assert len(table.entries) == 6
    assert "routing table v0" in captured.err


def test_build_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    data = json.loads(Path(REPORTS[0]).read_text())
    data["context_length"] = 3
    bad.write_text(json.dumps(data))
    assert run(["build", str(bad), "-o", str(tmp_path / "t.json")]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (f"error: {bad}: context_length: Input should be greater than or equal to 16")
    assert not (tmp_path / "t.json").exists()


def test_build_rejects_partial_unless_flagged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    partial = tmp_path / "partial.json"
    data = json.loads(Path(REPORTS[0]).read_text())
    data["provenance"]["partial"] = True
    partial.write_text(json.dumps(data))
    out = str(tmp_path / "t.json")
    assert run(["build", partial.as_posix(), "-o", out]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "provenance.partial" in err
    assert run(["build", partial.as_posix(), "-o", out, "--allow-partial"]) == 0


def test_bad_settings_and_usage(monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setenv("GEARBOX_CP_PUBLISH_HISTORY_LIMIT", "0")
    assert run(["history"]) == 1
    assert "GEARBOX_CP_PUBLISH_HISTORY_LIMIT" in capsys.readouterr().err
    monkeypatch.delenv("GEARBOX_CP_PUBLISH_HISTORY_LIMIT")
    monkeypatch.delenv("GEARBOX_CP_SERVER_ADMIN_TOKEN", raising=False)
    assert run(["serve"]) == 1
    assert "admin_token is required" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        run(["frobnicate"])
    assert usage.value.code == 2
