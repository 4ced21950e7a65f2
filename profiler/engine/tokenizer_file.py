"""The served model's tokenizer file, where the profiler can read it: `/v1/models` names the
checkpoint an engine serves as `root` (vLLM: the directory or hub id it was started with); a
`tokenizer.json` in that directory, on this machine, is recorded in the report by where it
was read and its SHA-256 (docs/profiler.md, "Tokenizer"). Nothing is fetched: a hub id, or a
directory this machine cannot see, records nothing, logged once.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from tokenizers import Tokenizer

from contracts.tokenizer_ref import TOKENIZER_FILE, TokenizerRef, file_sha256

logger = logging.getLogger(__name__)


def tokenizer_path(root: str | None) -> Path | None:
    """The tokenizer file `root` names: a `tokenizer.json` itself, or one inside the
    directory; None when there is none on this machine."""
    if not root:
        return None
    path = Path(root)
    candidate = path if path.name == TOKENIZER_FILE else path / TOKENIZER_FILE
    try:
        return candidate if candidate.is_file() else None
    except OSError:  # a name the file system refuses (too long, ...)
        return None


def read_tokenizer_ref(path: Path) -> TokenizerRef:
    """The reference of a tokenizer file that loads (raises ValueError when it does not)."""
    try:
        Tokenizer.from_file(str(path))
    except Exception as err:  # the library raises a bare Exception for a bad file
        raise ValueError(f"{path} is not a tokenizer file: {err}") from err
    return TokenizerRef(id=str(path.resolve()), sha256=file_sha256(path))


async def find_tokenizer(url: str, root: str | None) -> TokenizerRef | None:
    """The tokenizer of the checkpoint `root` names, read off the event loop; None (logged)
    when there is no such file here or it does not load."""
    path = tokenizer_path(root)
    if path is None:
        logger.info(
            "%s: no tokenizer recorded: /v1/models root %r has no %s here",
            url,
            root,
            TOKENIZER_FILE,
        )
        return None
    try:
        return await asyncio.to_thread(read_tokenizer_ref, path)
    except (ValueError, OSError) as err:
        logger.warning("%s: no tokenizer recorded: %s", url, err)
        return None
