"""The bridge's front door: one asyncio protocol per client connection.

It serves the core routes' plain requests itself (axl.bridge.http1 says
which are plain), one after another as HTTP/1.1 requires, with no task
per /send: the node's future for the send writes the answer when it
settles. A WebSocket upgrade to /ws it serves too, for as long as the
connection lasts (axl.bridge.wsnative). The first request it declines
(another route, a chunked or oversized body, `Expect`, a malformed head)
hands the connection, with every byte not yet served, to the full
application (axl.bridge.app), which keeps it from then on. That application, and the
framework under it, load on the first such request, so a node that only
sends and receives never loads them.

Every wait is bounded: a head must arrive within the read timeout of the
connection opening (or of its first byte after an idle spell), a body
within the read timeout of its head, and an idle connection closes after
KEEPALIVE_TIMEOUT. So is what a client can make it hold: bytes read ahead
of the request being answered (pipelined requests, or a client that does
not read its answers) stop the reading at MAX_READ_AHEAD per connection,
and at READ_AHEAD_PER_NODE for all connections together (axl.budgets).

A /recv message written to a connection leaves the inbox only once its
client is proven to have it (axl.bridge.handoff holds the rule): the
connection tells its Handoff what it sees, for the full application's
answers too, and ends by half-closing while one is not yet proven, so that
the client's own end (a FIN or a reset) settles it.
"""

from __future__ import annotations

import array
import asyncio
import enum
import fcntl
import logging
import socket
import termios
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Final, Protocol
from urllib.parse import parse_qsl

from axl.bridge import api
from axl.bridge.api import BridgeNode, ClientWatch, InFlightBoard, ReceiverSlot
from axl.bridge.gathering import TurnWriter
from axl.bridge.guard import BridgeGuard, PageGuard, unauthorized
from axl.bridge.handoff import Handoff
from axl.bridge.http1 import (HEAD_END, Answer, HttpDate, RequestHead, parse_head, render_head,
                              text_answer)
from axl.bridge.streaming import StreamingSession, StreamRefused, max_frame, session_window
from axl.bridge.wsframes import GOING_AWAY, accept_token
from axl.bridge.wsnative import NativeSocket
from axl.budgets import MAX_HEAD, MAX_READ_AHEAD, READ_AHEAD_PER_NODE, BudgetUse
from axl.eventloop import running_loop
from axl.observe.httpstats import HttpStats
from axl.readbuffer import ReadBuffer
from axl.tasks import start_task

log = logging.getLogger("axl.bridge")

# Idle keep-alive connections are closed after this long.
KEEPALIVE_TIMEOUT: Final = 75.0
# Pipelined requests served one after another before the event loop gets a
# turn: 64 connections pipelining /topology at 32 each held /health 1.7 s.
REQUESTS_PER_TURN: Final = 8
# Above this an answer's body is written after its head, not copied into one buffer with it.
JOIN_LIMIT: Final = 64 << 10
# A /send body from this size on goes out into the overlay as it arrives
# (when the node has a message stream to the destination), not once whole.
STREAMED_BODY = 1 << 20
# After a client's FIN, how often the bytes it has not acknowledged are counted again.
ACK_POLL_INTERVAL = 0.02

ProtocolFactory = Callable[[], asyncio.Protocol]
# The GET routes the front door serves, by path: the BridgeConnection method for each.
_GET_ROUTES: Final = {"/recv": "_recv", "/topology": "_topology", "/health": "_health", "/metrics": "_metrics"}


