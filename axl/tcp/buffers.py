"""A connection's stream buffers, kept as chunks instead of one bytearray.

Send side: a bytearray appended at the back and cut at the front copies its
whole content whenever an append outgrows the space left behind the cut:
with a 4 MiB buffer refilled by 64 KiB per acknowledgement that averaged
43 us per segment, more than the copy of the segment itself. `SendBuffer`
keeps the chunks it was handed instead, by reference when they are
immutable (`bytes`, or a read-only view of `bytes`), so queueing a 16 MiB
message copies nothing and a segment inside one chunk is a view of it.

Receive side: a segment's payload is a read-only view of the session's
decrypted packet, which nothing else holds or changes. `ReceiveQueue` keeps
those views and hands a lone one over as it is, where appending to a
bytearray and copying it out cost two copies of every segment.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Final

_COMPACT_AFTER: Final = 64
"""Released chunk slots tolerated at the front before the lists are shortened."""

_RELEASED: Final = memoryview(b"")


class SendBuffer:
    """A queue of bytes read by offset from its front and dropped from the front.

    Chunks are found by their end offset in the stream (bisect), so reading a
    segment 4 MiB ahead of the front costs the same as reading the first.
    """

    def __init__(self) -> None:
        self._chunks: list[memoryview] = []
        self._ends: list[int] = []
        self._head = 0
        self._front = 0
        self._total = 0

    def __len__(self) -> int:
        return self._total - self._front

    def append(self, data: bytes | bytearray | memoryview) -> None:
        """Queue `data`; a mutable buffer is copied, since its owner may change it."""
        view = memoryview(data)
        if not (view.readonly and isinstance(view.obj, bytes) and view.c_contiguous
                and view.format == "B"):
            view = memoryview(bytes(view))
        if not view:
            return
        self._total += len(view)
        self._chunks.append(view)
        self._ends.append(self._total)

    def drop(self, count: int) -> None:
        """Forget the first `count` bytes (acknowledged), releasing whole chunks."""
        self._front = min(self._front + count, self._total)
        chunks, ends = self._chunks, self._ends
        while self._head < len(chunks) and ends[self._head] <= self._front:
            chunks[self._head] = _RELEASED
            self._head += 1
        if self._head >= _COMPACT_AFTER and self._head * 2 >= len(chunks):
            del chunks[:self._head]
            del ends[:self._head]
            self._head = 0

    def read(self, offset: int, size: int) -> bytes | memoryview:
        """`size` bytes from `offset` past the front: a view when one chunk holds
        them, else one joined copy. The range must lie inside the buffer."""
        if size == 0:
            return b""
        start = self._front + offset
        index = bisect_right(self._ends, start, self._head)
        chunk = self._chunks[index]
        skip = start - (self._ends[index] - len(chunk))
        piece = chunk[skip:skip + size]
        if len(piece) == size:
            return piece
        pieces = [piece]
        missing = size - len(piece)
        while missing:
            index += 1
            piece = self._chunks[index][:missing]
            pieces.append(piece)
            missing -= len(piece)
        return b"".join(pieces)


class ReceiveQueue:
    """In-order received bytes the application has not taken yet.

    Chunks must not change once queued: `bytes`, or read-only views of
    memory nobody else writes (a decrypted packet).
    """

    def __init__(self) -> None:
        self._chunks: list[bytes | memoryview] = []
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def append(self, data: bytes | memoryview) -> None:
        if data:
            self._chunks.append(data)
            self._size += len(data)

    def take(self, size: int = -1) -> bytes | memoryview:
        """Remove and return the first `size` bytes (all when negative): a lone
        chunk taken whole is returned as it is, anything else as one copy."""
        if size < 0 or size >= self._size:
            chunks, self._chunks, self._size = self._chunks, [], 0
            if len(chunks) == 1:
                return chunks[0]
            return b"".join(chunks)
        joined = b"".join(self._chunks)
        self._chunks = [joined[size:]] if size < len(joined) else []
        self._size -= size
        return joined[:size]
