"""What a simulated engine answers (PURE: no clock, no I/O).

Known prompts get the right answer with probability accuracy[category], decided by an RNG
seeded from (seed, served name, prompt, how often this prompt was asked), so runs reproduce.
Unknown prompts get filler tokens up to max_tokens. One token is about `chars_per_token` chars.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass
from enum import StrEnum

from simulator.answer_key import WRONG_ANSWER, KnownAnswer

FILLER_WORDS = (" the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog.")


class FinishReason(StrEnum):
    STOP = "stop"
    LENGTH = "length"


@dataclass(frozen=True, slots=True)
class CompletionPlan:
    """The tokens to stream, why generation ends, and whether a known answer was right."""

    tokens: tuple[str, ...]
    finish_reason: FinishReason
    category: str | None = None
    correct: bool | None = None

    @property
    def text(self) -> str:
        return "".join(self.tokens)


def count_tokens(chars: int, chars_per_token: float) -> int:
    """Simulated token count of `chars` characters: ceil(chars / chars_per_token)."""
    return math.ceil(chars / chars_per_token) if chars > 0 else 0


def split_tokens(text: str, chars_per_token: float) -> tuple[str, ...]:
    """Cut `text` into tokens of about `chars_per_token` chars; joining them gives `text`."""
    step = max(1, round(chars_per_token))
    return tuple(text[i : i + step] for i in range(0, len(text), step))


def filler_tokens(count: int) -> tuple[str, ...]:
    """`count` filler tokens (one word each), for prompts the key does not know."""
    return tuple(FILLER_WORDS[i % len(FILLER_WORDS)] for i in range(count))


def decision_rng(seed: int, served_name: str, prompt: str, occurrence: int) -> random.Random:
    """A private RNG for one request, independent of the order other prompts arrive in."""
    material = f"{seed}\x1f{served_name}\x1f{prompt}\x1f{occurrence}".encode()
    return random.Random(int.from_bytes(hashlib.sha256(material).digest()[:8], "big"))


def plan_completion(
    known: KnownAnswer | None,
    accuracy: float,
    draw: float,
    max_tokens: int,
    ignore_eos: bool,
    chars_per_token: float,
) -> CompletionPlan:
    """Choose the output. `draw` in [0, 1): the answer is right when `draw < accuracy`.

    A known answer ends with "stop" unless it needs more than `max_tokens` tokens; with
    `ignore_eos` the output is padded (or cut) to exactly `max_tokens` and ends with "length".
    """
    if known is None:
        return CompletionPlan(filler_tokens(max_tokens), FinishReason.LENGTH)
    correct = draw < accuracy
    text = known.text if correct else WRONG_ANSWER
    tokens = split_tokens(text, chars_per_token)
    if ignore_eos:
        padded = (tokens + filler_tokens(max_tokens))[:max_tokens]
        return CompletionPlan(padded, FinishReason.LENGTH, known.category, correct)
    if len(tokens) > max_tokens:
        return CompletionPlan(tokens[:max_tokens], FinishReason.LENGTH, known.category, correct)
    return CompletionPlan(tokens, FinishReason.STOP, known.category, correct)
