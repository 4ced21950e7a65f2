"""What the chat template adds, measured from the engine's usage against the tokenizer file's
count of the body's parts (docs/profiler.md, "Chat template"): tokens per prompt and per turn,
and the tools as the template renders them (a preamble and a scale; none at all; or not
measured when the engine refuses tools whatever the tool choice).

The engines here are `prompt_tokens` answers (the profiler's `PromptCounter` protocol) that
count with a real tokenizer file (tests/support/tiny_tokenizer.py) and add a known template;
the real Gemma template is measured against vLLM in tests/e2e/test_real_engine.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contracts.prompt_text import prompt_parts
from contracts.tokenizer_ref import TemplateTokens, TokenizerRef
from profiler.engine.client import RequestFailedError
from profiler.engine.template_tokens import fit, measure_template, with_template
from tests.support import tiny_tokenizer


class Engine:
    """Counts a chat body's text with the tokenizer file and adds `fixed` per prompt,
    `per_message` per turn and, for tools, `tools_fixed` plus `tools_scale` per counted
    token of their JSON; like vLLM without a tool parser, refuses tools unless
    `tool_choice` is "none" (`refuse_tools`: refuses them whatever the choice), each turn's
    text stripped where the template `trims`; counts a
    completions prompt's text and adds `special` (a BOS), or refuses it (None)."""

    def __init__(
        self,
        path: Path,
        template: TemplateTokens,
        refuse_tools: bool = False,
        special: int | None = 1,
    ) -> None:
        self.path, self.template, self.refuse_tools = path, template, refuse_tools
        self.special = special

    async def prompt_tokens(self, body: dict[str, Any]) -> int:
        parts = prompt_parts(body, self.template.trims)
        if parts.messages is None:
            if self.special is None:
                raise RequestFailedError("HTTP 404: Not Found")
            return tiny_tokenizer.count(self.path, parts.text) + self.special
        if parts.tools and (self.refuse_tools or body.get("tool_choice") != "none"):
            raise RequestFailedError('HTTP 400: "auto" tool choice requires a tool parser')
        text = tiny_tokenizer.count(self.path, parts.text)
        tools = tiny_tokenizer.count(self.path, parts.tools) if parts.tools else None
        assert parts.messages is not None
        return self.template.tokens(text, parts.messages, tools)


@pytest.fixture
def ref(tmp_path: Path) -> TokenizerRef:
    path = tiny_tokenizer.train(tmp_path / "model" / "tokenizer.json")
    return TokenizerRef(id=str(path), sha256=tiny_tokenizer.sha256(path))


@pytest.mark.parametrize(
    "template",
    [
        TemplateTokens(fixed=5, per_message=4, tools_fixed=0, tools_scale=0),  # Gemma's turns
        TemplateTokens(fixed=26, per_message=5, tools_fixed=41, tools_scale=2.0),  # indent=4
        TemplateTokens(fixed=1, per_message=3, tools_fixed=12, tools_scale=1.0),  # tojson
    ],
)
async def test_the_template_s_tokens_are_read_from_the_engine_s_count(
    ref: TokenizerRef, template: TemplateTokens
) -> None:
    measured = await measure_template(Engine(Path(ref.id), template), ref)
    assert measured is not None
    for name in ("fixed", "per_message", "tools_fixed", "tools_scale"):
        assert getattr(measured, name) == pytest.approx(getattr(template, name), abs=0.02), name


@pytest.mark.parametrize("trims", [True, False])
async def test_a_template_that_trims_each_turn_is_told_by_a_padded_turn(
    ref: TokenizerRef, trims: bool
) -> None:
    """The 1-turn conversation again with its text padded with spaces and newlines: the same
    count as without the padding where the template strips each turn (Gemma's `trim`)."""
    template = TemplateTokens(fixed=5, per_message=4, tools_scale=0, trims=trims)
    measured = await measure_template(Engine(Path(ref.id), template), ref)
    assert measured is not None
    assert measured.trims is trims
    assert (measured.fixed, measured.per_message) == (5.0, 4.0)


async def test_tools_the_engine_refuses_are_counted_as_their_json(ref: TokenizerRef) -> None:
    """The turns are still measured; the tools keep the text's count (scale 1, no preamble)."""
    template = TemplateTokens(fixed=5, per_message=4, tools_fixed=9, tools_scale=0)
    measured = await measure_template(Engine(Path(ref.id), template, refuse_tools=True), ref)
    assert measured == TemplateTokens(fixed=5, per_message=4, tools_fixed=0, tools_scale=1)


async def test_no_template_without_a_tokenizer_file_or_usage(ref: TokenizerRef) -> None:
    class Silent:
        async def prompt_tokens(self, body: dict[str, Any]) -> int:
            raise RequestFailedError("the answer carries no usage")

    assert await with_template(Silent(), None) is None
    assert await with_template(Silent(), ref) == ref
    missing = ref.model_copy(update={"id": str(Path(ref.id).with_name("gone.json"))})
    engine = Engine(Path(ref.id), TemplateTokens(fixed=1, per_message=1))
    assert await measure_template(engine, missing) is None


def test_noise_around_a_template_that_renders_no_tools_is_no_negative_scale() -> None:
    measured = fit([(1, 9), (3, 17), (5, 25)], [(100, 1), (300, -1), (900, 0)])
    assert (measured.fixed, measured.per_message) == (5.0, 4.0)
    assert (measured.tools_fixed, measured.tools_scale) == (0.0, 0.0)


@pytest.mark.parametrize("special", [0, 1, 2, None])
async def test_the_special_tokens_of_a_completions_prompt_are_read_from_the_engine_s_count(
    ref: TokenizerRef, special: int | None
) -> None:
    """vLLM's /v1/completions adds the tokenizer's special tokens (a BOS) to the prompt: one
    completions request's usage against the count of its text; an engine that answers no
    completions leaves them unmeasured, and the template is measured all the same."""
    gemma = TemplateTokens(fixed=5, per_message=4, tools_fixed=0, tools_scale=0)
    measured = await with_template(Engine(Path(ref.id), gemma, special=special), ref)
    assert measured is not None
    assert measured.special_tokens == special
    assert measured.template == gemma


async def test_an_engine_that_counts_fewer_than_the_text_gives_no_special_tokens(
    ref: TokenizerRef,
) -> None:
    gemma = TemplateTokens(fixed=5, per_message=4, tools_fixed=0, tools_scale=0)
    measured = await with_template(Engine(Path(ref.id), gemma, special=-2), ref)
    assert measured is not None
    assert measured.special_tokens is None
