"""Byte-level helpers shared by every protocol layer: Go-compatible uvarints
and a bounds-checked reader.

Decoders never trust a length they read: every `take` is checked against the
bytes actually present, so a hostile frame can make a decode fail but never
make it allocate or read past its buffer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final

MAX_UVARINT_LEN: Final = 10
# Largest ironwood link frame (type byte + body) yggdrasil accepts: 65535 x 2.
# A larger one closes the link at the receiver, so senders drop them instead.
MAX_FRAME = 131070
KEY_SIZE: Final = 32
SIG_SIZE = 64
# What a parser accepts: received bytes, a view into a read buffer, or a
# buffer being built. Said in full because a compiled build checks `bytes`
# exactly, and a memoryview is not bytes.
BytesLike = bytes | bytearray | memoryview


class DecodeError(ValueError):
    """A received byte string does not follow the wire format."""


class FrameType(IntEnum):
    """ironwood link frame types: 0-1 the link's own, 2-5 the tree, 6-9 queued traffic."""

    DUMMY = 0
    KEEPALIVE = 1
    SIGREQ = 2
    SIGRES = 3
    ANNOUNCE = 4
    BLOOM = 5
    PATH_LOOKUP = 6
    PATH_NOTIFY = 7
    PATH_BROKEN = 8
    TRAFFIC = 9


# BYTE[n] is bytes((n,)), made once. Compiled, bytes((n,)) builds a tuple
# and calls the bytes type on it (about 700 instructions); a lookup in this
# list allocates nothing, and gluing two costs one small concatenation.
BYTE: Final = [bytes((value,)) for value in range(256)]
_UVARINT_END: Final = 1 << 64


def encode_uvarint(value: int) -> bytes:
    """Minimal unsigned LEB128, as Go's binary.PutUvarint writes it."""
    if 0 <= value < 0x80:
        return BYTE[value]  # most: ports, sequence numbers, short lengths
    if value < 0 or value >= _UVARINT_END:
        raise ValueError(f"uvarint out of range: {value}")
    out = b""
    while value >= 0x80:
        out += BYTE[(value & 0x7F) | 0x80]
        value >>= 7
    return out + BYTE[value]


def decode_uvarint(buf: bytes | bytearray | memoryview, offset: int = 0) -> tuple[int, int]:
    """Decode one uvarint the way Go's binary.Uvarint does.

    Overlong (non-minimal) encodings are accepted, as Go accepts them; an
    11th byte, a 10th byte above 1 and truncation are errors. Returns the
    value and the offset just past it.
    """
    value = 0
    shift = 0
    end = len(buf)
    for i in range(MAX_UVARINT_LEN):
        pos = offset + i
        if pos >= end:
            raise DecodeError("truncated uvarint")
        byte = buf[pos]
        if byte < 0x80:
            if i == MAX_UVARINT_LEN - 1 and byte > 1:
                raise DecodeError("uvarint overflows 64 bits")
            return value | (byte << shift), pos + 1
        value |= (byte & 0x7F) << shift
        shift += 7
    raise DecodeError("uvarint longer than 10 bytes")


@dataclass
class Reader:
    """Sequential reader over one frame body; every read is bounds-checked."""

    buf: bytes | bytearray | memoryview
    pos: int = 0
    end: int = field(default=-1)

    def __post_init__(self) -> None:
        if self.end < 0:
            self.end = len(self.buf)

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def take(self, size: int) -> bytes:
        if size < 0 or size > self.remaining:
            raise DecodeError(f"need {size} bytes, have {self.remaining}")
        start = self.pos
        self.pos += size
        return bytes(self.buf[start:self.pos])

    def uvarint(self) -> int:
        value, self.pos = decode_uvarint(self.buf[:self.end], self.pos)
        return value

    def key(self) -> bytes:
        return self.take(KEY_SIZE)

    def sig(self) -> bytes:
        return self.take(SIG_SIZE)

    def rest(self) -> bytes:
        return self.take(self.remaining)

    def finish(self) -> None:
        """Require the body to be consumed exactly, as ironwood's decoders do."""
        if self.remaining:
            raise DecodeError(f"{self.remaining} trailing bytes")


def encode_frame(ftype: int, body: bytes = b"") -> bytes:
    """One link frame, `uvarint(N) || type || body` with N counting the type byte.
    Oversized frames are refused here, where Go would silently drop them, so
    the caller learns about its bug (the router drops them before, as Go does)."""
    size = len(body) + 1
    if size > MAX_FRAME:
        raise ValueError(f"frame of {size} bytes exceeds {MAX_FRAME}")
    return encode_uvarint(size) + BYTE[ftype] + body
