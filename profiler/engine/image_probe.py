"""The image part the profiler sends to measure a model's tokens per image: an inline PNG.

No network and no file: a solid grey PROBE_SIDE x PROBE_SIDE PNG written here with zlib (a few
hundred bytes as base64). The side is 336 px, LLaVA-1.5's input (576 tokens there), so a model
that counts tokens by resolution (Qwen2-VL: one token per 28 x 28 px) is measured at a small
photo's size rather than at its minimum (a 1 px image is 4 tokens in Qwen2-VL); a model with a
fixed figure (LLaVA-1.5 576, Gemma 3 256) gives that figure whatever the size
(docs/profiler.md, "Tokens per image").
"""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Any

PROBE_SIDE = 336
_GREY = b"\x80\x80\x80"  # one RGB pixel


def _chunk(tag: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(tag + data)
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", crc)


def solid_png(side: int) -> bytes:
    """A side x side 8-bit RGB PNG of one grey: each row is filter byte 0 and its pixels."""
    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    rows = (b"\x00" + _GREY * side) * side
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(rows, 9))
        + _chunk(b"IEND", b"")
    )


PNG_DATA_URL = "data:image/png;base64," + base64.b64encode(solid_png(PROBE_SIDE)).decode()
IMAGE_PART: dict[str, Any] = {"type": "image_url", "image_url": {"url": PNG_DATA_URL}}
