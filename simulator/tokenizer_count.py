"""Prompt tokens by a real tokenizer file, for a simulated engine given one
(`SimPairConfig.tokenizer`): each turn's text and the `tools` JSON counted by it, as an
engine whose template renders them as they are (no role headers). Loaded once per file."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer


@functools.lru_cache(maxsize=8)
def _loaded(path: str) -> Tokenizer:
    return Tokenizer.from_file(path)


def tokens_of(path: Path, text: str) -> int:
    """`text`'s tokens by the file at `path`, without special tokens."""
    return len(_loaded(str(path)).encode(text, add_special_tokens=False))


def schema_tokens(path: Path, tools: Any) -> int:
    """A tools list's tokens as a template's `tojson` renders it."""
    return tokens_of(path, json.dumps(tools, ensure_ascii=False)) if tools else 0
