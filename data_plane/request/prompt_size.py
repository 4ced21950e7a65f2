"""The prompt the engine tokenizes, in characters: every part of a body, not its text alone.

PURE. `fields` (the fast path) and `body` (pydantic's) read a body's size through here, so the
one estimate (`RequestFacts.input_chars`, over the family's measured characters per token:
`decision.feasibility.input_tokens`) is what every consumer uses: latency prediction, the
context limit, cost, the engine's allowance for the first byte (`serving.attempt`), and the
accuracy checks' prompt cap.

What an engine tokenizes beyond the messages' text (docs/data_plane.md, "Prompt size"):
- `tools`: the chat template renders their JSON schema into the prompt; counted as the
  characters of that JSON with ", " and ": " separators (as templates' `tojson`), read from
  orjson's compact bytes plus one for each ',' and ':' in them (6.5x cheaper than
  `json.dumps` for 31.5k tokens of tools, 0.14 ms against 0.94 ms of CPU; a comma or colon
  inside a string counts one more, 1.6% over `json.dumps` on prose descriptions; a non-ASCII
  character counts its UTF-8 bytes);
- an assistant turn's `tool_calls`, rendered the same way;
- `documents` (RAG templates), rendered the same way;
- a `response_format` JSON schema (`{"type": "json_schema", "json_schema": {...}}`), the
  same way: vLLM hands it to guided decoding rather than the template, so there it is an
  over-estimate by the schema's size;
- image parts: counted (`ParsedBody.images`), each standing for IMAGE_CHARS (IMAGE_TOKENS at
  IMAGE_CHARS_PER_TOKEN) in `input_chars`; `category.request_facts` replaces that with the
  table's characters per image for the alias (`CompiledTable.image_chars`: the largest
  image_tokens x chars_per_token among its pairs, from the profile's measured tokens per image,
  IMAGE_TOKENS where a pair has none), so a model counting 2,880 tokens per image is sized at
  2,880, not 576, and a pair without the figure at 576 whatever its characters per token (on
  260b93e, 576 x 4 / c: 658 at 3.5). A pair under an alias with a larger figure (`auto` over
  families) is over-estimated by the ratio, as with JSON.
The template's own tokens (role headers, a few per turn) are added by `category.weighed_chars`
where the table carries them (`prompt_tokens.templated_chars`): `ParsedBody.messages` and
`tools_chars` (the `tools` part of `json_chars`) are counted here for it.

JSON (every part above but images) is counted apart as well (`ParsedBody.json_chars`): a
tokenizer splits JSON finer than prose (1.28-1.39x more tokens with gemma-3-270m's, 2.2x
under a template rendering it with indent=4: docs/data_plane.md "Prompt size"). Where the
profile measured the family's JSON characters per token, `category.request_facts` weighs
those characters by the table's `json_weight` for the alias; else JSON is priced at the
prose figure and tools-heavy prompts are under-estimated. `gearbox_prompt_estimate_ratio`
(the engine's `usage.prompt_tokens` over this estimate, per pair) shows by how much on live
traffic.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

IMAGE_TOKENS = 576  # one image part where the profile has no figure (a 336 px image, LLaVA-1.5)
IMAGE_CHARS_PER_TOKEN = 4.0  # the profile's default characters per token
IMAGE_CHARS = round(IMAGE_TOKENS * IMAGE_CHARS_PER_TOKEN)
IMAGE_PARTS = frozenset({"image_url", "image", "input_image"})


def rendered_chars(value: Any) -> int:
    """Characters of `value` as a chat template renders it: its JSON with ", " and ": "."""
    try:
        raw = orjson.dumps(value)
    except orjson.JSONEncodeError:  # what only the slow path decodes: an integer past 64
        return len(json.dumps(value, ensure_ascii=False))  # bits, a lone surrogate
    return len(raw) + raw.count(b",") + raw.count(b":")


def image_parts(content: list[Any]) -> int:
    """How many image parts a content list holds."""
    images = 0
    for part in content:
        if type(part) is dict and part.get("type") in IMAGE_PARTS:
            images += 1
    return images


def message_chars(message: dict[str, Any]) -> tuple[int, int]:
    """What a message adds beyond its text: (its `tool_calls` as rendered JSON, in
    characters; its image parts, counted: each stands for IMAGE_CHARS in `input_chars`)."""
    schema = images = 0
    calls = message.get("tool_calls")
    if calls:
        schema = rendered_chars(calls)
    content = message.get("content")
    if type(content) is list:
        images = image_parts(content)
    return schema, images


def body_chars(doc: dict[str, Any]) -> tuple[int, int]:
    """What a body adds beyond its messages, all rendered JSON: `tools`, `documents`, a
    response_format schema; and of those characters, the tools' (a chat template renders
    them its own way: `prompt_tokens.templated_chars`)."""
    tools = doc.get("tools")
    extra = tools_chars = rendered_chars(tools) if tools else 0
    documents = doc.get("documents")
    if documents:
        extra += rendered_chars(documents)
    fmt = doc.get("response_format")
    if type(fmt) is dict and fmt.get("type") == "json_schema":
        schema = fmt.get("json_schema")
        if schema:
            extra += rendered_chars(schema)
    return extra, tools_chars
