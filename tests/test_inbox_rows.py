"""The durable inbox's layout, without SQLite: a commit's records in one
row, and which rows a batch of deliveries empties or leaves partly delivered."""

from __future__ import annotations

import pytest

from axl.node.inboxrows import (APART, IN_ROW, RECORD, DamagedRow, MessageRows, add_apart_record, add_record,
                                decode_bits, decode_records, encode_bits)

SENDER = b"\x02" * 32


def test_records_read_back_as_written_payloads_in_the_row_or_apart() -> None:
    pieces: list[bytes] = []
    add_record(pieces, 7, SENDER, b"hello")
    add_apart_record(pieces, 8, SENDER, 1 << 20)
    add_record(pieces, 9, SENDER, b"")
    records = list(decode_records(b"".join(pieces)))
    assert [(r.id, r.sender, r.where, r.size, r.payload) for r in records] == [
        (7, SENDER, IN_ROW, 5, b"hello"), (8, SENDER, APART, 1 << 20, b""), (9, SENDER, IN_ROW, 0, b"")]


def test_a_sender_key_of_another_length_is_refused_not_padded() -> None:
    with pytest.raises(ValueError, match="sender key of 31 bytes"):
        add_record([], 1, SENDER[:31], b"x")


@pytest.mark.parametrize("row", [
    RECORD.pack(1, SENDER, IN_ROW, 10) + b"short",  # a payload longer than the row
    RECORD.pack(1, SENDER, IN_ROW, 0)[:-1],  # a record cut short
    RECORD.pack(1, SENDER, 9, 0),  # neither in the row nor apart
])
def test_a_damaged_row_is_named_as_such(row: bytes) -> None:
    with pytest.raises(DamagedRow):
        list(decode_records(row))


def test_bitmaps_round_trip() -> None:
    for bits in (0, 1, 0b1010, 1 << 999 | 1):
        assert decode_bits(encode_bits(bits)) == bits


def test_deliveries_mark_a_row_until_its_last_message_empties_it() -> None:
    rows = MessageRows()
    rows.add(10, [10, 11, 12], 3)
    rows.add(13, [13, 14], 2)
    plan = rows.plan([11, 13, 14])
    assert plan.deletes == [11, 13, 14]
    assert plan.bitmaps == {10: 0b010} and plan.emptied == [13]
    rows.apply(plan)
    assert len(rows) == 1
    plan = rows.plan([10, 12])
    assert plan.emptied == [10] and plan.bitmaps == {}
    rows.apply(plan)
    assert len(rows) == 0


def test_a_plan_not_applied_changes_nothing_and_unknown_or_repeated_ids_change_nothing_more() -> None:
    rows = MessageRows()
    rows.add(1, [1, 2], 2)
    rows.plan([1, 2])  # its commit failed: not applied
    plan = rows.plan([1, 1, 99])
    assert plan.deletes == [1, 1] and plan.bitmaps == {1: 0b01} and plan.emptied == []
    rows.apply(plan)
    assert rows.plan([1]).deletes == []  # delivered already
    assert rows.plan([2]).emptied == [1]


def test_a_row_read_back_partly_delivered_holds_only_its_other_messages() -> None:
    rows = MessageRows()
    rows.add(5, [5, 6, 7], 3, delivered=0b101)
    assert rows.plan([5, 7]).deletes == []
    assert rows.plan([6]).emptied == [5]
