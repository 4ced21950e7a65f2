"""A batch's replies read by hiredis from the chunks received (`data_plane/sync/command_link.py`
`Replies`): every reply type the link's commands get, in RESP2 and RESP3, the bytes cut
anywhere, and what puts the link out of step refused."""

from __future__ import annotations

import pytest
from redis.exceptions import InvalidResponse, ResponseError

from data_plane.sync.command_link import Replies

REPLIES = (
    b"+OK\r\n"  # SET
    b":1\r\n"  # SADD, PEXPIRE, SCARD
    b"*3\r\n$2\r\n\x00\r\r\n$-1\r\n_\r\n"  # MGET: a snapshot (any bytes), two nulls
    b"~2\r\n$1\r\na\r\n$1\r\nb\r\n"  # RESP3 SMEMBERS
    b"%1\r\n$1\r\nk\r\n:7\r\n"  # a map
    b"*-1\r\n"  # a null array
    b"-WRONGTYPE Operation against a key\r\n"
    b"-ERR unknown command 'NOPE'\r\n"
)
COUNT = 8


def _check(replies: list[object] | None) -> None:
    assert replies is not None
    assert replies[:6] == [b"OK", 1, [b"\x00\r", None, None], [b"a", b"b"], {b"k": 7}, None]
    assert [type(r) for r in replies[6:]] == [ResponseError, ResponseError]
    assert str(replies[6]) == "WRONGTYPE Operation against a key"
    assert str(replies[7]) == "unknown command 'NOPE'"  # as redis-py words it: no "ERR "


def test_every_reply_type_is_read() -> None:
    _check(Replies(COUNT).feed(REPLIES))


def test_bytes_cut_anywhere_ask_for_more_then_give_every_reply() -> None:
    for cut in range(1, len(REPLIES)):
        replies = Replies(COUNT)
        assert replies.feed(REPLIES[:cut]) is None, cut
        _check(replies.feed(REPLIES[cut:]))


def test_one_byte_at_a_time_gives_every_reply_with_the_last() -> None:
    replies = Replies(COUNT)
    for at in range(len(REPLIES) - 1):
        assert replies.feed(REPLIES[at : at + 1]) is None, at
    _check(replies.feed(REPLIES[-1:]))


def test_bytes_beyond_the_last_reply_are_refused() -> None:
    with pytest.raises(InvalidResponse, match="more bytes"):
        Replies(COUNT).feed(REPLIES + b"+extra\r\n")
    replies = Replies(1)  # the extra bytes arrive with the rest of the reply
    assert replies.feed(b"$3\r\nab") is None
    with pytest.raises(InvalidResponse, match="more bytes"):
        replies.feed(b"c\r\n:1")


def test_an_unknown_reply_type_is_a_protocol_error() -> None:
    with pytest.raises(InvalidResponse):
        Replies(1).feed(b"@5\r\nhello\r\n")
