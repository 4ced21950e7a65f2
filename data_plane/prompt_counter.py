"""Prompt tokens by the served model's own tokenizer: files loaded once, counts off the loop.

`TokenizerShelf` loads each tokenizer file a table names (`CompiledTable.tokenizers`) once per
SHA-256, in a thread when a table arrives: `<TABLE_TOKENIZER_DIR>/<sha256>.json`, else the path
the profiler recorded; a file whose SHA-256 differs, or that does not load, is not used, and
why is logged once. Nothing is fetched.

`PromptCounter.count` counts a body's prompt (`request.prompt_tokens`: its text, and what
the chat template adds where the profiler measured it) on one worker thread of
its own, for bodies of at least `TABLE_TOKENIZE_MIN_BYTES`: the tokenizer runs without the GIL
and the loop serves others meanwhile; one count at a time, and a body arriving while one runs
is priced per character (None) instead of waiting, so one client's huge prompts cannot make
anyone else's request wait on the tokenizer. A count reads at most the alias's `max_chars`.
docs/data_plane.md, "Prompt size".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import orjson
from aiohttp import web
from tokenizers import Tokenizer

from contracts.prompt_text import prompt_parts
from contracts.tokenizer_ref import file_sha256
from data_plane.domain import AliasTokenizer, CompiledTable
from data_plane.request.prompt_tokens import PromptCount, TokenCount, count_parts
from data_plane.table_store import TableStore

logger = logging.getLogger(__name__)


class Shelf(Protocol):
    """Where a counter finds the tokenizers (`TokenizerShelf`; a test's own)."""

    def want(self, table: CompiledTable) -> None: ...

    def loaded(self, sha256: str) -> TokenCount | None: ...

    async def settled(self) -> None: ...


class TokenizerShelf:
    """Tokenizers by SHA-256, loaded in threads; `loaded` reads them from any thread."""

    def __init__(self, directory: Path | None) -> None:
        self._directory = directory
        self._loaded: dict[str, TokenCount] = {}
        self._asked: set[str] = set()  # SHA-256s whose load was started (once each)
        self._loads: set[asyncio.Future[None]] = set()

    def loaded(self, sha256: str) -> TokenCount | None:
        """The count of the file with this SHA-256, once loaded."""
        return self._loaded.get(sha256)

    def want(self, table: CompiledTable) -> None:
        """Start loading, in a thread, each file `table` names that no load was started for;
        without a running loop (a table read at startup) the first count starts it."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        for ref in table.tokenizers.values():
            if ref.sha256 not in self._asked:
                self._asked.add(ref.sha256)
                load = asyncio.ensure_future(asyncio.to_thread(self._load, ref), loop=loop)
                self._loads.add(load)
                load.add_done_callback(self._loads.discard)

    async def settled(self) -> None:
        """Wait for the loads started so far (tests; shutdown)."""
        while self._loads:
            await asyncio.gather(*self._loads, return_exceptions=True)

    def _load(self, ref: AliasTokenizer) -> None:
        for path in self._candidates(ref):
            try:
                if not path.is_file():
                    continue
                if file_sha256(path) != ref.sha256:
                    logger.warning("tokenizer %s: %s has another SHA-256", ref.sha256[:12], path)
                    continue
                self._loaded[ref.sha256] = _counter(Tokenizer.from_file(str(path)))
            except Exception as err:  # the library raises a bare Exception for a bad file
                logger.warning("tokenizer %s: %s does not load: %s", ref.sha256[:12], path, err)
                continue
            logger.info("tokenizer %s loaded from %s", ref.sha256[:12], path)
            return
        logger.warning(
            "tokenizer %s (%s) not found here: prompts of its aliases are priced per character",
            ref.sha256[:12],
            ref.path,
        )

    def _candidates(self, ref: AliasTokenizer) -> list[Path]:
        found = [] if self._directory is None else [self._directory / f"{ref.sha256}.json"]
        return [*found, Path(ref.path)]


class PromptCounter:
    """Counts large bodies' prompts with the alias's tokenizer, one at a time, off the loop."""

    def __init__(self, shelf: Shelf, min_bytes: int) -> None:
        self._shelf = shelf
        self._min_bytes = min_bytes
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gearbox-tokens")
        self._busy = False
        self.busy_skips = 0  # bodies priced per character because a count was running

    @property
    def busy(self) -> bool:
        """A count runs on the worker thread."""
        return self._busy

    def want(self, table: CompiledTable) -> None:
        self._shelf.want(table)

    async def settled(self) -> None:
        """Wait for the tokenizer loads started so far."""
        await self._shelf.settled()

    def counts(self, raw: bytes, table: CompiledTable | None) -> bool:
        """Whether `count` may count `raw` under `table` (a body large enough, a table naming
        a tokenizer): a check the request path makes without a coroutine."""
        return table is not None and bool(table.tokenizers) and len(raw) >= self._min_bytes

    async def count(self, raw: bytes, table: CompiledTable | None) -> PromptCount | None:
        """`raw`'s prompt tokens by the tokenizer its alias names, or None: a small body, no
        tokenizer for the table (or not loaded yet), a count already running, a body the
        count cannot read (the decision names what is wrong with it)."""
        if table is None or not self.counts(raw, table):
            return None
        self._shelf.want(table)
        if self._busy:
            self.busy_skips += 1
            return None
        self._busy = True
        # Free again when the thread is done, not when this request is: a cancelled request
        # does not let a second count queue behind a running one.
        work: Future[PromptCount | None] = self._pool.submit(self._count, raw, table)
        work.add_done_callback(self._free)
        return await asyncio.wrap_future(work)

    def _free(self, _: Future[PromptCount | None]) -> None:
        self._busy = False

    def _count(self, raw: bytes, table: CompiledTable) -> PromptCount | None:
        try:
            doc: Any = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
        alias = doc.get("model") if type(doc) is dict else None
        ref = table.tokenizers.get(alias) if type(alias) is str else None
        count = None if ref is None else self._shelf.loaded(ref.sha256)
        if ref is None or count is None:
            return None
        trim = ref.template is not None and ref.template.trims
        return count_parts(count, prompt_parts(doc, trim), ref)

    async def close(self) -> None:
        """Stop the worker thread (a count running ends first) and wait for the loads."""
        await asyncio.to_thread(self._pool.shutdown, wait=True, cancel_futures=True)
        await self._shelf.settled()


def prompt_counter(store: TableStore, directory: Path | None, min_bytes: int) -> PromptCounter:
    """A counter whose shelf loads the tokenizers of every table `store` swaps in."""
    shelf = TokenizerShelf(directory)
    store.on_swap(shelf.want)
    return PromptCounter(shelf, min_bytes)


def counter_ctx(
    counter: PromptCounter, store: TableStore
) -> Callable[[web.Application], AsyncIterator[None]]:
    """The app's cleanup context: the startup table's tokenizers loading, the thread stopped."""

    async def ctx(_: web.Application) -> AsyncIterator[None]:
        if store.current is not None:
            counter.want(store.current)
        yield
        await counter.close()

    return ctx


def _counter(tokenizer: Tokenizer) -> TokenCount:
    def count(text: str) -> int:
        # A batch of one: the library releases the GIL for batches, and one item keeps it
        # on this one thread (no pool of the library's own).
        return len(tokenizer.encode_batch([text], add_special_tokens=False)[0])

    return count
