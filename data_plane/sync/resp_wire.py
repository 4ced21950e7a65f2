"""RESP on a redis-py connection, for the links that send plain commands again and again
(`command_link.py`, `cluster_link.py`): commands packed once, replies read from one receive
buffer (`resp_replies.py`) rather than element by element."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse

from data_plane.sync.resp_replies import IncompleteReplyError, parse_replies

Arg = str | bytes | int | float


@dataclass(frozen=True, slots=True)
class Packed:
    """A command packed once and sent many times (a long MGET whose keys rarely change)."""

    args: tuple[Arg, ...]
    resp: bytes

    @classmethod
    def of(cls, *args: Arg) -> Packed:
        return cls(args, pack_commands([args]))


Command = Sequence[Arg] | Packed


def _bulk(arg: Arg) -> bytes:
    """One RESP bulk string, encoded as redis-py encodes it (str UTF-8, int str, float repr)."""
    if isinstance(arg, bytes):
        data = arg
    elif isinstance(arg, str):
        data = arg.encode()
    else:
        data = (repr(arg) if isinstance(arg, float) else str(arg)).encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


def pack_commands(commands: Sequence[Command]) -> bytes:
    """The commands as RESP, one after the other (PURE). redis-py's general packer spent 40%
    of an exchange's client CPU on in-flight sharing's calls (cProfile, 8 calls of ~20
    arguments each)."""
    parts: list[bytes] = []
    for command in commands:
        if isinstance(command, Packed):
            parts.append(command.resp)
        else:
            parts.append(b"*%d\r\n" % len(command))
            parts += map(_bulk, command)
    return b"".join(parts)


async def receive(conn: AbstractConnection, count: int) -> list[Any]:
    """`count` replies, from one receive buffer (`resp_replies`), not element by element."""
    reader: asyncio.StreamReader | None = getattr(conn, "_reader", None)
    if reader is None:
        raise RedisConnectionError("the connection closed")
    buffer = b""
    while True:
        chunk = await reader.read(1 << 16)
        if not chunk:
            raise RedisConnectionError("Redis closed the connection")
        buffer += chunk
        try:
            replies, used = parse_replies(buffer, count)
        except IncompleteReplyError:
            continue
        if used != len(buffer):
            raise InvalidResponse("more bytes than the replies asked for")
        return replies
