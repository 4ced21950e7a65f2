"""The served model's tokenizer, as the profiler found it: a `tokenizer.json` named by where it
was read and by its content's SHA-256.

A profile and a table's pair entry may carry one (optional: older files load without it). The
data plane counts prompt tokens with the file whose SHA-256 matches, found locally, never
fetched (docs/data_plane.md, "Prompt size"); without one it prices prompts at the family's
measured characters per token.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
TOKENIZER_FILE = "tokenizer.json"  # the file a Hugging Face checkpoint directory holds


class TokenizerRef(BaseModel):
    """A tokenizer file: `id` is where the profiler read it (the engine's checkpoint
    directory's `tokenizer.json`, from `/v1/models`' `root`), `sha256` its content's hash,
    which a data plane checks the file it loads against."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str = Field(min_length=1, max_length=1000, description="where the file was read")
    sha256: Sha256 = Field(description="SHA-256 of the file's bytes")


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