@dataclass
class FrontDoor:
    """What every connection of one bridge shares."""

    node: BridgeNode
    clients: ClientWatch
    receiver: ReceiverSlot
    http: HttpStats
    read_timeout: float
    # A future of the full application's protocol factory, started on the first call.
    full_application: Callable[[], asyncio.Future[ProtocolFactory]]
    # The Prometheus exposition and its content type: a scrape needs no full application.
    metrics: Callable[[], tuple[bytes, str]]
    # What web pages may not send (a foreign Host or Origin).
    pages: PageGuard
    # With a bridge token, the requests served here must carry it.
    guard: BridgeGuard | None = None
    connections: set[BridgeConnection] = field(default_factory=set)
    date: HttpDate = field(default_factory=HttpDate)
    # bytes read and not yet served, all connections together
    read_ahead: int = 0
    # times a connection's reading paused at its own budget, or at the node's
    held_back: dict[str, int] = field(default_factory=lambda: {"connection": 0, "node": 0})
    # what the /ws connections' sends hold, for /metrics
    in_flight: InFlightBoard = field(default_factory=InFlightBoard)

    def budget_use(self) -> list[BudgetUse]:
        most = max((len(connection.ahead) for connection in self.connections), default=0)
        return [BudgetUse("bridge_read_ahead_bytes", "connection", MAX_READ_AHEAD, most,
                          self.held_back["connection"]),
                BudgetUse("bridge_read_ahead_bytes", "node", READ_AHEAD_PER_NODE, self.read_ahead,
                          self.held_back["node"])]

    def busy(self) -> bool:
        """Whether a request the front door serves is still being answered."""
        return any(connection.busy for connection in self.connections)

    def handing_over(self) -> bool:
        """Whether a connection holds /recv messages not yet proven received."""
        return any(connection.handoff.pending for connection in self.connections)

    async def close_streams(self, timeout: float) -> None:
        """Close the /ws connections (1001, going away), waiting `timeout` at
        most for their clients to answer."""
        closing = [connection.close_stream(GOING_AWAY, "node stopping") for connection in self.connections]
        waits = {asyncio.ensure_future(close) for close in closing if close is not None}
        if waits:
            await asyncio.wait(waits, timeout=timeout)

    def finish_all(self) -> None:
        """End every connection, waiting for the clients of unproven /recv answers (BridgeConnection.finish)."""
        for connection in list(self.connections):
            connection.finish()

    def close_all(self) -> None:
        for connection in list(self.connections):
            connection.close()


class ReadAhead(ReadBuffer):
    """Bytes read from one client and not yet served (axl.readbuffer), with
    the door's total kept in step."""

    def __init__(self, door: FrontDoor) -> None:
        super().__init__()
        self._door = door

    def append(self, data: bytes) -> None:
        self._door.read_ahead += len(data)
        super().append(data)

    def head_length(self) -> int | None:
        """The length of the whole request head at the front (its final blank
        line not counted), or None while its end has not arrived."""
        return self.find(HEAD_END)

    def starts_like_a_request(self) -> bool:
        return self.data[self.front:self.front + 1].isupper()

    def skip(self, length: int) -> None:
        self._door.read_ahead -= length
        super().skip(length)

    def release(self) -> None:
        """The connection closed: what it held no longer counts."""
        self.skip(len(self))


class _State(enum.Enum):
    HEAD = "waiting for a request head"
    BODY = "reading a /send body"
    ANSWERING = "answering a request"
    HANDING_OFF = "waiting for the full application"
    HANDED_OFF = "served by the full application"
    STREAMING = "serving a /ws WebSocket"
    ENDING = "half-closed, waiting for the client to end the connection"
    CLOSED = "closed"


