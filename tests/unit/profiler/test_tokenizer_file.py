"""The served checkpoint's tokenizer file, recorded by the profiler where this machine can read
it (profiler/engine/tokenizer_file.py; docs/profiler.md, "Tokenizer")."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from profiler.engine.tokenizer_file import find_tokenizer, read_tokenizer_ref, tokenizer_path
from tests.support import tiny_tokenizer


def test_root_names_a_checkpoint_directory_or_the_file_itself(tmp_path: Path) -> None:
    """vLLM's `root` is the directory it was started with; a hub id, a directory without the
    file, nothing, or a name the file system refuses record nothing."""
    path = tiny_tokenizer.train(tmp_path / "ckpt" / "tokenizer.json")
    assert tokenizer_path(str(tmp_path / "ckpt")) == path
    assert tokenizer_path(str(path)) == path
    assert tokenizer_path("google/gemma-3-270m") is None
    assert tokenizer_path(str(tmp_path)) is None
    assert tokenizer_path(None) is None
    assert tokenizer_path("x" * 5000) is None


def test_a_file_that_loads_is_recorded_by_where_it_was_read_and_its_sha256(
    tmp_path: Path,
) -> None:
    path = tiny_tokenizer.train(tmp_path / "ckpt" / "tokenizer.json")
    ref = read_tokenizer_ref(path)
    assert ref.id == str(path.resolve())
    assert ref.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


async def test_a_file_that_is_no_tokenizer_records_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "ckpt" / "tokenizer.json"
    bad.parent.mkdir()
    bad.write_text('{"not": "a tokenizer"}')
    with pytest.raises(ValueError, match="is not a tokenizer file"):
        read_tokenizer_ref(bad)
    assert await find_tokenizer("http://engine", str(bad.parent)) is None
    assert await find_tokenizer("http://engine", "google/gemma-3-270m") is None
    good = tiny_tokenizer.train(tmp_path / "good" / "tokenizer.json")
    found = await find_tokenizer("http://engine", str(good.parent))
    assert found is not None
    assert found.id == str(good.resolve())
