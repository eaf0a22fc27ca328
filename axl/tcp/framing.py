"""AXL message framing on a TCP stream: u32be length || body, repeated.

The Go node reads the 4-byte length first and closes the connection if it is
over its limit (16 MiB by default; exactly the limit and 0 are allowed), so
the decoder refuses an oversize message from its header alone, before any of
the body is buffered.
"""

from __future__ import annotations

import struct
from collections import deque

from axl.wire import BytesLike, DecodeError

LENGTH_SIZE = 4
DEFAULT_MAX_MESSAGE_SIZE = 16 * 1024 * 1024
_LENGTH = struct.Struct("!I")


class MessageTooLarge(DecodeError):
    """A length header announced a message over the configured limit."""

    def __init__(self, size: int, max_size: int) -> None:
        super().__init__(f"message of {size} bytes exceeds the limit of {max_size}")
        self.size = size
        self.max_size = max_size


def message_header(length: int) -> bytes:
    """The 4-byte length prefix; lets a sender write a large body without copying it."""
    return _LENGTH.pack(length)


def encode_message(body: BytesLike) -> bytes:
    """Header and body as one buffer (fine for small messages)."""
    view = memoryview(body)
    return _LENGTH.pack(view.nbytes) + view


class MessageDecoder:
    """Incremental decoder: feed stream bytes, get complete message bodies.

    After a MessageTooLarge the stream is unusable (the sender and we no
    longer agree on message boundaries); the caller closes the connection.
    """

    def __init__(self, max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        self.max_size = max_size
        # Received chunks kept as they came: a 16 MiB message is copied once,
        # when it is complete, instead of on every append and removal.
        self._chunks: deque[memoryview] = deque()
        self._buffered = 0
        self._expected: int | None = None

    @property
    def partial(self) -> bool:
        """True while part of a message is buffered: the read deadline applies."""
        return self._buffered > 0 or self._expected is not None

    @property
    def buffered(self) -> int:
        return self._buffered

    def feed(self, data: BytesLike) -> list[bytes]:
        """Append stream bytes; return every message they complete, in order."""
        if len(data):
            # Keep a private immutable copy only when the caller's buffer may change.
            self._chunks.append(memoryview(data if isinstance(data, bytes) else bytes(data)))
            self._buffered += len(data)
        messages: list[bytes] = []
        while True:
            if self._expected is None:
                if self._buffered < LENGTH_SIZE:
                    return messages
                size = _LENGTH.unpack(self._take(LENGTH_SIZE))[0]
                if size > self.max_size:
                    raise MessageTooLarge(size, self.max_size)
                self._expected = size
            if self._buffered < self._expected:
                return messages
            messages.append(self._take(self._expected))
            self._expected = None

    def _take(self, size: int) -> bytes:
        """Remove and return the first `size` buffered bytes (all present)."""
        parts: list[memoryview] = []
        needed = size
        while needed:
            chunk = self._chunks[0]
            if len(chunk) <= needed:
                parts.append(self._chunks.popleft())
                needed -= len(chunk)
            else:
                parts.append(chunk[:needed])
                self._chunks[0] = chunk[needed:]
                needed = 0
        self._buffered -= size
        return parts[0].tobytes() if len(parts) == 1 else b"".join(parts)
