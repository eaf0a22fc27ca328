"""`GET /ws`: the streaming bridge's sessions, both directions on one WebSocket (SPEC.md "GET /ws").

A session reads and writes through a MessageSocket: the front door's own
WebSocket (axl.bridge.wsnative), or aiohttp's on a connection the full
application already holds (axl.bridge.ws).

Sending: each binary frame is a 32-byte destination key and a payload. The
frames are numbered 1, 2, 3, ... and each is answered with a text frame
`{"ack": n, "status": S}` once the node knows its fate. Frames to one
destination arrive in the order sent: while the node keeps that order itself
(a connected message stream, whose messages keep their sequence through
reconnections) they are all under way at once; elsewhere (a Go peer, one
connection per message) each waits for the fate of the one before. Frames to
different destinations go concurrently, so their acks may come out of order.
Acks settled in one turn of the event loop are written together. At most
WS_MAX_IN_FLIGHT frames (WS_MAX_IN_FLIGHT_BYTES of payload) are read and not yet
acknowledged; beyond that the socket is not read, and TCP pushes back on the
client.

Receiving (`?recv=1[&window=N]`): the connection takes the node's incoming
messages in place of `/recv`, as binary frames of 8-byte id, 32-byte sender
key and payload. The client says `{"done": id}` or `{"done": [ids]}`; at
most `window` delivered messages are not done. Those not done when the
connection ends go back to the front of the queue, in their order, so a
client that leaves loses nothing. One receiving connection at a time.

Protocol violations close the connection with 1008 and a reason.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from typing import Final, Protocol

from axl.bridge.api import BridgeNode, InFlightBoard, QueuedMessage, ReceiverSlot, record_send
from axl.bridge.wsframes import BINARY, POLICY_VIOLATION, TEXT
from axl.budgets import WS_MAX_IN_FLIGHT, WS_MAX_IN_FLIGHT_BYTES, WS_MAX_WINDOW
from axl.errors import DeliveryError
from axl.gojson import read_json
from axl.tasks import start_task

log = logging.getLogger("axl.bridge")

KEY_SIZE: Final = 32
ID_SIZE: Final = 8
DEFAULT_WINDOW = 64
# How long one wait for an incoming message lasts before the pump looks again.
RECV_POLL = 30.0
CLOSE_REASON_MAX = 120
# A frame up to this much over the limit is read and acknowledged 413; a
# larger one closes the connection (1009) instead of being held.
OVERSIZE_SLACK = 64 << 10
STOP_CLOSE_TIMEOUT = 1.0
"""How long a stopping node waits for a /ws client to answer its close."""


class MessageSocket(Protocol):
    """A WebSocket as a session uses it: the front door's own
    (axl.bridge.wsnative) or aiohttp's (axl.bridge.ws)."""

    @property
    def closed(self) -> bool: ...

    def poll(self) -> tuple[int, bytes] | None:
        """The next message if it is already here, else None (then `receive`)."""

    async def receive(self) -> tuple[int, bytes]:
        """The next message: (BINARY, payload), (TEXT, its UTF-8 bytes), or
        (CLOSE, b"") once the client has closed, left or broken the protocol."""

    def write_text(self, text: str) -> None:
        """Queue a text frame; ConnectionError once the client has gone."""

    def write_binary(self, data: bytes) -> None:
        """Queue a binary frame; ConnectionError once the client has gone."""

    async def drain(self) -> None:
        """Wait until the frames queued can be taken by the connection (its
        buffer below the high-water mark); ConnectionError once the client has gone."""

    async def close(self, code: int, reason: str) -> None: ...


def max_frame(node: BridgeNode) -> int:
    """The largest binary frame a session reads: a key and a payload over
    the node's limit by OVERSIZE_SLACK at most (it gets its 413 ack)."""
    return KEY_SIZE + node.max_message_size + OVERSIZE_SLACK


class ProtocolViolation(Exception):
    """The client broke the /ws protocol; the text is the close reason."""


