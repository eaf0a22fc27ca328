"""The acknowledged message stream between nodes of this project (sans-IO).

One overlay TCP connection per destination carries many messages, each
answered in-band with the status `/send` reports (200 queued, 503 refused by a
full queue, 413 too large for the receiver). It runs on its own port
(`message_stream_port`) so that port `tcp_port` keeps the Go node's
one-message-per-connection protocol; see docs/protocol.md.

Wire format (all integers big-endian):

    connection start, sender -> receiver:  "AXLS" | u8 version | u64 session id
    message, sender -> receiver:           u8 1 | u64 seq | u32 length | payload
    acknowledgement, receiver -> sender:   u8 2 | u64 seq | u16 status
    window, receiver -> sender:            u8 3 | u32 messages   (version 2: once, first)

Version 1 has a fixed window of STREAM_BASE_WINDOW messages unanswered. A
version 2 receiver says first how many it takes (STREAM_WINDOW), and the
sender sizes its window to what the path carries a round trip, within it. A receiver that
knows only version 1 resets a version 2 hello before saying anything: the
sender then speaks version 1 to it (the caller remembers that for a while).

A session outlives its connections: when one breaks, the sender opens another
with the same session id and sends every unacknowledged message again with
its old sequence number. The receiver remembers, per session, the highest
sequence number it handed to the application and the recent answers, so a
message delivered before the break is acknowledged again (with its first
status) instead of being delivered twice. (Its caller makes a new connection
wait until the older one's messages are all answered.) A node with a durable
inbox keeps those answers with the messages, so this holds across its
restarts too (axl.node.store).
"""

from __future__ import annotations

import math
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from axl.budgets import STREAM_BASE_WINDOW, STREAM_WINDOW
from axl.node.streamsessions import SessionLru
from axl.wire import DecodeError

MAGIC: Final = b"AXLS"
VERSION = 2
VERSIONS = frozenset((1, VERSION))
MESSAGE: Final = 1
ACK: Final = 2
WINDOW: Final = 3
_HELLO: Final = struct.Struct("!4sBQ")
_MESSAGE: Final = struct.Struct("!BQI")
_ACK: Final = struct.Struct("!BQH")
_WINDOW: Final = struct.Struct("!BI")

STATUS_QUEUED: Final = 200
STATUS_TOO_LARGE: Final = 413
STATUS_REFUSED: Final = 503
KNOWN_STATUSES = frozenset((STATUS_QUEUED, STATUS_TOO_LARGE, STATUS_REFUSED))
# A sender's window is this many times the messages its path carried in
# the last round trip: room to find out whether the path carries more.
PATH_HEADROOM = 8
# A round trip this long is a long path's (a loopback or LAN one stays far
# under it): its sender starts at the receiver's whole window, instead of
# spending round trips growing from the base one.
LONG_PATH_RTT = 0.1
# How a SessionRecord keeps each answer: one byte, 0 for none.
_STATUS_CODES: Final = {STATUS_QUEUED: 1, STATUS_REFUSED: 2, STATUS_TOO_LARGE: 3}
_CODE_STATUSES = (None, STATUS_QUEUED, STATUS_REFUSED, STATUS_TOO_LARGE)

# A payload from this size on is written as it is, after its own header,
# instead of being copied into one frame (a 16 MiB copy per large message).
SEPARATE_PAYLOAD: Final = 64 * 1024
# A body written as it arrives goes out once this much of it is waiting (about
# a full TCP segment), or once it is whole: a client uploading in 4 KiB pieces
# made a 4 KiB segment of each, at 15 times the CPU per MB of full ones.
BODY_BATCH_BYTES = 64 * 1024


class StreamError(DecodeError):
    """The peer broke the stream protocol; the connection is closed."""


class OutsideWindow(StreamError):
    """A message numbered more than STREAM_WINDOW beyond its session's others."""


@dataclass(init=False, slots=True)
class Ack:
    seq: int
    status: int

    def __init__(self, seq: int, status: int) -> None:
        self.seq = seq
        self.status = status


