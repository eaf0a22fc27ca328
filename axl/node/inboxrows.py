"""How the durable inbox lays its messages out: one row per commit.

A commit's messages go into one row of the `batches` table, as records one
after another; which of a row's records were delivered is a bitmap in the
`delivered` table; a row whose records were all delivered is deleted with
its bitmap. A row per message cost SQLite a B-tree insert and a delete per
message, and copied each 1 KiB payload into its own cell: about 10 us of
CPU per message on the event loop's thread, half the durable inbox's price
for small messages. One row per commit is one insert of a long value
(written into the pages as they come) and a small write per commit for the
deliveries: about 4 us per 1 KiB message (docs/performance-log.md,
"One row per commit").

This module is the layout alone, without SQLite: the records' bytes, and
which row holds each message not yet delivered (`MessageRows`), so that a
batch of deliveries becomes the rows to delete and the bitmaps to write.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final

from axl.wire import KEY_SIZE

# A message's record: its id, its sender's key, where its payload is, the
# payload's length; then the payload itself when it is IN_ROW.
RECORD: Final = struct.Struct(f"!Q{KEY_SIZE}sBI")
IN_ROW: Final = 0
APART = 1  # in a file of its own (axl.node.store)


class DamagedRow(ValueError):
    """A row's records do not parse."""


@dataclass(frozen=True, slots=True)
class Record:
    """One message as a row keeps it; `payload` is empty when it is APART."""

    id: int
    sender: bytes
    where: int
    size: int
    payload: bytes


def add_record(pieces: list[bytes], id_: int, sender: bytes, payload: bytes) -> None:
    """Append to a row's pieces a record whose payload stays in the row."""
    _check_sender(sender)
    pieces.append(RECORD.pack(id_, sender, IN_ROW, len(payload)))
    pieces.append(payload)


def add_apart_record(pieces: list[bytes], id_: int, sender: bytes, size: int) -> None:
    """Append to a row's pieces a record whose payload of `size` bytes is in a file of its own."""
    _check_sender(sender)
    pieces.append(RECORD.pack(id_, sender, APART, size))


def _check_sender(sender: bytes) -> None:
    if len(sender) != KEY_SIZE:
        raise ValueError(f"a sender key of {len(sender)} bytes")


def decode_records(row: bytes) -> Iterator[Record]:
    """The records of a row, in the order they were written."""
    view = memoryview(row)
    offset = 0
    while offset < len(row):
        if offset + RECORD.size > len(row):
            raise DamagedRow(f"a record cut short at byte {offset} of {len(row)}")
        id_, sender, where, size = RECORD.unpack_from(row, offset)
        offset += RECORD.size
        if where == APART:
            yield Record(id_, sender, where, size, b"")
            continue
        if where != IN_ROW or offset + size > len(row):
            raise DamagedRow(f"record of message {id_} does not fit its row")
        yield Record(id_, sender, where, size, bytes(view[offset:offset + size]))
        offset += size


def encode_bits(bits: int) -> bytes:
    """A delivered bitmap: bit i set when record i was delivered."""
    return bits.to_bytes((bits.bit_length() + 7) // 8, "little")


def decode_bits(blob: bytes) -> int:
    return int.from_bytes(blob, "little")


@dataclass
class DeliveryPlan:
    """What a batch of deliveries changes, before its commit: rows left
    with no message to deliver (deleted), and the new bitmaps of the others."""

    deletes: list[int] = field(default_factory=list)
    emptied: list[int] = field(default_factory=list)
    bitmaps: dict[int, int] = field(default_factory=dict)


class MessageRows:
    """Which row (by its first message's id) holds each message not yet
    delivered, at which position. `plan` works out what deliveries change
    without changing anything; `apply` records it once its commit
    succeeded, so that a failed commit leaves the rows as the file has them."""

    def __init__(self) -> None:
        self._place: dict[int, tuple[int, int]] = {}  # id -> (row, position)
        self._delivered: dict[int, int] = {}  # row -> its delivered bitmap
        self._count: dict[int, int] = {}  # row -> how many records it has

    def __len__(self) -> int:
        return len(self._count)

    def add(self, first: int, ids: Iterable[int], count: int, delivered: int = 0) -> None:
        """Row `first` of `count` records, with bitmap `delivered`; `ids`
        are its records' ids in order (those delivered already too)."""
        self._count[first] = count
        self._delivered[first] = delivered
        self._place.update((id_, (first, position)) for position, id_ in enumerate(ids)
                           if not delivered >> position & 1)

    def plan(self, deletes: Iterable[int]) -> DeliveryPlan:
        """The rows and bitmaps to write for these deliveries (ids this store
        does not hold, or named twice, change nothing more)."""
        plan = DeliveryPlan()
        bitmaps = plan.bitmaps
        place = self._place
        for id_ in deletes:
            where = place.get(id_)
            if where is None:
                continue
            plan.deletes.append(id_)
            first, position = where
            bitmaps[first] = bitmaps.get(first, self._delivered[first]) | 1 << position
        for first, bits in list(bitmaps.items()):
            if bits.bit_count() >= self._count[first]:
                plan.emptied.append(first)
                del bitmaps[first]
        return plan

    def apply(self, plan: DeliveryPlan) -> None:
        """The plan's commit succeeded."""
        place = self._place
        for id_ in plan.deletes:
            place.pop(id_, None)
        for first in plan.emptied:
            self._count.pop(first, None)
            self._delivered.pop(first, None)
        self._delivered.update(plan.bitmaps)
