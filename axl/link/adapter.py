"""An asyncio Transport over a carrier that is not a socket: a WebSocket or a
QUIC stream.

The link protocol (`Connection`) is written against asyncio's
Transport/Protocol pair; this adapter lets it run unchanged on any carrier
that can send bytes, deliver bytes and close. Writes are buffered and
handed to the carrier's (possibly async) `send` by one writer task, and the
protocol is told to pause above HIGH_WATER buffered bytes, as a socket
transport would.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, Protocol

from axl.tasks import start_task

HIGH_WATER = 1024 * 1024
LOW_WATER = 256 * 1024
log = logging.getLogger("axl.link")


class Carrier(Protocol):
    """The few things the adapter needs from a WebSocket or QUIC stream."""

    async def send(self, data: bytes) -> None: ...

    async def finish(self) -> None:
        """End the stream politely once everything sent has been sent."""

    def abort(self) -> None:
        """Drop the carrier now."""


class StreamTransport(asyncio.Transport):
    def __init__(self, carrier: Carrier, protocol: asyncio.Protocol,
                 extra: dict[str, Any] | None = None) -> None:
        super().__init__(extra)
        self._carrier = carrier
        self._protocol = protocol
        self._loop = asyncio.get_running_loop()
        self._pending: deque[bytes] = deque()
        self._buffered = 0
        self._wakeup = asyncio.Event()
        self._closing = False
        self._lost = False
        self._paused = False
        self._writer = start_task(self._write_loop(), log, "link stream writer")
        protocol.connection_made(self)

    # --- what the carrier calls ------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Bytes arrived; message boundaries, if any, mean nothing."""
        if not self._lost and data:
            self._protocol.data_received(data)

    def carrier_closed(self, exc: Exception | None = None) -> None:
        """The other side ended the stream, or the carrier failed."""
        if self._lost:
            return
        self._lost = True
        self._closing = True
        if asyncio.current_task() is not self._writer:
            self._writer.cancel()
        self._protocol.connection_lost(exc)

    # --- the Transport API ------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        self._pending.append(bytes(data))
        self._buffered += len(data)
        self._wakeup.set()
        if not self._paused and self._buffered > HIGH_WATER:
            self._paused = True
            self._protocol.pause_writing()

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Send what is buffered, then end the stream."""
        if self._closing:
            return
        self._closing = True
        self._wakeup.set()

    def abort(self, exc: Exception | None = None) -> None:
        """Drop the carrier now; `exc` is what the protocol is told went wrong."""
        if self._lost:
            return
        self._carrier.abort()
        self.carrier_closed(exc)

    def get_write_buffer_size(self) -> int:
        return self._buffered

    # --- the writer task ---------------------------------------------------------

    async def _write_loop(self) -> None:
        try:
            while True:
                await self._wakeup.wait()
                self._wakeup.clear()
                while self._pending:
                    data = self._pending.popleft()
                    await self._carrier.send(data)
                    self._buffered -= len(data)
                    self._maybe_resume()
                if self._closing:
                    await self._carrier.finish()
                    self.carrier_closed(None)
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.debug("link stream failed: %s", exc)
            self._carrier.abort()
            self.carrier_closed(exc)

    def _maybe_resume(self) -> None:
        if self._paused and self._buffered <= LOW_WATER:
            self._paused = False
            self._protocol.resume_writing()