@dataclass(frozen=True, slots=True)
class Hello:
    """A connection opened (or reopened) session `session_id`, speaking `version`."""

    session_id: int
    version: int


@dataclass(init=False, slots=True)
class Message:
    """A new message: deliver it, then `answer` it."""

    seq: int
    payload: bytes

    def __init__(self, seq: int, payload: bytes) -> None:
        self.seq = seq
        self.payload = payload


@dataclass(init=False, slots=True)
class Answered:
    """A message that was answered already (or must be refused unread):
    write its acknowledgement, deliver nothing."""

    seq: int
    status: int

    def __init__(self, seq: int, status: int) -> None:
        self.seq = seq
        self.status = status


def encode_hello(session_id: int, version: int = 1) -> bytes:
    return _HELLO.pack(MAGIC, version, session_id)


def encode_message(seq: int, payload: bytes) -> bytes:
    return _MESSAGE.pack(MESSAGE, seq, len(payload)) + payload


def encode_ack(seq: int, status: int) -> bytes:
    return _ACK.pack(ACK, seq, status)


def encode_window(messages: int) -> bytes:
    return _WINDOW.pack(WINDOW, messages)


@dataclass(slots=True)
class StreamedBody:
    """A message written while its body is still arriving: the length its
    header announced and the parts written so far."""

    length: int
    parts: list[bytes]


