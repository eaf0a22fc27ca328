"""AXL's application protocol over the userspace TCP stack, sans-IO.

Between nodes of this project a message travels on a kept-open, acknowledged
stream to port `message_stream_port` (axl.node.streams). Toward any other
node (a Go node resets that SYN) and for requests, every message travels on
its own TCP connection to port `tcp_port` of the destination's overlay
address, as u32be length || body. The sender half-closes
after the body and waits for the receiver's FIN: a receiver closes only after
it has read everything, so that FIN is an end-to-end acknowledgement (it works
against Go receivers too, which close on EOF). A receiver that cannot queue a
message resets the connection instead, and the sender reports it refused.

`MessageLayer` holds no clock and no task: it is told the time with each
call, reads the TCP stack's events, and hands the application events
(`Acknowledged`, `SendFailed`, `ReplyReceived`, `InboundMessage`) through
`next_event()`. An inbound message waits for the application's answer
(`answer_inbound`): accepted (the FIN follows once the sender finishes),
refused (RST) or a reply written back on the same connection. Messages that
arrive behind an unanswered one wait in order, and their bytes are reported
consumed to TCP only once the application is free again: a sender facing a
busy reader (an inbound MCP call can take a minute) is paused by a closed
receive window instead of filling our memory.
"""

from __future__ import annotations

import itertools
import logging
import random
# Bound here so that a compiled dataclass finds it: mypyc looks a field's
# type up among the module's names, and `memoryview` is only a builtin.
from builtins import memoryview  # noqa: A004
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from axl.budgets import MAX_REMEMBERED_SENDERS
from axl.config import NodeConfig
from axl.errors import (DeliveryError, DeliveryTimeout, MessageTooLarge, PeerUnreachable, ReceiverFull,
                        never_connected)
from axl.identity import address_for_key, key_for_address_bytes
from axl.node.deadlines import Deadlines
from axl.node.events import Acknowledged, InboundMessage, MessageEvent, ReplyReceived, SendFailed
from axl.node.stats import ListenerCounts
from axl.node.streams import LAST_ACK_WAIT, MessageStreams
from axl.tcp import events as tcp_events
from axl.tcp.connection import TcpConnection
from axl.tcp.framing import MessageDecoder, MessageTooLarge as FrameTooLarge, message_header
from axl.tcp.stack import TcpStack

log = logging.getLogger("axl.transport")

WRITE_CHUNK = 1 << 20
REFUSAL_CAUSES = ("its receive queue is full, it is at its connection limit or its budget for "
                  "our MCP/A2A messages, or the message exceeds its max_message_size")


@dataclass(frozen=True)
class MessageSettings:
    """The message layer's limits, in seconds and bytes (from the node config)."""

    port: int = 7000
    max_message_size: int = 16 * 1024 * 1024
    lookup_timeout: float = 10.0
    send_timeout: float = 60.0
    read_timeout: float = 60.0
    idle_timeout: float = 300.0
    stream_port: int = 7001
    streams: bool = True
    # None: a stream sender's window grows as answers come back, up to what
    # its receiver takes. A number: the sender keeps that many unanswered
    # whatever the receiver says, which only a test playing a sender that
    # ignores the window sets (receivers refuse, 503, what comes beyond
    # their STREAM_WINDOW).
    stream_window: int | None = None

    @classmethod
    def from_config(cls, config: NodeConfig) -> MessageSettings:
        return cls(config.tcp_port, config.max_message_size, config.lookup_timeout_secs,
                   config.send_timeout_secs, config.conn_read_timeout_secs,
                   config.conn_idle_timeout_secs, config.message_stream_port,
                   config.message_streams)


# -- per-connection state --------------------------------------------------


@dataclass(eq=False)
class _Stream:
    conn: TcpConnection
    peer_key: bytes
    deadline: float | None = None
    rest: memoryview = field(default_factory=lambda: memoryview(b""))


@dataclass(eq=False)
class _Outbound(_Stream):
    handle: int = 0
    want_reply: bool = False
    connected: bool = False
    reply_timeout: float = 0.0
    final_deadline: float = 0.0
    decoder: MessageDecoder | None = None


@dataclass(eq=False)
class _InboundConnection(_Stream):
    """The receiving side of one connection to port `tcp_port` (one or more
    messages, answered one at a time); streams have `_InboundStream`."""

    decoder: MessageDecoder = field(default_factory=MessageDecoder)
    waiting: deque[bytes] = field(default_factory=deque)
    answering: int | None = None
    unconsumed: int = 0
    message_deadline: float | None = None
    finished: bool = False
    ended: bool = False
    closing: bool = False


# What the layer keeps per connection (never a bare _Stream).
_Connection = _Outbound | _InboundConnection