def parse_window(text: str | None) -> int:
    """The `window` query parameter; ValueError with a one-line reason when bad."""
    if text is None:
        return DEFAULT_WINDOW
    try:
        window = int(text)
    except ValueError:
        raise ValueError("window must be an integer") from None
    if not 1 <= window <= WS_MAX_WINDOW:
        raise ValueError(f"window must be between 1 and {WS_MAX_WINDOW}")
    return window


class StreamRefused(Exception):
    """A /ws request the node answers with an HTTP error instead of the upgrade."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def session_window(receiving: bool, window_text: str | None, slot: ReceiverSlot) -> int | None:
    """The window of a /ws request's deliveries (None when it only sends);
    StreamRefused when the query is bad (400) or another connection
    receives (409)."""
    if not receiving:
        return None
    try:
        window = parse_window(window_text)
    except ValueError as exc:
        raise StreamRefused(400, str(exc)) from None
    if slot.holder is not None:
        raise StreamRefused(409, "another /ws connection is receiving this node's messages")
    return window


def parse_done(text: str | bytes) -> list[int]:
    """The ids of a `{"done": id}` or `{"done": [id, ...]}` text frame, each
    once (an empty list says nothing, and is no violation)."""
    try:
        message = read_json(text)
    except ValueError:
        raise ProtocolViolation("text frame is not JSON") from None
    done = message.get("done") if isinstance(message, dict) else None
    ids = done if isinstance(done, list) else [done]
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ProtocolViolation('expected {"done": id} or {"done": [id, ...]}')
    return list(dict.fromkeys(ids))


def delivery_frame(message: QueuedMessage) -> bytes:
    """8-byte id, 32-byte sender key, payload: joined in one copy of the payload, where two `+` made two."""
    return b"".join((message.id.to_bytes(ID_SIZE, "big"), message.sender, message.payload))


def ack_text(number: int, status: int, error: str | None = None) -> str:
    """`{"ack": n, "status": S}` (what json.dumps writes), with `"error"` when S is not 200."""
    if error is None:
        return f'{{"ack": {number}, "status": {status}}}'
    ack: dict[str, object] = {"ack": number, "status": status, "error": error}
    return json.dumps(ack)


class _Flow:
    """Frames read from the client and not yet acknowledged to it, for back-pressure.

    A frame counts until its ack is written, not only until its fate is
    known: a client that does not read its acks stops being read too.
    `paused` mirrors `room` (clear while paused), so that the per-frame
    checks read a field instead of calling into asyncio.Event, once per
    frame each way.
    """

    def __init__(self, board: InFlightBoard) -> None:
        self.board = board
        self.frames = 0
        self.bytes = 0
        self.paused = False
        self.room = asyncio.Event()
        self.room.set()
        board.flows.add(self)

    def retire(self) -> None:
        """The connection has ended: /metrics no longer counts what it held."""
        self.board.flows.discard(self)

    def add(self, size: int) -> None:
        self.frames += 1
        self.bytes += size
        if self.paused:
            return
        if self.frames >= WS_MAX_IN_FLIGHT:
            self.board.paused_at_frames += 1
            self._pause()
        elif self.bytes >= WS_MAX_IN_FLIGHT_BYTES:
            self.board.paused_at_bytes += 1
            self._pause()

    def _pause(self) -> None:
        self.paused = True
        self.room.clear()

    def remove(self, size: int) -> None:
        self.frames -= 1
        self.bytes -= size
        if self.paused and self.frames < WS_MAX_IN_FLIGHT and self.bytes < WS_MAX_IN_FLIGHT_BYTES:
            self.paused = False
            self.room.set()


class _Destination:
    """One destination's frames: those not started yet, in order, and how many are under way."""

    def __init__(self, key: bytes) -> None:
        self.key = key
        self.waiting: deque[tuple[int, bytes]] = deque()
        self.under_way = 0


