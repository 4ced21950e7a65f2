"""A small real tokenizer file, trained here with the `tokenizers` library (no download, no
cache): byte-level BPE on English prose and JSON, so English and JSON split into a few
characters per token and text it never saw (German umlauts, Japanese) into bytes, one token
each, as a served model's tokenizer splits a language it saw little of."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

PROSE = (
    "The quick brown fox jumps over the lazy dog. Routing tables name the pairs that serve "
    "each model, and the data plane sends every request to the cheapest pair that meets its "
    "budget. An engine prefills the prompt, then decodes one token at a time. "
)
SCHEMA = {
    "type": "function",
    "function": {
        "name": "lookup_record",
        "description": "Look a record up in the inventory by its key and return its fields.",
        "parameters": {
            "type": "object",
            "properties": {"key": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["key"],
        },
    },
}


def train(path: Path, vocab_size: int = 600) -> Path:
    """Train the tokenizer and write it to `path` (a `tokenizer.json`); returns `path`."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [PROSE] * 20 + [json.dumps([SCHEMA] * 3, ensure_ascii=False)] * 20
    tokenizer.train_from_iterator(corpus, trainer)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))
    return path


def count(path: Path, text: str) -> int:
    """`text`'s tokens by the file at `path`."""
    return len(Tokenizer.from_file(str(path)).encode(text, add_special_tokens=False))


def sha256(path: Path) -> str:
    """The file's SHA-256, as a table names it."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
