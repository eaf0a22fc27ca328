"""The front door's own WebSocket: a /ws session's MessageSocket on the client's transport.

After the upgrade the front door hands every byte it reads to `feed` and
says when the connection ends (`lost`) or its writing pauses. The socket
reads messages out of those bytes when the session asks (axl.bridge.wsframes),
so a session that stops asking (its sends in flight are at their limit)
stops the reading too once READ_LIMIT bytes wait; it reads on whenever the
session waits for more. Pings are answered as they are read.

Frames written in one turn of the loop go to the transport together at its
end (axl.bridge.gathering: a burst of acks or deliveries is one system
call), and a write waits while the transport is over its high-water mark,
so a client that does not read is not written to without bound.

Closing follows RFC 6455: the side that closes first waits (CLOSE_TIMEOUT
at most) for the other's close frame, then the transport closes. A
protocol error closes at once, with the FrameError's code and reason.
"""

from __future__ import annotations

import asyncio
import logging

from axl.bridge.gathering import TurnWriter
from axl.bridge.wsframes import (BINARY, CLOSE, INVALID_DATA, NORMAL_CLOSURE, PING, PONG, TEXT, FrameError,
                                 FrameReader, close_frame, frame_head, read_close)
from axl.budgets import MAX_READ_AHEAD

log = logging.getLogger("axl.bridge")

# Bytes read and held while the session does not ask for them, before the reading pauses.
READ_LIMIT = MAX_READ_AHEAD
CLOSE_TIMEOUT = 5.0
"""How long a close waits for the client's own close frame."""


class NativeSocket:
    """One upgraded connection's WebSocket, server side."""

    def __init__(self, transport: asyncio.Transport, max_message: int) -> None:
        self._transport = transport
        self._reader = FrameReader(max_message)
        # Set when bytes come or the connection ends, for whoever waits to
        # read (the session, or a close waiting for the client's): events,
        # not a shared future, so that a cancelled waiter cancels nobody else.
        self._arrived = asyncio.Event()
        self._waiting = 0
        self._reading_paused = False
        self._writer = TurnWriter(transport, lambda: self._lost)
        # clear while the transport is over its high-water mark
        self._writable = asyncio.Event()
        self._writable.set()
        self._close_sent = False
        self._close_received = False
        self._lost = False
        # a protocol error: nothing more is read
        self._broken = False
        self._closing: asyncio.Future[None] | None = None

    # -- from the connection ---------------------------------------------

    def feed(self, data: bytes) -> None:
        self._reader.feed(data)
        if self._waiting:
            self._arrived.set()
        elif not self._reading_paused and len(self._reader) > READ_LIMIT:
            self._reading_paused = True
            self._transport.pause_reading()

    def lost(self) -> None:
        """The connection has ended: reads end, writes fail."""
        self._lost = True
        self._writer.discard()
        self._arrived.set()
        self._writable.set()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- the session's MessageSocket -------------------------------------

    @property
    def closed(self) -> bool:
        return self._close_sent or self._lost

    def poll(self) -> tuple[int, bytes] | None:
        """A message already read: (BINARY, payload) or (TEXT, UTF-8 bytes),
        answering pings and skipping pongs on the way; (CLOSE, b"") once the
        client closed, left or broke the protocol; None until more bytes come."""
        if self._close_sent or self._close_received or self._lost or self._broken:
            return CLOSE, b""
        reader = self._reader
        try:
            while True:
                message = reader.next_message()
                if message is None:
                    return None
                opcode = message[0]
                if opcode == BINARY:
                    return message
                if opcode == TEXT:
                    _check_text(message[1])
                    return message
                if opcode == PING:
                    self._write(frame_head(PONG, len(message[1])), message[1])
                elif opcode == CLOSE:
                    read_close(message[1])
                    self._close_received = True
                    return CLOSE, b""
        except FrameError as exc:
            self._fail(exc)
            return CLOSE, b""

    async def receive(self) -> tuple[int, bytes]:
        while True:
            message = self.poll()
            if message is not None:
                return message
            await self._more()

    def write_text(self, text: str) -> None:
        self.write_frame(TEXT, text.encode())

    def write_binary(self, data: bytes) -> None:
        self.write_frame(BINARY, data)

    def write_frame(self, opcode: int, payload: bytes) -> None:
        if self._close_sent or self._lost:
            raise ConnectionError("the /ws connection is closed")
        self._write(frame_head(opcode, len(payload)), payload)

    async def drain(self) -> None:
        if not self._writable.is_set():
            await self._writable.wait()
        if self._lost:
            raise ConnectionError("the /ws connection ended")

    async def close(self, code: int = NORMAL_CLOSURE, reason: str = "") -> None:
        """Send our close (once), wait for the client's, and end the connection."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close(code, reason))
        await asyncio.shield(self._closing)

    # -- reading ---------------------------------------------------------

    async def _more(self) -> None:
        """Wait for the client's next bytes (or the connection's end, or our
        close), reading on if paused."""
        if self._reading_paused:
            self._reading_paused = False
            self._transport.resume_reading()
        self._arrived.clear()
        self._waiting += 1
        try:
            await self._arrived.wait()
        finally:
            self._waiting -= 1

    def _fail(self, error: FrameError) -> None:
        log.info("/ws client broke the protocol: %s; closing with %d", error.reason, error.code)
        self._broken = True
        self._arrived.set()
        if not self._close_sent:
            self._close_sent = True
            self._write(close_frame(error.code, error.reason), b"")
        self._writer.flush()
        self._transport.close()

    # -- writing -----------------------------------------------------------

    def _write(self, head: bytes, payload: bytes) -> None:
        if not self._lost:
            self._writer.write(head, payload)

    # -- closing -----------------------------------------------------------

    async def _close(self, code: int, reason: str) -> None:
        if self._lost:
            return
        if not self._close_sent:
            self._close_sent = True
            self._arrived.set()  # a session waiting to read sees the close
            self._write(close_frame(code, reason), b"")
            self._writer.flush()
        if not self._close_received:
            try:
                await asyncio.wait_for(self._client_close(), CLOSE_TIMEOUT)
            except TimeoutError:
                log.info("a /ws client did not answer the node's close within %gs", CLOSE_TIMEOUT)
        self._transport.close()

    async def _client_close(self) -> None:
        """Read (and drop) what the client still sends, until its close frame."""
        reader = self._reader
        while not (self._close_received or self._lost or self._broken):
            try:
                message = reader.next_message()
            except FrameError as exc:
                self._fail(exc)
                return
            if message is None:
                await self._more()
            elif message[0] == CLOSE:
                self._close_received = True


def _check_text(payload: bytes) -> None:
    try:
        payload.decode("utf-8")
    except UnicodeDecodeError:
        raise FrameError(INVALID_DATA, "a text message that is not UTF-8") from None
