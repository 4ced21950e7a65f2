"""Redis replies parsed straight from the bytes received (PURE), for `CommandLink`.

redis-py's pure-Python parser reads a reply element by element through asyncio's stream
(a readline and a readexactly per element): an MGET of 63 snapshots cost in-flight sharing
about 2 ms of a replica's CPU per exchange (cProfile, 64 replicas x 200 endpoints), ten
times what the rest of the exchange costs. Here one receive buffer is cut with `bytes.find`
and slicing. Only the reply types the link's commands get are read (RESP2 and RESP3):
simple strings, errors, integers, bulk strings, arrays, sets, maps and nulls.
"""

from __future__ import annotations

from typing import Any

from redis.exceptions import InvalidResponse, ResponseError


class IncompleteReplyError(Exception):
    """The buffer ends before the reply does: receive more and parse again."""


def parse_replies(buffer: bytes, count: int) -> tuple[list[Any], int]:
    """`count` replies from the head of `buffer` and how many bytes they took (PURE). An
    error reply is a `ResponseError` in the list, not raised. Raises `IncompleteReplyError`."""
    replies: list[Any] = []
    at = 0
    for _ in range(count):
        reply, at = _parse(buffer, at)
        replies.append(reply)
    return replies, at


def _line(buffer: bytes, at: int) -> tuple[bytes, int]:
    end = buffer.find(b"\r\n", at)
    if end < 0:
        raise IncompleteReplyError
    return buffer[at:end], end + 2


def _parse(buffer: bytes, at: int) -> tuple[Any, int]:
    if at >= len(buffer):
        raise IncompleteReplyError
    kind = buffer[at : at + 1]
    line, at = _line(buffer, at + 1)
    if kind == b"$":
        size = int(line)
        if size < 0:
            return None, at
        if len(buffer) < at + size + 2:
            raise IncompleteReplyError
        return buffer[at : at + size], at + size + 2
    if kind in (b"*", b"~", b"%"):
        size = int(line) * (2 if kind == b"%" else 1)
        if size < 0:
            return None, at
        items, at = _items(buffer, at, size)
        return (dict(zip(items[::2], items[1::2], strict=True)) if kind == b"%" else items), at
    return _simple(kind, line), at


def _items(buffer: bytes, at: int, size: int) -> tuple[list[Any], int]:
    """An aggregate's `size` elements; bulk strings (most of them) read inline."""
    items: list[Any] = []
    for _ in range(size):
        if not buffer.startswith(b"$", at):
            item, at = _parse(buffer, at)
            items.append(item)
            continue
        end = buffer.find(b"\r\n", at)
        if end < 0:
            raise IncompleteReplyError
        length = int(buffer[at + 1 : end])
        if length < 0:
            items.append(None)
            at = end + 2
            continue
        at = end + 4 + length
        if len(buffer) < at:
            raise IncompleteReplyError
        items.append(buffer[end + 2 : at - 2])
    return items, at


def _simple(kind: bytes, line: bytes) -> Any:
    if kind == b":":
        return int(line)
    if kind == b"+":
        return line
    if kind == b"-":
        return ResponseError(line.decode(errors="replace").removeprefix("ERR "))
    if kind == b"_":
        return None
    raise InvalidResponse(f"unexpected reply type {kind!r}")
