"""The demo's client (`demo.replay`): it comes back after a shed as the OpenAI SDKs do, and
grades code items with tests by running them."""

from __future__ import annotations

import json

import httpx2 as httpx
import openai
import pytest
from aiohttp import web

from demo.replay import MAX_RETRY_AFTER_S, _retry_after_s, make_client, replay
from demo.report import build_report
from demo.workload import Job
from profiler.evals.accuracy import EvalItem
from tests.support.loopback import served


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


ADD = 'def add(a, b):\n    """Return the sum of a and b."""\n'
SUB = 'def sub(a, b):\n    """Return a minus b."""\n'
NAME = 'Say the name "Gearbox".'
# The engine's answer per prompt: `add` functionally right in other words than the regex
# expects, `sub` one off though the regex matches, the text-only item right by its text.
ANSWERS = {ADD: "    total=b+a\n    return total\n", SUB: "    return a - b - 1\n", NAME: "Gearbox"}
CODE_ITEMS = [
    {"id": "add", "prompt": ADD, "expected": r"a\s*\+\s*b", "tests": "assert add(2, 3) == 5\n"},
    {"id": "sub", "prompt": SUB, "expected": r"a\s*-\s*b", "tests": "assert sub(5, 3) == 2\n"},
]


async def _completions(request: web.Request) -> web.StreamResponse:
    """An OpenAI-compatible `/v1/completions` that answers each prompt with `ANSWERS`."""
    body = await request.json()
    text = ANSWERS[body["prompt"]]
    chunk = {"id": "c", "object": "text_completion", "created": 0, "model": "m"}
    choice = {"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}
    headers = {"x-route-pair": "g@int4"}
    if not body.get("stream"):
        return web.json_response({**chunk, "choices": [choice]}, headers=headers)
    response = web.StreamResponse(headers={**headers, "content-type": "text/event-stream"})
    await response.prepare(request)
    await response.write(f"data: {json.dumps({**chunk, 'choices': [choice]})}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def _job(index: int, item: EvalItem, stream: bool) -> Job:
    assert item.prompt is not None
    return Job(index, item.prompt, item.category, 32, "cheap", stream, (), 60.0, item)


@pytest.mark.parametrize("stream", [False, True])
async def test_the_replay_scores_code_items_by_their_tests(stream: bool) -> None:
    """The demo's accuracy column scores a code item as the profiler does
    (`contracts.code_tests`): an answer in other names passes its tests and counts right, an
    off-by-one fails them and counts wrong, whatever the regex says; an item without tests
    keeps its text scorer. On 9a8aa4a (text scoring) the report said 1/3 right, not 2/3."""
    coded = {"scorer": "regex", "category": "code"}
    items = [EvalItem.model_validate({**coded, **line}) for line in CODE_ITEMS]
    items.append(EvalItem.model_validate({"id": "name", "prompt": NAME, "expected": "Gearbox",
                                          "scorer": "contains", "category": "chat"}))  # fmt: skip
    jobs = [_job(i, item, stream) for i, item in enumerate(items)]
    async with served(_app()) as url:
        client = make_client(url)
        try:
            outcomes = await replay(client, jobs, concurrency=3)
        finally:
            await client.close()
    assert {str(o.job.item.id): o.correct for o in outcomes if o.job.item} == {
        "add": True,
        "sub": False,
        "name": True,
    }
    row = build_report("sim", TABLE, outcomes, {}).rows[0]
    assert (row.pair, row.known_answers, row.correct) == ("g@int4", 3, 2)


def _app() -> web.Application:
    app = web.Application()
    app.router.add_post("/v1/completions", _completions)
    return app


TABLE = {"version": 1, "entries": [{"pair": "g@int4", "precision_rank": 0}]}
