"""ironwood link framing, sans-IO: `uvarint(N) || type || body(N-1)`.

The decoder is fed whatever the transport delivered and hands back every
complete frame in it; Go closes the link on an empty frame, an oversized
length, a malformed length prefix or an unknown type, and so do we.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from axl.wire import MAX_FRAME, MAX_UVARINT_LEN, DecodeError, FrameType, decode_uvarint, encode_frame

__all__ = ["KEEPALIVE_FRAME", "MAX_FRAME", "MAX_FRAME_TYPE", "FrameDecoder", "FrameError",
           "FrameType", "encode_frame"]


MAX_FRAME_TYPE: Final = max(FrameType)
KEEPALIVE_FRAME = b"\x01\x01"


class FrameError(DecodeError):
    """The byte stream broke ironwood's framing; the link must close."""


class FrameDecoder:
    """Incremental frame splitter over a byte stream.

    `feed` returns an iterator; each frame is consumed from the buffer only
    when it is yielded, so a caller that stops iterating (because it closed
    the link) leaves the decoder consistent. A later `feed` supersedes an
    unfinished iterator.

    A frame split across feeds is gathered in one bytearray with a read
    offset, so each byte is copied a bounded number of times however finely
    the transport splits a frame (concatenating immutable bytes per chunk
    made a large frame fed in small pieces cost time quadratic in its number
    of pieces). While nothing is gathered, frames are read straight from the
    data fed and only an incomplete last one is copied in: a body is then
    copied once, into the bytes handed out, instead of twice.

    `data` must stay unchanged until its iterator is finished or the next
    `feed`: the link passes a view of a read buffer that the next read
    reuses, and finishes each iterator before that read.
    """

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self._pos = 0
        self._direct: bytes | bytearray | memoryview | None = None
        self._after: memoryview | None = None
        self._generation = 0
        self._max_frame = max_frame
        self._error: FrameError | None = None

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame waiting for more data."""
        if self._direct is not None:
            return len(self._direct) - self._pos
        return len(self._buf) - self._pos + (len(self._after) if self._after is not None else 0)

    def feed(self, data: bytes | bytearray | memoryview) -> Iterator[tuple[int, bytes]]:
        self._gather_unread()
        if self._pos:
            del self._buf[:self._pos]
            self._pos = 0
        self._generation += 1
        if not self._buf:
            self._direct = data
        else:
            take = self._completing(len(data))
            self._buf += data[:take]
            if take < len(data):
                self._after = memoryview(data)[take:]
        return self._frames(self._generation)

    def _completing(self, available: int) -> int:
        """How many fed bytes the gathered frame still needs (all of them
        while its length prefix is itself incomplete or malformed)."""
        try:
            size, start = decode_uvarint(self._buf, self._pos)
        except DecodeError:
            return available
        return min(available, max(0, start + size - len(self._buf)))

    def _gather_unread(self) -> None:
        """What an unfinished iterator left unread of the data fed moves into
        the buffer (that data may not outlive this feed)."""
        direct, self._direct = self._direct, None
        if direct is not None:
            self._buf += direct[self._pos:]
            self._pos = 0
        after, self._after = self._after, None
        if after is not None:
            self._buf += after

    def _fail(self, message: str) -> FrameError:
        self._error = FrameError(message)
        return self._error

    def _frames(self, generation: int) -> Iterator[tuple[int, bytes]]:
        """Frames from the gathered buffer, then straight from the data fed."""
        if self._error is not None:
            raise self._error
        while True:
            buf = self._buf if self._direct is None else self._direct
            while self._pos < len(buf) and self._generation == generation:
                pos = self._pos
                end = len(buf)
                size = buf[pos]
                start = pos + 1
                if size >= 0x80:
                    try:
                        size, start = decode_uvarint(buf, pos)
                    except DecodeError as exc:
                        if end - pos < MAX_UVARINT_LEN:
                            break
                        raise self._fail(f"bad frame length: {exc}") from None
                if size == 0:
                    raise self._fail("empty frame")
                if size > self._max_frame:
                    raise self._fail(f"frame length {size} over limit {self._max_frame}")
                if start + size > end:
                    break
                ftype = buf[start]
                if ftype > MAX_FRAME_TYPE:
                    raise self._fail(f"unknown frame type {ftype}")
                self._pos = start + size
                with memoryview(buf) as view:
                    body = bytes(view[start + 1:start + size])
                yield ftype, body
            if self._generation != generation:
                return
            if self._after is None or self._pos < len(buf):
                break
            self._buf.clear()
            self._pos = 0
            self._direct, self._after = self._after, None
        if self._direct is not None:
            self._gather_unread()
