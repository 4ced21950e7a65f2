"""Contracts: validation, hashing, schema export freshness."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from contracts.policy import Policy, PolicyError, load_policy
from contracts.redis_keys import RedisKeys
from contracts.schemas_export import SCHEMA_DIR, render_schemas


def test_exported_schemas_are_current() -> None:
    for name, text in render_schemas().items():
        on_disk = (SCHEMA_DIR / name).read_text(encoding="utf-8")
        assert on_disk == text, f"{name} is stale: run `python -m contracts export-schemas`"


def test_policy_unknown_keys_are_named_by_path() -> None:
    with pytest.raises(PolicyError) as err:
        load_policy({"categories": {"chat": {"min_acuracy": 0.5}}, "canary": 1})
    assert "categories.chat.min_acuracy: unknown field" in err.value.errors
    assert "canary: unknown field" in err.value.errors


def test_policy_bad_values_are_named_by_path() -> None:
    with pytest.raises(PolicyError) as err:
        load_policy({"latency_quantile": 0.97, "categories": {"chat": {"min_accuracy": 2}}})
    joined = " ".join(err.value.errors)
    assert "latency_quantile" in joined
    assert "categories.chat.min_accuracy" in joined


def test_policy_default_category_must_exist() -> None:
    with pytest.raises(PolicyError):
        load_policy({"default_category": "poetry"})


@pytest.mark.parametrize(
    "data",
    [{"shadow": {"enabled": True}}, {"canary_fraction": 1.5}, {"budget_mode": "lenient"}],
)
def test_policy_rejects(data: dict[str, Any]) -> None:
    with pytest.raises(PolicyError):
        load_policy(data)


def test_policy_defaults() -> None:
    policy = load_policy({})
    assert policy == Policy()
    assert policy.latency_quantile == 0.95
    assert set(policy.categories) >= {"chat", "code", "math"}


def test_policy_is_frozen() -> None:
    with pytest.raises(ValidationError):
        Policy().canary_fraction = 0.5  # type: ignore[misc]


def test_redis_keys_prefix() -> None:
    keys = RedisKeys("acme")
    assert keys.table_version(7) == "acme:rt:v:7"
    assert keys.table_current == "acme:rt:current"
    with pytest.raises(ValueError, match="prefix"):
        RedisKeys("bad prefix")


def test_a_table_written_before_the_accuracy_check_budget_keeps_its_hash() -> None:
    """`max_usd_per_hour`, `max_tokens`, `confidence`, `max_input_tokens` and `canary_looks`
    came after `accuracy_check`: a table whose accuracy checks were set without them (an older
    writer's) keeps its hash."""
    import json

    from contracts.routing_table import RoutingTable, compute_content_sha256
    from tests.unit.data_plane.tables import entry, table

    checks = {"sample_rate": 0.25, "max_checks_per_hour": 600, "min_checks": 100, "demote": True}
    current = table([entry("m", "fp16")], policy={"accuracy_check": checks})
    old = json.loads(current.model_dump_json())
    old["policy"]["accuracy_check"] = checks
    del old["demotions"]
    old["content_sha256"] = compute_content_sha256(old)  # what that writer stamped
    assert RoutingTable.model_validate(old).content_sha256 == current.content_sha256


def test_a_table_written_before_the_added_fields_keeps_its_hash() -> None:
    """Objective, ladder hysteresis, refit policy, refit provenance and the classifier (and its
    policy) came after 1.0: a table without them (an older writer's) still validates, and
    setting them changes it."""
    import hashlib
    import json

    from contracts.routing_table import RoutingTable, canonical_json, compute_content_sha256
    from tests.unit.data_plane.tables import entry, table

    current = table([entry("m", "fp16")])
    old = json.loads(current.model_dump_json())
    for key in (
        "objective",
        "ladder_hysteresis_ratio",
        "refit",
        "accuracy_check",
        "category_confidence",
        "doubt_category",
        "floor_confidence",
        "min_eval_items",
        "precision_formats",
    ):
        del old["policy"][key]
    for key in ("refit", "classifier", "fleet_baseline", "demotions"):
        del old[key]
    for item in old["entries"]:
        for key in (
            "accuracy_right",
            "accuracy_bound",
            "precision_format",
            "image_tokens",
            "tokenizer",
        ):
            del item[key]
        for key in (
            "load_levels",
            "ttft_load_s",
            "tpot_load_s",
            "ttft_per_input_load_s",
            "ttft_rmse_load_s",
            "tpot_rmse_load_s",
        ):
            del item["latency"][key]
    payload = {k: v for k, v in old.items() if k not in {"version", "created_at", "content_sha256"}}
    old["content_sha256"] = hashlib.sha256(canonical_json(payload).encode()).hexdigest()
    assert RoutingTable.model_validate(old).content_sha256 == current.content_sha256
    quality = table([entry("m", "fp16")], policy={"objective": "quality-first"})
    assert compute_content_sha256(quality) != current.content_sha256


def test_a_tokenizer_is_an_optional_entry_field_outside_the_old_hash() -> None:
    """A table without `tokenizer` (written before it) keeps its hash; one naming a file
    hashes differently and validates; a reference whose SHA-256 is not hex is refused."""
    import json

    from contracts.routing_table import RoutingTable, compute_content_sha256
    from tests.unit.data_plane.tables import entry, table

    current = table([entry("m", "fp16")])
    old = json.loads(current.model_dump_json())
    for item in old["entries"]:
        del item["tokenizer"]
    assert compute_content_sha256(old) == current.content_sha256
    named = json.loads(current.model_dump_json())
    named["entries"][0]["tokenizer"] = {"id": "/models/m/tokenizer.json", "sha256": "ab" * 32}
    named["content_sha256"] = compute_content_sha256(named)
    assert named["content_sha256"] != current.content_sha256
    read = RoutingTable.model_validate(named)
    assert read.entries[0].tokenizer is not None
    assert read.entries[0].tokenizer.sha256 == "ab" * 32
    named["entries"][0]["tokenizer"]["sha256"] = "not hex"
    with pytest.raises(ValidationError, match=r"tokenizer\.sha256"):
        RoutingTable.model_validate(named)


def test_a_tokenizer_s_template_is_optional_validated_and_hashed_when_present() -> None:
    """A tokenizer without `template` (written before it) keeps its hash; one with it hashes
    differently, validates, and reaches the compiled table's alias; a template out of range
    (a negative tools scale, a non-finite figure, an unknown field) is refused, naming it."""
    import json

    from contracts.routing_table import RoutingTable, compute_content_sha256
    from data_plane.decision.compile import compile_table
    from tests.unit.data_plane.tables import entry, table

    current = json.loads(table([entry("m", "fp16")]).model_dump_json())
    current["entries"][0]["tokenizer"] = {"id": "/models/m/tokenizer.json", "sha256": "ab" * 32}
    current["content_sha256"] = compute_content_sha256(current)
    read = RoutingTable.model_validate(current)
    assert compute_content_sha256(read) == current["content_sha256"]  # template: None
    gemma = {"fixed": 5.0, "per_message": 4.0, "tools_fixed": 0.0, "tools_scale": 0.0}
    current["entries"][0]["tokenizer"]["template"] = gemma
    assert compute_content_sha256(current) != read.content_sha256
    current["content_sha256"] = compute_content_sha256(current)
    measured = RoutingTable.model_validate(current)
    assert measured.entries[0].tokenizer is not None
    assert measured.entries[0].tokenizer.template is not None
    compiled = compile_table(measured)
    assert compiled.tokenizers["m"].template == measured.entries[0].tokenizer.template
    assert compute_content_sha256(measured) == current["content_sha256"]  # trims: False
    trimming = json.loads(json.dumps(current))
    trimming["entries"][0]["tokenizer"]["template"] = gemma | {"trims": True}
    assert compute_content_sha256(trimming) != current["content_sha256"]
    for field, value in (("tools_scale", -0.5), ("fixed", float("nan")), ("turns", 3)):
        wrong = json.loads(json.dumps(current))
        wrong["entries"][0]["tokenizer"]["template"] = gemma | {field: value}
        with pytest.raises(ValidationError, match=rf"tokenizer\.template\.{field}"):
            RoutingTable.model_validate(wrong)


def test_a_tokenizer_s_special_tokens_are_optional_validated_and_hashed_when_present() -> None:
    """A tokenizer without `special_tokens` (written before it) keeps its hash, null or
    absent; one with it hashes differently and reaches the compiled table's alias (absent: 0);
    a negative, fractional or huge figure is refused, naming it."""
    import json

    from contracts.routing_table import RoutingTable, compute_content_sha256
    from data_plane.decision.compile import compile_table
    from tests.unit.data_plane.tables import entry, table

    current = json.loads(table([entry("m", "fp16")]).model_dump_json())
    current["entries"][0]["tokenizer"] = {"id": "/models/m/tokenizer.json", "sha256": "ab" * 32}
    current["content_sha256"] = compute_content_sha256(current)
    read = RoutingTable.model_validate(current)
    assert compute_content_sha256(read) == current["content_sha256"]  # special_tokens: None
    assert compile_table(read).tokenizers["m"].special_tokens == 0
    current["entries"][0]["tokenizer"]["special_tokens"] = None
    assert compute_content_sha256(current) == read.content_sha256
    current["entries"][0]["tokenizer"]["special_tokens"] = 1
    assert compute_content_sha256(current) != read.content_sha256
    current["content_sha256"] = compute_content_sha256(current)
    measured = RoutingTable.model_validate(current)
    assert compute_content_sha256(measured) == current["content_sha256"]
    assert compile_table(measured).tokenizers["m"].special_tokens == 1
    for value in (-1, 1.5, 65):
        wrong = json.loads(json.dumps(current))
        wrong["entries"][0]["tokenizer"]["special_tokens"] = value
        with pytest.raises(ValidationError, match=r"tokenizer\.special_tokens"):
            RoutingTable.model_validate(wrong)


def test_a_table_written_before_the_json_rate_validates_both_ways() -> None:
    """`json_chars_per_token` (6a74426) came into entries without a place among the added
    defaults, so writers since hash it as null and writers before did not have it: a reader
    accepts either hash, and still refuses a table whose content was changed."""
    import json

    from contracts.routing_table import RoutingTable, compute_content_sha256
    from tests.unit.data_plane.tables import entry, table

    current = table([entry("m", "fp16")])
    assert RoutingTable.model_validate(json.loads(current.model_dump_json())) == current
    old = json.loads(current.model_dump_json())
    for item in old["entries"]:
        del item["json_chars_per_token"]
        del item["image_tokens"]
        del item["tokenizer"]
    old["content_sha256"] = compute_content_sha256(old)  # what that writer stamped
    assert old["content_sha256"] != current.content_sha256
    assert RoutingTable.model_validate(old).entries == current.entries
    first = old["entries"][0]["accuracy"]
    old["entries"][0]["accuracy"] = {category: 0.1 for category in first}
    with pytest.raises(ValidationError, match="content_sha256 does not match"):
        RoutingTable.model_validate(old)
