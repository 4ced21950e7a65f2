"""JSON characters per token from the engine's usage: token difference over character
difference, and no figure when the engine refuses tools or its count does not grow."""

from __future__ import annotations

import math
from typing import Any

import pytest

from profiler.engine.client import RequestFailedError
from profiler.engine.token_rates import (
    PROBES,
    json_chars_per_token,
    measure_json_chars_per_token,
    schema_chars,
)

BASE_TOKENS = 12


class Counter:
    """An engine that counts `tools` at `rate` characters per token, or refuses them."""

    def __init__(self, rate: float, refuse: bool = False) -> None:
        self.rate, self.refuse = rate, refuse

    async def prompt_tokens(self, body: dict[str, Any]) -> int:
        tools = body.get("tools")
        if tools is None:
            return BASE_TOKENS
        if self.refuse:
            raise RequestFailedError('HTTP 400: "auto" tool choice requires --enable-auto-tool')
        return BASE_TOKENS + math.ceil(schema_chars(tools) / self.rate)


async def test_the_figure_is_the_tools_characters_over_their_tokens() -> None:
    assert await measure_json_chars_per_token(Counter(2.7)) == pytest.approx(2.7, rel=0.01)


async def test_an_engine_that_refuses_tools_gives_no_figure() -> None:
    assert await measure_json_chars_per_token(Counter(2.7, refuse=True)) is None


def test_no_figure_when_the_count_does_not_grow() -> None:
    assert json_chars_per_token(BASE_TOKENS, [(500, BASE_TOKENS)]) is None
    assert json_chars_per_token(BASE_TOKENS, [(300, 112), (700, 212)]) == pytest.approx(
        3.333, rel=0.001
    )


def test_the_probes_are_schemas_of_some_size() -> None:
    assert all(schema_chars(tools) > 200 for tools in PROBES)
