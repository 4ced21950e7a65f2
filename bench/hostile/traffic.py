"""The hostile-tenant section's traffic (issue 22): normal clients asking short math questions
from an answer key, and one client whose requests are legal but odd, as 10% of the load.

The hostile client's requests come in a fixed cycle of ten (`HOSTILE_CYCLE`): five short
requests carrying `SLOW_MARKER`, which the engines answer `SLOW_S` later than their profile
says (the simulator's `slow_prompt_marker` fault: a kind of request the engine is slow on; 5%
of all requests, one client's slow outliers, in the same size bucket as the normal requests);
two essays without `max_tokens` (the engine writes `ESSAY_TOKENS`); one
high-temperature free-text request; one math question with a huge `max_tokens`; one prompt
heavy with images and tool schemas. Normal requests come from `NORMAL_KEYS` API keys, the
hostile ones from one key, so the data plane tells the clients apart (docs/data_plane.md,
"Tenants, priorities and admission").
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import aiohttp

from simulator.answer_key import KnownAnswer

CHEAP, PRICEY = "fam@int4", "fam@fp16"
BUDGET_MS = 500  # normal requests
NORMAL_KEYS = 12  # API keys the normal clients' requests rotate over
HOSTILE_EVERY = 9  # normal answers per hostile request: the hostile client sends 10%
ESSAY_TOKENS = 700  # what the engine writes without max_tokens
SLOW_MARKER, SLOW_S = "[slow path]", 0.3
PROMPTS = [f"Compute {a} * 3 + {a % 17} (case {a})." for a in range(5000)]
ANSWERS = {p: KnownAnswer("math", str(a * 3 + a % 17)) for a, p in enumerate(PROMPTS)}
_IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
_TOOLS = [
    {"type": "function", "function": {"name": f"tool_{i}", "parameters": {"x": "y" * 400}}}
    for i in range(4)
]


HOSTILE_CYCLE = (
    "slow outlier",
    "essay, no max_tokens",
    "slow outlier",
    "temperature 1.8 free text",
    "slow outlier",
    "essay, no max_tokens",
    "slow outlier",
    "max_tokens 8000",
    "slow outlier",
    "images and tools",
)


def _body(content: Any, **fields: Any) -> dict[str, Any]:
    return {"model": "auto", "messages": [{"role": "user", "content": content}]} | fields


def hostile_request(i: int) -> tuple[str, dict[str, Any], dict[str, str]]:
    """The hostile client's i-th request: (kind, body, headers besides its key)."""
    kind = HOSTILE_CYCLE[i % len(HOSTILE_CYCLE)]
    math_headers = {"X-Task-Category": "math"}
    if kind == "slow outlier":
        slow = _body(f"Look up record {i} {SLOW_MARKER}.", max_tokens=10)
        return kind, slow, {"X-Latency-Budget-Ms": "2000"}
    if kind == "essay, no max_tokens":
        # By pair name: the quality guard would otherwise re-ask the filler essay on the
        # dearer pair (its re-ask budget assumes the category's typical length).
        essay = _body("Write an essay about bicycles.", model=CHEAP)
        return kind, essay, {"X-Latency-Budget-Ms": "6000"}
    if kind == "temperature 1.8 free text":
        poem = _body("Write a poem about the sea.", temperature=1.8, top_p=1.0, max_tokens=200)
        return kind, poem, {"X-Latency-Budget-Ms": "4000"}
    if kind == "max_tokens 8000":
        return kind, _body(PROMPTS[-1 - i % 100], max_tokens=8000), math_headers
    heavy = [{"type": "text", "text": "Describe these."}, _IMAGE, _IMAGE]
    return kind, _body(heavy, tools=_TOOLS, max_tokens=10), {"X-Latency-Budget-Ms": "2000"}


class Traffic:
    """Closed-loop normal clients and, when `hostile`, one hostile request after every
    HOSTILE_EVERY normal answers (sent without waiting for it)."""

    def __init__(self, url: str, session: aiohttp.ClientSession, hostile: bool) -> None:
        self.url, self.session, self.hostile = url, session, hostile
        self.normal: list[bool] = []  # met the budget
        self.answered: list[bool] = []  # got a 200, in budget or not
        self.served: Counter[str] = Counter()  # normal answers per pair
        self.kinds: dict[str, Counter[int]] = {}  # hostile kind -> status -> count
        self._pending: set[asyncio.Task[None]] = set()
        self._sent = 0

    async def _post(self, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, str]:
        async with self.session.post(self.url, json=body, headers=headers) as resp:
            await resp.read()
            return resp.status, resp.headers.get("X-Route-Pair", "")

    async def _hostile(self, i: int) -> None:
        kind, body, headers = hostile_request(i)
        status, _ = await self._post(body, headers | {"Authorization": "Bearer hostile"})
        self.kinds.setdefault(kind, Counter())[status] += 1

    async def client(self) -> None:
        while True:
            n = self._sent
            self._sent += 1
            headers = {
                "X-Latency-Budget-Ms": str(BUDGET_MS),
                "X-Task-Category": "math",
                "Authorization": f"Bearer normal-{n % NORMAL_KEYS}",
            }
            started = time.monotonic()
            body = _body(PROMPTS[n % len(PROMPTS)], max_tokens=10)
            status, pair = await self._post(body, headers)
            took_s = time.monotonic() - started
            self.normal.append(status == 200 and took_s <= BUDGET_MS / 1000)
            self.answered.append(status == 200)
            self.served[pair] += status == 200
            if self.hostile and len(self.normal) % HOSTILE_EVERY == 0:
                task = asyncio.create_task(self._hostile(len(self.normal) // HOSTILE_EVERY))
                self._pending.add(task)
                task.add_done_callback(self._pending.discard)

    async def drain(self) -> None:
        await asyncio.gather(*self._pending, return_exceptions=True)
