"""The shipped classifier's report: admin API (`GET /v1/classifier`), CLI and the build log."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from contracts.redis_keys import RedisKeys
from control_plane.cli import run
from tests.integration.control_plane.conftest import AUTH, MakeClient, documented, example_report
from tests.support.redis_server import RedisProcess
from tests.unit.control_plane.test_category_training import _profiler_eval_prompts

pytestmark = pytest.mark.integration
CATEGORIES = ["chat", "code", "extraction", "math", "reasoning"]


def _with_eval_prompts(name: str) -> dict[str, Any]:
    report = example_report(name)
    report["eval_prompts"] = [p.model_dump() for p in _profiler_eval_prompts()]
    return report


async def test_the_classifier_report_follows_the_pushed_eval_prompts(
    make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    client = await make_client()
    resp = await client.get("/v1/classifier")
    assert (await documented(resp, "GET", "/v1/classifier"))["error"]["code"] == "table_not_found"

    plain = example_report("llama-3.1-8b-instruct@fp16")
    assert (await client.post("/v1/profiles", json=plain, headers=AUTH)).status == 201
    assert (await client.post("/v1/tables", headers=AUTH)).status == 201
    report = await documented(await client.get("/v1/classifier"), "GET", "/v1/classifier")
    assert (report["shipped"], report["table_version"]) == (False, 1)

    pushed = _with_eval_prompts("llama-3.1-8b-instruct@fp16")
    assert (await client.post("/v1/profiles", json=pushed, headers=AUTH)).status == 200  # replaced
    with caplog.at_level(logging.INFO, logger="control_plane.runtime.table_service"):
        built = await (await client.post("/v1/tables", headers=AUTH)).json()
    assert any(w.startswith("classifier: trained on 417 prompts") for w in built["warnings"])
    assert "classifier: trained on 417 prompts (292 builtin, 125 profiles)" in caplog.text

    report = await documented(await client.get("/v1/classifier"), "GET", "/v1/classifier")
    assert (report["shipped"], report["table_version"]) == (True, 2)
    assert report["categories"] == CATEGORIES
    training = report["training"]
    assert training["sources"] == {"builtin": 292, "profiles": 125}
    assert training["cv_folds"] == 5
    assert [sum(row) for row in training["confusion"]] == [
        training["examples"][c] for c in CATEGORIES
    ]
    assert 0.75 <= training["cv_accuracy"] <= 1.0
    assert set(report["recall"]) == set(CATEGORIES)
    table = await (await client.get("/v1/tables/current")).json()
    assert table["classifier"]["model_sha256"] == report["model_sha256"]


def test_the_cli_prints_accuracy_and_the_confusion_matrix(
    redis_server: RedisProcess,
    redis_keys: RedisKeys,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Any,
) -> None:
    where = ["--redis-url", redis_server.url, "--redis-key-prefix", redis_keys.prefix]
    assert run(["classifier", *where]) == 1
    assert capsys.readouterr().err == "error: no table published yet\n"
    path = tmp_path / "report.json"
    path.write_text(json.dumps(_with_eval_prompts("llama-3.1-8b-instruct@fp16")))
    assert run(["publish", str(path), *where]) == 0
    assert "classifier: trained on 417 prompts" in capsys.readouterr().err
    assert run(["classifier", *where]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("table v1 classifier ")
    assert (
        lines[2] == "trained on 417 prompts (builtin 292, profiles 125); " + lines[2].split("; ")[1]
    )
    assert lines[3].startswith("cross-validated accuracy 0.")
    header, *rows = lines[4:]
    assert header.split()[-5:] == CATEGORIES
    assert [row.split()[0] for row in rows] == CATEGORIES
    assert all("recall" in row for row in rows)
