"""The weight format a quantization name declares: the one reading the control plane's
precision order (`control_plane/build/precision.py`) and the data plane's precision ladder
(`data_plane/decision/ladder.py`) share.

PURE: stdlib only. The name is split into tokens on anything but letters and digits, and each
token read as one of (docs/control_plane.md, "Precision"):

- a floating-point weight format: `fp32`/`float32`/`f32`, `bf16`/`bfloat16`, `fp16`/
  `float16`/`f16`/`half`, `fp8`/`float8`/`e4m3`/`e5m2`, `fp6`/`mxfp6`, `fp4`/`nvfp4`/`mxfp4`;
- an integer one: `int8`, `int4`, ... (any `intN`), `8bit`/`4bit`, `nf4`, GGUF's `q4_k_m`,
  `q5_k`, `q6_k`, `q8_0`, `iq4_xs` (the `qN`/`iqN` token: N bits);
- llm-compressor's `wNaM` (`w8a8`, `w4a16`, `w4afp8`): N-bit weights, integer unless the name
  also declares an N-bit floating format (`fp8-w8a8` is fp8);
- `awq`, `gptq`, `marlin`: integer weights, 4 bits unless the name says otherwise
  (`gptq-int8`);
- a KV-cache format (`fp8kv`, `kvfp8`, `kv-fp8`, `fp8-kv`, `kvcache-fp8`): not the weights,
  so `int4-fp8kv` is int4.

Anything else (`dynamic`, `instruct`, `k`, `m`) says nothing. A name that declares no weight
format, only a KV-cache one, or two different weight formats, is unreadable: the table build
refuses it unless `policy.precision_formats` declares it.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_FLOAT = re.compile(r"(?:nv|mx)?fp(\d+)|float(\d+)|f(16|32)|(bf16|bfloat16|half|e4m3|e5m2)")
_INT = re.compile(r"int(\d+)|(\d+)bit|i?q(\d)|nf(4)")
_WIDTHS = re.compile(r"w(\d+)a(?:\d+|fp\d+|int\d+)")
_INT_KINDS = frozenset({"awq", "gptq", "marlin"})
_KV = re.compile(r"kv(?:cache)?(.+)|(.+?)kv(?:cache)?")
_KV_WORDS = frozenset({"kv", "kvcache", "cache"})
_NAMED_FLOATS = {"bf16": "bf16", "bfloat16": "bf16", "half": "fp16", "e4m3": "fp8", "e5m2": "fp8"}
INTEGER_KIND_BITS = 4  # awq/gptq/marlin without a width


class UnreadablePrecisionError(ValueError):
    """A quantization name from which no single weight format can be read."""


class _Found(NamedTuple):
    formats: set[str]  # explicit formats: fp8, int4, bf16, ...
    widths: set[int]  # wNaM's N
    integer_kind: bool  # awq / gptq / marlin
    kv_only: bool  # a KV-cache format was the only format named


def _float_format(token: str) -> str | None:
    match = _FLOAT.fullmatch(token)
    if match is None:
        return None
    fp, flt, f, named = match.groups()
    if named is not None:
        return _NAMED_FLOATS[named]
    bits = fp or flt or f
    return f"fp{bits}"


def _format(token: str) -> str | None:
    """The weight format one token names, if it names one."""
    if (fmt := _float_format(token)) is not None:
        return fmt
    match = _INT.fullmatch(token)
    if match is None:
        return None
    return "int" + next(g for g in match.groups() if g is not None)


def _is_kv(tokens: list[str], at: int) -> bool:
    """Whether the format token at `at` is the KV cache's: right after a KV word (`kv-fp8`,
    `kv-cache-fp8`), or right before one that no format follows (`fp8-kv`; in `int4-kv-fp8`
    the fp8 is the cache's, the int4 the weights')."""
    if at > 0 and tokens[at - 1] in _KV_WORDS:
        return True
    after = at + 1
    if after >= len(tokens) or tokens[after] not in _KV_WORDS:
        return False
    while after < len(tokens) and tokens[after] in _KV_WORDS:
        after += 1
    return after >= len(tokens) or _format(tokens[after]) is None


def _kv_token(token: str) -> bool:
    """`fp8kv`, `kvfp8`, `kvcachefp8`, `fp8kvcache`: a KV-cache format in one token."""
    match = _KV.fullmatch(token)
    if match is None:
        return False
    inner = match.group(1) or match.group(2)
    return _format(inner) is not None


def _scan(name: str) -> _Found:
    tokens = [t for t in re.split(r"[^a-z0-9]+", name.lower()) if t]
    found = _Found(set(), set(), False, False)
    kv_seen = False
    integer_kind = False
    for at, token in enumerate(tokens):
        if _kv_token(token):
            kv_seen = True
        elif (widths := _WIDTHS.fullmatch(token)) is not None:
            found.widths.add(int(widths.group(1)))
        elif token in _INT_KINDS:
            integer_kind = True
        elif (fmt := _format(token)) is not None:
            if _is_kv(tokens, at):
                kv_seen = True
            else:
                found.formats.add(fmt)
    named = found.formats or found.widths or integer_kind
    return found._replace(integer_kind=integer_kind, kv_only=kv_seen and not named)


def weight_format(name: str) -> str:
    """The weight format `name` declares (`bf16`, `fp8`, `int4`, `int5`, ...); raises
    UnreadablePrecisionError saying why when there is none or more than one.

    >>> [weight_format(q) for q in ("bf16", "fp8-dynamic", "w8a8", "int4-fp8kv", "q5_k")]
    ['bf16', 'fp8', 'int8', 'int4', 'int5']
    """
    found = _scan(name)
    formats = set(found.formats)
    floats = {f for f in formats if not f.startswith("int")}
    for bits in found.widths:  # wNaM: N-bit weights, floating only where a float says so
        if not any(_bits(f) == bits for f in floats):
            formats.add(f"int{bits}")
    if not formats and found.integer_kind:
        formats.add(f"int{INTEGER_KIND_BITS}")
    if not formats:
        what = "only a KV-cache format" if found.kv_only else "no weight format"
        raise UnreadablePrecisionError(f"{name!r} declares {what}")
    if len({(_bits(f), f.startswith("int")) for f in formats}) > 1:
        raise UnreadablePrecisionError(
            f"{name!r} names more than one weight format ({', '.join(sorted(formats))})"
        )
    return sorted(formats)[0]  # one precision: bf16 before fp16


def _bits(fmt: str) -> int:
    return int(re.sub(r"\D", "", fmt))
