"""Latency probes: pairs that refits made slower are measured again, so a refit can go back.

A pair refit slower loses the traffic that would show it recovered: routing now predicts it
too slow for most budgets. While the current table lists it in `refit.slowed`, this process
sends it one small request (`PROBE_MAX_TOKENS` tokens out) every `interval_s`, to its least
loaded endpoint that is not ejected, with the engine's API key, and counts the answer in the
latency feedback like a served one: judged on the answer's `usage` at the load it met, under
no client (probes are our own measurements, not a tenant's). The control plane's refit loop
then sees the pair as it is and refits it back when it is faster than the table says
(docs/control_plane.md "Latency feedback"). Never on a client's path; failures are counted.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from data_plane.domain import Candidate, CompiledPair, HealthView
from data_plane.engine_keys import EngineKeys
from data_plane.serving.usage import find_usage
from data_plane.table_store import TableStore
from data_plane.telemetry.feedback import FeedbackAggregator
from data_plane.upstream.port import (
    AttemptError,
    LimitReachedError,
    UpstreamClient,
    UpstreamRequest,
)

logger = logging.getLogger(__name__)
PROBE_MAX_TOKENS = 16
PROBE_LIMIT_S = 30.0  # a probe that takes longer is dropped (and counted as failed)
_PROMPT = "Reply with a short greeting."


class LatencyProbe:
    def __init__(
        self,
        upstream: UpstreamClient,
        store: TableStore,
        feedback: FeedbackAggregator,
        health: Callable[[], HealthView],
        clock: Callable[[], float],
        engine_keys: EngineKeys | None = None,
    ) -> None:
        self._upstream = upstream
        self._store = store
        self._feedback = feedback
        self._health = health
        self._clock = clock
        self._keys = engine_keys
        self.sent = 0
        self.failed = 0

    async def probe_once(self) -> int:
        """One probe of every slowed pair of the current table; returns how many answered."""
        table = self._store.current
        if table is None:
            return 0
        answered = 0
        for pair in table.slowed_pairs:
            answered += await self._probe(table.version, pair)
        return answered

    async def _probe(self, version: int, pair: CompiledPair) -> bool:
        view = self._health()
        live = [e for e in pair.endpoints if e.id not in view.open_endpoints]
        if not live:
            return False
        endpoint = min(live, key=lambda e: view.load.get(e.id, 0.0))
        body = {
            "model": pair.served_model_name,
            "max_tokens": PROBE_MAX_TOKENS,
            "messages": [{"role": "user", "content": _PROMPT}],
        }
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        auth = self._keys.authorization(endpoint.id, pair.pair) if self._keys else None
        if auth is not None:
            headers["Authorization"] = auth
        url = endpoint.url + "/v1/chat/completions"
        load = view.load.get(endpoint.id, 0.0) + 1.0
        self.sent += 1
        started = self._clock()
        request = UpstreamRequest(url, json.dumps(body).encode(), headers, PROBE_LIMIT_S)
        try:
            resp = await self._upstream.send(request)
            try:
                raw = await resp.read()
            finally:
                resp.close()
        except (AttemptError, LimitReachedError):
            self.failed += 1
            return False
        latency_s = self._clock() - started
        usage = find_usage(raw) if resp.status == 200 else None
        if usage is None:
            self.failed += 1
            return False
        tokens = (usage.input_tokens, usage.output_tokens)
        cand = Candidate(pair, (endpoint,), *tokens, 0.0, 0.0, 0.0, load=load)
        self._feedback.observe(version, cand, (latency_s, None), tokens)
        return True

    async def run(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await self.probe_once()
