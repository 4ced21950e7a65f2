"""In-flight sums' pure planning (docs/data_plane.md, "In-flight sharing"): which epochs a
replica is in, the BITFIELD arguments of its changes, and the others' counts from the sums."""

from __future__ import annotations

import numpy as np

from data_plane.sync.command_link import pack_commands
from data_plane.sync.in_flight_epochs import (
    decoded,
    epoch_lengths,
    epochs_due,
    increments,
    named,
    others,
)


def test_a_dead_replica_is_out_of_the_sums_a_ttl_after_its_last_write() -> None:
    """The latest a replica can write is just before an epoch's end while in the lead of the
    next; the next one's reads end `period + lead` later: the TTL."""
    period, lead = epoch_lengths(1.0)
    assert period + lead == 1.0
    last_write = 3 * period - lead  # the first instant of epoch 3's lead
    assert epochs_due(last_write, period, lead) == (2, 3)
    assert epochs_due(3 * period + 0.5 * period, period, lead) == (3,)
    assert epochs_due(last_write + 1.0, period, lead) == (4,)  # 3 is no longer read


def test_a_replica_enters_the_next_epoch_only_within_the_lead() -> None:
    period, lead = epoch_lengths(2.0)
    assert epochs_due(10 * period + period / 2, period, lead) == (10,)
    assert epochs_due(11 * period - lead - 1e-6, period, lead) == (10,)
    assert epochs_due(11 * period - lead / 2, period, lead) == (10, 11)
    assert epochs_due(11 * period, period, lead) == (11,)


def test_increments_name_only_the_changed_positions_with_signed_deltas() -> None:
    changes = np.array([0, 3, 0, -12], dtype=np.int64)
    args, packed = increments(changes)
    assert args == [b"INCRBY", b"i32", b"#1", b"3", b"INCRBY", b"i32", b"#3", b"-12"]
    assert packed == pack_commands([args])[len(b"*8\r\n") :]  # as the link packs them
    assert increments(np.zeros(5, dtype=np.int64)) == ([], b"")


def test_two_changed_neighbours_take_one_i64_operation_at_the_first_ones_bit_offset() -> None:
    """Positions 2 and 3 changed: one INCRBY i64 at bit 64 adding 5 * 2**32 - 1 (the second
    count's decrease borrows nothing from the first while its sum stays >= 0); a run of
    three is a pair and a single."""
    args, packed = increments(np.array([0, 0, 5, -1, 0, 7], dtype=np.int64))
    pair = [b"INCRBY", b"i64", b"64", b"%d" % (5 * 2**32 - 1)]
    assert args == [*pair, b"INCRBY", b"i32", b"#5", b"7"]
    assert packed == pack_commands([args])[len(b"*8\r\n") :]
    run, _ = increments(np.array([-2, 1, 1], dtype=np.int64))
    pair = [b"INCRBY", b"i64", b"0", b"%d" % (-2 * 2**32 + 1)]
    assert run == [*pair, b"INCRBY", b"i32", b"#2", b"1"]
    whole, _ = increments(np.ones(333, dtype=np.int64))  # an entry with every endpoint busy
    assert len(whole) // 4 == 167


def test_the_sums_decode_as_bitfield_lays_them_out() -> None:
    """BITFIELD's i32 at #p is the p-th group of 4 bytes, most significant byte first."""
    raw = (5).to_bytes(4, "big") + (-1).to_bytes(4, "big", signed=True) + b"\x00\x01"
    assert decoded(raw).tolist() == [5, -1]  # a partial count is never a count
    assert decoded(None).tolist() == []


def test_the_others_are_the_sums_less_ours_never_below_zero() -> None:
    sums = np.array([5, 1, 0], dtype=np.int64)
    mine = np.array([2, 3, 0, 0], dtype=np.int64)
    assert others(sums, mine).tolist() == [3, 0, 0, 0]


def test_a_count_at_an_unknown_position_asks_for_the_index() -> None:
    counts = np.array([0, 2, 0, 1], dtype=np.int64)
    assert named(counts, ["a", "b", "c", "d"]) == {"b": 2.0, "d": 1.0}
    assert named(counts, ["a", "b", None]) is None
    assert named(np.array([0, 0, 0, 0], dtype=np.int64), ["a"]) == {}
