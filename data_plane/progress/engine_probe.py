"""One bounded read of an engine's token counters from its `/metrics`, for the stall guard's
hang evidence (`progress.stillness`; docs/reliability.md, "What a breaker counts").

Reads only `vllm:prompt_tokens_total` and `vllm:generation_tokens_total` of the pair's served
model (series without a `model_name` label count too), as the queue-depth scrape reads only
its own series: another model served by the same engine neither hides a hang nor fakes one.
Each read is one GET with its own limit, through a lean `UpstreamClient` and pool of its own,
started by the guard off every request's path. The page is read as a bounded stream that keeps
only those series (`metrics_page`); a page past its limit reads as `NO_SERIES`, counted and
logged as the scrape's are. Never raises (but for a cancellation): what went wrong is the
reading (`Unread`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from data_plane.outcome import ResponseTooLarge
from data_plane.progress.stillness import Counters, Reading, Unread
from data_plane.sync.engine_scrape import ScrapeTarget
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

PROMPT = "vllm:prompt_tokens_total"
GENERATION = "vllm:generation_tokens_total"
_ACCEPT = {"Accept": "text/plain"}


def parse_token_counters(text: str, model_name: str | None = None) -> Counters | None:
    """The sums of vLLM's prompt and generation token counters over the label sets of
    `model_name` (None = every series); None when neither series is on the page.

    Only those sample lines go to the Prometheus parser (untyped, so the names stay whole;
    vLLM pages are large)."""
    return token_counters(
        [ln for ln in text.splitlines() if ln.startswith((PROMPT, GENERATION))], model_name
    )


def token_counters(lines: list[str], model_name: str | None = None) -> Counters | None:
    """`parse_token_counters` of a page's sample lines of the two counters."""
    sums = {PROMPT: 0.0, GENERATION: 0.0}
    seen = False
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for sample in family.samples:
            if sample.name not in sums:
                continue  # a longer name with the same start
            served = sample.labels.get("model_name")
            if model_name is not None and served is not None and served != model_name:
                continue
            sums[sample.name] += sample.value
            seen = True
    return Counters(sums[PROMPT], sums[GENERATION]) if seen else None


class EngineProbe:
    """Reads one endpoint's counters within `timeout_s` (`read`, the guard's `Probe`)."""

    def __init__(
        self,
        client: UpstreamClient,
        target: Callable[[str], ScrapeTarget | None],
        timeout_s: float,
        max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES,
        refusals: PageRefusals | None = None,
    ) -> None:
        self._client = client
        self._target = target
        self._timeout_s = timeout_s
        self._max_page_bytes = max_page_bytes
        self._refusals = PageRefusals() if refusals is None else refusals

    async def read(self, endpoint_id: str) -> Reading:
        """The counters; `NO_ANSWER` when the engine did not answer within the limit (refused,
        reset, timed out: a frozen or dead process, or one too slow to serve the page);
        `NO_SERIES` when it answered without them (not a 200, no such series, a page past the
        page limit) or the endpoint is no longer in the table."""
        target = self._target(endpoint_id)
        if target is None:
            return Unread.NO_SERIES
        lines = await self._fetch(target)
        if isinstance(lines, Unread):
            return lines
        try:
            counters = token_counters(lines, target.served_model_name)
        except ValueError:
            logger.debug("probe unparsable", extra={"endpoint": endpoint_id})
            return Unread.NO_SERIES
        return Unread.NO_SERIES if counters is None else counters

    async def _fetch(self, target: ScrapeTarget) -> list[str] | Unread:
        endpoint = target.endpoint
        until = limit_until(self._timeout_s)
        request = UpstreamRequest(f"{endpoint.url}/metrics", b"", _ACCEPT, self._timeout_s, "GET")
        try:
            resp = await self._client.send(request)
            try:
                if resp.status != 200:
                    return Unread.NO_SERIES
                page = read_series(resp.chunks(), (PROMPT, GENERATION), self._max_page_bytes)
                return await within(until, page)
            finally:
                resp.close()
        except LimitReachedError:
            logger.debug("probe unanswered", extra={"endpoint": endpoint.id})
            return Unread.NO_ANSWER
        except AttemptError as err:
            logger.debug("probe failed: %s", err.outcome.label, extra={"endpoint": endpoint.id})
            too_large = isinstance(err.outcome, ResponseTooLarge)
            return Unread.NO_SERIES if too_large else Unread.NO_ANSWER
        except PageRefusedError as err:
            self._refusals.refused(endpoint.id, err, "stall probe")
            return Unread.NO_SERIES
