"""Small writes gathered into one system call per turn of the loop.

A /ws burst of a hundred acks or deliveries, written one frame at a time by
the session, reaches the transport as one write at the end of the loop's
turn instead of a hundred. Both the front door's own WebSocket
(axl.bridge.wsnative) and the transport it hands to the full application
(axl.bridge.front.HandedTransport) write through a TurnWriter.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from axl.eventloop import running_loop

# Writes smaller than this wait for the end of the turn; a larger one goes at
# once, after those gathered, and so does everything once this much waits.
GATHER_LIMIT: Final = 64 << 10


class TurnWriter:
    """Gathers small writes to `transport` until the end of the loop's turn.
    What is gathered when `ended()` says the connection is over, or the
    transport is closing, is dropped, as a write into it would be."""

    def __init__(self, transport: asyncio.WriteTransport, ended: Callable[[], bool]) -> None:
        self._transport = transport
        self._ended = ended
        self._parts: list[bytes] = []
        self._bytes = 0

    @property
    def gathered_bytes(self) -> int:
        return self._bytes

    def write(self, head: bytes, payload: bytes = b"") -> None:
        """Write `head` then `payload`; the caller gives bytes it will not
        change (a bytearray or memoryview must be copied first)."""
        if len(payload) >= GATHER_LIMIT or len(head) >= GATHER_LIMIT:
            self.flush()
            self._transport.write(head)
            if payload:
                self._transport.write(payload)
            return
        if not self._parts:
            running_loop().call_soon(self.flush)
        self._parts.append(head)
        if payload:
            self._parts.append(payload)
        self._bytes += len(head) + len(payload)
        if self._bytes >= GATHER_LIMIT:
            self.flush()

    def flush(self) -> None:
        """Write what was gathered, in one write."""
        parts = self._parts
        if not parts:
            return
        self._parts = []
        self._bytes = 0
        if self._ended() or self._transport.is_closing():
            return
        self._transport.write(parts[0] if len(parts) == 1 else b"".join(parts))

    def discard(self) -> None:
        """Forget what was gathered (the connection is gone)."""
        self._parts = []
        self._bytes = 0
