"""Load workloads: the sweep of load levels, seeded prompts of a target length, arrival schedules.

PURE: no I/O, no clock, no global randomness; every random choice comes from an explicit seed,
so the same flags produce the same prompts and schedules.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_CHARS_PER_TOKEN = 4.0

# Common English words: real tokenizers split them into about one token each, so a prompt of
# N words lands near N tokens for any family, and the measured chars/token corrects the rest.
_VOCABULARY = """
the of and to in is you that it he was for on are as with his they at be this have from or one
had by word but not what all were we when your can said there use an each which she do how their
if will up other about out many then them these so some her would make like him into time has
look two more write go see number no way could people my than first water been call who oil its
now find long down day did get come made may part over new sound take only little work know
place year live me back give most very after thing our just name good sentence man think say
great where help through much before line right too mean old any same tell boy follow came want
show also around form three small set put end does another well large must big even such because
turn here why ask went men read need land different home us move try kind hand picture again
change off play spell air away animal house point page letter mother answer found study still
learn should world
"""
_WORDS: tuple[str, ...] = tuple(_VOCABULARY.split())


@dataclass(frozen=True, slots=True)
class LoadLevel:
    """One point of the sweep. Closed loop at `concurrency` unless `open_loop_rps` is set.

    `warmup` requests run first at the same load and are excluded from every statistic.
    """

    concurrency: int
    input_tokens: int
    output_tokens: int
    requests: int
    warmup: int = 0
    open_loop_rps: float | None = None

    @property
    def total(self) -> int:
        return self.warmup + self.requests

    @property
    def label(self) -> str:
        load = f"{self.open_loop_rps:g} rps" if self.open_loop_rps else f"c={self.concurrency}"
        return f"{load} in={self.input_tokens} out={self.output_tokens}"


def build_sweep(
    concurrency: Sequence[int],
    input_tokens: Sequence[int],
    output_tokens: Sequence[int],
    requests_per_level: int,
    warmup: int = 0,
    open_loop_rps: float | None = None,
) -> tuple[LoadLevel, ...]:
    """Every (input, output) size at every concurrency (ascending), then one open-loop level
    per size when `open_loop_rps` is given. Raises ValueError naming the bad argument."""
    _check_positive("concurrency", concurrency)
    _check_positive("input_tokens", input_tokens)
    _check_positive("output_tokens", output_tokens)
    if min(output_tokens) < 2:
        raise ValueError("output_tokens: every value must be >= 2 (TPOT needs two tokens)")
    if requests_per_level < 1:
        raise ValueError("requests_per_level: must be >= 1")
    if warmup < 0:
        raise ValueError("warmup: must be >= 0")
    if open_loop_rps is not None and not open_loop_rps > 0:
        raise ValueError("open_loop_rps: must be > 0")
    sizes = [(i, o) for i in input_tokens for o in output_tokens]
    levels = [
        LoadLevel(c, i, o, requests_per_level, warmup)
        for i, o in sizes
        for c in sorted(set(concurrency))
    ]
    if open_loop_rps is not None:
        levels += [LoadLevel(1, i, o, requests_per_level, warmup, open_loop_rps) for i, o in sizes]
    return tuple(levels)


def _check_positive(name: str, values: Sequence[int]) -> None:
    if not values:
        raise ValueError(f"{name}: needs at least one value")
    if any(v < 1 for v in values):
        raise ValueError(f"{name}: every value must be >= 1, got {list(values)}")


def make_prompt(target_tokens: int, chars_per_token: float, seed: int) -> str:
    """A prompt of about `target_tokens` tokens (`target_tokens * chars_per_token` characters).

    Different seeds give prompts that differ from the first word, so an engine's prefix cache
    cannot make later requests look faster than a real workload.
    """
    if target_tokens < 1 or chars_per_token <= 0:
        raise ValueError("target_tokens must be >= 1 and chars_per_token > 0")
    rng = random.Random(seed)
    target_chars = max(1, round(target_tokens * chars_per_token))
    words: list[str] = []
    length = -1
    while length < target_chars:
        word = rng.choice(_WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:target_chars].rstrip()


def request_seed(level_index: int, request_index: int, base_seed: int = 0) -> int:
    """A distinct, reproducible seed per request of the sweep."""
    return base_seed * 1_000_003 + level_index * 100_003 + request_index


def arrival_offsets_s(rate_rps: float, count: int, seed: int) -> tuple[float, ...]:
    """Poisson arrivals at `rate_rps`: start offsets in seconds from the level's start.

    The first request starts at 0; gaps are exponential with mean 1 / rate_rps.
    """
    if not rate_rps > 0 or count < 0:
        raise ValueError("rate_rps must be > 0 and count >= 0")
    rng = random.Random(seed)
    offsets: list[float] = []
    at = 0.0
    for i in range(count):
        if i:
            at += rng.expovariate(rate_rps)
        offsets.append(at)
    return tuple(offsets)
