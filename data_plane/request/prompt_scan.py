"""One read of a prompt: the window the category model looks at, its bytes and its words.

PURE. Long prompts are read through a head + tail window (the head carries the ask and the
code fences, the tail the question that follows pasted material), so classification costs
the same for 4 KB and 32 KB. ASCII text is split as bytes (cheaper), other text as str; the
two splits give the same words (tested). The terms these words make are defined once, in
`contracts/category_model.py`, for the trainer and this reader alike.
"""

from __future__ import annotations

from typing import NamedTuple

from contracts.category_model import FOLDED, prompt_window

Word = str | bytes  # ASCII text is split as bytes, other text as str

# The contract's folding (keeps '-', '+' and '_' in words), for str and for ASCII bytes.
_SPLIT = str.maketrans(dict.fromkeys(FOLDED, " "))
# The same for ASCII bytes; str.split() also splits at \x1c-\x1f, bytes.split() does not.
_ASCII_SPLIT = bytes.maketrans(FOLDED.encode() + bytes(range(0x1C, 0x20)), b" " * (len(FOLDED) + 4))


def split_words(text: str, ascii_bytes: bytes | None) -> list[Word]:
    """`text` lowercased, punctuation folded to spaces, split; `ascii_bytes` is `text` encoded
    when it is ASCII (the same words, as bytes, from cheaper byte operations)."""
    if ascii_bytes is not None:
        return ascii_bytes.lower().translate(_ASCII_SPLIT).split()  # type: ignore[return-value]
    return text.lower().translate(_SPLIT).split()  # type: ignore[return-value]


class PromptScan(NamedTuple):
    """The window, its UTF-8 bytes, its words and their set. Words are bytes when the window
    is ASCII (`ascii_raw` is then `raw`), else str."""

    chars: int  # length of the whole text
    window: str
    raw: bytes
    ascii_raw: bytes | None
    words: list[Word]
    distinct: set[Word]


def scan_prompt(text: str) -> PromptScan:
    """The window of `text` read once (see `PromptScan`)."""
    part = prompt_window(text)
    # surrogatepass: JSON may carry a lone surrogate (\ud800), which strict UTF-8 refuses
    raw = part.encode("utf-8", "surrogatepass")
    ascii_raw = raw if part.isascii() else None
    words = split_words(part, ascii_raw)
    return PromptScan(len(text), part, raw, ascii_raw, words, set(words))
