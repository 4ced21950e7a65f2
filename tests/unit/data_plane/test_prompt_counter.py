"""The tokenizer files a table names, loaded once off the loop, and prompts counted by them on
a worker thread, one at a time (data_plane.prompt_counter; docs/data_plane.md, "Prompt size").
A real tokenizer file, trained in the test (tests/support/tiny_tokenizer.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from contracts.prompt_text import prompt_text
from contracts.tokenizer_ref import file_sha256
from data_plane.decision.compile import compile_table
from data_plane.domain import CompiledTable
from data_plane.prompt_counter import PromptCounter, TokenizerShelf
from data_plane.request.prompt_tokens import PromptCount, TokenCount
from tests.component.data_plane.fakes import make_table, pair_entry
from tests.support import tiny_tokenizer
from tests.support.waiting import eventually

GERMAN = "Der schnelle braune Fuchs springt über den faulen Hund. " * 40


def _table(path: Path, sha256: str | None = None) -> CompiledTable:
    row = pair_entry("fama", "fp16", context_length=4096)
    row["tokenizer"] = {"id": str(path), "sha256": sha256 or file_sha256(path)}
    return compile_table(make_table([row]))


def _body(text: str, **extra: Any) -> bytes:
    body = {"model": "fama", "messages": [{"role": "user", "content": text}], **extra}
    return json.dumps(body).encode()


@pytest.fixture
def trained(tmp_path: Path) -> Path:
    return tiny_tokenizer.train(tmp_path / "model" / "tokenizer.json")


async def _loaded(shelf: TokenizerShelf, table: CompiledTable) -> None:
    shelf.want(table)
    await shelf.settled()


async def test_a_large_prompt_is_counted_by_the_tokenizer_the_table_names(trained: Path) -> None:
    """The file the profiler recorded, loaded once: a body over the size floor is counted as
    the tokenizer counts its text and tools; one under it, and one for an alias without a
    tokenizer, are priced per character (None)."""
    table = _table(trained)
    shelf = TokenizerShelf(None)
    counter = PromptCounter(shelf, min_bytes=1024)
    try:
        await _loaded(shelf, table)
        tools = [tiny_tokenizer.SCHEMA] * 4
        raw = _body(GERMAN, tools=tools)
        counted = await counter.count(raw, table)
        expected = tiny_tokenizer.count(trained, prompt_text(json.loads(raw)))
        assert counted == PromptCount(file_sha256(trained), expected, 0)
        assert await counter.count(_body("Hallo"), table) is None
        assert (counter.counts(raw, table), counter.counts(_body("Hallo"), table)) == (True, False)
        assert not counter.counts(raw, None)
        other = json.dumps({"model": "nobody", "messages": [{"role": "user", "content": GERMAN}]})
        assert await counter.count(other.encode(), table) is None
        assert await counter.count(b"[" * 2000, table) is None  # the decision names what is wrong
    finally:
        await counter.close()


@pytest.mark.parametrize("trims", [True, False])
async def test_a_template_that_trims_each_turn_is_counted_with_the_turns_stripped(
    trained: Path, trims: bool
) -> None:
    """Gemma's template renders each turn as `text | trim`: where the profiler found the
    template trims (`TemplateTokens.trims`), each turn's text is counted stripped of its
    surrounding whitespace, as the engine sees it; one that does not trim counts it as sent."""
    row = pair_entry("fama", "fp16", context_length=4096)
    template = {"fixed": 5.0, "per_message": 4.0, "trims": trims}
    row["tokenizer"] = {"id": str(trained), "sha256": file_sha256(trained), "template": template}
    table = compile_table(make_table([row]))
    shelf = TokenizerShelf(None)
    counter = PromptCounter(shelf, min_bytes=1024)
    turns = [{"role": "user", "content": GERMAN}, {"role": "user", "content": "  Wie bitte?\n"}]
    try:
        await _loaded(shelf, table)
        raw = json.dumps({"model": "fama", "messages": turns}).encode()
        counted = await counter.count(raw, table)
        texts = [t["content"].strip() if trims else t["content"] for t in turns]
        expected = tiny_tokenizer.count(trained, "\n".join(texts)) + 5 + 4 * 2
        assert counted == PromptCount(file_sha256(trained), expected, 0)
    finally:
        await counter.close()


async def test_a_file_with_another_sha256_is_not_used_and_why_is_logged_once(
    trained: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The table names a file whose content changed since it was profiled: it is not loaded,
    the reason is logged once however many tables name it, and prompts are priced per
    character."""
    table = _table(trained, sha256="c" * 64)
    shelf = TokenizerShelf(None)
    counter = PromptCounter(shelf, min_bytes=0)
    try:
        with caplog.at_level(logging.WARNING, logger="data_plane.prompt_counter"):
            await _loaded(shelf, table)
            await _loaded(shelf, table)
            assert await counter.count(_body(GERMAN), table) is None
        assert sum("another SHA-256" in r.getMessage() for r in caplog.records) == 1
        assert sum("not found here" in r.getMessage() for r in caplog.records) == 1
    finally:
        await counter.close()


