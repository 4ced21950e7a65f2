"""JSON characters per token and tokens per image from the engine's usage: token difference
over character difference, the image's token difference, and no figure when the engine refuses
tools or images or its count does not grow."""

from __future__ import annotations

import base64
import math
import struct
import zlib
from typing import Any

import pytest

from profiler.engine.client import RequestFailedError
from profiler.engine.image_probe import IMAGE_PART, PNG_DATA_URL, PROBE_SIDE
from profiler.engine.token_rates import (
    PROBES,
    json_chars_per_token,
    measure_image_tokens,
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


class Viewer:
    """An engine that counts each image part as `per_image` tokens, or refuses images with
    `refuse` (a text-only model's 4xx), or answers without usage (`no_usage`)."""

    def __init__(self, per_image: int, refuse: str | None = None) -> None:
        self.per_image, self.refuse = per_image, refuse
        self.bodies: list[dict[str, Any]] = []

    async def prompt_tokens(self, body: dict[str, Any]) -> int:
        self.bodies.append(body)
        content = body["messages"][0]["content"]
        images = sum(1 for part in content if part["type"] == "image_url")
        if images and self.refuse is not None:
            raise RequestFailedError(self.refuse)
        return BASE_TOKENS + images * self.per_image


async def test_tokens_per_image_are_the_image_s_token_difference() -> None:
    """One request with the probe image and one without; the same text in both."""
    viewer = Viewer(1_500)
    assert await measure_image_tokens(viewer) == 1_500
    text, image = viewer.bodies
    assert image["messages"][0]["content"] == [*text["messages"][0]["content"], IMAGE_PART]


@pytest.mark.parametrize(
    "refusal",
    [
        'HTTP 400: "gemma-3-270m is not a multimodal model"',
        "the answer carries no usage",
    ],
)
async def test_an_engine_that_refuses_images_gives_no_figure(
    refusal: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A text-only model (gemma-3-270m on vLLM) answers an image part with a 4xx, and an
    engine without usage says nothing: None, logged once, not an error."""
    with caplog.at_level("WARNING"):
        assert await measure_image_tokens(Viewer(576, refuse=refusal)) is None
    assert [r.getMessage() for r in caplog.records] == [f"tokens per image not measured: {refusal}"]


async def test_no_figure_when_the_image_adds_no_tokens() -> None:
    assert await measure_image_tokens(Viewer(0)) is None


def test_the_probe_image_is_a_valid_png_of_its_stated_side() -> None:
    """The data URL decodes to a PNG whose chunks' CRCs hold and whose pixels are
    PROBE_SIDE rows of PROBE_SIDE RGB pixels (a decoder would accept it), in under 2 KB."""
    prefix = "data:image/png;base64,"
    assert PNG_DATA_URL.startswith(prefix)
    assert len(PNG_DATA_URL) < 2_000
    png = base64.b64decode(PNG_DATA_URL[len(prefix) :])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    at, chunks = 8, {}
    while at < len(png):
        (size,) = struct.unpack(">I", png[at : at + 4])
        tag, data = png[at + 4 : at + 8], png[at + 8 : at + 8 + size]
        (crc,) = struct.unpack(">I", png[at + 8 + size : at + 12 + size])
        assert crc == zlib.crc32(tag + data)
        chunks[tag] = data
        at += 12 + size
    assert list(chunks) == [b"IHDR", b"IDAT", b"IEND"]
    assert struct.unpack(">IIBBBBB", chunks[b"IHDR"]) == (PROBE_SIDE, PROBE_SIDE, 8, 2, 0, 0, 0)
    assert len(zlib.decompress(chunks[b"IDAT"])) == PROBE_SIDE * (1 + 3 * PROBE_SIDE)