class BridgeConnection(asyncio.Protocol):
    """One client connection, served here until a request needs the full application."""

    def __init__(self, door: FrontDoor) -> None:
        self.door = door
        self.transport: asyncio.Transport | None = None
        self._state = _State.HEAD
        self.ahead = ReadAhead(door)
        self._head: RequestHead | None = None
        self._started = 0.0
        self._body: list[bytes] = []
        self._body_size = 0
        # the node's handle of a /send going out while its body arrives
        self._outgoing: int | None = None
        # an answer known before the body is whole, written once it is read
        self._early: Answer | None = None
        self._inner: asyncio.Protocol | None = None
        self._deadline: float | None = None
        self._idle = False
        self._watchdog: asyncio.TimerHandle | None = None
        self._advancing = False
        self._advance_scheduled = False
        self._reading_paused = False
        self._writing_paused = False
        self._close_after_answer = False
        self.handoff = Handoff()
        self._ack_poll: asyncio.TimerHandle | None = None
        # the transport as the full application sees it, once handed off
        self._shown: HandedTransport | None = None
        # the WebSocket, once upgraded for /ws, and the task serving its
        # session (held here: the loop keeps only a weak reference to a task)
        self._socket: NativeSocket | None = None
        self._stream: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        return self._state in (_State.BODY, _State.ANSWERING)

    # -- asyncio protocol ------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport subclass
        self.door.clients.opened(transport, self.handoff)
        self.door.connections.add(self)
        self._set_deadline(self.door.read_timeout)

    def data_received(self, data: bytes) -> None:
        if self.handoff.pending:
            self.door.node.delivered(self.handoff.client_sent())
        state = self._state
        if state is _State.ENDING:
            transport = self.transport
            assert transport is not None  # set by connection_made
            transport.close()
        elif state is _State.STREAMING:
            assert self._socket is not None
            self._socket.feed(data)
        elif state is _State.HANDED_OFF:
            assert self._inner is not None
            self._inner.data_received(data)
        elif state is _State.BODY:
            self._body_received(data)
        elif state is not _State.CLOSED:
            self.ahead.append(data)
            if state is _State.HEAD and not self._advance_scheduled:
                self._advance()
            self._hold_back_over_budget()

    def eof_received(self) -> bool | None:
        """A client that half-closes has left (as the full application takes it
        too): a long poll must not take a message for it. While /recv answers
        are not yet proven received, the connection stays open until the
        client's host has acknowledged them (or reset the connection)."""
        if self.handoff.pending:
            self.door.clients.left(self.transport)
            self.handoff.finished()
            self._end_gracefully()
            self._count_unacknowledged()
            return True
        if self._inner is not None:
            return self._inner.eof_received()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_outgoing()
        self._state = _State.CLOSED
        self.ahead.release()
        self._deadline = None
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._ack_poll is not None:
            self._ack_poll.cancel()
            self._ack_poll = None
        api.not_received(self.door.node, self.handoff.broken(), "was reset" if exc is not None else "closed")
        self.door.clients.closed(self.transport)
        self.door.connections.discard(self)
        if self._socket is not None:
            self._socket.lost()
        if self._inner is not None:
            # Next turn: a connection handed over in this same turn has a
            # request task that has not run yet, and aiohttp's task fails
            # (an AssertionError, logged) if the connection is gone first.
            running_loop().call_soon(self._inner.connection_lost, exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()
        if self._socket is not None:
            self._socket.pause_writing()
        self._writing_paused = True

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()
        if self._socket is not None:
            self._socket.resume_writing()
        self._writing_paused = False
        if self._state is _State.HEAD:
            self._advance()

    def close(self) -> None:
        if self.transport is not None and self._state is not _State.CLOSED:
            self._flush_shown()
            api.not_received(self.door.node, self.handoff.broken(), "was closed by the node")
            self.transport.close()

    def finish(self) -> None:
        """Close the connection. While /recv answers written to it are not
        yet proven received (axl.bridge.handoff), half-close it instead: the
        client reads to the end and closes, which settles them, or the read
        timeout gives them back."""
        if self.transport is None or self._state in (_State.CLOSED, _State.ENDING):
            return
        self._flush_shown()
        if self.handoff.pending:
            self._end_gracefully()
        else:
            self.transport.close()

    @property
    def ending(self) -> bool:
        return self._state in (_State.ENDING, _State.CLOSED)

    def _flush_shown(self) -> None:
        """The full application's gathered writes go out before the connection ends."""
        if self._shown is not None:
            self._shown.flush()

    def _end_gracefully(self) -> None:
        """Serve nothing more; send our FIN once the answers are out, and keep
        reading, to see the client's end."""
        if self._state is _State.ENDING:
            return
        transport = self.transport
        assert transport is not None  # set by connection_made
        self._flush_shown()
        self._state = _State.ENDING
        self.ahead.release()
        transport.write_eof()
        self._resume_reading()
        self._set_deadline(self.door.read_timeout)

    def _count_unacknowledged(self) -> None:
        """After the client's FIN: settle the unproven answers once its host
        has acknowledged every byte, or give them back if it resets."""
        self._ack_poll = None
        if self._state is _State.CLOSED:
            return
        transport = self.transport
        assert transport is not None  # the client's FIN came on it
        count = unacknowledged(transport)
        if count is None:
            api.not_received(self.door.node, self.handoff.broken(), "was reset")
            transport.abort()
            return
        received = self.handoff.unacknowledged(count)
        if received:
            self.door.node.delivered(received)
            transport.close()
            return
        self._ack_poll = running_loop().call_later(ACK_POLL_INTERVAL, self._count_unacknowledged)

    # -- reading requests --------------------------------------------------

    def _advance(self) -> None:
        """Serve the buffered requests in order until one has to wait, at
        most REQUESTS_PER_TURN of them before the event loop gets a turn: a
        client pipelining requests whose answers the kernel takes (it buffers
        megabytes on loopback) held the loop for seconds, and every other
        connection with it."""
        if self._advancing:
            return
        self._advancing = True
        try:
            for _ in range(REQUESTS_PER_TURN):
                if self._state is not _State.HEAD or self._writing_paused or not self._next_request():
                    return
            self._advance_next_turn()
        finally:
            self._advancing = False

    def _advance_next_turn(self) -> None:
        if not self._advance_scheduled:
            self._advance_scheduled = True
            running_loop().call_soon(self._scheduled_advance)

    def _scheduled_advance(self) -> None:
        self._advance_scheduled = False
        self._advance()

    def _next_request(self) -> bool:
        """Start the next buffered request; False when there is none yet."""
        ahead = self.ahead
        length = ahead.head_length()
        if length is None:
            self._await_head()
            return False
        head = parse_head(ahead.peek(length)) if length <= MAX_HEAD else None
        if head is None or (route := self._route_for(head)) is None:
            self._hand_off()
            return False
        refusal = self._refusal(head)
        ahead.skip(length + len(HEAD_END))
        self._head = head
        self._started = time.monotonic()
        self._deadline = None
        self._state = _State.ANSWERING
        if refusal is None:
            route(head)
        else:
            self._refuse(refusal)
        return True

    def _refusal(self, head: RequestHead) -> Answer | None:
        """The token's refusal (401), else the page guard's (403), else None,
        as the full application's middlewares answer. The content type is
        not asked: none of the routes here takes JSON."""
        door = self.door
        if door.guard is not None and not door.guard.allows(head.authorization):
            return unauthorized(head.path, head.authorization)
        return door.pages.refusal(head.method, head.path, head.host, head.origin, None)

    def _await_head(self) -> None:
        ahead = self.ahead
        if len(ahead) > MAX_HEAD or ahead and not ahead.starts_like_a_request():
            # Too long for ours, or not a request line at all (a TLS hello from
            # an https:// client): the full application answers it now, where
            # waiting for a head's end would hold the client until a timeout.
            self._hand_off()
        elif ahead and self._idle:
            self._idle = False
            self._set_deadline(self.door.read_timeout)
        self._resume_reading()

    def _resume_reading(self) -> None:
        if self._reading_paused:
            transport = self.transport
            assert transport is not None  # it paused the reading
            self._reading_paused = False
            transport.resume_reading()

    def _route_for(self, head: RequestHead) -> Callable[[RequestHead], None] | None:
        """The core route serving `head`, or None for the full application."""
        if head.websocket_key:
            return self._websocket if head.method == "GET" and head.path == "/ws" and not head.content_length else None
        if head.method == "POST" and head.path == "/send":
            return self._send if head.content_length <= self.door.node.max_message_size else None
        if head.method != "GET" or head.content_length:
            return None
        name = _GET_ROUTES.get(head.path)
        return getattr(self, name) if name is not None else None

    # -- the routes --------------------------------------------------------

    def _refuse(self, refusal: Answer) -> None:
        """A 401 or 403; a /send body that came with it is never read, so the connection closes."""
        self._close_after_answer = True
        self._answer(refusal)

    def _topology(self, head: RequestHead) -> None:
        self._answer(api.topology_answer(self.door.node))

    def _health(self, head: RequestHead) -> None:
        self._answer(api.health_answer(self.door.node))

    def _metrics(self, head: RequestHead) -> None:
        try:
            body, content_type = self.door.metrics()
        except Exception:  # a failing collector must cost a 500, not a hung scrape
            log.exception("/metrics: the exposition failed")
            self._answer(text_answer(500, "metrics exposition failed; see the node's log"))
            return
        self._answer(Answer(200, body, content_type))

    def _send(self, head: RequestHead) -> None:
        length = head.content_length
        if len(self.ahead) >= length:
            self._send_body(self.ahead.take(length))
            return
        self._state = _State.BODY
        part = self.ahead.take_all()
        self._body = [part] if part else []
        self._body_size = len(part)
        self._set_deadline(self.door.read_timeout)
        self._resume_reading()  # paused while read-ahead waited behind the last answer
        if length >= STREAMED_BODY:
            self._start_outgoing(head)

    def _start_outgoing(self, head: RequestHead) -> None:
        """Send a large body into the overlay as it arrives, if the node can:
        the transfer then overlaps the upload instead of following it."""
        node = self.door.node
        key = api.destination(node, head.destination)
        if isinstance(key, Answer):
            self._early = key
            self._body = []
            return
        handle = api.open_send(node, key, head.content_length, self._answer)
        if handle is None:
            return
        self._outgoing = handle
        for part in self._body:
            node.write_body(handle, part)
        self._body = []

    def _body_received(self, data: bytes) -> None:
        assert self._head is not None
        missing = self._head.content_length - self._body_size
        if len(data) < missing:
            self._take_part(data)
            self._body_size += len(data)
            return
        self._take_part(data[:missing] if len(data) > missing else data)
        if len(data) > missing:
            self.ahead.append(data[missing:])
        self._body_size = 0
        self._deadline = None
        self._state = _State.ANSWERING
        if self._outgoing is not None:
            handle, self._outgoing = self._outgoing, None
            self.door.node.end_body(handle)  # the answer comes with the send's fate
        elif self._early is not None:
            early, self._early = self._early, None
            self._answer(early)
        else:
            body = b"".join(self._body)
            self._body = []
            self._send_body(body)

    def _take_part(self, part: bytes) -> None:
        if self._outgoing is not None:
            self.door.node.write_body(self._outgoing, part)
        elif self._early is None:
            self._body.append(part)

    def _cancel_outgoing(self) -> None:
        """The body will never be whole: the node drops what it sent of it."""
        if self._outgoing is not None:
            handle, self._outgoing = self._outgoing, None
            self.door.node.cancel_body(handle)

    def _send_body(self, payload: bytes) -> None:
        node = self.door.node
        assert self._head is not None
        key = api.destination(node, self._head.destination)
        if isinstance(key, Answer):
            self._answer(key)
        else:
            api.begin_send(node, key, payload, self._answer)

    def _recv(self, head: RequestHead) -> None:
        wait = api.recv_wait(_query_value(head.query, "wait", "0"))
        if isinstance(wait, Answer):
            self._answer(wait)
            return
        closing = self.door.clients.closing(self.transport)
        refusal = api.recv_refusal(self.door.node, self.door.receiver, closing)
        if refusal is not None:
            self._answer(refusal)
            return
        taking = self.door.node.take(wait, until=closing)
        if taking.done():  # a message was queued: answered in this turn, not the next
            self._taken(taking)
        else:
            taking.add_done_callback(self._taken)

    def _taken(self, taking: asyncio.Future) -> None:
        if taking.cancelled():
            self.close()
            return
        answer, message = api.recv_answer(self.door.node, self.door.receiver, taking.result())
        if message is None:
            self._answer(answer)
        elif self._state is not _State.ANSWERING or self.transport is None or self.transport.is_closing():
            api.left_before_delivery(self.door.node, message)
        else:
            self.handoff.written(message)  # before the answer, which may end the connection
            self._answer(answer)

    def _websocket(self, head: RequestHead) -> None:
        """GET /ws: refuse with the HTTP error, or upgrade and serve the
        session here (axl.bridge.wsnative) until the connection ends."""
        door = self.door
        query = _query_pairs(head.query)
        try:
            window = session_window(query.get("recv") == "1", query.get("window"), door.receiver)
        except StreamRefused as exc:
            self._answer(text_answer(exc.status, str(exc)))
            return
        transport = self.transport
        assert transport is not None  # the request came on it
        self._state = _State.STREAMING
        self._deadline = None
        transport.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        b"Sec-WebSocket-Accept: %s\r\n%s" % (accept_token(head.websocket_key).encode(),
                                                              door.date.now()))
        socket = self._socket = NativeSocket(transport, max_frame(door.node))
        if window is not None:
            door.receiver.holder = socket
        gone = door.clients.gone(transport) or asyncio.Event()
        session = StreamingSession(door.node, socket, window, gone, door.in_flight)
        self._stream = start_task(self._serve_stream(session, socket), log, "ws session")
        early = self.ahead.take_all()
        if early:
            socket.feed(early)
        self._resume_reading()

    async def _serve_stream(self, session: StreamingSession, socket: NativeSocket) -> None:
        # The close handshake is answered only after the undone messages are
        # back in the queue and the slot is free: a client that reconnects as
        # soon as its close completes finds both.
        try:
            await session.run()
        finally:
            if self.door.receiver.holder is socket:
                self.door.receiver.holder = None
        await socket.close()
        self.door.http.observe("/ws", 101, time.monotonic() - self._started)
        await session.finish_sends()

    def close_stream(self, code: int, reason: str) -> Awaitable[None] | None:
        """Close this connection's WebSocket, if it has one."""
        return self._socket.close(code, reason) if self._socket is not None else None

    # -- answering ---------------------------------------------------------

    def _answer(self, answer: Answer) -> None:
        """Write the current request's answer, then go on to the next request.
        An answer known while the body still arrives (a streamed send's fate)
        waits until the body is read."""
        if self.ending:
            return
        if self._state is _State.BODY:
            self._early = answer
            self._outgoing = None
            self._body = []
            return
        assert self._head is not None and self.transport is not None
        if self.transport.is_closing():
            self._state = _State.CLOSED
            return
        keep_alive = self._head.keep_alive and not self._close_after_answer
        head = render_head(answer, keep_alive, self.door.date.now())
        write_answer(self.transport, head, answer.body)
        self.door.http.observe(self._head.path, answer.status, time.monotonic() - self._started)
        self._head = None
        if not keep_alive:
            if self.handoff.pending:
                self._end_gracefully()
            else:
                self._state = _State.CLOSED
                self.transport.close()
            return
        self._state = _State.HEAD
        self._idle = True
        self._set_deadline(KEEPALIVE_TIMEOUT)
        self._advance()

    # -- handing off -------------------------------------------------------

    def _hand_off(self) -> None:
        self._state = _State.HANDING_OFF
        self._deadline = None
        ready = self.door.full_application()
        if ready.done():
            self._handed(ready)
        else:
            ready.add_done_callback(self._handed)

    def _handed(self, ready: asyncio.Future[ProtocolFactory]) -> None:
        if self._state is _State.CLOSED:
            return
        assert self.transport is not None
        if ready.cancelled() or ready.exception() is not None:
            log.error("the bridge application did not start: %r", None if ready.cancelled() else ready.exception())
            self.close()
            return
        inner = ready.result()()
        self._inner = inner
        self._state = _State.HANDED_OFF
        self._resume_reading()
        shown = self._shown = HandedTransport(self.transport, self)
        self.door.clients.alias(shown, self.transport)
        inner.connection_made(shown)  # type: ignore[arg-type]  # a stand-in, as uvloop's transports are
        if self._writing_paused:
            inner.pause_writing()
        data = self.ahead.take_all()
        if data:
            inner.data_received(data)

    # -- deadlines ---------------------------------------------------------

    def _hold_back_over_budget(self) -> None:
        """Stop reading while this connection holds more unserved bytes than
        its budget, or holds more than a head while all connections together
        hold more than theirs; it reads again once it has served them."""
        held = len(self.ahead)
        if self._reading_paused or held <= MAX_HEAD:
            return
        if held > MAX_READ_AHEAD:
            scope = "connection"
        elif self.door.read_ahead > READ_AHEAD_PER_NODE:
            scope = "node"
        else:
            return
        transport = self.transport
        assert transport is not None  # what it holds was read from it
        self.door.held_back[scope] += 1
        self._reading_paused = True
        transport.pause_reading()

    def _set_deadline(self, seconds: float) -> None:
        """Close (or answer 408) unless the state changes within `seconds`.

        One timer per connection, re-armed only when it fires early: moving
        a deadline on every request would cost a timer each."""
        loop = running_loop()
        self._deadline = deadline = loop.time() + seconds
        watchdog = self._watchdog
        if watchdog is not None and watchdog.when() <= deadline:
            return
        if watchdog is not None:
            watchdog.cancel()
        self._watchdog = loop.call_at(deadline, self._check_deadline)

    def _check_deadline(self) -> None:
        self._watchdog = None
        deadline = self._deadline
        if deadline is None or self._state is _State.CLOSED:
            return
        loop = running_loop()
        if loop.time() < deadline:
            self._watchdog = loop.call_at(deadline, self._check_deadline)
        elif self._state is _State.BODY:
            self._cancel_outgoing()
            self._body = []
            reason = f"request body not received within {self.door.read_timeout:g}s"
            # A send whose fate came early was counted then: the 408 is not counted again.
            answer = (text_answer(408, reason) if self._early is not None
                      else api.body_timeout(self.door.node, None, reason))
            self._early = None
            self._close_after_answer = True  # the rest of the body is never read
            self._state = _State.ANSWERING
            self._answer(answer)
        elif self._state is _State.ENDING:
            api.not_received(self.door.node, self.handoff.broken(),
                             f"was not ended by its client within {self.door.read_timeout:g}s")
            transport = self.transport
            assert transport is not None  # set by connection_made
            transport.abort()
        else:
            self.finish()


