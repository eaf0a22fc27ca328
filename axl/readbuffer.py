"""Bytes a local server has read and not yet served, sans-IO: the bridge's
front door (its read-ahead) and the admin socket cut requests out of one.

One buffer with a read offset: serving a request off the front costs the
request's length, not the buffer's (slicing the rest of an immutable
buffer after each request, and concatenating each read onto all of it,
made a client pipelining small requests cost time quadratic in what it
had sent). Data that arrives while nothing is held is kept as it came,
uncopied.

A search for the end of a request resumes where the last one stopped
(`searched`): a request trickled in a byte at a time is looked through
once, not once per byte (the admin socket's reader, which began each
search at the front, spent 18.5 s of CPU on 30 KB sent a byte a
millisecond).
"""

from __future__ import annotations

# A buffer is compacted once this much of it has been served.
COMPACT_AFTER = 64 << 10


class ReadBuffer:
    """Bytes read and not yet served, and how far searches through them have looked."""

    def __init__(self) -> None:
        self.data: bytes | bytearray = b""
        self.front = 0  # data[front:] is what is held
        self.searched = 0  # no request ends before this offset of data

    def __len__(self) -> int:
        return len(self.data) - self.front

    def append(self, data: bytes) -> None:
        if not len(self):
            self.data, self.front, self.searched = data, 0, 0
            return
        if isinstance(self.data, bytes):
            self.data = bytearray(memoryview(self.data)[self.front:])
            self.searched = max(0, self.searched - self.front)
            self.front = 0
        self.data += data

    def find(self, terminator: bytes) -> int | None:
        """The length of what comes before the first `terminator` held, or
        None while none has arrived; the next search starts where this one
        gave up."""
        end = self.data.find(terminator, max(self.front, self.searched))
        if end < 0:
            self.searched = max(self.front, len(self.data) - len(terminator) + 1)
            return None
        return end - self.front

    def resume_at(self) -> int:
        """Where a search of the caller's own resumes (an offset of `data`);
        it says how far it looked with `looked_to`."""
        return max(self.front, self.searched)

    def looked_to(self, offset: int) -> None:
        self.searched = offset

    def peek(self, length: int) -> bytes:
        return bytes(self.data[self.front:self.front + length])

    def take(self, length: int) -> bytes:
        if self.front == 0 and length == len(self.data) and isinstance(self.data, bytes):
            data = self.data
        else:
            data = self.peek(length)
        self.skip(length)
        return data

    def take_all(self) -> bytes:
        return self.take(len(self))

    def skip(self, length: int) -> None:
        self.front += length
        if self.front == len(self.data):
            self.data, self.front, self.searched = b"", 0, 0
        elif (self.front >= COMPACT_AFTER and self.front * 2 >= len(self.data)
              and isinstance(self.data, bytearray)):
            del self.data[:self.front]
            self.searched = max(0, self.searched - self.front)
            self.front = 0
