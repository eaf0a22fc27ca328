"""The bytes a connection was given to send and the peer has not acknowledged.

A bytearray that is appended at the back and cut at the front copies its
whole content whenever an append outgrows the space left behind the cut:
with a 4 MiB buffer refilled by 64 KiB per acknowledgement that averaged
43 us per segment, more than the copy of the segment itself. This buffer
keeps the chunks it was handed instead, by reference when they are
immutable (`bytes`, or a read-only view of `bytes`), so queueing a 16 MiB
message copies nothing and a segment inside one chunk is a view of it.
"""

from __future__ import annotations

from bisect import bisect_right

_COMPACT_AFTER = 64
"""Released chunk slots tolerated at the front before the lists are shortened."""

_RELEASED = memoryview(b"")


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
