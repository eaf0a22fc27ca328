"""``MessageStream``: one ``GET /ws`` WebSocket carrying many messages,
for asyncio code (``AsyncClient.stream()``)."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from axl.client.common import (
    HEARTBEAT_SECONDS, ID_BYTES, KEY_BYTES, MARGIN_SECONDS, RECEIVER_TAKEN, Bridge, BridgeError, BridgeUnreachable,
    Message, payload_bytes,
)


def session_for(bridge: Bridge) -> aiohttp.ClientSession:
    """An aiohttp session that reaches ``bridge`` (over its UNIX socket, if it has one)."""
    connector = aiohttp.UnixConnector(path=bridge.unix_path) if bridge.unix_path else None
    return aiohttp.ClientSession(connector=connector)


@dataclass(frozen=True)
class Ack:
    """A message sent over ``/ws`` that is in the receiver's queue; ``number`` is
    its frame's number on the connection (1, 2, 3, ...)."""

    number: int


def frame_key(peer: str, url: str) -> bytes:
    try:
        key = bytes.fromhex(peer)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise BridgeError(400, f"peer id must be {2 * KEY_BYTES} hex digits, not {peer!r}", url)
    return key


class MessageStream:
    """One ``/ws`` connection (``AsyncClient.stream()``): pipelined sends, each
    answered by its ack, and with ``receive`` this node's incoming messages.

    One task reads the socket: it settles each send's future from its ack and
    queues deliveries. Frames to one peer arrive in the order sent. The node
    stops reading the socket while 4,096 frames await their ack, so a sender that
    outruns delivery waits in ``start_send``.
    """

    def __init__(self, session: aiohttp.ClientSession, bridge: Bridge, timeout: float, receive: bool,
                 window: int) -> None:
        query = f"?recv=1&window={window}" if receive else ""
        self.url = f"{bridge.url}/ws{query}"
        self._connect_to = f"{bridge.base}/ws{query}"
        self._headers = bridge.headers
        self.timeout = timeout
        self.receive = receive
        self._session = session
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        self._sent = 0
        self._pending: dict[int, asyncio.Future[Ack]] = {}
        # deliveries not yet handed out, then None once the connection ends;
        # `arrivals` waits on `_arrival` while there are none
        self._arrived: deque[Message | None] = deque()
        self._arrival: asyncio.Future[None] | None = None
        self._handed_out: int | None = None
        self._done: list[int] = []
        self._ended: BridgeError | None = None
        self._closing = False

    async def __aenter__(self) -> "MessageStream":
        await self.open()
        return self

    async def __aexit__(self, exc_type: type | None, *exc_info: object) -> None:
        await self.close(finished=exc_type is None)

    async def open(self) -> None:
        try:
            self._ws = await self._session.ws_connect(
                self._connect_to, headers=self._headers, compress=0, max_msg_size=0, heartbeat=HEARTBEAT_SECONDS,
                timeout=aiohttp.ClientWSTimeout(ws_close=MARGIN_SECONDS))
        except aiohttp.WSServerHandshakeError as error:
            text = RECEIVER_TAKEN if error.status == 409 else f"the bridge refused the WebSocket ({error.status})"
            raise BridgeError(error.status, text, self.url) from None
        except aiohttp.ClientConnectionError as error:
            raise BridgeUnreachable(None, f"cannot connect ({error.__class__.__name__})", self.url) from None
        self._reader = asyncio.get_running_loop().create_task(self._read(self._ws))

    async def close(self, finished: bool = True, handled: Sequence[int] = ()) -> None:
        """Close the connection, marking the handled messages done (those of
        ``messages()``, and the ids in ``handled``). When ``finished`` (the
        ``async with`` block ended without an exception), the last message
        handed out counts as handled too, and the acks of the sends under way
        are awaited first: the node drops the frames it has not started once
        the client is gone."""
        ws, reader = self._ws, self._reader
        if ws is None or reader is None:
            return
        if self._ended is None:
            if finished:
                self._handled()
            self._done.extend(handled)
            await self._send_done(ws)
            if finished and self._pending:
                await asyncio.wait(list(self._pending.values()), timeout=self.timeout)
        self._closing = True
        await ws.close()
        await asyncio.wait({reader}, timeout=MARGIN_SECONDS)
        reader.cancel()

    # -- sending -------------------------------------------------------------

    async def start_send(self, peer: str, body: bytes | str) -> asyncio.Future[Ack]:
        """Write one message; the returned future settles with its ``Ack``, or with
        the ``BridgeError`` that ``AsyncClient.send`` would raise (502, 503, ...).
        Returns as soon as the frame is written, so many can be under way."""
        ws = self._open_socket()
        frame = frame_key(peer, self.url) + payload_bytes(body)
        self._sent += 1
        future: asyncio.Future[Ack] = asyncio.get_running_loop().create_future()
        self._pending[self._sent] = future
        try:
            await ws.send_bytes(frame)
        except (ConnectionError, aiohttp.ClientConnectionError):
            self._pending.pop(self._sent, None)
            raise BridgeError(None, "the /ws connection is closed", self.url) from None
        return future

    async def send(self, peer: str, body: bytes | str) -> Ack:
        """Deliver ``body`` into ``peer``'s receive queue; returns its ack once it is there."""
        future = await self.start_send(peer, body)
        try:
            return await asyncio.wait_for(future, self.timeout)
        except asyncio.TimeoutError:
            raise BridgeError(None, f"no ack within {self.timeout:g} s", self.url) from None

    def _open_socket(self) -> aiohttp.ClientWebSocketResponse:
        if self._ended is not None:
            raise self._ended
        if self._ws is None:
            raise BridgeError(None, "the /ws stream is not open (use async with)", self.url)
        return self._ws

    # -- receiving -----------------------------------------------------------

    async def messages(self) -> AsyncIterator[Message]:
        """This node's incoming messages, each with its ``id``.

        A message counts as handled, and is marked done, once the next one is
        asked for (or the ``async with`` block ends without an exception). One
        not done when the connection closes goes back to the front of the
        node's queue, for the next receiver. Ends when the stream is closed;
        raises ``BridgeError`` if the connection is lost.
        """
        if not self.receive:
            raise ValueError("open the stream with receive=True to take messages")
        while True:
            self._handled()
            batch = await self.arrivals(())
            if not batch:
                return
            for message in batch:
                self._handled()
                self._handed_out = message.id
                yield message

    async def arrivals(self, handled: Sequence[int]) -> list[Message]:
        """Mark ``handled`` done, then wait for the messages that have arrived:
        all those queued (at least one), none of them marked done; [] once the
        stream is closed (raises ``BridgeError`` if the connection was lost).
        ``messages()`` hands them out one by one; ``BlockingMessageStream``
        takes each batch across threads in one go."""
        ws = self._open_socket()
        self._done.extend(handled)
        if not self._arrived:
            await self._send_done(ws)
            await self._until_arrived()
        batch = list(self._arrived)
        self._arrived.clear()
        if batch[-1] is not None:
            return batch
        self._arrived.append(None)
        if len(batch) > 1 or self._closing:
            return batch[:-1]
        raise self._ended or BridgeError(None, "the /ws connection closed", self.url)

    async def _until_arrived(self) -> None:
        while not self._arrived:
            self._arrival = asyncio.get_running_loop().create_future()
            try:
                await self._arrival
            finally:
                self._arrival = None

    def _arrive(self, item: Message | None) -> None:
        """Queue a delivery (None: the connection ended) and wake `arrivals`."""
        self._arrived.append(item)
        if self._arrival is not None and not self._arrival.done():
            self._arrival.set_result(None)

    def _handled(self) -> None:
        if self._handed_out is not None:
            self._done.append(self._handed_out)
            self._handed_out = None

    async def _send_done(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        """Mark the handled messages done, all in one frame."""
        if not self._done:
            return
        ids, self._done = self._done, []
        try:
            await ws.send_str(json.dumps({"done": ids}))
        except (ConnectionError, aiohttp.ClientConnectionError):
            pass  # the node gives them back to its queue: they are delivered again

    # -- the reader ----------------------------------------------------------

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        reason = ""
        try:
            while True:
                message = await ws.receive()
                if message.type == aiohttp.WSMsgType.TEXT:
                    self._acked(json.loads(message.data))
                elif message.type == aiohttp.WSMsgType.BINARY:
                    data = message.data
                    self._arrive(Message(data[ID_BYTES:ID_BYTES + KEY_BYTES].hex(), data[ID_BYTES + KEY_BYTES:],
                                         int.from_bytes(data[:ID_BYTES], "big")))
                else:
                    if message.data == aiohttp.WSCloseCode.MESSAGE_TOO_BIG:
                        reason = (f" ({message.data}: a frame was far over the node's max_message_size, "
                                  f"so the node closed the stream)")
                    elif message.type == aiohttp.WSMsgType.CLOSE:
                        reason = f" ({message.data}: {message.extra or ''})"
                    return
        finally:
            self._end(reason)

    def _acked(self, ack: dict[str, Any]) -> None:
        future = self._pending.pop(ack["ack"], None)
        if future is None or future.done():
            return
        if ack["status"] == 200:
            future.set_result(Ack(ack["ack"]))
        else:
            future.set_exception(BridgeError(ack["status"], ack.get("error", ""), self.url))

    def _end(self, reason: str) -> None:
        """The connection is gone: sends without an ack have an unknown fate."""
        self._ended = BridgeError(None, f"the /ws connection closed{reason}", self.url)
        unknown = BridgeError(None, f"the /ws connection closed{reason} before the ack; the message "
                                    f"may or may not have been delivered", self.url)
        for future in self._pending.values():
            if not future.done():
                future.set_exception(unknown)
        self._pending.clear()
        self._arrive(None)


