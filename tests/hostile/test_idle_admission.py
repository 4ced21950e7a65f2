"""Issue 32, finding 1 (docs/data_plane.md, "Flow control"): one client, strictly one request
at a time, default class, `X-Latency-Budget-Ms: 6100`, `max_tokens: 1000`, answers that stop
after about 20 tokens, on the table built from the shipped 8B example profiles: nothing is
ever in flight when a request arrives, so none is refused. On 95376ca the first got 200 and
the next ones 429 router_overloaded: a pair that meets the request only alone sustains 1, the
standard class could fill 0.75 of it, and each request counted its predicted seconds for
1,000 tokens as offered work, refusals included."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from simulator import SimFleetConfig, run_fleet
from simulator.answer_key import KnownAnswer
from tests.hostile.test_engine_blame import chat, data_plane
from tests.hostile.test_tenant_burst import ask
from tests.reliability.stack import CHEAP, PRICEY, metric, served_name, sim_pair
from tests.support.virtual_time import on_virtual_time

pytestmark = pytest.mark.integration

PROMPT = "Say hello to the new team in one friendly sentence."
ANSWER = "Hello, team: welcome aboard, we are glad to have you here!"  # 15 tokens or so
REQUESTS = 40


@on_virtual_time
async def test_a_sequential_client_on_an_idle_fleet_is_never_refused(tmp_path: Path) -> None:
    config = SimFleetConfig(pairs=[sim_pair(CHEAP), sim_pair(PRICEY)])
    answers = {PROMPT: KnownAnswer("chat", ANSWER)}
    async with run_fleet(config, answers=answers) as fleet:
        urls = {q: [fleet.url(served_name(q))] for q in (CHEAP, PRICEY)}
        async with (
            data_plane(urls, tmp_path) as (url, app),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
        ):
            body = chat(PROMPT, max_tokens=1000)
            statuses = []
            for _ in range(REQUESTS):
                status, _, answer = await ask(session, url, body, {"X-Latency-Budget-Ms": "6100"})
                statuses.append(status)
                if status == 200:
                    assert answer["choices"][0]["finish_reason"] == "stop"
            assert statuses == [200] * REQUESTS
            shed = {"tenant": "anonymous", "priority": "standard"}
            assert metric(app, "gearbox_tenant_shed_total", **shed) == 0
