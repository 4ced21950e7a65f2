"""One client's long prompts against the accuracy check budget (issue 22, item 4;
docs/accuracy.md "Live checks").

A check costs what its prompt costs, and the check budget is dollars per hour per data plane:
a client whose prompts are 4,000 tokens would spend it for everyone. Ten clients ask short math
questions; one more sends 4,000-token math prompts as 10% of the traffic. The checks on the
normal clients' answers must keep flowing: within 10% (`refit.max_client_share`) of the run
without that client, whether it is identified (its share of the dollars) or anonymous (the
prompt token cap, `accuracy_check.max_input_tokens`).
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from contracts.routing_table import RoutingTable
from data_plane.upstream.port import UpstreamRequest
from tests.component.data_plane import conftest as component
from tests.component.data_plane.conftest import Harness, MakeHarness
from tests.component.data_plane.fakes import FakeResponse, chat_json, two_pair_table
from tests.support.waiting import eventually

make_harness = component.make_harness  # the component harness: create_app, a FakeUpstream
FP16, INT4 = "http://fp16-a", "http://int4-a"
BUDGET_USD = 0.2  # per hour: about 240 normal checks at fp16's prices ($4 / $8 per Mtok)
NORMAL = 300  # requests from ten clients; the long-prompt client adds one per nine
LONG = "Add the numbers in this ledger and answer with the total. " + "7 " * 8_000  # 4,000 tokens
SHORT = "Show the sum only. " * 42  # 200 tokens with the question
OUTCOMES = ("agree", "disagree", "undecided", "error", "dropped", "over_budget")
CAPPED = ("client_capped", "too_long")


def _answer(req: UpstreamRequest) -> FakeResponse:
    """An engine that answers 12 and counts the prompt's tokens as the data plane does."""
    prompt = orjson.loads(req.body)["messages"][0]["content"]
    return FakeResponse(body=chat_json("12", prompt_tokens=len(prompt) // 4, completion_tokens=2))


def _table(**checks: Any) -> RoutingTable:
    policy = {"accuracy_check": {"sample_rate": 1.0, "max_usd_per_hour": BUDGET_USD, **checks}}
    return two_pair_table([FP16], [INT4], policy=policy)


async def _ask(h: Harness, content: str, client: str | None) -> None:
    body = {
        "model": "fam@int4",
        "messages": [{"role": "user", "content": content}],
        "temperature": 0,
        "max_tokens": 16,
    }
    headers = {"X-Task-Category": "math"} | ({"x-t": client} if client else {})
    resp = await h.client.post("/v1/chat/completions", data=json.dumps(body), headers=headers)
    assert resp.status == 200, await resp.text()


def _outcomes(h: Harness, names: tuple[str, ...]) -> float:
    return sum(
        h.metric("gearbox_accuracy_checks_total", pair="fam@int4", category="math", outcome=o)
        for o in names
    )


async def _normal_checks(h: Harness, long_client: str | None, long_prompts: bool) -> int:
    """Send the run; the checks sent for the normal clients' answers (re-asks on fp16 of
    their short prompts)."""
    sent = 0
    for i in range(NORMAL):
        await _ask(h, f"What is 5 + 7? (question {i}) {SHORT}", f"client-{i % 10}")
        sent += 1
        if long_prompts and i % 9 == 8:
            await _ask(h, LONG, long_client)
            sent += 1
    await eventually(
        lambda: _outcomes(h, OUTCOMES + CAPPED) == sent, timeout_s=20, what="every check decided"
    )
    reasks = [r for r in h.upstream.requests if r.url.startswith(FP16)]
    return sum(b"ledger" not in r.body for r in reasks)


@pytest.mark.parametrize(
    ("case", "long_client", "checks"),
    [
        ("identified, token cap", "long", {}),
        ("identified, its share of the dollars alone", "long", {"max_input_tokens": 8192}),
        ("anonymous, token cap", None, {}),
    ],
)
async def test_one_clients_long_prompts_do_not_starve_the_other_clients_checks(
    make_harness: MakeHarness, case: str, long_client: str | None, checks: dict[str, Any]
) -> None:
    alone = await make_harness(_table(**checks), routes={FP16: _answer, INT4: _answer},
                               tenant_header="x-t")  # fmt: skip
    without = await _normal_checks(alone, None, long_prompts=False)
    assert 150 <= without < NORMAL  # the budget binds: this is what the long prompts compete for
    h = await make_harness(_table(**checks), routes={FP16: _answer, INT4: _answer},
                           tenant_header="x-t")  # fmt: skip
    beside = await _normal_checks(h, long_client, long_prompts=True)
    assert beside >= 0.9 * without, case
    long_reasks = [r for r in h.upstream.requests if r.url.startswith(FP16) and b"ledger" in r.body]
    spent = h.metric("gearbox_accuracy_check_cost_usd_total", pair="fam@int4")
    long_usd = len(long_reasks) * (len(LONG) // 4 * 4.0 + 2 * 8.0) / 1e6
    assert long_usd <= 0.1 * BUDGET_USD  # at most its share of the dollars
    assert spent <= BUDGET_USD


async def test_without_the_token_cap_anonymous_long_prompts_spend_the_budget(
    make_harness: MakeHarness,
) -> None:
    """The hole the token cap closes, and what stays open: anonymous requests are not told
    apart, so with the cap raised above their prompts they spend most of the budget."""
    alone = await make_harness(_table(max_input_tokens=8192), routes={FP16: _answer, INT4: _answer},
                               tenant_header="x-t")  # fmt: skip
    without = await _normal_checks(alone, None, long_prompts=False)
    h = await make_harness(_table(max_input_tokens=8192), routes={FP16: _answer, INT4: _answer},
                           tenant_header="x-t")  # fmt: skip
    beside = await _normal_checks(h, None, long_prompts=True)
    assert beside < 0.5 * without
