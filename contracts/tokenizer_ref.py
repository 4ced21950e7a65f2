"""The served model's tokenizer, as the profiler found it: a `tokenizer.json` named by where it
was read and by its content's SHA-256.

A profile and a table's pair entry may carry one (optional: older files load without it). The
data plane counts prompt tokens with the file whose SHA-256 matches, found locally, never
fetched (docs/data_plane.md, "Prompt size"); without one it prices prompts at the family's
measured characters per token. Where the profiler measured what the chat template adds
(`TemplateTokens`), the count adds it too.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
TOKENIZER_FILE = "tokenizer.json"  # the file a Hugging Face checkpoint directory holds


class TemplateTokens(BaseModel):
    """What the served model's chat template adds to a chat body's text, in tokens, as the
    profiler measured it from the engine's own `usage.prompt_tokens` against its count of
    `contracts.prompt_text`'s parts by the tokenizer file (docs/profiler.md, "Chat
    template"): turn markers and roles per message, a BOS and the generation prompt per
    prompt, and how it renders `tools` (a preamble, and the engine's tokens per counted
    token of their JSON: 0 for a template that renders none, 1 for `tojson`); `trims`,
    whether it strips each turn's text of surrounding whitespace (Jinja's `trim`, as Gemma's
    and Llama 3's templates do), which the count then strips too."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    fixed: float = Field(
        ge=-64.0, le=4096.0, description="tokens every chat prompt adds (BOS, generation prompt)"
    )
    per_message: float = Field(
        ge=-16.0, le=1024.0, description="tokens each message adds (its turn markers, its role)"
    )
    tools_fixed: float = Field(
        default=0.0, ge=-64.0, le=65536.0, description="tokens a body with tools adds (preamble)"
    )
    tools_scale: float = Field(
        default=1.0,
        ge=0.0,
        le=16.0,
        description="the engine's tokens per counted token of the tools' JSON (0: not rendered)",
    )
    trims: bool = Field(
        default=False,
        description="the template strips each turn's text of surrounding whitespace (`trim`)",
    )

    def added(self, messages: int, tools_tokens: float | None) -> float:
        """The tokens the template adds to a chat body's text (the tools apart): per prompt,
        per each of `messages` turns, and for tools of `tools_tokens` tokens (None: no tools)
        the preamble and the tokens it renders them as, in place of them. The one rule of
        both estimates: `tokens` (a count by the tokenizer) and the per-character estimate
        (`data_plane.request.prompt_tokens.templated_chars`, tokens estimated)."""
        added = self.fixed + self.per_message * messages
        if tools_tokens is not None:
            added += self.tools_fixed + self.tools_scale * tools_tokens
        return added

    def tokens(self, text_tokens: int, messages: int, tools_tokens: int | None) -> int:
        """A chat body's prompt tokens on the engine: its counted text (`text_tokens`, the
        tools apart), `messages` turns, and tools of `tools_tokens` counted tokens (None: no
        tools), rounded up; never below the counted text."""
        return max(text_tokens, math.ceil(text_tokens + self.added(messages, tools_tokens)))


class TokenizerRef(BaseModel):
    """A tokenizer file: `id` is where the profiler read it (the engine's checkpoint
    directory's `tokenizer.json`, from `/v1/models`' `root`), `sha256` its content's hash,
    which a data plane checks the file it loads against; `template`, what the served chat
    template adds to a chat body's text (absent: not measured, the text alone is counted);
    `special_tokens`, the tokenizer's special tokens (Gemma's `<bos>`), which vLLM's
    `/v1/completions` adds to each prompt by default (`add_special_tokens`) and a chat
    request gets from its template instead (absent: not measured, none counted)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str = Field(min_length=1, max_length=1000, description="where the file was read")
    sha256: Sha256 = Field(description="SHA-256 of the file's bytes")
    template: TemplateTokens | None = Field(
        default=None,
        description="what the chat template adds to a chat body's text, in tokens, measured "
        "from usage.prompt_tokens; absent: not measured (the text alone is counted)",
    )
    special_tokens: int | None = Field(
        default=None,
        ge=0,
        le=64,
        description="tokens the engine adds to each completions prompt (the tokenizer's BOS), "
        "measured from usage.prompt_tokens; absent: not measured (none counted)",
    )


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
