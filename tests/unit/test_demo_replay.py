"""The demo's client comes back after a shed as the OpenAI SDKs do (`demo.replay`)."""

from __future__ import annotations

import httpx2 as httpx
import openai
import pytest

from demo.replay import MAX_RETRY_AFTER_S, _retry_after_s


def _error(status: int, headers: dict[str, str]) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(status, headers=headers, request=request)
    return openai.APIStatusError("shed", response=response, body=None)


@pytest.mark.parametrize(
    ("status", "headers", "wait_s"),
    [
        (429, {"x-should-retry": "true", "retry-after": "2"}, 2.0),
        (429, {"x-should-retry": "true", "retry-after": "600"}, MAX_RETRY_AFTER_S),
        (429, {"x-should-retry": "true", "retry-after": "soon"}, 1.0),
        (429, {"x-should-retry": "true"}, 1.0),
        (429, {}, None),  # a 429 that does not invite a retry (an engine's own) is an error
        (429, {"x-should-retry": "false", "retry-after": "1"}, None),
        (503, {"x-should-retry": "true", "retry-after": "1"}, None),  # the router retried it
    ],
)
def test_only_a_shed_that_invites_it_is_retried(
    status: int, headers: dict[str, str], wait_s: float | None
) -> None:
    assert _retry_after_s(_error(status, headers)) == wait_s
