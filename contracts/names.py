"""Names shared by every plane: families, quantizations, pairs, categories and URLs."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field

FAMILY_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,79}$"
QUANT_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,39}$"
CATEGORY_PATTERN = r"^[a-z][a-z0-9_-]{0,39}$"
PAIR_SEPARATOR = "@"

Family = Annotated[str, Field(pattern=FAMILY_PATTERN)]
Quantization = Annotated[str, Field(pattern=QUANT_PATTERN)]
Category = Annotated[str, Field(pattern=CATEGORY_PATTERN)]

# The categories docs/design.md names ("Words"); policies may add more.
KNOWN_CATEGORIES: tuple[str, ...] = ("chat", "extraction", "code", "math", "reasoning")


def pair_name(family: str, quantization: str) -> str:
    """`family@quantization`, the one spelling of a pair everywhere."""
    return f"{family}{PAIR_SEPARATOR}{quantization}"


def split_pair(pair: str) -> tuple[str, str]:
    """Inverse of `pair_name`; raises ValueError on anything else."""
    family, sep, quant = pair.partition(PAIR_SEPARATOR)
    if not sep or not family or not quant or PAIR_SEPARATOR in quant:
        raise ValueError(f"not a pair name (family@quantization): {pair!r}")
    return family, quant


def _check_http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http(s) URL with a host")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError("must not carry credentials, a query or a fragment")
    return value.rstrip("/")


HttpUrl = Annotated[str, Field(min_length=8, max_length=2048), AfterValidator(_check_http_url)]
