"""Background scrape of each engine's vLLM `/metrics` for its queue depth (waiting + running).

Counts only the series of the pair's served model name (an engine may serve several models),
and hands the tracker how many of this process's own requests the count includes, so they are
not counted twice. Runs only when enabled (interval > 0, the default). Each scrape is bounded
by a timeout; a failed scrape leaves the last value in place, so a flaky engine never blanks
its load. Never on the request path, but on its event loop: scrapes go through the same lean
`UpstreamClient` as engine calls (a pool of their own), so each takes the requests being
served as little time as one engine call does (docs/data_plane.md, "Observability").
The page is read as a bounded stream that keeps only the two queue series (`metrics_page`): a
page past its limit is a scrape error, counted and logged, never a stall ("Engine pages").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import NamedTuple

from prometheus_client.parser import text_string_to_metric_families

from data_plane.domain import CompiledEndpoint
from data_plane.resilience.endpoint_load import LoadTracker
from data_plane.sync.metrics_page import (
    DEFAULT_MAX_PAGE_BYTES,
    PageRefusals,
    PageRefusedError,
    read_series,
)
from data_plane.upstream.port import (
    AttemptError,
    LimitReachedError,
    UpstreamClient,
    UpstreamRequest,
    limit_until,
    within,
)

logger = logging.getLogger(__name__)

QUEUE_METRICS = frozenset({"vllm:num_requests_waiting", "vllm:num_requests_running"})
_ACCEPT = {"Accept": "text/plain"}
_LINE_PREFIXES = ("vllm:num_requests_waiting", "vllm:num_requests_running")


def parse_queue_depth(text: str, model_name: str | None = None) -> float | None:
    """Sum of vLLM's waiting + running gauges over the label sets of `model_name` (series
    without a `model_name` label count too; None = every series); None when absent.

    Only the few relevant lines are handed to the Prometheus parser (vLLM pages are large).
    """
    return queue_depth(
        [ln for ln in text.splitlines() if ln.startswith(_LINE_PREFIXES)], model_name
    )


def queue_depth(lines: list[str], model_name: str | None = None) -> float | None:
    """`parse_queue_depth` of a page's sample lines of the two gauges (untyped, so the names
    stay whole)."""
    total = 0.0
    seen = False
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        if family.name not in QUEUE_METRICS:
            continue
        for sample in family.samples:
            served = sample.labels.get("model_name")
            if model_name is not None and served is not None and served != model_name:
                continue
            total += sample.value
            seen = True
    return total if seen else None


class ScrapeTarget(NamedTuple):
    """One endpoint to scrape and the model name its pair is served under."""

    endpoint: CompiledEndpoint
    served_model_name: str


class EngineScraper:
    """Scrapes every endpoint of the current table every `interval_s`."""

    def __init__(
        self,
        client: UpstreamClient,
        endpoints: Callable[[], Iterable[ScrapeTarget]],
        tracker: LoadTracker,
        on_depth: Callable[[str, float], None],
        timeout_s: float,
        max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES,
        refusals: PageRefusals | None = None,
    ) -> None:
        self._client = client
        self._endpoints = endpoints
        self._tracker = tracker
        self._on_depth = on_depth
        self._timeout_s = timeout_s
        self._max_page_bytes = max_page_bytes
        self._refusals = PageRefusals() if refusals is None else refusals

    async def scrape_once(self, spread_s: float = 0.0) -> int:
        """Scrape all endpoints, their starts spread evenly over `spread_s` (0: all at once);
        returns how many answered with a depth. Each scrape is started when its turn comes,
        so the round's start is one task, not one per endpoint at once."""
        targets = {t.endpoint.id: t for t in self._endpoints()}
        self._tracker.forget(set(targets))
        step_s = spread_s / len(targets) if targets else 0.0
        loop = asyncio.get_running_loop()
        started = loop.time()
        async with asyncio.TaskGroup() as group:  # cancelling the round cancels its scrapes
            tasks: list[asyncio.Task[bool]] = []
            for i, target in enumerate(targets.values()):
                if step_s > 0 and i:
                    await asyncio.sleep(max(0.0, started + i * step_s - loop.time()))
                tasks.append(group.create_task(self._scrape(target)))
        return sum(task.result() for task in tasks)

    async def run(self, interval_s: float) -> None:
        """Each endpoint once per `interval_s`, the scrapes spread over the interval: a burst
        of concurrent scrapes keeps the event loop busy at once, and the requests that arrive
        meanwhile wait (docs/data_plane.md, "Observability")."""
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await self.scrape_once(spread_s=interval_s)
            await asyncio.sleep(max(0.0, started + interval_s - loop.time()))

    async def _scrape(self, target: ScrapeTarget) -> bool:
        endpoint = target.endpoint
        # Our requests in flight both before and after the scrape were in the engine's count,
        # and so were our own items there (canary items: in no load, `LoadTracker.own_at`).
        own_before = self._tracker.own_at(endpoint.id)
        lines = await self._fetch(endpoint)
        if lines is None:
            return False
        try:
            depth = queue_depth(lines, target.served_model_name)
        except ValueError:
            logger.debug("scrape unparsable", extra={"endpoint": endpoint.id})
            return False
        if depth is None:
            return False
        own = min(own_before, self._tracker.own_at(endpoint.id))
        self._tracker.set_queue_depth(endpoint.id, depth, own)
        self._on_depth(endpoint.id, depth)
        return True

    async def _fetch(self, endpoint: CompiledEndpoint) -> list[str] | None:
        """The queue lines of the engine's /metrics page, read whole within the timeout and
        the page limit; None when they did not come (refused, timed out, broken, not a 200,
        or the page broke a bound: `gearbox_engine_scrape_errors_total`)."""
        until = limit_until(self._timeout_s)
        request = UpstreamRequest(f"{endpoint.url}/metrics", b"", _ACCEPT, self._timeout_s, "GET")
        try:
            resp = await self._client.send(request)
            try:
                if resp.status != 200:
                    logger.debug("scrape status %s", resp.status, extra={"endpoint": endpoint.id})
                    return None
                page = read_series(resp.chunks(), _LINE_PREFIXES, self._max_page_bytes)
                return await within(until, page)
            finally:
                resp.close()
        except (AttemptError, LimitReachedError) as err:
            logger.debug("scrape failed: %s", type(err).__name__, extra={"endpoint": endpoint.id})
        except PageRefusedError as err:
            self._refusals.refused(endpoint.id, err, "scrape")
        return None
