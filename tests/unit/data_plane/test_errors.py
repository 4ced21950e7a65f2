"""errors.py: one mapping from RouterError to OpenAI-style answers; upstream error bodies."""

from __future__ import annotations

import json
from typing import Any

import pytest

from data_plane.errors import (
    AllUpstreamsUnavailable,
    BudgetInfeasible,
    DeadlineExceeded,
    Internal,
    InvalidBudget,
    InvalidRequest,
    ModelNotFound,
    Overloaded,
    PayloadTooLarge,
    RouterError,
    Unauthorized,
    UpstreamError,
    normalize_upstream_error,
    to_openai_error,
)


@pytest.mark.parametrize(
    ("err", "status", "etype", "code", "param"),
    [
        (
            InvalidRequest("bad", code="invalid_json"),
            400,
            "invalid_request_error",
            "invalid_json",
            None,
        ),
        (
            InvalidRequest("bad", param="messages[0].content"),
            400,
            "invalid_request_error",
            "invalid_field",
            "messages[0].content",
        ),
        (
            InvalidBudget("bad", param="X-Min-Accuracy"),
            400,
            "invalid_request_error",
            "invalid_budget",
            "X-Min-Accuracy",
        ),
        (BudgetInfeasible("no"), 400, "invalid_request_error", "budget_infeasible", None),
        (Unauthorized("key"), 401, "invalid_request_error", "invalid_api_key", None),
        (ModelNotFound("none"), 404, "invalid_request_error", "model_not_found", "model"),
        (PayloadTooLarge("big"), 413, "invalid_request_error", "payload_too_large", None),
        (Overloaded("busy", retry_after_s=2), 429, "rate_limit_error", "router_overloaded", None),
        (UpstreamError("up"), 502, "server_error", "upstream_error", None),
        (
            AllUpstreamsUnavailable("down", retry_after_s=5),
            503,
            "server_error",
            "no_healthy_upstream",
            None,
        ),
        (DeadlineExceeded("late"), 504, "server_error", "budget_exhausted", None),
        (Internal("secret detail"), 500, "server_error", "internal_error", None),
    ],
)
def test_mapping_follows_the_style_table(
    err: RouterError, status: int, etype: str, code: str, param: str | None
) -> None:
    resp = to_openai_error(err)
    assert resp.status == status
    assert resp.body == {
        "error": {
            "message": resp.body["error"]["message"],
            "type": etype,
            "param": param,
            "code": code,
        }
    }
    assert isinstance(resp.body["error"]["message"], str)
    json.dumps(resp.body)  # serialisable as is


def test_internal_errors_never_leak_their_message() -> None:
    assert to_openai_error(Internal("db password is hunter2")).body["error"]["message"] == (
        "internal error"
    )
    assert to_openai_error(Internal()).body["error"]["message"] == "internal error"


@pytest.mark.parametrize(
    ("err", "headers"),
    [
        (Overloaded("busy", retry_after_s=0.2), (("Retry-After", "1"),)),
        (Overloaded("busy", retry_after_s=2.01), (("Retry-After", "3"),)),
        (AllUpstreamsUnavailable("down", retry_after_s=30), (("Retry-After", "30"),)),
        (AllUpstreamsUnavailable("down", retry_after_s=float("inf")), (("Retry-After", "1"),)),
        (DeadlineExceeded("late"), (("x-should-retry", "false"),)),
        (UpstreamError("up"), ()),
        (InvalidRequest("bad"), ()),
    ],
)
def test_headers(err: RouterError, headers: tuple[tuple[str, str], ...]) -> None:
    assert to_openai_error(err).headers == headers


def test_error_keeps_message_and_is_an_exception() -> None:
    err = InvalidBudget("X-Latency-Budget-Ms must be a number", param="X-Latency-Budget-Ms")
    assert str(err) == "X-Latency-Budget-Ms must be a number"
    assert isinstance(err, RouterError)
    assert to_openai_error(err).body["error"]["message"] == str(err)


def _env(message: str, etype: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": etype, "param": param, "code": code}}


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        # OpenAI / newer vLLM nested shape, vLLM sends the status as an int code
        (
            400,
            b'{"error": {"message": "too long", "type": "BadRequestError", "param": null, '
            b'"code": 400}}',
            _env("too long", "BadRequestError", None, "400"),
        ),
        # older vLLM flat shape
        (
            400,
            b'{"object": "error", "message": "bad temp", "type": "BadRequestError", '
            b'"param": "temperature", "code": 400}',
            _env("bad temp", "BadRequestError", "temperature", "400"),
        ),
        # OpenAI's own
        (
            404,
            b'{"error": {"message": "nope", "type": "invalid_request_error", "param": "model", '
            b'"code": "model_not_found"}}',
            _env("nope", "invalid_request_error", "model", "model_not_found"),
        ),
        # {"error": "text"}
        (429, b'{"error": "slow down"}', _env("slow down", "rate_limit_error", None, None)),
        # FastAPI default
        (
            422,
            b'{"detail": [{"loc": ["body"], "msg": "x"}]}',
            _env('[{"loc": ["body"], "msg": "x"}]', "invalid_request_error", None, None),
        ),
        (500, b'{"detail": "boom"}', _env("boom", "server_error", None, None)),
        # not JSON, empty, JSON without a message, bad UTF-8
        (502, b"Bad Gateway", _env("Bad Gateway", "server_error", None, None)),
        (503, b"", _env("upstream returned HTTP 503", "server_error", None, None)),
        (400, b'{"foo": 1}', _env('{"foo": 1}', "invalid_request_error", None, None)),
        (400, b"[1, 2]", _env("[1, 2]", "invalid_request_error", None, None)),
        (500, b"\xff\xfe", _env("\ufffd\ufffd", "server_error", None, None)),
        (
            400,
            b'{"error": {"type": 5, "message": null}}',
            _env("upstream returned HTTP 400", "invalid_request_error", None, None),
        ),
    ],
)
def test_normalize_upstream_error(status: int, body: bytes, expected: dict[str, Any]) -> None:
    assert normalize_upstream_error(status, body) == expected


def test_normalize_caps_huge_messages() -> None:
    out = normalize_upstream_error(500, b"x" * 100_000)
    assert len(out["error"]["message"]) == 2000
