"""An engine's `/metrics` page read as a bounded stream: only the wanted series are kept.

The queue-depth scrape and the stall guard's counter reads each need two series of a page that
a real vLLM engine serves at tens of KiB (the simulator's, with vLLM's names and buckets, is
15 KiB) and that a misconfigured exporter or a hostile pod can make any size. So the page is
never held whole: its chunks are split into lines as they arrive, a line is kept only when it
starts with one of the wanted names (decided from its first bytes, the rest of an unwanted line
is skipped as it comes), and the read ends as a refusal (`PageRefusedError`) once more than the
page limit has arrived or more than `MAX_SERIES_LINES` lines were kept. What reaches the
Prometheus parser is then a handful of lines: microseconds on the event loop, so no thread.
The limit and its figure are in docs/data_plane.md, "Engine pages"
(`tests/hostile/test_engine_pages.py` serves 48 MiB and 1 GiB pages).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Literal

logger = logging.getLogger(__name__)

# The default page limit (`ScrapeSettings.max_page_bytes`; its figure: docs/data_plane.md).
DEFAULT_MAX_PAGE_BYTES = 4 * 1024 * 1024
# Lines of the wanted names one page may carry: vLLM has one series per (model_name, engine)
# for each of the names read here, so a few per served model; more is not an engine's page.
MAX_SERIES_LINES = 256
# A wanted line longer than this is not an engine's series (vLLM's are under 200 bytes).
MAX_LINE_BYTES = 64 * 1024
# Bytes between two yields to the loop while pieces are already buffered.
_YIELD_EVERY_BYTES = 256 * 1024

RefusalReason = Literal["too_large", "too_many_series"]
REFUSAL_REASONS: tuple[RefusalReason, ...] = ("too_large", "too_many_series")


class PageRefusedError(Exception):
    """The page broke a bound (`reason`); nothing of it is used."""

    def __init__(self, reason: RefusalReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason: RefusalReason = reason


class SeriesLines:
    """The lines of a page, fed chunk by chunk, that start with one of `prefixes`."""

    def __init__(self, prefixes: tuple[bytes, ...], max_lines: int = MAX_SERIES_LINES) -> None:
        self._prefixes = prefixes
        self._needles = tuple(b"\n" + p for p in prefixes)
        self._max_lines = max_lines
        self._partial = b""  # the start of a line still arriving that may be wanted
        self._skipping = False  # the line still arriving is not wanted
        self.lines: list[bytes] = []

    def feed(self, chunk: bytes) -> None:
        """Split `chunk` on newlines, keeping the wanted lines; raises PageRefusedError past
        `max_lines` kept lines."""
        start = 0
        if self._skipping or self._partial:
            end = chunk.find(b"\n")
            if end < 0:
                self._carry(chunk)
                return
            if not self._skipping:
                self._keep(self._partial + chunk[:end])
            self._partial, self._skipping = b"", False
            start = end + 1
        last = chunk.rfind(b"\n", start)
        if last >= 0:
            self._whole_lines(b"\n" + chunk[start : last + 1])
            start = last + 1
        self._carry(chunk[start:])

    def _whole_lines(self, text: bytes) -> None:
        """Keeps the wanted lines of `text` (newline, whole lines, newline), in page order,
        found by searching for the names (most lines are never looked at from Python)."""
        found: list[tuple[int, bytes]] = []
        for needle in self._needles:
            at = text.find(needle)
            while at >= 0:
                end = text.find(b"\n", at + 1)
                found.append((at, text[at + 1 : end]))
                at = text.find(needle, end)
        for _, line in sorted(found):
            self._keep(line)

    def end(self) -> list[str]:
        """The kept lines, the last one included when the page did not end in a newline."""
        if self._partial and not self._skipping:
            self._keep(self._partial)
        self._partial = b""
        return [line.decode("utf-8", errors="replace") for line in self.lines]

    def _carry(self, tail: bytes) -> None:
        """`tail` continues the line still arriving: kept while it may be wanted."""
        if self._skipping or not tail:
            return
        partial = self._partial + tail
        if any(partial.startswith(p) or p.startswith(partial) for p in self._prefixes):
            if len(partial) > MAX_LINE_BYTES:
                raise PageRefusedError(
                    "too_large", f"a wanted line longer than {MAX_LINE_BYTES} bytes"
                )
            self._partial = partial
        else:
            self._partial, self._skipping = b"", True

    def _keep(self, line: bytes) -> None:
        if not line.startswith(self._prefixes):
            return
        self.lines.append(line)
        if len(self.lines) > self._max_lines:
            raise PageRefusedError("too_many_series", f"more than {self._max_lines} wanted lines")


async def read_series(
    chunks: AsyncGenerator[bytes, None], prefixes: tuple[str, ...], max_bytes: int
) -> list[str]:
    """The lines of the page streamed by `chunks` that start with `prefixes`; PageRefusedError
    once more than `max_bytes` arrived (the caller closes the response: the rest is never
    read) or too many lines were kept."""
    wanted = SeriesLines(tuple(p.encode() for p in prefixes))
    size = 0
    since_yield = 0
    async with aclosing(chunks):  # a refusal ends the body's reader at once
        async for chunk in chunks:
            size += len(chunk)
            if size > max_bytes:
                raise PageRefusedError("too_large", f"more than {max_bytes} bytes")
            wanted.feed(chunk)
            since_yield += len(chunk)
            if since_yield >= _YIELD_EVERY_BYTES:
                since_yield = 0
                await asyncio.sleep(0)  # buffered pieces come without a wait: let requests in
    return wanted.end()


@dataclass
class PageRefusals:
    """Counts refused pages by reason (`count`, e.g. `gearbox_engine_scrape_errors_total`)
    and logs the first refusal of each endpoint and reason once, at WARNING."""

    count: Callable[[RefusalReason], None] = lambda reason: None
    _logged: set[tuple[str, RefusalReason]] = field(default_factory=set)

    def refused(self, endpoint_id: str, err: PageRefusedError, reader: str) -> None:
        self.count(err.reason)
        key = (endpoint_id, err.reason)
        if key in self._logged:
            return
        self._logged.add(key)
        logger.warning(
            "engine /metrics page refused (%s): %s; further refusals of this endpoint are "
            "only counted",
            reader,
            err,
            extra={"endpoint": endpoint_id, "reason": err.reason},
        )
