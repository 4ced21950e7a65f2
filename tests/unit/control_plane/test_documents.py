"""Policy and report files: clear errors with the file path and the field path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.policy import Policy
from control_plane.build.documents import (
    DocumentError,
    field_path,
    load_policy_file,
    load_report_file,
    parse_json,
    parse_report,
)
from tests.unit.control_plane.factories import report_data


def test_field_path_formats_indexes() -> None:
    assert field_path(("latency", 2, "ttft_s", "p95")) == "latency[2].ttft_s.p95"
    assert field_path(()) == "(root)"


def test_yaml_and_json_policies_load(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("latency_quantile: 0.99\ncategories: {chat: {}}\n")
    (tmp_path / "p.json").write_text(json.dumps({"latency_quantile": 0.9}))
    (tmp_path / "policy").write_text("latency_quantile: 0.5\n")  # e.g. /dev/fd/63
    assert load_policy_file(tmp_path / "p.yaml").latency_quantile == 0.99
    assert load_policy_file(tmp_path / "p.json").latency_quantile == 0.9
    assert load_policy_file(tmp_path / "policy").latency_quantile == 0.5


def test_example_policy_loads() -> None:
    policy = load_policy_file(Path("examples/policy.yaml"))
    assert isinstance(policy, Policy)
    assert policy.categories["code"].typical_output_tokens == 512


def test_policy_errors_name_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("categories:\n  chat:\n    min_acuracy: 0.5\nlatency_quantile: 0.97\n")
    with pytest.raises(DocumentError) as err:
        load_policy_file(path)
    text = str(err.value)
    assert text.startswith(f"{path}: ")
    assert "categories.chat.min_acuracy: unknown field" in text
    assert "latency_quantile: " in text
    assert err.value.param == "categories.chat.min_acuracy"


@pytest.mark.parametrize(
    ("name", "text", "needle"),
    [
        ("p.yaml", "categories: [unclosed\n", "invalid YAML at line 2"),
        ("p.json", "{not json", "invalid JSON at line 1 column 2"),
        ("p.yaml", "", "(root): must be a mapping"),
        ("p.yaml", "- a list\n", "(root): must be a mapping"),
    ],
)
def test_policy_syntax_errors(tmp_path: Path, name: str, text: str, needle: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(DocumentError, match=None) as err:
        load_policy_file(path)
    assert needle in str(err.value)
    assert str(err.value).startswith(str(path))


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DocumentError) as err:
        load_policy_file(tmp_path / "absent.yaml")
    assert "cannot read: No such file or directory" in str(err.value)
    assert err.value.code == "unreadable"


def test_report_errors_name_the_field_path(tmp_path: Path) -> None:
    data = report_data()
    data["latency"][1]["ttft_s"]["p95"] = -1
    data["hardware"] = {"name": "x"}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    with pytest.raises(DocumentError) as err:
        load_report_file(path)
    assert "latency[1].ttft_s.p95: Input should be greater than or equal to 0" in str(err.value)
    assert err.value.param == "latency[1].ttft_s.p95"
    assert err.value.code == "invalid_field"


def test_report_model_level_errors_have_no_param() -> None:
    data = report_data(hourly_usd=None)
    with pytest.raises(DocumentError) as err:
        parse_report(data, "body")
    assert "(root): either prices or hardware.hourly_usd must be given" in str(err.value)
    assert err.value.param is None


def test_invalid_json_and_non_utf8() -> None:
    with pytest.raises(DocumentError) as err:
        parse_json(b"\xff\xfe", "body")
    assert err.value.code == "invalid_json"
    with pytest.raises(DocumentError, match="line 1 column 1"):
        parse_json(b"", "body")


def test_example_reports_load() -> None:
    paths = sorted(Path("examples/profiles").glob("*.json"))
    assert len(paths) == 6
    pairs = {load_report_file(p).pair for p in paths}
    assert "llama-3.1-70b-instruct@awq-int4" in pairs