class MessageLayer:
    """Every message connection of one node: sends, requests and inbound ones."""

    def __init__(self, stack: TcpStack, settings: MessageSettings,
                 rng: random.Random | None = None) -> None:
        self.stack = stack
        self.settings = settings
        self._handles = itertools.count(1)
        self._streams: dict[TcpConnection, _Connection] = {}
        self._answers: dict[int, _InboundConnection] = {}
        self._writers: dict[_Connection, None] = {}
        self._events: deque[MessageEvent] = deque()
        self._timers: Deadlines[_Connection] = Deadlines()
        # overlay address -> the full key its packets were last proven to come from
        self._senders: OrderedDict[bytes, bytes] = OrderedDict()
        self.listener = ListenerCounts()
        stack.listen(settings.port)
        self.streams = MessageStreams(stack, settings, self._handles, self._events, self._fallback,
                                      rng or random.SystemRandom(), self.listener)

    # -- application side -----------------------------------------------

    def send(self, dest_key: bytes, payload: bytes, now: float) -> int:
        """Start one acknowledged message; raises MessageTooLarge at once."""
        self._check_size(len(payload))
        if self.streams.usable(dest_key, now):
            return self.streams.send(dest_key, payload, now)
        return self._open(dest_key, payload, now, now + self.settings.lookup_timeout, None)

    def open_body(self, dest_key: bytes, length: int, now: float) -> int | None:
        """Start a message before its body is whole, on a connected stream
        (MessageStreams.open_body); None when it must be gathered first."""
        self._check_size(length)
        if not self.streams.usable(dest_key, now):
            return None
        return self.streams.open_body(dest_key, length, now)

    def _check_size(self, length: int) -> None:
        if length > self.settings.max_message_size:
            raise MessageTooLarge(f"payload of {length} bytes exceeds max_message_size")

    def keeps_order(self, dest_key: bytes) -> bool:
        """Whether concurrent sends to `dest_key` arrive in the order started.

        True only on a message stream that has connected: its messages keep
        their sequence order through reconnections. A stream not yet connected
        may still hand its messages to the fallback, and there every message
        has its own connection, which can overtake the others.
        """
        return self.streams.established(dest_key)

    def _fallback(self, dest_key: bytes, payload: bytes, now: float, handle: int) -> None:
        """A stream message whose destination has no stream port: its own connection."""
        self._open(dest_key, payload, now, now + self.settings.lookup_timeout, None, handle)

    def request(self, dest_key: bytes, payload: bytes, timeout: float, now: float) -> int:
        """One envelope out, one framed reply back on the same connection."""
        return self._open(dest_key, payload, now,
                          now + min(timeout, self.settings.lookup_timeout), timeout)

    def answer_inbound(self, handle: int, accepted: bool, reply: bytes | None, now: float) -> None:
        """The application's verdict on an InboundMessage."""
        if self.streams.answer(handle, accepted, now):
            return
        stream = self._answers.pop(handle, None)
        if stream is None:
            return
        stream.answering = None
        if stream.ended:
            self._advance(stream, now)
            return
        if not accepted:
            self._abort(stream)
            return
        if reply is not None:
            stream.rest = memoryview(message_header(len(reply)) + reply)
            self._writers[stream] = None
            self._set_deadline(stream, now + self.settings.read_timeout)
        self._advance(stream, now)

    def next_event(self) -> MessageEvent | None:
        return self._events.popleft() if self._events else None

    def abort_all(self) -> None:
        self.streams.abort_all()
        for stream in list(self._streams.values()):
            stream.conn.abort()
        self._streams.clear()
        self._writers.clear()

    # -- network side ---------------------------------------------------

    def packet_received(self, source_key: bytes, packet: bytes | memoryview, now: float) -> None:
        """An IPv6 packet for our TCP stack, proven to come from `source_key`."""
        self._remember_sender(bytes(packet[8:24]), source_key)
        self.stack.receive(packet, now)

    def process(self, now: float) -> None:
        """Take the stack's events, then write what the send buffers now take."""
        stack = self.stack
        while (event := stack.next_event()) is not None:
            conn = event.connection
            if isinstance(event, tcp_events.NewConnection):
                if self.streams.is_stream_port(conn):
                    self.streams.accept(conn, self._peer_of(conn), now)
                else:
                    self._accept(conn, now)
                continue
            if self.streams.owns(conn):
                self.streams.event(event, now)
                continue
            stream = self._streams.get(conn)
            if isinstance(stream, _Outbound):
                self._outbound_event(stream, event, now)
            elif stream is not None:
                self._inbound_event(stream, event, now)
        for stream in list(self._writers):
            if stream.conn.send_space:
                self._write(stream, now)
        self.streams.write_all()

    def get_timer(self) -> float | None:
        mine = self._timers.earliest()
        theirs = self.streams.get_timer()
        return theirs if mine is None else mine if theirs is None else min(mine, theirs)

    def handle_timer(self, now: float) -> None:
        self.streams.handle_timer(now)
        for stream in self._timers.due(now):
            if isinstance(stream, _Outbound):
                self._outbound_expired(stream)
            else:
                self._inbound_expired(stream)

    # -- outbound -------------------------------------------------------

    def _open(self, dest_key: bytes, payload: bytes, now: float, connect_deadline: float,
              reply_timeout: float | None, handle: int | None = None) -> int:
        """Connect with the framed message queued before the SYN leaves, as much
        of it as the send buffer takes: it then rides on the handshake's final
        ACK instead of waiting a round trip, and for a plain send the FIN rides
        along too."""
        conn = self.stack.connect(address_for_key(dest_key), self.settings.port, now=now)
        conn.send(message_header(len(payload)))
        sent = conn.send(payload)
        rest = memoryview(payload)[sent:]
        want_reply = reply_timeout is not None
        stream = _Outbound(conn, dest_key, rest=rest, handle=handle or next(self._handles),
                           want_reply=want_reply, reply_timeout=reply_timeout or 0.0,
                           final_deadline=now + (reply_timeout or 0.0))
        if want_reply:
            stream.decoder = MessageDecoder(self.settings.max_message_size)
        self._streams[conn] = stream
        if rest:
            self._writers[stream] = None
        elif not want_reply:
            conn.close()
        self._set_deadline(stream, connect_deadline)
        return stream.handle

    def _outbound_event(self, stream: _Outbound, event: tcp_events.TcpEvent, now: float) -> None:
        match event:
            case tcp_events.Connected():
                stream.connected = True
                if not stream.want_reply:
                    stream.final_deadline = now + self.settings.send_timeout
                self._set_deadline(stream, stream.final_deadline)
            case tcp_events.DataReceived(data=data):
                stream.conn.consumed(len(data))
                decoder = stream.decoder
                if decoder is not None:
                    self._reply_data(stream, decoder, data)
            case tcp_events.PeerFinished() | tcp_events.Closed():
                self._peer_finished(stream)
            case tcp_events.Reset(reason=reason):
                self._outbound_ended(stream, f"reset: {reason}")
            case tcp_events.TimedOut():
                self._outbound_ended(stream, "timed out")

    def _reply_data(self, stream: _Outbound, decoder: MessageDecoder, data: bytes | memoryview) -> None:
        try:
            replies = decoder.feed(data)
        except FrameTooLarge as exc:
            self._fail(stream, DeliveryError(f"request to {stream.peer_key.hex()} failed: {exc}"))
            stream.conn.close()
            return
        if replies:
            self._finish(stream, ReplyReceived(stream.handle, replies[0]))
            stream.conn.close()

    def _peer_finished(self, stream: _Outbound) -> None:
        dest = stream.peer_key.hex()
        if stream.want_reply:
            self._fail(stream, PeerUnreachable(f"{dest} closed the connection without replying"))
            stream.conn.close()
        elif stream.rest or stream.conn.unacknowledged:
            # A receiver that read the message acknowledged every byte before
            # its FIN; a FIN without that (a Go node over its connection limit
            # closes at once) is a refusal, not a delivery.
            stream.conn.abort()
            self._fail(stream, ReceiverFull(f"{dest} closed the connection without reading the "
                                            f"message: {REFUSAL_CAUSES}"))
        else:
            self._finish(stream, Acknowledged(stream.handle))

    def _outbound_ended(self, stream: _Outbound, how: str) -> None:
        dest = stream.peer_key.hex()
        if not stream.connected:
            error: DeliveryError = never_connected(dest, how)
        elif stream.want_reply:
            error = DeliveryError(f"request to {dest} failed: {how}")
        else:
            error = ReceiverFull(f"{dest} refused the message ({how}): {REFUSAL_CAUSES}")
        self._fail(stream, error)

    def _outbound_expired(self, stream: _Outbound) -> None:
        dest = stream.peer_key.hex()
        if not stream.connected:
            stream.conn.abort()
            error: DeliveryError = PeerUnreachable(f"no route to {dest}: peer offline or unknown")
        elif stream.want_reply:
            stream.conn.close()
            error = DeliveryTimeout(f"no reply from {dest} within {stream.reply_timeout:g}s")
        else:
            stream.conn.abort()
            error = DeliveryTimeout(f"{dest} did not acknowledge within {self.settings.send_timeout:g}s")
        self._fail(stream, error)

    def _fail(self, stream: _Outbound, error: DeliveryError) -> None:
        self._finish(stream, SendFailed(stream.handle, error))

    def _finish(self, stream: _Outbound, event: MessageEvent) -> None:
        self._forget(stream)
        self._events.append(event)

    # -- inbound --------------------------------------------------------

    def _remember_sender(self, address: bytes, key: bytes) -> None:
        senders = self._senders
        senders[address] = key
        senders.move_to_end(address)
        if len(senders) > MAX_REMEMBERED_SENDERS:
            senders.popitem(last=False)

    def _peer_of(self, conn: TcpConnection) -> bytes:
        return self._senders.get(conn.remote_address) or key_for_address_bytes(conn.remote_address)

    def _accept(self, conn: TcpConnection, now: float) -> None:
        stream = _InboundConnection(conn, self._peer_of(conn),
                                    decoder=MessageDecoder(self.settings.max_message_size))
        self.listener.accepts += 1
        self._streams[conn] = stream
        self._set_deadline(stream, now + self.settings.idle_timeout)

    def _inbound_event(self, stream: _InboundConnection, event: tcp_events.TcpEvent, now: float) -> None:
        match event:
            case tcp_events.DataReceived(data=data):
                self._inbound_data(stream, data, now)
            case tcp_events.PeerFinished():
                stream.finished = True
                self._advance(stream, now)
            case tcp_events.Closed() | tcp_events.Reset() | tcp_events.TimedOut():
                if stream.decoder.partial:
                    self.listener.read_errors += 1
                stream.ended = True
                self._streams.pop(stream.conn, None)
                self._writers.pop(stream, None)
                stream.deadline = None
                self._advance(stream, now)

    def _inbound_data(self, stream: _InboundConnection, data: bytes | memoryview, now: float) -> None:
        decoder = stream.decoder
        try:
            messages = decoder.feed(data)
        except FrameTooLarge as exc:
            log.warning("inbound message refused: %s", exc)
            self.listener.oversize += 1
            self._abort(stream)
            return
        if messages or not decoder.partial:
            stream.message_deadline = None
        stream.unconsumed += len(data)
        stream.waiting.extend(messages)
        self._advance(stream, now)

    def _advance(self, stream: _InboundConnection, now: float) -> None:
        """Hand the next waiting message to the application, or finish the connection."""
        if stream.answering is not None:
            return
        if stream.unconsumed and not stream.ended:
            stream.conn.consumed(stream.unconsumed)
            stream.unconsumed = 0
        if stream.waiting:
            handle = next(self._handles)
            stream.answering = handle
            self._answers[handle] = stream
            self._events.append(InboundMessage(handle, stream.peer_key, stream.waiting.popleft()))
            if not stream.ended:
                self._set_deadline(stream, None)
            return
        if stream.ended or stream.closing or stream.rest:
            return
        if stream.finished:
            self._close_inbound(stream, now)
        elif stream.decoder.partial:
            if stream.message_deadline is None:
                stream.message_deadline = now + self.settings.read_timeout
            self._set_deadline(stream, stream.message_deadline)
        else:
            self._set_deadline(stream, now + self.settings.idle_timeout)

    def _close_inbound(self, stream: _InboundConnection, now: float) -> None:
        if stream.decoder.partial:
            log.warning("connection from %s ended mid-message", stream.peer_key.hex())
            self.listener.read_errors += 1
            self._abort(stream)
            return
        stream.closing = True
        stream.conn.close()
        self._set_deadline(stream, now + LAST_ACK_WAIT)

    def _inbound_expired(self, stream: _InboundConnection) -> None:
        if not stream.closing:
            log.info("inbound connection idle or stalled: closing")
        if stream.decoder.partial:
            self.listener.read_errors += 1
        self._abort(stream)

    def _abort(self, stream: _InboundConnection) -> None:
        stream.conn.abort()
        stream.ended = True
        stream.waiting.clear()
        self._forget(stream)

    # -- shared ---------------------------------------------------------

    def _write(self, stream: _Connection, now: float) -> None:
        """Move what the send buffer takes; a finished send half-closes."""
        conn = stream.conn
        rest = stream.rest
        while rest:
            accepted = conn.send(rest[:WRITE_CHUNK])
            if not accepted:
                break
            rest = rest[accepted:]
        stream.rest = rest
        if rest:
            return
        del self._writers[stream]
        if isinstance(stream, _Outbound):
            if not stream.want_reply:
                conn.close()
        else:
            self._advance(stream, now)

    def _set_deadline(self, stream: _Connection, when: float | None) -> None:
        self._timers.set(stream, when)

    def _forget(self, stream: _Connection) -> None:
        stream.deadline = None
        self._streams.pop(stream.conn, None)
        self._writers.pop(stream, None)