class StreamingSession:
    """One /ws connection: its numbered sends and, with a window, its deliveries."""

    def __init__(self, node: BridgeNode, ws: MessageSocket, window: int | None,
                 gone: asyncio.Event, in_flight: InFlightBoard) -> None:
        self.node = node
        self.ws = ws
        self.window = window
        self.gone = gone
        self._frames = 0
        self._destinations: dict[bytes, _Destination] = {}
        self._under_way = 0
        self._all_settled = asyncio.Event()
        self._all_settled.set()
        self._flow = _Flow(in_flight)
        # (ack text, payload size) settled and not yet written, in the order settled
        self._acks: list[tuple[str, int]] = []
        self._acks_ready = asyncio.Event()
        self._delivered: dict[int, QueuedMessage] = {}
        self._room_to_deliver = asyncio.Event()
        self._room_to_deliver.set()

    async def run(self) -> None:
        """Serve the client until it closes or leaves; then its undone messages go back."""
        pump = start_task(self._deliver_forever(self.window), log, "ws delivery") if self.window else None
        writer = start_task(self._write_acks(), log, "ws acks")
        try:
            await self._read_client()
        finally:
            writer.cancel()
            if pump is not None:
                pump.cancel()
            await asyncio.wait({task for task in (writer, pump) if task is not None}, timeout=5)
            self._give_back_undone()
            self._flow.retire()

    async def finish_sends(self) -> None:
        """After the client left: finish the sends under way, drop the frames not yet started.

        The node's own deadlines (lookup and send timeouts) bound the wait.
        """
        self._drop_unstarted()
        await self._all_settled.wait()

    def _drop_unstarted(self) -> None:
        """Forget the queued frames that no send has started, and the acks not written.

        Their acks could not reach a departed client, so it must treat them
        as unsent either way; dropping them bounds what it costs (a full
        window to an unreachable node would otherwise keep the node busy for
        minutes).
        """
        for destination in self._destinations.values():
            waiting = destination.waiting
            while waiting:
                self._flow.remove(len(waiting.pop()[1]))
        for _, size in self._acks:
            self._flow.remove(size)
        self._acks.clear()

    # -- reading the client ------------------------------------------------

    async def _read_client(self) -> None:
        while not self.ws.closed:
            if self._flow.paused:
                # Not reading is the back-pressure; a client that leaves meanwhile
                # is still noticed, so its queued frames are dropped at once.
                await _first_of(self._flow.room, self.gone)
                if self.gone.is_set():
                    return
            message = self.ws.poll()
            kind, data = message if message is not None else await self.ws.receive()
            try:
                if kind == BINARY:
                    self._accept_send(data)
                elif kind == TEXT:
                    self._accept_done(data)
                else:
                    return
            except ProtocolViolation as exc:
                log.info("/ws protocol violation: %s", exc)
                await self.ws.close(POLICY_VIOLATION, str(exc)[:CLOSE_REASON_MAX])
                return

    def _accept_send(self, data: bytes) -> None:
        self._frames += 1
        number = self._frames
        if len(data) < KEY_SIZE:
            self._flow.add(0)
            self._queue_ack(number, 0, 400, f"frame of {len(data)} bytes is shorter than the "
                                            f"{KEY_SIZE}-byte destination key")
            return
        key, payload = data[:KEY_SIZE], data[KEY_SIZE:]
        self._flow.add(len(payload))
        destination = self._destinations.get(key)
        if destination is None:
            destination = self._destinations[key] = _Destination(key)
        destination.waiting.append((number, payload))
        self._start_ready(destination)

    # -- sending ---------------------------------------------------------------

    def _start_ready(self, destination: _Destination) -> None:
        """Start the destination's waiting frames that may start now, in order.

        Where the node keeps order (a connected message stream) every frame
        starts at once: they arrive in the order started. Elsewhere (a Go
        peer, one connection per message; a stream not yet connected, which
        may still fall back to that) a frame starts only when the one before
        it has its fate, since connections can overtake each other.
        """
        waiting = destination.waiting
        while waiting and (not destination.under_way or self.node.keeps_order(destination.key)):
            number, payload = waiting.popleft()
            self._start(destination, number, payload)
        if not waiting and not destination.under_way:
            del self._destinations[destination.key]

    def _start(self, destination: _Destination, number: int, payload: bytes) -> None:
        started = time.monotonic()
        size = len(payload)
        try:
            self.node.start_send_then(destination.key, payload,
                                      lambda error: self._settled(destination, number, size, started, error))
        except DeliveryError as exc:
            self._finished(destination.key, number, size, started, exc)
            return
        destination.under_way += 1
        if not self._under_way:
            self._all_settled.clear()
        self._under_way += 1

    def _settled(self, destination: _Destination, number: int, size: int, started: float,
                 error: DeliveryError | None) -> None:
        """A send's fate is known: queue its ack and start what waited for it."""
        destination.under_way -= 1
        self._under_way -= 1
        if not self._under_way:
            self._all_settled.set()
        self._finished(destination.key, number, size, started, error)
        if self._destinations.get(destination.key) is destination:
            self._start_ready(destination)

    def _finished(self, key: bytes, number: int, size: int, started: float,
                  error: DeliveryError | None) -> None:
        status, text = record_send(self.node, key, size, started, error)
        self._queue_ack(number, size, status, text)

    # -- acknowledging ---------------------------------------------------------

    def _queue_ack(self, number: int, size: int, status: int, error: str | None) -> None:
        if self.gone.is_set():
            self._flow.remove(size)
            return
        if not self._acks:  # the writer takes them all at once, and clears the event first
            self._acks_ready.set()
        self._acks.append((ack_text(number, status, error), size))

    async def _write_acks(self) -> None:
        """Write the acks settled meanwhile, many per turn of the loop; each
        frame leaves the back-pressure count once its ack is written."""
        while True:
            await self._acks_ready.wait()
            self._acks_ready.clear()
            acks, self._acks = self._acks, []
            try:
                for text, _ in acks:
                    self.ws.write_text(text)
                await self.ws.drain()
            except ConnectionError:
                # While reading is paused the client's close goes unseen; a
                # failed write is then how its departure shows.
                log.info("/ws client left with %d acks unwritten", len(acks))
                self.gone.set()
                self._acks[:0] = acks
                self._drop_unstarted()
                return
            for _, size in acks:
                self._flow.remove(size)

    def _accept_done(self, text: str | bytes) -> None:
        if not self.window:
            raise ProtocolViolation('text frames ({"done": ...}) need a receiving connection (?recv=1)')
        ids = parse_done(text)
        unknown = [i for i in ids if i not in self._delivered]
        if unknown:
            raise ProtocolViolation(f"done for id {unknown[0]}, which is not delivered and undone")
        self.node.delivered([self._delivered.pop(message_id) for message_id in ids])
        self._room_to_deliver.set()

    # -- delivering to the client --------------------------------------------

    async def _deliver_forever(self, window: int) -> None:
        """Take messages from the queue and send them, keeping at most `window`
        undone: once one comes, those queued behind it go in the same turn,
        with no wait (no future or timer) for each."""
        while not self.ws.closed:
            if len(self._delivered) >= window:
                self._room_to_deliver.clear()
                await self._room_to_deliver.wait()
                continue
            message = await self.node.recv(RECV_POLL)
            try:
                while message is not None:
                    self._delivered[message.id] = message
                    self.ws.write_binary(delivery_frame(message))
                    message = self.node.take_nowait() if len(self._delivered) < window else None
                await self.ws.drain()
            except ConnectionError:
                return

    def _give_back_undone(self) -> None:
        if self._delivered:
            undone = list(self._delivered.values())
            self._delivered.clear()
            self.node.give_back(undone)
            log.info("/ws receiver left: %d undone messages back at the front of the queue", len(undone))


async def _first_of(*events: asyncio.Event) -> None:
    """Wait until one of `events` is set."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
