"""Message streams over the userspace TCP stack, sans-IO.

`axl.node.msgstream` is the stream protocol; this module runs it on TCP
connections for the message layer. A sender keeps one `_Link` per
destination: one session, its connection (opened again, with the same
session, when it breaks with messages outstanding), and the handle of every
message waiting for its acknowledgement. A receiver's `_InboundStream` hands
the messages to the application as they arrive, at most STREAM_WINDOW of
them unanswered, and writes each answer back as an acknowledgement.

A destination whose stream port resets the SYN (a Go node, or one of ours
with `message_streams` false) is remembered for `UNSUPPORTED_TTL` seconds:
its messages, including those already waiting, take the
one-connection-per-message path meanwhile (the message layer's `fallback`).
One that resets our version 2 hello unanswered (a node of ours from before
version 2) is remembered for `VERSION_1_TTL` seconds: its streams speak
version 1 meanwhile, within that version's window.

Like `MessageLayer`, this holds no clock and no task: time comes with each call.
"""

from __future__ import annotations

import logging
import random
# Bound here so that a compiled dataclass finds it: mypyc looks a field's
# type up among the module's names, and `memoryview` is only a builtin.
from builtins import memoryview  # noqa: A004
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from axl.budgets import MAX_UNSUPPORTED, STREAM_WINDOW, BudgetUse
from axl.errors import (DeliveryError, DeliveryTimeout, MessageTooLarge, PeerUnreachable, ReceiverFull,
                        never_connected)
from axl.identity import address_for_key
from axl.node.deadlines import Deadlines
from axl.node.events import Acknowledged, InboundMessage, MessageEvent, SendFailed
from axl.node.msgstream import (
    STATUS_QUEUED,
    STATUS_REFUSED,
    STATUS_TOO_LARGE,
    Ack,
    Answered,
    Hello,
    Message,
    OutsideWindow,
    SessionRecord,
    SessionTable,
    StreamError,
    StreamedBody,
    StreamReceiver,
    StreamSender,
    VERSION,
)
from axl.node.stats import ListenerCounts
from axl.tcp import events as tcp_events
from axl.tcp.connection import TcpConnection
from axl.tcp.stack import TcpStack

if TYPE_CHECKING:
    from axl.node.messages import MessageSettings

log = logging.getLogger("axl.streams")

UNSUPPORTED_TTL = 60.0
VERSION_1_TTL = 600.0
# A sender closes a stream with nothing outstanding after this long (the
# receiver's own limit is the idle timeout, conn_idle_timeout_secs).
SENDER_IDLE = 30.0
# Messages wait at most this long behind a body still arriving before that
# body is taken off the stream, to be sent once whole (a slow client must not
# hold up the others).
BODY_HOLD = 1.0
# Reopenings of a broken connection in a row without any acknowledgement.
MAX_REOPENS = 2
# How long a receiver that closed waits for the sender's last ACK before it
# resets (on a message stream and on a one-message connection alike).
LAST_ACK_WAIT: Final = 10.0
MAY_HAVE_ARRIVED = "; it may or may not have been delivered"
# What a 503 on the stream means (the receiver's log says which).
STREAM_REFUSAL_CAUSES = "its receive queue is full, or it is at its budget for our MCP/A2A messages"
# A sender breaking the stream protocol is logged at most once in this many
# seconds (each of its streams is reset all the same), for this many senders.
STREAM_ERROR_LOG_INTERVAL = 10.0
STREAM_ERROR_LOG_PEERS = 1024

Fallback = Callable[[bytes, bytes, float, int], None]


class RememberedDestinations:
    """Destinations remembered for `ttl` seconds each, the `capacity` most
    recently added (oldest first out)."""

    def __init__(self, ttl: float, capacity: int) -> None:
        self.ttl = ttl
        self.capacity = capacity
        self._until: OrderedDict[bytes, float] = OrderedDict()

    def add(self, dest: bytes, now: float) -> None:
        self._until[dest] = now + self.ttl
        self._until.move_to_end(dest)
        if len(self._until) > self.capacity:
            self._until.popitem(last=False)

    def holds(self, dest: bytes, now: float) -> bool:
        until = self._until.get(dest)
        if until is None:
            return False
        if until > now:
            return True
        del self._until[dest]
        return False


