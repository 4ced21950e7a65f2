"""inbound.py: one request read once: facts, budget and the forwarded body from one object."""

from __future__ import annotations

import json

import pytest

from data_plane.errors import InvalidBudget, InvalidRequest
from data_plane.request.inbound import read_request
from tests.unit.data_plane.tables import fleet


def _raw(doc: object) -> bytes:
    return json.dumps(doc).encode()


CHAT = {"model": "auto", "messages": [{"role": "user", "content": "what is 2 + 2?"}]}
TABLE = fleet()

COMPLETION = {"model": "auto", "prompt": "Once upon a time", "max_tokens": 7}


def test_either_reads_a_completions_body_by_its_prompt() -> None:
    inbound = read_request(_raw(COMPLETION), "either", {}, TABLE)
    assert inbound.parsed.input_chars == len("Once upon a time")
    assert inbound.parsed.max_output_tokens == 7


def test_either_reads_a_chat_body_and_words_errors_as_chat() -> None:
    assert read_request(_raw(CHAT), "either", {}, TABLE).parsed.input_chars == len("what is 2 + 2?")
    with pytest.raises(InvalidRequest) as err:
        read_request(_raw({"model": "auto"}), "either", {}, TABLE)
    assert err.value.param == "messages"


def test_the_body_is_judged_before_the_headers() -> None:
    with pytest.raises(InvalidRequest):
        read_request(b"{", "chat", {"X-Min-Accuracy": "95"}, TABLE)
    with pytest.raises(InvalidBudget):
        read_request(_raw(CHAT), "chat", {"X-Min-Accuracy": "95"}, TABLE)


def test_budget_and_facts_come_from_the_same_read() -> None:
    inbound = read_request(_raw(CHAT), "chat", {"X-Latency-Budget-Ms": "1500"}, TABLE)
    assert inbound.budget.latency_s == pytest.approx(1.5)
    assert inbound.parsed.alias == "auto"
    assert inbound.facts.alias == "auto"
    assert 0.0 <= inbound.facts.complexity <= 1.0


def test_the_forwarded_body_is_rewritten_once_per_served_model() -> None:
    raw = b'{"messages": [{"role": "user", "content": "hi"}], "model" : "auto", "n": 1}'
    inbound = read_request(raw, "chat", {}, TABLE)
    first = inbound.body_for("served-a")
    assert (
        first == b'{"messages": [{"role": "user", "content": "hi"}], "model" : "served-a", "n": 1}'
    )
    assert inbound.body_for("served-a") is first
    assert b'"served-b"' in inbound.body_for("served-b")
