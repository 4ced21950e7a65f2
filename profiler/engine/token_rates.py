"""Characters per token of JSON schemas and tokens per image, measured from the engine's own
`usage.prompt_tokens`.

A chat template renders a request's `tools` into the prompt as JSON, and a tokenizer splits
JSON finer than prose (1.28-1.39x more tokens with gemma-3-270m's: docs/data_plane.md,
"Prompt size"). The data plane prices JSON at this figure when the profile carries it
(docs/profiler.md, "JSON characters per token").

The measure: the same chat request without tools and with each probe tools list; the token
difference over the character difference, summed over the probes. The template's own text
around the tools (a header, a few tokens) rides in the difference, as it does in traffic.
Characters are counted as the data plane counts them: the JSON with ", " and ": ".

Tokens per image: the same chat request with and without one inline PNG (`image_probe`), the
difference of the two counts (docs/profiler.md, "Tokens per image").
"""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol

from profiler.engine.client import RequestFailedError
from profiler.engine.image_probe import IMAGE_PART

logger = logging.getLogger(__name__)

_BASE: dict[str, Any] = {"messages": [{"role": "user", "content": "What is the weather?"}]}


class PromptCounter(Protocol):
    async def prompt_tokens(self, body: dict[str, Any]) -> int: ...


def _function(name: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    parameters = {"type": "object", "properties": properties, "required": sorted(properties)}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


WEATHER = _function(
    "get_weather",
    "Current weather for a city, in the unit the user asks for.",
    {
        "city": _string("The city name, e.g. Paris"),
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
)
# A response_format-like schema (nested objects, arrays, numbers) as a tool's parameters.
ORDER = _function(
    "record_order",
    "Record a customer's order with its lines and the delivery address.",
    {
        "customer_id": {"type": "integer", "minimum": 1},
        "lines": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "sku": _string("Stock keeping unit"),
                    "quantity": {"type": "integer", "minimum": 1, "maximum": 999},
                    "unit_price": {"type": "number"},
                },
                "required": ["sku", "quantity"],
            },
        },
        "address": {
            "type": "object",
            "properties": {"street": _string("Street and number"), "zip": _string("Postcode")},
        },
        "express": {"type": "boolean", "default": False},
    },
)
PROBES: tuple[list[dict[str, Any]], ...] = ([WEATHER], [WEATHER, ORDER], [ORDER] * 4)


def schema_chars(tools: list[dict[str, Any]]) -> int:
    """Characters of a tools list as the data plane counts them (ASCII probes)."""
    return len(json.dumps(tools))


def json_chars_per_token(base_tokens: int, probe_tokens: list[tuple[int, int]]) -> float | None:
    """Summed character difference over summed token difference, from (chars, tokens) of
    each probe; None when the engine's count did not grow with the schema."""
    chars = sum(c for c, _ in probe_tokens)
    tokens = sum(t - base_tokens for _, t in probe_tokens)
    if chars <= 0 or tokens <= 0:
        return None
    return chars / tokens


async def measure_json_chars_per_token(client: PromptCounter) -> float | None:
    """The figure for this engine; None (logged) when it refuses tools or gives no usage."""
    try:
        base = await client.prompt_tokens(_BASE)
        counts = [
            (schema_chars(tools), await client.prompt_tokens({**_BASE, "tools": tools}))
            for tools in PROBES
        ]
    except RequestFailedError as err:
        logger.warning("JSON characters per token not measured: %s", err)
        return None
    figure = json_chars_per_token(base, counts)
    if figure is None:
        logger.warning("JSON characters per token not measured: tools added no prompt tokens")
    return figure


_ASK = {"type": "text", "text": "What is in this picture?"}


async def measure_image_tokens(client: PromptCounter) -> int | None:
    """Prompt tokens of one image part on this engine; None (logged) when it refuses images
    (a text-only model answers 4xx), gives no usage, or the image added no tokens."""
    try:
        base = await client.prompt_tokens(_image_body([_ASK]))
        probe = await client.prompt_tokens(_image_body([_ASK, IMAGE_PART]))
    except RequestFailedError as err:
        logger.warning("tokens per image not measured: %s", err)
        return None
    if probe <= base:
        logger.warning("tokens per image not measured: the image added no prompt tokens")
        return None
    return probe - base


def _image_body(content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}]}