class PeerLogLimit:
    """When a peer-triggered log line may be written again, per peer: at
    most once per `interval`, saying how many were left out meanwhile.
    Remembers the `capacity` peers logged most recently."""

    def __init__(self, interval: float, capacity: int) -> None:
        self.interval = interval
        self.capacity = capacity
        self._peers: OrderedDict[bytes, tuple[float, int]] = OrderedDict()  # peer -> (next log, left out)

    def allow(self, peer: bytes, now: float) -> int | None:
        """None to leave this line out; else how many were left out before it."""
        next_log, left_out = self._peers.get(peer, (now, 0))
        if now < next_log:
            self._peers[peer] = (next_log, left_out + 1)
            return None
        self._peers[peer] = (now + self.interval, 0)
        self._peers.move_to_end(peer)
        if len(self._peers) > self.capacity:
            self._peers.popitem(last=False)
        return left_out


@dataclass(eq=False)
class _Link:
    """The sending side of one session to one destination."""

    dest: bytes
    sender: StreamSender
    conn: TcpConnection | None = None
    connected: bool = False
    ever_connected: bool = False
    reopens: int = 0
    handles: dict[int, int] = field(default_factory=dict)
    # (deadline, seq) in submission order: the send timeout of each waiting message
    expiries: deque[tuple[float, int]] = field(default_factory=deque)
    connect_deadline: float | None = None
    idle_deadline: float | None = None
    # when messages waiting behind an open body stop waiting for it
    hold_deadline: float | None = None
    rest: memoryview = field(default_factory=lambda: memoryview(b""))
    deadline: float | None = None


@dataclass(eq=False)
class _InboundStream:
    """The receiving side of one stream connection."""

    conn: TcpConnection
    receiver: StreamReceiver
    queue: deque[Message | Answered] = field(default_factory=deque)
    session: tuple[bytes, int] | None = None
    in_flight: dict[int, int] = field(default_factory=dict)  # handle -> seq, with the application
    successor: _InboundStream | None = None
    paused: bool = False
    stash: list[bytes | memoryview] = field(default_factory=list)
    out: bytearray = field(default_factory=bytearray)
    unconsumed: int = 0
    finished: bool = False
    closing: bool = False
    ended: bool = False
    deadline: float | None = None
    partial_since: float | None = None
    overran: bool = False  # the sender went beyond STREAM_WINDOW (logged once)