class StreamSender:
    """One session's sending side: sequence numbers, the messages sent but
    not yet acknowledged, and those waiting for room in the window.

    A message may also be written as its body arrives (`open`, `write`,
    `close`): its header goes out first, with the length announced, and the
    messages submitted meanwhile wait until it is whole. If the connection
    breaks meanwhile, the new one does not repeat its part: the rest of the
    body is gathered and the message sent whole once it is (a receiver that
    reset a frame too slow to complete must not be given it slowly again).

    A message has two numbers: its `seq`, given on submission, by which the
    caller knows it, and the sequence number it carries on the wire, given
    when it first goes out. Messages withdrawn while waiting never go out,
    so they leave no gap on the wire: the receiver refuses a number more
    than its window beyond the highest it has seen.

    The window (messages sent and not yet acknowledged) starts at
    STREAM_BASE_WINDOW, which every receiver takes, and is sized to the
    path once a round trip (`size_to_path`): PATH_HEADROOM times the
    messages acknowledged in the last one, never below STREAM_BASE_WINDOW
    nor above what the receiver said it takes (`granted`, version 2). So
    a long path gets its round trip's worth of messages under way within
    two round trips, while a short one keeps the base window (thousands
    in flight there only made the receiver's commits longer). On a path
    whose round trip is LONG_PATH_RTT or more, a burst after a round trip
    that never filled the window starts at `granted` instead, sized by the
    round trips after. A 503 (the receiver's queue is full) halves it,
    never below STREAM_BASE_WINDOW."""

    def __init__(self, session_id: int, fixed_window: int | None = None, version: int = 1) -> None:
        self.session_id = session_id
        # the protocol version its connections speak: a node's streams start
        # at VERSION, and go back to 1 toward a receiver that knows only that
        self.version = version
        # A window kept whatever the receiver says: only a test playing a
        # sender that ignores the window sets one.
        self.fixed_window = fixed_window
        self.window = fixed_window or STREAM_BASE_WINDOW
        # the round trip being measured: when it began, the messages
        # acknowledged since, and whether the window was full meanwhile
        self._round_start: float | None = None
        self._round_acked = 0
        self._round_filled = False
        # what the receiver takes: STREAM_BASE_WINDOW until it says more
        self.granted = STREAM_BASE_WINDOW
        # whether the current connection's receiver has said its window (version 2)
        self.told = False
        self.next_seq = 1
        self._next_wire_seq = 1
        # seq <-> wire sequence number, of the messages that went out and are unacknowledged
        self._wire_seq: dict[int, int] = {}
        self._seq_on_wire: dict[int, int] = {}
        # seq -> payload of every message not yet acknowledged, sent or
        # waiting, in the order submitted (a dict keeps it; deleting from an
        # OrderedDict cost more per acknowledgement)
        self.unacked: dict[int, bytes | StreamedBody] = {}
        # the waiting ones: always the highest sequence numbers, in order
        self._waiting: deque[int] = deque()
        # the message whose body is still being written, if any, and whether
        # its part so far is on the current connection's wire
        self.open_seq: int | None = None
        self._open_on_wire = False
        self._buffer = bytearray()
        self._pending: list[bytes] = []
        # parts of the open body written since the last BODY_BATCH_BYTES went out
        self._batch: list[bytes] = []
        self._batch_bytes = 0

    def submit(self, payload: bytes) -> int:
        """Queue one message; returns its sequence number. It goes out at once
        if the window has room, else once acknowledgements make some."""
        seq = self.next_seq
        self.next_seq += 1
        self.unacked[seq] = payload
        if self._waiting or self.open_seq is not None or len(self.unacked) > self.window:
            self._waiting.append(seq)
            self._round_filled = True
        else:
            self._queue_frame(seq, payload)
        return seq

    def can_open(self) -> bool:
        """Whether a message may start before its body is whole: none is
        open, none waits, and the window has room."""
        return self.open_seq is None and not self._waiting and len(self.unacked) < self.window

    def open(self, length: int) -> int:
        """Start a message of `length` bytes whose body `write` gives in parts."""
        assert self.can_open()
        seq = self.next_seq
        self.next_seq += 1
        self.unacked[seq] = StreamedBody(length, [])
        self.open_seq = seq
        self._open_on_wire = True
        self._pending.append(_MESSAGE.pack(MESSAGE, self._number(seq), length))
        return seq

    def body_so_far(self) -> StreamedBody:
        """The open message's body so far."""
        assert self.open_seq is not None
        body = self.unacked[self.open_seq]
        assert isinstance(body, StreamedBody)
        return body

    def write(self, part: bytes) -> bool:
        """The next part of the open message's body; it goes out with the
        others once BODY_BATCH_BYTES have come, or the body is whole.
        True when a batch is ready to go (there is output to take)."""
        self.body_so_far().parts.append(part)
        if not self._open_on_wire:
            return False
        self._batch.append(part)
        self._batch_bytes += len(part)
        if self._batch_bytes < BODY_BATCH_BYTES:
            return False
        self._send_batch()
        return True

    def _send_batch(self) -> None:
        self._pending += self._batch
        self._drop_batch()

    def _drop_batch(self) -> None:
        self._batch = []
        self._batch_bytes = 0

    def close(self) -> None:
        """The open message is whole; the messages that waited for it go out."""
        seq = self.open_seq
        assert seq is not None
        if self._open_on_wire:
            self._send_batch()
        else:
            body = self.body_so_far()
            self._pending += (_MESSAGE.pack(MESSAGE, self._wire_seq[seq], body.length), *body.parts)
        self.open_seq = None
        self._release()

    def cancel(self) -> bool:
        """Drop the open message. True when part of it is on the wire: the
        caller must then break the connection, so that the receiver never
        completes it, and start another (which repeats the other
        unacknowledged messages)."""
        assert self.open_seq is not None
        del self.unacked[self.open_seq]
        self._settled(self.open_seq)
        self.open_seq = None
        self._drop_batch()
        self._release()
        return self._open_on_wire

    def _number(self, seq: int) -> int:
        """Give message `seq` the next sequence number on the wire (it goes out now)."""
        wire_seq = self._next_wire_seq
        self._next_wire_seq += 1
        self._wire_seq[seq] = wire_seq
        self._seq_on_wire[wire_seq] = seq
        return wire_seq

    def _settled(self, seq: int) -> None:
        """Message `seq` is no longer outstanding: forget its wire number."""
        del self._seq_on_wire[self._wire_seq.pop(seq)]

    def _queue_frame(self, seq: int, payload: bytes) -> None:
        wire_seq = self._number(seq)
        if len(payload) < SEPARATE_PAYLOAD:
            self._pending.append(encode_message(wire_seq, payload))
        else:
            self._pending += (_MESSAGE.pack(MESSAGE, wire_seq, len(payload)), payload)

    def _release(self) -> None:
        """Send the waiting messages the window has room for now."""
        waiting = self._waiting
        while waiting and self.open_seq is None and len(self.unacked) - len(waiting) < self.window:
            seq = waiting.popleft()
            payload = self.unacked[seq]
            assert not isinstance(payload, StreamedBody)  # an open message never waits
            self._queue_frame(seq, payload)
        if waiting:
            self._round_filled = True

    def withdraw(self, seq: int) -> None:
        """Forget a message still waiting for room (its sender gave up on it):
        it was never sent, so it never arrives."""
        if seq in self._waiting:
            self._waiting.remove(seq)
            del self.unacked[seq]

    def payload_of(self, seq: int) -> bytes:
        """An unacknowledged message's payload (to send it another way)."""
        payload = self.unacked[seq]
        return b"".join(payload.parts) if isinstance(payload, StreamedBody) else payload

    def start_connection(self) -> bytes:
        """The first bytes of a (new) connection: the hello and every message
        sent but not acknowledged, again, in order (those waiting for room
        go on waiting). Clears pending output, and what the last connection
        left of an acknowledgement."""
        self._pending.clear()
        self._buffer.clear()
        self.told = False
        parts = [encode_hello(self.session_id, self.version)]
        first_waiting = self._waiting[0] if self._waiting else self.next_seq
        for seq, payload in self.unacked.items():
            if seq >= first_waiting:
                break
            if seq == self.open_seq:
                self._open_on_wire = False  # sent whole once its body is
                self._drop_batch()
                break
            wire_seq = self._wire_seq[seq]
            if isinstance(payload, StreamedBody):
                parts.append(_MESSAGE.pack(MESSAGE, wire_seq, payload.length))
                parts += payload.parts
            else:
                parts += (_MESSAGE.pack(MESSAGE, wire_seq, len(payload)), payload)
        return b"".join(parts)

    def take_output(self) -> bytes:
        """The next buffer to write, b"" when none: the frames submitted since
        the connection started or the last call, joined (many small messages
        leave in one segment) up to a large payload, which comes alone and
        uncopied in the next call."""
        pending = self._pending
        if not pending:
            return b""
        if len(pending[0]) >= SEPARATE_PAYLOAD:
            return pending.pop(0)
        for count, part in enumerate(pending):
            if len(part) >= SEPARATE_PAYLOAD:
                data = b"".join(pending[:count])
                del pending[:count]
                return data
        data = b"".join(pending)
        pending.clear()
        return data

    def speak_version_1(self) -> None:
        """The receiver knows only version 1 (it reset our version 2 hello
        unanswered): the next connections speak it, within its window."""
        self.version = 1
        self.granted = STREAM_BASE_WINDOW
        if self.fixed_window is None:
            self.window = min(self.window, STREAM_BASE_WINDOW)

    def hello_unanswered(self) -> bool:
        """Whether this connection spoke version 2 and its receiver has said
        nothing yet: when it ends so, the receiver knows only version 1."""
        return self.version >= 2 and not self.told and not self._buffer

    def receive(self, data: bytes | memoryview) -> list[Ack]:
        """Bytes from the receiver -> the acks they complete (each with the
        message's `seq`). A version 2 receiver's window comes first."""
        buffer = self._buffer
        buffer += data
        acks: list[Ack] = []
        offset = 0
        if self.version >= 2 and not self.told:
            if len(buffer) < _WINDOW.size:
                return acks
            offset = self._take_window(buffer)
        while len(buffer) - offset >= _ACK.size:
            kind, wire_seq, status = _ACK.unpack_from(buffer, offset)
            if kind != ACK or status not in KNOWN_STATUSES:
                raise StreamError(f"bad acknowledgement frame (type {kind}, status {status})")
            seq = self._seq_on_wire.get(wire_seq)
            # The open message can only be refused on its announced length (413):
            # the receiver does not have it whole. It stays outstanding for the
            # caller to cancel.
            if seq is not None and seq == self.open_seq and status == STATUS_TOO_LARGE:
                pass
            elif seq is None or seq == self.open_seq:
                raise StreamError(f"acknowledgement for message {wire_seq}, which is not outstanding")
            else:
                del self.unacked[seq]
                self._settled(seq)
                self._adjust_window(status)
            acks.append(Ack(seq, status))
            offset += _ACK.size
        del buffer[:offset]
        if self._waiting:
            self._release()
        return acks

    def _take_window(self, buffer: bytearray) -> int:
        """Read the receiver's window at the start of `buffer`; returns its size."""
        kind, messages = _WINDOW.unpack_from(buffer, 0)
        if kind != WINDOW or messages < STREAM_BASE_WINDOW:
            raise StreamError(f"expected the receiver's window, got frame type {kind}"
                              if kind != WINDOW else f"a window of {messages} messages, below "
                              f"the {STREAM_BASE_WINDOW} every receiver takes")
        self.told = True
        self.granted = min(messages, STREAM_WINDOW)
        if self.fixed_window is None:
            self.window = min(self.window, self.granted)
        return _WINDOW.size

    def _adjust_window(self, status: int) -> None:
        """One message answered `status`: halve the window if the receiver was full."""
        if self.fixed_window is None and status == STATUS_REFUSED:
            self.window = max(STREAM_BASE_WINDOW, self.window // 2)

    def size_to_path(self, acked: int, now: float, rtt: float | None) -> None:
        """`acked` messages were acknowledged at `now` (0: one was submitted),
        on a path whose round trip is `rtt` (None before the first sample).
        That is the least the overlay TCP sampled, not its smoothed RTT: on
        loopback the smoothed one grows with the receiver's commits and
        delayed ACKs, and a window sized by it grew with it, to 4096, where
        the base one carried more (the durable inbox's /ws rate fell by a
        third). Once a round trip has passed, the window becomes
        PATH_HEADROOM times what it carried. What a round trip carried says
        what the path takes only if the window was full meanwhile: on a long
        path, a round trip that never filled it (idle, one large message
        under way, a few requests) was limited by the application, not the
        path, and leaves the receiver's whole window for the next burst
        (RFC 7661 likewise keeps TCP's window through such periods); a
        short path keeps what it carried, or the base window after a round
        trip without answers.
        Always within STREAM_BASE_WINDOW and `granted`."""
        if self._round_start is None:
            self._round_start = now
        if self.fixed_window is not None or rtt is None:
            return
        self._round_acked += acked
        elapsed = now - self._round_start
        if elapsed < rtt or elapsed <= 0:
            return
        long_path = rtt >= LONG_PATH_RTT
        if self._round_acked and (self._round_filled or not long_path):
            window = math.ceil(PATH_HEADROOM * self._round_acked * rtt / elapsed)
        else:
            window = self.granted if long_path else STREAM_BASE_WINDOW
        self.window = max(STREAM_BASE_WINDOW, min(self.granted, window))
        self._round_start = now
        self._round_acked = 0
        self._round_filled = False
        if self._waiting:
            self._release()


@dataclass(slots=True)
class SessionRecord:
    """What a receiver remembers of one sender's session: the highest
    sequence number handed to the application, and the answers given to the
    sequence numbers of the last window up to it.

    A sender has at most STREAM_WINDOW messages on the wire unanswered, so
    a message it sends again is never older than that window: an older one
    was acknowledged. Within the window, a sequence number without an answer
    was never answered (a record restored after a restart holds only what was
    committed), so that message is delivered. The answers are one byte per
    number of the window (`answers[seq % STREAM_WINDOW]`, 0 for none), made
    on the first answer: constant memory and constant time per message,
    however the sender numbers them.

    It also holds the highest sequence number this node has seen of the
    session (`seen_upto`, 0 before the first), which the next may pass by
    at most STREAM_WINDOW (`see`)."""

    taken_upto: int = 0
    answers: bytearray | None = None
    seen_upto: int = 0

    @classmethod
    def restored(cls, taken_upto: int, queued: Iterable[int]) -> SessionRecord:
        """A record of what a durable inbox committed: `queued`, in order, answered 200."""
        record = cls(taken_upto)
        for seq in queued:
            record.remember(seq, STATUS_QUEUED)
        return record

    def see(self, seq: int) -> None:
        """A message header of the session arrived. A sender numbers its
        messages as they go out, at most STREAM_WINDOW of them unanswered, so
        its numbers never run further ahead of those it sent before: one that
        does is a StreamError, refused before the store or the application
        sees it. The first number this node sees sets where the session is
        (one new to it, restored after a restart, or forgotten: a sender's
        503s were never kept, so it may be anywhere past the restored ones)."""
        if self.seen_upto and seq > self.seen_upto + STREAM_WINDOW:
            raise OutsideWindow(f"message {seq} is more than {STREAM_WINDOW} beyond message "
                              f"{self.seen_upto} of its session (outside the window)")
        self.seen_upto = max(self.seen_upto, seq)

    def take(self, seq: int) -> None:
        """Message `seq` goes to the application: the window moves up to it,
        and the answers of the numbers it leaves behind are forgotten."""
        ahead = seq - self.taken_upto
        if ahead <= 0:
            return
        answers = self.answers
        if answers is not None:
            if ahead == 1:  # the usual step: the one number it leaves behind
                answers[seq % STREAM_WINDOW] = 0
            elif ahead >= STREAM_WINDOW:
                answers[:] = bytes(STREAM_WINDOW)
            else:
                first = (self.taken_upto + 1) % STREAM_WINDOW
                stop = first + ahead
                answers[first:stop] = bytes(min(stop, STREAM_WINDOW) - first)
                if stop > STREAM_WINDOW:
                    answers[:stop - STREAM_WINDOW] = bytes(stop - STREAM_WINDOW)
        self.taken_upto = seq

    def remember(self, seq: int, status: int) -> None:
        """Message `seq` was answered `status` (one answered unread, 413,
        moves the window up to it too)."""
        self.take(seq)
        if seq <= self.taken_upto - STREAM_WINDOW:
            return
        if self.answers is None:
            self.answers = bytearray(STREAM_WINDOW)
        self.answers[seq % STREAM_WINDOW] = _STATUS_CODES[status]

    def status_of(self, seq: int) -> int | None:
        """The answer given to `seq` (at most `taken_upto`), or None if it was never answered."""
        if seq <= self.taken_upto - STREAM_WINDOW:
            return STATUS_QUEUED
        if self.answers is None:
            return None
        return _CODE_STATUSES[self.answers[seq % STREAM_WINDOW]]


class SessionTable(SessionLru[SessionRecord]):
    """The receiver's memory of sessions, bounded for the node and for each
    sender, least recently used first out."""

    def record(self, peer: bytes, session_id: int) -> SessionRecord:
        record = self.get((peer, session_id))
        if record is None:
            record = SessionRecord()
            self.adopt(peer, session_id, record)
        return record

    def adopt(self, peer: bytes, session_id: int, record: SessionRecord) -> None:
        """Hold `record` as the session's, the most recent (a restored one, or a new one)."""
        self.put((peer, session_id), record)


@dataclass(slots=True)
class _Body:
    """A message whose header has arrived and part of its payload."""

    seq: int
    missing: int
    parts: list[bytes | memoryview]


class StreamReceiver:
    """One inbound connection: decodes the hello and messages, drops the
    ones its session answered already, and encodes the answers."""

    def __init__(self, table: SessionTable, peer: bytes, max_message_size: int) -> None:
        self.table = table
        self.peer = peer
        self.max_message_size = max_message_size
        self.record: SessionRecord | None = None
        self._buffer = bytearray()
        self._skip = 0
        self._body: _Body | None = None

    @property
    def partial(self) -> bool:
        """True while part of a frame is buffered (the read deadline applies)."""
        return bool(self._buffer) or self._skip > 0 or self._body is not None

    def feed(self, data: bytes | memoryview) -> list[Hello | Message | Answered]:
        """Append stream bytes; return the events they complete, in order.
        A Hello is returned alone (see below)."""
        events: list[Hello | Message | Answered] = []
        body = self._body
        if body is not None:
            rest = self._take_body(body, data, events)
            if rest is None:
                return events
            data = rest
        buffer = self._buffer
        buffer += data
        offset = self._skip_body(0)
        if self.record is None:
            if len(buffer) < _HELLO.size:
                return events
            magic, version, session_id = _HELLO.unpack_from(buffer, 0)
            if magic != MAGIC or version not in VERSIONS:
                raise StreamError(f"not a message stream (magic {magic!r}, version {version})")
            self.record = self.table.record(self.peer, session_id)
            # Stop here: the caller first settles any older connection of
            # this session, then feeds b"" to read on against its answers.
            del buffer[:_HELLO.size]
            return [Hello(session_id, version)]
        with memoryview(buffer) as view:  # one copy of each payload, not two
            offset = self._read_messages(view, offset, events)
        del buffer[:offset]
        return events

    def _read_messages(self, view: memoryview, offset: int, events: list[Hello | Message | Answered]) -> int:
        """The messages in `view` from `offset` on, into `events`; returns
        where the unread bytes begin (a message begun and not whole becomes
        `_body`)."""
        record = self.record
        assert record is not None
        while len(view) - offset >= _MESSAGE.size:
            kind, seq, length = _MESSAGE.unpack_from(view, offset)
            if kind != MESSAGE:
                raise StreamError(f"unexpected frame type {kind}")
            record.see(seq)
            if length > self.max_message_size:
                events.append(Answered(seq, STATUS_TOO_LARGE))
                self._skip = length
                offset = self._skip_body(offset + _MESSAGE.size)
                continue
            end = offset + _MESSAGE.size + length
            payload = bytes(view[offset + _MESSAGE.size:end])
            offset = min(end, len(view))
            if offset < end:
                self._body = _Body(seq, end - offset, [payload])
                break
            self._complete(seq, payload, events)
        return offset

    def _take_body(self, body: _Body, data: bytes | memoryview,
                   events: list[Hello | Message | Answered]) -> bytes | memoryview | None:
        """Add `data` to `body`, the message being received; returns what
        follows it, or None while the message is still incomplete.

        A large payload's pieces are kept as they arrive and joined once:
        appending 64 KiB segments to the buffer and copying the payload out
        of it cost two copies and a growing buffer's reallocations."""
        if len(data) < body.missing:
            body.parts.append(data)
            body.missing -= len(data)
            return None
        body.parts.append(data[:body.missing])
        rest = data[body.missing:]
        self._body = None
        self._complete(body.seq, b"".join(body.parts), events)
        return rest

    def _complete(self, seq: int, payload: bytes, events: list[Hello | Message | Answered]) -> None:
        """A whole message: new ones are delivered, repeated ones answered again."""
        record = self.record
        assert record is not None
        status = record.status_of(seq) if seq <= record.taken_upto else None
        if status is not None:
            events.append(Answered(seq, status))
        else:
            record.take(seq)
            events.append(Message(seq, payload))

    def _skip_body(self, offset: int) -> int:
        """Discard up to `_skip` bytes of a refused body from `offset` on."""
        taken = min(self._skip, len(self._buffer) - offset)
        self._skip -= taken
        return offset + taken

    @staticmethod
    def welcome(hello: Hello) -> bytes:
        """What goes back first on a connection that said `hello`: a version 2
        sender is told the window, a version 1 sender nothing (it knows it)."""
        return encode_window(STREAM_WINDOW) if hello.version >= 2 else b""

    def answer(self, seq: int, status: int) -> bytes:
        """Record a message's fate and return its acknowledgement frame."""
        assert self.record is not None
        self.record.remember(seq, status)
        return encode_ack(seq, status)