class TransportOwner(Protocol):
    """All a HandedTransport asks of its BridgeConnection."""

    @property
    def ending(self) -> bool: ...

    def finish(self) -> None: ...


class HandedTransport:
    """A connection's transport as the full application sees it: its close()
    is BridgeConnection.finish, so a /recv answer the application wrote is
    settled by the client's end, as the front door's are.

    Its writes go through a TurnWriter (axl.bridge.gathering): a /ws burst
    of a hundred frames is one system call, not a hundred. Anything else
    asked of the transport (write_eof, its socket, pausing) writes what was
    gathered first, so nothing is reordered, and the count of bytes written
    but not yet acknowledged (the /recv handoff) sees them."""

    def __init__(self, transport: asyncio.Transport, connection: TransportOwner) -> None:
        self._transport = transport
        self._connection = connection
        self._writer = TurnWriter(transport, lambda: connection.ending)

    def __getattr__(self, name: str):
        self.flush()
        return getattr(self._transport, name)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        # a copy: the writer may reuse its buffer once write() returns
        self._writer.write(data if isinstance(data, bytes) else bytes(data))

    def writelines(self, lines: Iterable[bytes | bytearray | memoryview]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        """Write what was gathered; dropped if the connection has ended
        meanwhile (as a write into an ending connection would be)."""
        self._writer.flush()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + self._writer.gathered_bytes

    def close(self) -> None:
        self._connection.finish()

    def is_closing(self) -> bool:
        return self._connection.ending or self._transport.is_closing()


def write_answer(transport: asyncio.WriteTransport, head: bytes, body: bytes) -> None:
    """Write an answer: a small one as one buffer; a body over JOIN_LIMIT
    after its head, as a view. Not `writelines`: the standard loop's joins
    the parts, and what the socket does not take at once is copied from a
    slice of bytes: three copies of a 16 MiB `/recv` body on the event loop
    where a view leaves one (uvloop keeps the view itself)."""
    if len(body) > JOIN_LIMIT:
        transport.write(head)
        transport.write(memoryview(body))
    else:
        transport.write(head + body if body else head)


def unacknowledged(transport: asyncio.Transport) -> int | None:
    """Bytes written to `transport` that the peer's host has not yet
    acknowledged (in our buffer, or the kernel's: TIOCOUTQ; on a UNIX socket
    what the peer has not read), or None once the connection is reset."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return None
    queued = array.array("i", [0])
    try:
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            return None
        fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, queued)
    except OSError:
        return None
    return transport.get_write_buffer_size() + queued[0]


def _query_pairs(query: str) -> dict[str, str]:
    """A query string's names and their first values, percent-decoded."""
    pairs: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        pairs.setdefault(key, value)
    return pairs


def _query_value(query: str, name: str, default: str) -> str:
    """The first value of `name` in a query string, percent-decoded."""
    if not query:
        return default
    if "%" not in query and "+" not in query:
        for pair in query.split("&"):
            key, _, value = pair.partition("=")
            if key == name:
                return value
        return default
    return _query_pairs(query).get(name, default)