async def test_the_operator_s_directory_is_read_before_the_recorded_path(
    trained: Path, tmp_path: Path
) -> None:
    """The recorded path is not on this machine; `<TABLE_TOKENIZER_DIR>/<sha256>.json` is."""
    sha = file_sha256(trained)
    shelf_dir = tmp_path / "shelf"
    shelf_dir.mkdir()
    shutil.copy(trained, shelf_dir / f"{sha}.json")
    table = _table(tmp_path / "elsewhere" / "tokenizer.json", sha256=sha)
    shelf = TokenizerShelf(shelf_dir)
    await _loaded(shelf, table)
    assert shelf.loaded(sha) is not None
    assert TokenizerShelf(None).loaded(sha) is None


class _HeldShelf:
    """A shelf whose count waits until the test releases it (a long count)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.read: list[int] = []

    def want(self, table: CompiledTable) -> None:
        pass

    def loaded(self, sha256: str) -> TokenCount | None:
        def count(text: str) -> int:
            self.read.append(len(text))
            self.started.set()
            self.release.wait(30)
            return 7

        return count

    async def settled(self) -> None:
        pass


async def test_a_body_arriving_while_a_count_runs_is_priced_per_character_not_held(
    trained: Path,
) -> None:
    """One client's huge prompt holds the worker: another client's large body is not queued
    behind it (None at once: priced per character), and the huge prompt is read only up to
    the alias's limit. Once it is done, the next body is counted again."""
    table = _table(trained)
    ref = table.tokenizers["fama"]
    shelf = _HeldShelf()
    counter = PromptCounter(shelf, min_bytes=1024)
    try:
        huge = asyncio.create_task(counter.count(_body("x" * (10 * ref.max_chars)), table))
        await eventually(shelf.started.is_set)
        assert await counter.count(_body(GERMAN), table) is None
        assert counter.busy_skips == 1
        shelf.release.set()
        counted = await huge
        assert counted is not None
        assert counted.rest_chars == 9 * ref.max_chars
        assert shelf.read == [ref.max_chars]
        assert await counter.count(_body(GERMAN), table) == PromptCount(ref.sha256, 7, 0)
    finally:
        shelf.release.set()
        await counter.close()


async def test_a_cancelled_count_keeps_the_worker_busy_until_its_thread_is_done(
    trained: Path,
) -> None:
    """A client that goes away mid-count does not free the worker for a second count to
    queue behind the running one."""
    table = _table(trained)
    shelf = _HeldShelf()
    counter = PromptCounter(shelf, min_bytes=0)
    try:
        first = asyncio.create_task(counter.count(_body(GERMAN), table))
        await eventually(shelf.started.is_set)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        assert await counter.count(_body(GERMAN), table) is None
        shelf.release.set()
        await eventually(lambda: not counter.busy)
    finally:
        shelf.release.set()
        await counter.close()