class MessageStreams:
    """Every message stream of one node, both directions."""

    def __init__(self, stack: TcpStack, settings: "MessageSettings", handles: Iterator[int],
                 events: deque[MessageEvent], fallback: Fallback, rng: random.Random,
                 listener: ListenerCounts) -> None:
        self.stack = stack
        self.listener = listener
        self.settings = settings
        self.enabled = settings.streams
        self._handles = handles
        self._events = events
        self._fallback = fallback
        self._rng = rng
        self._links: dict[bytes, _Link] = {}
        self._by_conn: dict[TcpConnection, _Link | _InboundStream] = {}
        self._answers: dict[int, _InboundStream] = {}
        self._active: dict[tuple[bytes, int], _InboundStream] = {}
        self._unsupported = RememberedDestinations(UNSUPPORTED_TTL, MAX_UNSUPPORTED)
        self._version_1 = RememberedDestinations(VERSION_1_TTL, MAX_UNSUPPORTED)
        self._sessions = SessionTable()
        self._bodies: dict[int, _Link] = {}  # handle -> link, of messages whose body is arriving
        # handle -> (destination, body) of bodies arriving too slowly to hold a stream up
        self._gathering: dict[int, tuple[bytes, StreamedBody]] = {}
        self._timers: Deadlines[_Link | _InboundStream] = Deadlines()
        self.window_refused = 0  # messages refused beyond a stream's STREAM_WINDOW
        self.outside_window = 0  # inbound streams reset for a sequence number outside the window
        self._error_log = PeerLogLimit(STREAM_ERROR_LOG_INTERVAL, STREAM_ERROR_LOG_PEERS)
        if self.enabled:
            stack.listen(settings.stream_port)

    # -- the sending side -------------------------------------------------

    def usable(self, dest: bytes, now: float) -> bool:
        """Whether a message to `dest` goes on a stream."""
        return self.enabled and not self._unsupported.holds(dest, now)

    def established(self, dest: bytes) -> bool:
        """Whether messages to `dest` now join a stream that has connected (and
        so never fall back to one connection each)."""
        link = self._links.get(dest)
        return link is not None and link.ever_connected

    def send(self, dest: bytes, payload: bytes, now: float) -> int:
        return self._submit(dest, payload, next(self._handles), now)

    def _submit(self, dest: bytes, payload: bytes, handle: int, now: float) -> int:
        link = self._links.get(dest)
        if link is None:
            version = 1 if self._version_1.holds(dest, now) else VERSION
            sender = StreamSender(self._rng.getrandbits(64), self.settings.stream_window, version)
            link = self._links[dest] = _Link(dest, sender)
        conn = link.conn
        if conn is None:
            conn = self._connect(link, now)
        seq = link.sender.submit(payload)
        link.sender.size_to_path(0, now, conn.path.min_rtt)
        link.handles[seq] = handle
        self._expire_later(link, seq, now)
        if link.sender.open_seq is not None and link.hold_deadline is None:
            # (well inside the send timeout of the messages that wait, however short)
            link.hold_deadline = now + min(BODY_HOLD, self.settings.send_timeout / 2)
            self._schedule(link)
        return handle

    def _expire_later(self, link: _Link, seq: int, now: float) -> None:
        """Start message `seq`'s send timeout."""
        expiry = now + self.settings.send_timeout
        link.expiries.append((expiry, seq))
        # Expiries come in order, so a later one never moves a deadline that
        # is set already: only an idle link's deadline needs working out again.
        if link.idle_deadline is not None or link.deadline is None or link.deadline > expiry:
            link.idle_deadline = None
            self._schedule(link)

    # -- a message written as its body arrives --------------------------

    def open_body(self, dest: bytes, length: int, now: float) -> int | None:
        """Start a message of `length` bytes before its body is whole (a large
        /send still arriving): its parts follow through `write_body`, and
        it is acknowledged as any other. Its send timeout starts once it is
        whole (its upload is bounded by the bridge's read timeout). None when
        it cannot start now: no connected stream to `dest`, or one such
        message already open there, or a full window (the caller then
        gathers the body first)."""
        link = self._links.get(dest)
        if link is None or not link.connected or not link.sender.can_open():
            return None
        handle = next(self._handles)
        link.handles[link.sender.open(length)] = handle
        link.idle_deadline = None
        self._bodies[handle] = link
        return handle

    def write_body(self, handle: int, part: bytes) -> bool:
        """The next part of an open message; ignored once its fate is known.
        True when output is ready to go (a batch of the body)."""
        link = self._bodies.get(handle)
        if link is not None:
            return link.sender.write(part)
        if handle in self._gathering:
            self._gathering[handle][1].parts.append(part)
        return False

    def end_body(self, handle: int, now: float) -> None:
        """The open message is whole."""
        link = self._bodies.pop(handle, None)
        if link is not None:
            seq = link.sender.open_seq
            assert seq is not None  # a link in _bodies has its message open
            link.sender.close()
            link.hold_deadline = None
            self._expire_later(link, seq, now)
        elif handle in self._gathering:
            dest, body = self._gathering.pop(handle)
            self._submit(dest, b"".join(body.parts), handle, now)

    def cancel_body(self, handle: int, now: float) -> None:
        """Drop an open message whose body will never be whole (its client
        left or was too slow): no event follows for `handle`."""
        self._gathering.pop(handle, None)
        link = self._bodies.pop(handle, None)
        if link is not None:
            seq = link.sender.open_seq
            assert seq is not None  # a link in _bodies has its message open
            link.handles.pop(seq, None)
            self._take_off_wire(link, now)

    def _hold_expired(self, link: _Link, now: float) -> None:
        """Messages have waited BODY_HOLD behind a body still arriving (a slow
        client): take it off the stream, to be gathered and sent whole, so
        they go now. (Their order against it was never promised: its /send
        is not answered yet.)"""
        seq = link.sender.open_seq
        assert seq is not None  # the hold deadline is set only while a message is open
        handle = link.handles.pop(seq)
        self._bodies.pop(handle)
        log.info("a /send body to %s is arriving slowly: it goes once whole, after the "
                 "messages waiting behind it", link.dest.hex()[:16])
        self._gathering[handle] = (link.dest, link.sender.body_so_far())
        self._take_off_wire(link, now)

    def _take_off_wire(self, link: _Link, now: float) -> None:
        """Drop the open message from the stream. If part of it is on the
        wire, restart the connection: the receiver discards that part, and
        the new connection repeats the other unacknowledged messages."""
        link.hold_deadline = None
        if not link.sender.cancel():
            if not link.handles and link.connected:
                link.idle_deadline = now + SENDER_IDLE
            self._schedule(link)
            return
        if link.conn is not None:
            self._by_conn.pop(link.conn, None)
            link.conn.abort()
            link.conn = None
            link.connected = False
        if link.sender.unacked:
            self._connect(link, now)
        else:
            self._forget_link(link)

    def _connect(self, link: _Link, now: float) -> TcpConnection:
        link.conn = conn = self.stack.connect(address_for_key(link.dest), self.settings.stream_port, now=now)
        link.connected = False
        link.rest = memoryview(b"")
        link.connect_deadline = now + self.settings.lookup_timeout
        link.idle_deadline = None
        self._by_conn[conn] = link
        self._schedule(link)
        return conn

    def _link_event(self, link: _Link, event: tcp_events.TcpEvent, now: float) -> None:
        conn = link.conn
        assert conn is not None  # events come only from the connection in _by_conn
        match event:
            case tcp_events.Connected():
                self._connected(link, now)
            case tcp_events.DataReceived(data=data):
                conn.consumed(len(data))
                try:
                    acks = link.sender.receive(data)
                except StreamError as exc:
                    log.warning("message stream to %s: %s", link.dest.hex()[:16], exc)
                    conn.abort()
                    self._end_link(link, DeliveryError(f"message stream to {link.dest.hex()} broke: "
                                                       f"{exc}{MAY_HAVE_ARRIVED}"))
                    return
                self._acknowledged(link, conn, acks, now)
            case tcp_events.PeerFinished() | tcp_events.Closed():
                conn.close()
                self._broken(link, "closed", now)
            case tcp_events.Reset(reason=reason):
                self._broken(link, f"reset: {reason}", now)
            case tcp_events.TimedOut():
                self._broken(link, "timed out", now)

    def _connected(self, link: _Link, now: float) -> None:
        log.info("message stream to %s open (session %016x, %d outstanding)", link.dest.hex()[:16],
                 link.sender.session_id, len(link.sender.unacked))
        link.connected = link.ever_connected = True
        link.connect_deadline = None
        link.rest = memoryview(link.sender.start_connection())
        if not link.handles:
            link.idle_deadline = now + SENDER_IDLE
        self._schedule(link)

    def _acknowledged(self, link: _Link, conn: TcpConnection, acks: list[Ack], now: float) -> None:
        if acks:
            link.sender.size_to_path(len(acks), now, conn.path.min_rtt)
        too_large_open = False
        for ack in acks:
            link.reopens = 0
            handle = link.handles.pop(ack.seq, None)
            if ack.seq == link.sender.open_seq:
                # refused on its announced length while its body still arrives
                too_large_open = True
                if handle is not None:  # None for a repeated refusal in the same read
                    self._bodies.pop(handle, None)
            if handle is None:
                continue  # its sender was told it timed out
            if ack.status == STATUS_QUEUED:
                self._events.append(Acknowledged(handle))
            elif ack.status == STATUS_REFUSED:
                self._events.append(SendFailed(handle, ReceiverFull(
                    f"{link.dest.hex()} refused the message: {STREAM_REFUSAL_CAUSES}")))
            else:
                self._events.append(SendFailed(handle, MessageTooLarge(
                    f"the message exceeds the max_message_size of {link.dest.hex()}")))
        if too_large_open:
            self._take_off_wire(link, now)
            return
        if not link.handles and link.connected:
            link.idle_deadline = now + SENDER_IDLE
        self._schedule(link)

    def _broken(self, link: _Link, how: str, now: float) -> None:
        """The connection ended: fall back, reopen, or give up."""
        conn = link.conn
        assert conn is not None  # called from _link_event, for the link's live connection
        self._by_conn.pop(conn, None)
        link.conn = None
        was_connected, link.connected = link.connected, False
        dest = link.dest.hex()
        if not was_connected and not link.ever_connected and how.startswith("reset"):
            log.info("%s has no message stream port: one connection per message", dest[:16])
            self._unsupported.add(link.dest, now)
            self._forget_link(link)
            for seq, handle in link.handles.items():
                self._fallback(link.dest, link.sender.payload_of(seq), now, handle)
            return
        if not was_connected:
            self._end_link(link, never_connected(dest, how))
            return
        if how.startswith("reset") and link.sender.hello_unanswered():
            log.info("%s reset a version 2 message stream unanswered: speaking version 1 to it", dest[:16])
            self._version_1.add(link.dest, now)
            link.sender.speak_version_1()
        if not link.sender.unacked:
            self._forget_link(link)
            return
        link.reopens += 1
        if link.reopens > MAX_REOPENS:
            self._end_link(link, DeliveryTimeout(f"the message stream to {dest} broke ({how}) "
                                                 f"before the message was acknowledged{MAY_HAVE_ARRIVED}"))
            return
        log.info("message stream to %s broke (%s) with %d outstanding: reopening",
                 dest[:16], how, len(link.sender.unacked))
        self._connect(link, now)

    def _end_link(self, link: _Link, error: DeliveryError) -> None:
        for handle in link.handles.values():
            self._bodies.pop(handle, None)
            self._events.append(SendFailed(handle, error))
        link.handles.clear()
        if link.conn is not None:
            self._by_conn.pop(link.conn, None)
            link.conn.abort()
            link.conn = None
        self._forget_link(link)

    def _forget_link(self, link: _Link) -> None:
        link.deadline = None
        if self._links.get(link.dest) is link:
            del self._links[link.dest]

    def _link_expired(self, link: _Link, now: float) -> None:
        dest = link.dest.hex()
        if link.connect_deadline is not None and link.connect_deadline <= now:
            if link.ever_connected:
                self._end_link(link, DeliveryTimeout(f"the message stream to {dest} could not be "
                                                     f"reopened{MAY_HAVE_ARRIVED}"))
            else:
                self._end_link(link, PeerUnreachable(f"no route to {dest}: peer offline or unknown"))
            return
        expired = False
        while link.expiries and link.expiries[0][0] <= now:
            _, seq = link.expiries.popleft()
            handle = link.handles.pop(seq, None)
            if handle is not None:
                expired = True
                link.sender.withdraw(seq)
                self._events.append(SendFailed(handle, DeliveryTimeout(
                    f"{dest} did not acknowledge within {self.settings.send_timeout:g}s")))
        if expired and link.connected and link.conn is not None:
            # A receiver that restarted after its TCP took a window of
            # messages, before it answered them, lost the connection; with
            # every byte acknowledged and the window full, nothing more would
            # go to it, and nothing would show it. A probe it must answer: a
            # live one with an ACK, a restarted one with a reset, on which
            # the stream reopens (_broken) and repeats what is unanswered.
            link.conn.probe(now)
        if link.hold_deadline is not None and link.hold_deadline <= now:
            self._hold_expired(link, now)
            if link.conn is None:
                return
        if (link.idle_deadline is not None and link.idle_deadline <= now and link.conn is not None
                and not link.sender.unacked):
            link.conn.close()
            self._by_conn.pop(link.conn, None)
            self._forget_link(link)
            return
        self._schedule(link)

    def _schedule(self, link: _Link) -> None:
        while link.expiries and link.expiries[0][1] not in link.handles:
            link.expiries.popleft()
        candidates = [when for when in (link.connect_deadline, link.idle_deadline, link.hold_deadline,
                                        link.expiries[0][0] if link.expiries else None)
                      if when is not None]
        self._set_deadline(link, min(candidates) if candidates else None)

    # -- the receiving side ---------------------------------------------

    def restore_sessions(self, sessions: list[tuple[bytes, int, SessionRecord]]) -> None:
        """Take the sessions' answers a durable inbox kept across a restart
        (least recently used first): a sender repeating a message it had
        delivered before gets its answer, not a second delivery."""
        for peer, session_id, record in sessions:
            self._sessions.adopt(peer, session_id, record)

    def accept(self, conn: TcpConnection, peer: bytes, now: float) -> None:
        stream = _InboundStream(conn, StreamReceiver(self._sessions, peer, self.settings.max_message_size))
        self.listener.accepts += 1
        self._by_conn[conn] = stream
        self._set_deadline(stream, now + self.settings.idle_timeout)

    def _inbound_event(self, stream: _InboundStream, event: tcp_events.TcpEvent, now: float) -> None:
        match event:
            case tcp_events.DataReceived(data=data):
                stream.unconsumed += len(data)
                if stream.paused:
                    stream.stash.append(data)
                else:
                    self._feed(stream, data, now)
            case tcp_events.PeerFinished():
                stream.finished = True
                self._advance(stream, now)
            case tcp_events.Closed() | tcp_events.Reset() | tcp_events.TimedOut():
                if stream.partial_since is not None:
                    self.listener.read_errors += 1
                self._inbound_ended(stream)

    def _feed(self, stream: _InboundStream, data: bytes | memoryview, now: float) -> None:
        receiver = stream.receiver
        try:
            events = receiver.feed(data)
            if events and isinstance(events[0], Hello):
                stream.out += receiver.welcome(events[0])
                if self._settle(stream, events[0].session_id):
                    return
                events = receiver.feed(b"")
        except StreamError as exc:
            self._protocol_error(stream, exc, now)
            return
        # A Hello comes alone and first, and was taken above: the rest are messages and answers.
        stream.queue.extend(events)  # type: ignore[arg-type]
        if receiver.partial:
            if stream.partial_since is None:
                stream.partial_since = now
        else:
            stream.partial_since = None
        self._advance(stream, now)

    def _protocol_error(self, stream: _InboundStream, error: StreamError, now: float) -> None:
        """The sender broke the protocol: reset its stream (the messages it
        holds in the application still get their answers on record)."""
        if isinstance(error, OutsideWindow):
            self.outside_window += 1
        self.listener.read_errors += 1
        peer = stream.receiver.peer
        left_out = self._error_log.allow(peer, now)
        if left_out is not None:
            log.warning("message stream from %s: %s: reset%s", peer.hex()[:16], error,
                        f" ({left_out} more from it left out of the log)" if left_out else "")
        self._abort_inbound(stream)

    def _settle(self, stream: _InboundStream, session_id: int) -> bool:
        """A connection took over a session: end the older one. If that one
        still awaits the application's answer, pause this one until it is on
        record (True), so a message it repeats is recognised, not delivered twice."""
        key = (stream.receiver.peer, session_id)
        stream.session = key
        older = self._active.get(key)
        self._active[key] = stream
        if older is None:
            return False
        if not older.ended:
            self._abort_inbound(older)
        if not older.in_flight:
            return False
        older.successor = stream
        stream.paused = True
        return True

    def _resume(self, stream: _InboundStream, now: float) -> None:
        stream.paused = False
        stash, stream.stash = stream.stash, []
        self._feed(stream, b"".join(stash), now)

    def _advance(self, stream: _InboundStream, now: float) -> None:
        """Answer repeats at once and hand every new message to the application
        (in order, all together: their answers then leave in one write), but
        never more than STREAM_WINDOW unanswered: a sender keeping to the
        window never has more on the wire, so one beyond it is answered 503
        at once. The bytes count as read, reopening TCP's window, once all
        are answered."""
        if stream.paused or stream.ended:
            return
        receiver = stream.receiver
        while stream.queue:
            event = stream.queue.popleft()
            if isinstance(event, Answered):
                if event.status == STATUS_TOO_LARGE:
                    self.listener.oversize += 1
                stream.out += receiver.answer(event.seq, event.status)
                continue
            if len(stream.in_flight) >= STREAM_WINDOW:
                self._refuse_over_window(stream, event.seq)
                continue
            session = stream.session
            assert session is not None  # set by the Hello, which comes before any message
            handle = next(self._handles)
            stream.in_flight[handle] = event.seq
            self._answers[handle] = stream
            self._events.append(InboundMessage(handle, receiver.peer, event.payload,
                                               (session[1], event.seq)))
        if stream.in_flight:
            self._set_deadline(stream, None)
            return
        if stream.unconsumed:
            stream.conn.consumed(stream.unconsumed)
            stream.unconsumed = 0
        if stream.finished and not stream.closing:
            stream.closing = True
            stream.conn.close()
            self._set_deadline(stream, now + LAST_ACK_WAIT)
        elif stream.partial_since is not None:
            self._set_deadline(stream, stream.partial_since + self.settings.read_timeout)
        elif not stream.closing:
            self._set_deadline(stream, now + self.settings.idle_timeout)

    def _refuse_over_window(self, stream: _InboundStream, seq: int) -> None:
        self.window_refused += 1
        if not stream.overran:
            stream.overran = True
            log.warning("message stream from %s: more than %d messages unanswered (its sender "
                        "ignores the window): refusing each one beyond it (503)",
                        stream.receiver.peer.hex()[:16], STREAM_WINDOW)
        stream.out += stream.receiver.answer(seq, STATUS_REFUSED)

    def budget_usage(self) -> list[BudgetUse]:
        """The receiving side's budgets (besides the window of unanswered messages)."""
        sessions = self._sessions
        return [
            BudgetUse("stream_seq_window", "stream", STREAM_WINDOW, None, self.outside_window),
            BudgetUse("stream_sessions", "peer", sessions.per_peer, sessions.most_held_by_one_peer(),
                      sessions.pushed_out["peer"]),
            BudgetUse("stream_sessions", "node", sessions.capacity, len(sessions), sessions.pushed_out["node"]),
        ]

    def most_unanswered(self) -> int:
        """Messages unanswered on the inbound stream that has the most (its
        STREAM_WINDOW budget in use)."""
        return max((len(owner.in_flight) for owner in self._by_conn.values()
                    if isinstance(owner, _InboundStream)), default=0)

    def answer(self, handle: int, accepted: bool, now: float) -> bool:
        """The application's verdict on an inbound message; False if not ours."""
        stream = self._answers.pop(handle, None)
        if stream is None:
            return False
        seq = stream.in_flight.pop(handle)
        ack = stream.receiver.answer(seq, STATUS_QUEUED if accepted else STATUS_REFUSED)
        if stream.ended:
            if not stream.in_flight:
                self._release_session(stream)
                if stream.successor is not None:
                    self._resume(stream.successor, now)
            return True
        stream.out += ack
        if not stream.in_flight:
            self._advance(stream, now)
        return True

    def _inbound_ended(self, stream: _InboundStream) -> None:
        stream.ended = True
        stream.queue.clear()
        stream.deadline = None
        self._by_conn.pop(stream.conn, None)
        if not stream.in_flight:
            self._release_session(stream)

    def _release_session(self, stream: _InboundStream) -> None:
        """Forget the stream as its session's latest (kept while the application
        holds one of its messages: a successor must wait for that answer)."""
        if stream.session is not None and self._active.get(stream.session) is stream:
            del self._active[stream.session]

    def _abort_inbound(self, stream: _InboundStream) -> None:
        stream.conn.abort()
        self._inbound_ended(stream)

    # -- shared with the message layer ------------------------------------

    def owns(self, conn: TcpConnection) -> bool:
        return conn in self._by_conn

    def is_stream_port(self, conn: TcpConnection) -> bool:
        return self.enabled and conn.local_port == self.settings.stream_port

    def event(self, event: tcp_events.TcpEvent, now: float) -> None:
        owner = self._by_conn.get(event.connection)
        if isinstance(owner, _Link):
            self._link_event(owner, event, now)
        elif owner is not None:
            self._inbound_event(owner, event, now)

    def write_all(self) -> None:
        """Move pending output into the send buffers: everything submitted
        since the last call leaves as one write (one segment for small messages)."""
        for owner in list(self._by_conn.values()):
            if isinstance(owner, _Link):
                if owner.connected:
                    self._write_link(owner)
            elif owner.out:
                accepted = owner.conn.send(owner.out)
                del owner.out[:accepted]

    def _write_link(self, link: _Link) -> None:
        conn = link.conn
        assert conn is not None  # called only on a connected link
        while True:
            if not link.rest:
                output = link.sender.take_output()
                if not output:
                    return
                link.rest = memoryview(output)
            accepted = conn.send(link.rest)
            link.rest = link.rest[accepted:]
            if link.rest:
                return

    def get_timer(self) -> float | None:
        return self._timers.earliest()

    def handle_timer(self, now: float) -> None:
        for owner in self._timers.due(now):
            if isinstance(owner, _Link):
                self._link_expired(owner, now)
            else:
                if not owner.closing:
                    log.info("message stream from %s idle or stalled: closing",
                             owner.receiver.peer.hex()[:16])
                if owner.partial_since is not None:
                    self.listener.read_errors += 1
                self._abort_inbound(owner)

    def abort_all(self) -> None:
        for conn in list(self._by_conn):
            conn.abort()
        self._by_conn.clear()
        self._links.clear()
        self._bodies.clear()
        self._gathering.clear()

    def _set_deadline(self, owner: _Link | _InboundStream, when: float | None) -> None:
        self._timers.set(owner, when)
