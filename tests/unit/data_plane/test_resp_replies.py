"""Redis replies parsed from one receive buffer (`data_plane/sync/resp_replies.py`): every
reply type the link's commands get, in RESP2 and RESP3, and a buffer cut anywhere."""

from __future__ import annotations

import pytest
from redis.exceptions import InvalidResponse, ResponseError

from data_plane.sync.resp_replies import IncompleteReplyError, parse_replies

REPLIES = (
    b"+OK\r\n"  # SET
    b":1\r\n"  # SADD, PEXPIRE, SCARD
    b"*3\r\n$2\r\n\x00\r\r\n$-1\r\n_\r\n"  # MGET: a snapshot (any bytes), two nulls
    b"~2\r\n$1\r\na\r\n$1\r\nb\r\n"  # RESP3 SMEMBERS
    b"%1\r\n$1\r\nk\r\n:7\r\n"  # a map
    b"*-1\r\n"  # a null array
    b"-WRONGTYPE Operation against a key\r\n"
)


def test_every_reply_type_is_read() -> None:
    replies, used = parse_replies(REPLIES + b"+extra\r\n", 7)
    assert replies[:6] == [b"OK", 1, [b"\x00\r", None, None], [b"a", b"b"], {b"k": 7}, None]
    assert isinstance(replies[6], ResponseError)
    assert str(replies[6]) == "WRONGTYPE Operation against a key"
    assert used == len(REPLIES)  # the next reply's bytes are left alone


def test_a_buffer_cut_anywhere_asks_for_more() -> None:
    for cut in range(len(REPLIES)):
        with pytest.raises(IncompleteReplyError):
            parse_replies(REPLIES[:cut], 7)


def test_an_unknown_reply_type_is_refused() -> None:
    with pytest.raises(InvalidResponse):
        parse_replies(b"!5\r\nhello\r\n", 1)
