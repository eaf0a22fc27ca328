"""One TCP connection as a sans-IO state machine (an RFC 9293 subset).

Feed it segments with `receive_segment(segment, now)`, collect what it wants
sent with `segments_to_send(now)`, drive time with `get_timer()` and
`handle_timer(now)`, and read what happened with `next_event()`.

Loss and reordering are normal on the overlay (relays drop packets that
queue too long, sessions drop reordered ones), so recovery is what matters:
RFC 6298 retransmission timer with a low floor, fast retransmit and NewReno
fast recovery (RFC 6582; both in `axl.tcp.recovery`), out-of-order
reassembly and zero-window probes.

Sequence numbers are kept internally as unbounded integers and wrapped to
32 bits only on the wire, which keeps every comparison a plain `<`.
"""

from __future__ import annotations

import enum
import heapq
from collections import deque
from dataclasses import dataclass
from typing import Final

from axl.budgets import TCP_RECEIVE_BUFFER, TCP_SEND_BUFFER
from axl.tcp.events import (
    Closed,
    Connected,
    DataReceived,
    NewConnection,
    PeerFinished,
    Reset,
    TcpClosedError,
    TcpEvent,
    TimedOut,
)
from axl.tcp.recovery import NewReno, PathStats, RttEstimator
from axl.tcp.segment import ACK, FIN, MAX_WINDOW_SCALE, PSH, RST, SYN, TcpSegment
from axl.tcp.buffers import ReceiveQueue, SendBuffer

SEQ_MODULUS: Final = 1 << 32
_HALF_SEQ: Final = 1 << 31
MAX_WINDOW_FIELD: Final = 0xFFFF

IPV6_DEFAULT_MSS = 1220
"""MSS toward a 1280-byte MTU (the Go node's); also what a SYN without the option implies.

It is also the floor for a peer's MSS option: IPv6 guarantees a 1280-byte
MTU on every path, so a smaller MSS buys nothing and an MSS of 1 would turn
every byte into its own sealed, routed packet."""

MAX_MSS = 65535 - 40 - 20
"""The largest payload of one segment in a 65535-byte IPv6 packet (the core MTU)."""


class State(enum.Enum):
    CLOSED = "CLOSED"
    SYN_SENT = "SYN-SENT"
    SYN_RECEIVED = "SYN-RECEIVED"
    ESTABLISHED = "ESTABLISHED"
    FIN_WAIT_1 = "FIN-WAIT-1"
    FIN_WAIT_2 = "FIN-WAIT-2"
    CLOSE_WAIT = "CLOSE-WAIT"
    CLOSING = "CLOSING"
    LAST_ACK = "LAST-ACK"
    TIME_WAIT = "TIME-WAIT"


# Tuples, not sets: membership in a tuple compares identities, while a set
# hashes the member first, and an Enum's __hash__ is a Python call.
_SENDING_STATES = (State.ESTABLISHED, State.CLOSE_WAIT, State.FIN_WAIT_1, State.CLOSING, State.LAST_ACK)
_RECEIVING_STATES: Final = (State.ESTABLISHED, State.FIN_WAIT_1, State.FIN_WAIT_2)
_OPEN_FOR_WRITES = (State.SYN_SENT, State.SYN_RECEIVED, State.ESTABLISHED, State.CLOSE_WAIT)
_UNSYNCHRONIZED: Final = (State.CLOSED, State.SYN_SENT, State.SYN_RECEIVED)


@dataclass
class TcpConfig:
    """Tunables shared by the connections of a stack.

    The RTO floor is far below RFC 6298's 1 s because overlay RTTs are small
    and loss is frequent. `min_rto` floors the variance term, as Linux does,
    not the RTO: the RTO is at least the smoothed RTT plus `min_rto`, so on a
    long path a relay's queue filling during slow start (the RTT doubling
    within one window, faster than the estimate follows) is not taken for a
    loss that would collapse the window. The exponential backoff is forgotten as soon as
    new data is acknowledged (as Linux does) rather than only at the next
    RTT sample: after go-back-N retransmissions samples are rare, and a
    backoff kept through a lossy stretch would stall a live transfer.

    The handshake retries every 1-2 s (SYNs at 0, 1, 3, 5 and 7 s; given up
    at 9 s): the first SYN to a new peer waits on a path lookup and a session
    handshake, and each SYN retry re-triggers both, so frequent retries
    connect sooner after a lost lookup, while an offline peer still answers
    an HTTP request within 10 s.

    With `hold_until_consumed`, bytes handed over in DataReceived keep
    occupying the receive buffer until the application reports them with
    `consumed(n)`: the advertised window then bounds everything the
    application has not processed yet, not only what TCP still holds, so a
    sender facing a busy reader is paused instead of filling its memory.

    `fast_start_window` is the initial congestion window of connections the
    stack marks `fast_start` (the message stream's, between our nodes only),
    in place of RFC 6928's two jumbo segments: the overlay runs over the
    links' own TCP, which paces the wire, so an overlay burst waits in the
    link's queue (LINK_QUEUE_BYTES, four times this) instead of being lost,
    and on a 200 ms path slow start from 128 KiB cost a 16 MiB message a
    third of its time.

    `ack_delay` applies to connections the stack marks `delays_acks`: their
    in-order data is acknowledged by the next segment leaving anyway, at the
    latest `ack_delay` later (sooner in the cases `_acknowledge_in_order`
    names), instead of by a segment of its own. It stays far below
    `min_rto`, so a delayed ACK never makes the peer retransmit.
    """

    mss: int = MAX_MSS
    send_buffer_size: int = TCP_SEND_BUFFER
    recv_buffer_size: int = TCP_RECEIVE_BUFFER
    initial_rto: float = 1.0
    min_rto: float = 0.2
    max_rto: float = 10.0
    max_retransmits: int = 12
    syn_retransmits: int = 4
    max_syn_rto: float = 2.0
    time_wait: float = 2.0
    dupack_threshold: int = 3
    max_persist_interval: float = 5.0
    # How many keep-alive probes `probe` sends, one an RTO apart, until the peer answers.
    probes: int = 4
    offer_window_scale: bool = True
    hold_until_consumed: bool = False
    ack_delay: float = 0.04
    fast_start_window: int = 1 << 20


def unwrap_seq(value: int, reference: int) -> int:
    """The unbounded sequence number nearest `reference` whose low 32 bits are `value`."""
    return reference + ((value - reference + _HALF_SEQ) % SEQ_MODULUS) - _HALF_SEQ


def _earlier(first: float | None, second: float | None) -> float | None:
    """The earlier of two deadlines, either of which may be unset."""
    if first is None:
        return second
    if second is None or first <= second:
        return first
    return second


def window_scale_for(buffer_size: int) -> int:
    """Smallest shift that lets a 16-bit window field describe the whole buffer."""
    shift = 0
    while (buffer_size >> shift) > MAX_WINDOW_FIELD and shift < MAX_WINDOW_SCALE:
        shift += 1
    return shift


class TcpConnection:
    """A connection identified by the stack's 4-tuple; created by TcpStack."""

    def __init__(self, local_port: int, remote_address: bytes, remote_port: int, iss: int,
                 config: TcpConfig | None = None, mss: int | None = None,
                 events: deque[TcpEvent] | None = None,
                 touched: dict[TcpConnection, None] | None = None) -> None:
        self.config = config or TcpConfig()
        # A stack passes one shared dict in: every call that can change what
        # the connection wants to send or when its timer fires records it there,
        # so the stack polls only those instead of all connections per packet.
        self._touched = touched
        self.local_port = local_port
        self.remote_address = remote_address
        self.remote_port = remote_port
        self.advertised_mss = mss if mss is not None else self.config.mss
        if not 64 <= self.advertised_mss <= MAX_MSS:
            raise ValueError(f"MSS {self.advertised_mss} outside 64..{MAX_MSS}")
        self.state = State.CLOSED
        self.passive = False
        self._events: deque[TcpEvent] = events if events is not None else deque()
        self._announced = False

        self._iss = iss
        self._snd_una = iss
        self._snd_nxt = iss
        self._snd_max = iss
        self._send_buf = SendBuffer()
        self._send_base = iss + 1
        self._fin_queued = False
        self._snd_wnd = 0
        self._snd_wl1 = 0
        self._snd_wl2 = 0
        self._snd_wscale = 0
        self._rcv_wscale = 0
        self._window_scaling = False
        self._peer_mss = IPV6_DEFAULT_MSS

        self._rcv_nxt = 0
        self._rcv_adv = 0
        self._recv_buf = ReceiveQueue()
        self._unconsumed = 0
        self._ooo_heap: list[int] = []
        self._ooo: dict[int, bytes] = {}
        self._ooo_bytes = 0
        self._peer_fin_seq: int | None = None
        self._peer_finished = False
        self._reading = True

        self._ack_now = False
        self.delays_acks = False
        self.fast_start = False
        self._ack_deadline: float | None = None
        self._unacked_bytes = 0
        self._queued: list[TcpSegment] = []

        self.path = PathStats()
        self._rtt = RttEstimator(self.config)
        self._cc = NewReno(iss, self.config.dupack_threshold)
        self._rto_deadline: float | None = None
        self._retries = 0
        self._persist_deadline: float | None = None
        self._persist_backoff = 0
        # the next keep-alive probe (`probe`), and how many are left to send
        self._probe_deadline: float | None = None
        self._probes_left = 0
        self._time_wait_deadline: float | None = None


        self._finished_announced = False
        self._closed_pending = False

    # ----------------------------------------------------------------- opening

    def open_active(self) -> None:
        """Start the handshake: the SYN leaves with the next segments_to_send."""
        self._touch()
        self.state = State.SYN_SENT
        self._announced = True

    def open_passive(self, syn: TcpSegment) -> None:
        """Answer a SYN that reached a listener with a SYN-ACK."""
        self._touch()
        self.passive = True
        self.state = State.SYN_RECEIVED
        self._take_peer_syn(syn)

    def _take_peer_syn(self, syn: TcpSegment) -> None:
        irs = syn.seq
        self._rcv_nxt = irs + 1
        self._peer_mss = max(syn.mss or 0, IPV6_DEFAULT_MSS)
        scale = syn.window_scale
        self._window_scaling = scale is not None
        if scale is not None:
            self._snd_wscale = scale
            self._rcv_wscale = window_scale_for(self.config.recv_buffer_size)
        self._snd_wnd = syn.window
        self._snd_wl1 = irs
        self._cc.start(self.send_mss, self.config.fast_start_window if self.fast_start else 0)
        self._rcv_adv = self._rcv_nxt + self._syn_window()

    def _syn_window(self) -> int:
        """Window fields of SYNs are never scaled."""
        return min(self.config.recv_buffer_size, MAX_WINDOW_FIELD)

    # ------------------------------------------------------------- application

    @property
    def send_mss(self) -> int:
        """Payload bytes per segment: the peer's MSS, never above our own."""
        return max(1, min(self._peer_mss, self.advertised_mss))

    @property
    def send_space(self) -> int:
        """Bytes `send` would accept now (buffered, not yet acknowledged, data counts)."""
        if self.state not in _OPEN_FOR_WRITES or self._fin_queued:
            return 0
        return max(0, self.config.send_buffer_size - len(self._send_buf))

    @property
    def bytes_in_flight(self) -> int:
        return self._snd_nxt - self._snd_una

    @property
    def unacknowledged(self) -> int:
        """Stream bytes written by the application that the peer has not yet acknowledged."""
        return len(self._send_buf)

    @property
    def is_closed(self) -> bool:
        return self.state is State.CLOSED

    @property
    def synchronized(self) -> bool:
        """Whether the peer has answered the handshake (RFC 9293's synchronized
        states): until then we know nothing of it but that a SYN reached it."""
        return self.state not in _UNSYNCHRONIZED

    def send(self, data: bytes | bytearray | memoryview) -> int:
        """Queue as much of `data` as the send buffer holds; returns how much."""
        self._touch()
        if self.state not in _OPEN_FOR_WRITES or self._fin_queued:
            raise TcpClosedError(f"cannot send in state {self.state.value}")
        accepted = min(len(data), self.send_space)
        if accepted:
            self._send_buf.append(memoryview(data)[:accepted])
        return accepted

    def close(self) -> None:
        """Send FIN after every queued byte; the peer may keep sending until its FIN.

        Before the handshake completes the FIN waits for it, so an application
        can connect, send and close at once (as a one-shot message sender does).
        """
        self._touch()
        if self.state in (State.SYN_SENT, State.SYN_RECEIVED, State.ESTABLISHED):
            self._fin_queued = True
            if self.state is State.ESTABLISHED:
                self.state = State.FIN_WAIT_1
        elif self.state is State.CLOSE_WAIT:
            self._fin_queued = True
            self.state = State.LAST_ACK

    def abort(self) -> None:
        """Drop the connection and tell the peer with RST (after Closed: just forget it)."""
        self._touch()
        if self.state is State.CLOSED:
            return
        if self.state is State.TIME_WAIT:
            self._enter_closed()
            return
        if self.state is not State.SYN_SENT:
            self._queued.append(self._make_segment(self._snd_max, RST | ACK))
        self._enter_closed()
        self._emit(Reset(self, "aborted"))

    def pause_reading(self) -> None:
        """Keep received data in the receive buffer; the window closes as it fills."""
        self._reading = False

    def resume_reading(self) -> None:
        """Deliver buffered data as events again, and reopen the window."""
        self._touch()
        self._reading = True
        self._deliver()
        self._after_drain()

    def read(self, max_bytes: int = -1) -> bytes:
        """Take buffered data directly (while paused); reopens the window."""
        self._touch()
        data = bytes(self._recv_buf.take(max_bytes))
        self._deliver()
        self._after_drain()
        return data

    def consumed(self, nbytes: int) -> None:
        """The application processed `nbytes` delivered bytes (with hold_until_consumed)."""
        self._touch()
        self._unconsumed = max(0, self._unconsumed - nbytes)
        self._after_drain()

    @property
    def unconsumed(self) -> int:
        """Delivered bytes the application has not reported consumed yet."""
        return self._unconsumed

    def _touch(self) -> None:
        if self._touched is not None:
            self._touched[self] = None

    def next_event(self) -> TcpEvent | None:
        """The next event; a stack passes its own queue in, so use the stack's next_event there."""
        return self._events.popleft() if self._events else None

    # ---------------------------------------------------------------- receiving

    def receive_segment(self, segment: TcpSegment, now: float) -> None:
        """Process one segment addressed to this connection."""
        self._touch()
        if self.state is State.CLOSED:
            return
        self._probe_deadline = None  # the peer answered (or spoke) meanwhile
        if self.state is State.SYN_SENT:
            self._receive_in_syn_sent(segment, now)
        else:
            self._receive_synchronized(segment, now)
        self._deliver()

    def _receive_in_syn_sent(self, segment: TcpSegment, now: float) -> None:
        flags = segment.flags
        ack = unwrap_seq(segment.ack, self._iss)
        ack_ok = self._iss < ack <= self._snd_max
        if flags & ACK and not ack_ok:
            if not flags & RST:
                self._queued.append(TcpSegment(self.local_port, self.remote_port,
                                               segment.ack, 0, RST, 0))
            return
        if flags & RST:
            if flags & ACK:
                self._enter_closed()
                self._emit(Reset(self, "refused"))
            return
        if not flags & SYN:
            return
        self._take_peer_syn(segment)
        if flags & ACK:
            self._snd_wl2 = ack
            self._ack_advances(ack, now)
            self._establish()
            self._ack_now = True
        else:
            self.state = State.SYN_RECEIVED
            self._snd_nxt = self._iss

    def _receive_synchronized(self, segment: TcpSegment, now: float) -> None:
        flags = segment.flags
        seq = unwrap_seq(segment.seq, self._rcv_nxt)
        if flags & RST:
            self._receive_rst(seq)
            return
        if flags & SYN:
            self._receive_stray_syn(seq)
            return
        ack = unwrap_seq(segment.ack, self._snd_una)
        if not self._acceptable(seq, len(segment.payload) + (1 if flags & FIN else 0)):
            self._receive_unacceptable(segment, seq, ack, now)
            return
        if not flags & ACK:
            return
        if self.state is State.SYN_RECEIVED:
            if not self._snd_una < ack <= self._snd_max:
                self._queued.append(TcpSegment(self.local_port, self.remote_port,
                                               segment.ack, 0, RST, 0))
                return
            self._ack_advances(ack, now)
            self._establish()
            self._snd_wl1 = seq - 1
        if not self._process_ack(segment, seq, ack, now):
            return
        if self.state is State.CLOSED:
            return
        if self.state in _RECEIVING_STATES:
            self._receive_payload(seq, segment.payload, bool(flags & FIN), now)
        elif self.state is State.TIME_WAIT and flags & FIN:
            self._ack_now = True
            self._time_wait_deadline = now + self.config.time_wait

    def _receive_unacceptable(self, segment: TcpSegment, seq: int, ack: int, now: float) -> None:
        """Answer with an ACK, but still honour the ACK an old duplicate or a zero-window probe carries.

        After a timeout the peer resends data we already hold; dropping the
        acknowledgement riding on it would let both sides retransmit to each
        other without either learning what the other has received.
        """
        self._ack_now = True
        if self.state is State.TIME_WAIT:
            self._time_wait_deadline = now + self.config.time_wait
        elif (segment.flags & ACK and self.state is not State.SYN_RECEIVED
              and seq <= self._rcv_nxt):
            self._process_ack(segment, seq, ack, now)

    def _receive_rst(self, seq: int) -> None:
        """Accept a RST only at a sequence number inside our window (RFC 5961 spirit)."""
        if not self._rcv_nxt <= seq < self._rcv_nxt + max(1, self._receive_window_size()):
            return
        if self.state is State.TIME_WAIT:
            self._enter_closed()
            return
        self._enter_closed()
        self._emit(Reset(self, "reset by peer"))

    def _receive_stray_syn(self, seq: int) -> None:
        """A repeated SYN means our SYN-ACK was lost; any other SYN gets a challenge ACK."""
        if self.state is State.SYN_RECEIVED and seq == self._rcv_nxt - 1:
            self._snd_nxt = self._iss
        else:
            self._ack_now = True

    def _acceptable(self, seq: int, length: int) -> bool:
        """RFC 9293 3.10.7.4 acceptability against our current receive window."""
        window = self._receive_window_size()
        start, end = self._rcv_nxt, self._rcv_nxt + window
        if length == 0:
            return seq == start if window == 0 else start <= seq < end or seq == start
        if window == 0:
            return False
        return start <= seq < end or start < seq + length <= end or (seq < start and seq + length > end)

    def _establish(self) -> None:
        self.state = State.ESTABLISHED
        self._retries = 0
        self._rtt.established()
        if self._fin_queued:
            self.state = State.FIN_WAIT_1
        self._announced = True
        self._emit(NewConnection(self) if self.passive else Connected(self))

    def _process_ack(self, segment: TcpSegment, seq: int, ack: int, now: float) -> bool:
        """Apply the acknowledgement; False when the segment must be dropped."""
        if ack > self._snd_max:
            self._ack_now = True
            return False
        window = segment.window << self._snd_wscale
        window_changed = False
        if self._snd_wl1 < seq or (self._snd_wl1 == seq and self._snd_wl2 <= ack):
            window_changed = window != self._snd_wnd
            self._snd_wnd = window
            self._snd_wl1 = seq
            self._snd_wl2 = ack
            if window > 0:
                self._persist_deadline = None
                self._persist_backoff = 0
            else:
                self._retries = 0
        if ack > self._snd_una:
            self._ack_advances(ack, now)
            self._after_our_fin_acked(now)
        elif (ack == self._snd_una and self._snd_max > self._snd_una and not segment.payload
              and not segment.flags & FIN and not window_changed and self._snd_wnd > 0):
            self._cc.on_duplicate_ack(self._snd_una, self._snd_max, self.send_mss)
        return True

    def _ack_advances(self, ack: int, now: float) -> None:
        acked = ack - self._snd_una
        data_acked = min(ack, self._send_base + len(self._send_buf)) - self._send_base
        if data_acked > 0:
            self._send_buf.drop(data_acked)
            self._send_base += data_acked
        self._snd_una = ack
        if self._snd_nxt < ack:
            self._snd_nxt = ack
        sample = self._rtt.acknowledged(ack, now)
        self.path.took_sample(self._rtt.srtt, sample)
        self._retries = 0
        self._cc.on_new_ack(acked, self._snd_una, self._snd_max, self.send_mss, now, self.path.min_rtt)
        self._rto_deadline = now + self.rto if self._snd_max > self._snd_una else None

    def _after_our_fin_acked(self, now: float) -> None:
        if not self._fin_sent() or self._snd_una < self._snd_max:
            return
        if self.state is State.FIN_WAIT_1:
            self.state = State.FIN_WAIT_2
        elif self.state is State.CLOSING:
            self._enter_time_wait(now)
        elif self.state is State.LAST_ACK:
            self._enter_closed()
            self._closed_pending = True

    def _fin_sent(self) -> bool:
        return self._fin_queued and self._snd_max > self._send_base + len(self._send_buf)

    def _receive_payload(self, seq: int, payload: bytes | memoryview, fin: bool, now: float) -> None:
        if not payload and not fin:
            return
        end = seq + len(payload)
        if end + (1 if fin else 0) <= self._rcv_nxt:
            self._ack_now = True
            return
        if seq < self._rcv_nxt:
            payload = payload[self._rcv_nxt - seq:]
            seq = self._rcv_nxt
        right_edge = self._rcv_nxt + self._receive_window_size()
        if seq + len(payload) > right_edge:
            fits = max(0, right_edge - seq)
            payload = payload[:fits]
            fin = False
        if fin:
            self._peer_fin_seq = seq + len(payload)
        if seq == self._rcv_nxt:
            fills_gap = bool(self._ooo)
            self._recv_buf.append(payload)
            self._rcv_nxt += len(payload)
            self._drain_out_of_order()
            self._acknowledge_in_order(len(payload), fills_gap, now)
        else:
            self._store_out_of_order(seq, bytes(payload))
            self._queued.append(self._make_segment(self._snd_max, ACK))
        if self._peer_fin_seq is not None and self._peer_fin_seq == self._rcv_nxt:
            self._receive_fin(now)

    def _acknowledge_in_order(self, size: int, fills_gap: bool, now: float) -> None:
        """ACK at once, or for a connection that `delays_acks`, with the next
        segment leaving: the answer the application writes back in the same
        turn usually carries it, and a bare ACK costs the peer as much to
        take in as a data segment. ACKed at once all the same: data that
        fills a gap (RFC 5681, 4.2: the sender is recovering a loss), the
        second full-sized segment, and data that leaves the sender less
        than two segments of window (the SYN-ACK's window is unscaled, so
        right after the handshake one segment fills it: the ACK brings the
        real window)."""
        if not self.delays_acks or fills_gap:
            self._ack_now = True
            return
        self._unacked_bytes += size
        full_segments = 2 * self.send_mss
        if self._unacked_bytes >= full_segments or self._rcv_adv - self._rcv_nxt < full_segments:
            self._ack_now = True
        elif self._ack_deadline is None:
            self._ack_deadline = now + self.config.ack_delay

    def _store_out_of_order(self, seq: int, payload: bytes) -> None:
        if not payload or self._ooo_bytes + len(payload) > self.config.recv_buffer_size:
            return
        known = self._ooo.get(seq)
        if known is not None and len(known) >= len(payload):
            return
        if known is None:
            heapq.heappush(self._ooo_heap, seq)
        else:
            self._ooo_bytes -= len(known)
        self._ooo[seq] = payload
        self._ooo_bytes += len(payload)

    def _drain_out_of_order(self) -> None:
        heap = self._ooo_heap
        while heap and heap[0] <= self._rcv_nxt:
            start = heapq.heappop(heap)
            data = self._ooo.pop(start)
            self._ooo_bytes -= len(data)
            end = start + len(data)
            if end > self._rcv_nxt:
                self._recv_buf.append(memoryview(data)[self._rcv_nxt - start:])
                self._rcv_nxt = end

    def _receive_fin(self, now: float) -> None:
        self._rcv_nxt += 1
        self._rcv_adv += 1
        self._peer_finished = True
        self._ack_now = True
        self._ooo.clear()
        self._ooo_heap.clear()
        self._ooo_bytes = 0
        if self.state is State.ESTABLISHED:
            self.state = State.CLOSE_WAIT
        elif self.state is State.FIN_WAIT_1:
            if self._fin_sent() and self._snd_una == self._snd_max:
                self._enter_time_wait(now)
            else:
                self.state = State.CLOSING
        elif self.state is State.FIN_WAIT_2:
            self._enter_time_wait(now)

    def _enter_time_wait(self, now: float) -> None:
        self.state = State.TIME_WAIT
        self._time_wait_deadline = now + self.config.time_wait
        self._rto_deadline = None
        self._persist_deadline = None
        self._closed_pending = True

    def _enter_closed(self) -> None:
        self.state = State.CLOSED
        self._rto_deadline = None
        self._persist_deadline = None
        self._time_wait_deadline = None
        self._ack_deadline = None

    def _emit(self, event: TcpEvent) -> None:
        if self._announced:
            self._events.append(event)

    def _deliver(self) -> None:
        """Hand over data, then end-of-stream, then Closed, strictly in that order."""
        if self._reading and self._recv_buf:
            if self.config.hold_until_consumed:
                self._unconsumed += len(self._recv_buf)
            self._emit(DataReceived(self, self._recv_buf.take()))
        if self._recv_buf:
            return
        if self._peer_finished and not self._finished_announced:
            self._finished_announced = True
            self._emit(PeerFinished(self))
        if self._closed_pending and self._finished_announced:
            self._closed_pending = False
            self._emit(Closed(self))

    # ------------------------------------------------------------ receive window

    def _receive_window_size(self) -> int:
        """The window we have promised: its right edge never moves left."""
        return max(0, self._rcv_adv - self._rcv_nxt, self._free_window())

    def _free_window(self) -> int:
        held = len(self._recv_buf) + self._unconsumed
        free = max(0, self.config.recv_buffer_size - held)
        return min(free >> self._rcv_wscale, MAX_WINDOW_FIELD) << self._rcv_wscale

    def _window_field(self) -> int:
        """Advertise new space only in useful amounts (receiver-side SWS avoidance)."""
        candidate = self._rcv_nxt + self._free_window()
        threshold = min(self.config.recv_buffer_size // 2, self.advertised_mss)
        if candidate >= self._rcv_adv + threshold or self._rcv_adv < self._rcv_nxt:
            self._rcv_adv = max(self._rcv_adv, candidate)
        window = (self._rcv_adv - self._rcv_nxt) >> self._rcv_wscale
        return min(window, MAX_WINDOW_FIELD)

    def _after_drain(self) -> None:
        """Tell the peer about reopened space once it is worth a segment.

        While the peer still holds more than half a buffer of window, the
        news waits for the next ACK: a reader consuming as data arrives
        would otherwise double the ACKs of a bulk transfer.
        """
        if self.state not in _RECEIVING_STATES:
            return
        if self._rcv_adv - self._rcv_nxt > self.config.recv_buffer_size // 2:
            return
        threshold = min(self.config.recv_buffer_size // 2, self.advertised_mss)
        if self._rcv_nxt + self._free_window() >= self._rcv_adv + threshold:
            self._ack_now = True

    # ---------------------------------------------------------------- sending

    def segments_to_send(self, now: float) -> list[TcpSegment]:
        """Everything due now: control segments, handshake, data, FIN, ACKs."""
        out = self._queued
        self._queued = []
        if self.state in (State.SYN_SENT, State.SYN_RECEIVED):
            self._emit_handshake(out, now)
        elif self.state in _SENDING_STATES:
            if self._cc.retransmit_head:
                self._emit_head(out, now)
            self._emit_data(out, now)
        self._emit_acks(out)
        self._arm_persist(now)
        return out

    def _emit_handshake(self, out: list[TcpSegment], now: float) -> None:
        if self._snd_nxt != self._iss:
            return
        syn_ack = self.state is State.SYN_RECEIVED
        segment = TcpSegment(
            self.local_port, self.remote_port, self._iss, self._rcv_nxt if syn_ack else 0,
            SYN | ACK if syn_ack else SYN, self._syn_window(), mss=self.advertised_mss,
            window_scale=self._syn_window_scale(syn_ack),
        )
        out.append(segment)
        if self._snd_max == self._iss and self._retries == 0:
            self._rtt.time(self._iss + 1, now)
        self._snd_nxt = self._snd_max = self._iss + 1
        self._ack_now = False
        if self._rto_deadline is None:
            self._rto_deadline = now + self.rto

    def _syn_window_scale(self, syn_ack: bool) -> int | None:
        """Offer scaling on our SYN; on a SYN-ACK only if the peer offered it."""
        if syn_ack:
            return self._rcv_wscale if self._window_scaling else None
        if not self.config.offer_window_scale:
            return None
        return window_scale_for(self.config.recv_buffer_size)

    def _emit_head(self, out: list[TcpSegment], now: float) -> None:
        """Resend the first unacknowledged segment, whatever the windows say.

        Only what was sent before: the acknowledgement that asked for the
        resend may have been followed, before this call, by one covering
        everything sent. A "resend" past SND.MAX would then be new data sent
        without counting it, and the peer's acknowledgement of it would look
        like one for data never sent and be dropped, forever."""
        self._cc.retransmit_head = False
        sent_end = self._snd_max - (1 if self._fin_sent() else 0)
        size = min(self.send_mss, max(0, sent_end - self._snd_una))
        data_end = self._send_base + len(self._send_buf)
        fin = self._fin_sent() and self._snd_una + size == data_end
        if size == 0 and not (fin and self._snd_una < self._snd_max):
            return
        self._rtt.cancel()
        self.path.retransmits += 1
        self._cc.head_resent(now)
        out.append(self._data_segment(self._snd_una, size, fin))
        self._snd_nxt = max(self._snd_nxt, self._snd_una + size + (1 if fin else 0))
        if self._rto_deadline is None:
            self._rto_deadline = now + self.rto

    def _emit_data(self, out: list[TcpSegment], now: float) -> None:
        data_end = self._send_base + len(self._send_buf)
        mss = self.send_mss
        # Nothing sent below moves SND.UNA or either window.
        window_end = self._snd_una + min(self._snd_wnd, self._cc.cwnd + self._cc.limited_transmit(mss))
        while True:
            pending = data_end - self._snd_nxt
            if pending > 0:
                size = min(mss, pending, window_end - self._snd_nxt)
                if size <= 0 or (size < mss and size < pending and self._snd_nxt > self._snd_una):
                    return
            elif self._fin_queued and self._snd_nxt == data_end:
                size = 0
            else:
                return
            fin = self._fin_queued and self._snd_nxt + size == data_end
            if self._snd_nxt < self._snd_max:
                self.path.retransmits += 1
            out.append(self._data_segment(self._snd_nxt, size, fin))
            self._advance_snd_nxt(size + (1 if fin else 0), now)

    def _advance_snd_nxt(self, length: int, now: float) -> None:
        start = self._snd_nxt
        self._snd_nxt += length
        if self._snd_nxt > self._snd_max:
            if start >= self._snd_max:
                self._rtt.time(self._snd_nxt, now)
            self._snd_max = self._snd_nxt
        if self._rto_deadline is None:
            self._rto_deadline = now + self.rto

    def _data_segment(self, seq: int, size: int, fin: bool) -> TcpSegment:
        offset = seq - self._send_base
        payload = self._send_buf.read(offset, size)
        flags = ACK | (FIN if fin else 0)
        if size and offset + size == len(self._send_buf):
            flags |= PSH
        self._ack_now = False
        return self._make_segment(seq, flags, payload)

    def _emit_acks(self, out: list[TcpSegment]) -> None:
        """One ACK covers everything received in order since the last segment we sent.

        Pure ACKs carry SND.MAX, not a rewound SND.NXT: a sequence number the
        peer has already passed would make it discard the acknowledgement.
        """
        if self._ack_now and self.state not in (State.CLOSED, State.SYN_SENT):
            out.append(self._make_segment(self._snd_max, ACK))
        self._ack_now = False

    def _make_segment(self, seq: int, flags: int, payload: bytes | memoryview = b"") -> TcpSegment:
        self._ack_deadline = None
        self._unacked_bytes = 0
        return TcpSegment(self.local_port, self.remote_port, seq, self._rcv_nxt, flags,
                          self._window_field(), payload=payload)

    # ---------------------------------------------------------------- timers

    @property
    def rto(self) -> float:
        """The current retransmission timeout, backoff included."""
        handshaking = self.state in (State.SYN_SENT, State.SYN_RECEIVED)
        cap = self.config.max_syn_rto if handshaking else self.config.max_rto
        return self._rtt.rto(cap)

    def get_timer(self) -> float | None:
        """The earliest deadline set, or None. Asked after every segment:
        pairwise, as a list of the five and min() cost ten times as much."""
        earliest = _earlier(self._rto_deadline, self._persist_deadline)
        earliest = _earlier(earliest, self._probe_deadline)
        earliest = _earlier(earliest, self._time_wait_deadline)
        return _earlier(earliest, self._ack_deadline)

    def handle_timer(self, now: float) -> None:
        self._touch()
        if self._time_wait_deadline is not None and now >= self._time_wait_deadline:
            self._enter_closed()
            return
        if self._rto_deadline is not None and now >= self._rto_deadline:
            self._on_retransmission_timeout(now)
        if self._persist_deadline is not None and now >= self._persist_deadline:
            self._send_window_probe(now)
        if self._probe_deadline is not None and now >= self._probe_deadline:
            if self.state in _SENDING_STATES:
                self._send_probe(now)
            else:
                self._probe_deadline = None
        if self._ack_deadline is not None and now >= self._ack_deadline:
            self._ack_deadline = None
            self._ack_now = True
        self._deliver()

    def path_changed(self, now: float) -> None:
        """The overlay found a new path to the peer: retry now, not after a backed-off wait.

        Exponential backoff protects a congested path; after a relay died and
        a lookup found another one, the old backoff and retry count only
        measure the outage, so both start again.
        """
        if self._rtt.backoff > 0:
            self.retransmit_now(now)

    def retransmit_now(self, now: float) -> None:
        """Whatever is unacknowledged was lost (the session under us was re-keyed): resend now."""
        if self._rto_deadline is not None:
            self._touch()
            self._rtt.backoff = 0
            self._retries = 0
            self._rto_deadline = now

    def _on_retransmission_timeout(self, now: float) -> None:
        handshaking = self.state in (State.SYN_SENT, State.SYN_RECEIVED)
        limit = self.config.syn_retransmits if handshaking else self.config.max_retransmits
        if self._retries >= limit:
            if not handshaking:
                self._queued.append(self._make_segment(self._snd_max, RST | ACK))
            self._enter_closed()
            self._emit(TimedOut(self))
            return
        self._retries += 1
        if not handshaking:
            self.path.timeouts += 1
        self._cc.on_timeout(self._snd_una, self._snd_max, self.send_mss, handshaking)
        self._rtt.back_off()
        self._snd_nxt = self._snd_una
        self._rto_deadline = now + self.rto

    def _arm_persist(self, now: float) -> None:
        """Probe a zero window while data waits and nothing is in flight to carry an ACK back."""
        waiting = self._send_base + len(self._send_buf) > self._snd_nxt
        if (self.state in _SENDING_STATES and waiting and self._snd_wnd == 0
                and self._snd_max == self._snd_una):
            if self._persist_deadline is None:
                interval = min(self._rtt.base * (1 << self._persist_backoff),
                               self.config.max_persist_interval)
                self._persist_deadline = now + interval
        else:
            self._persist_deadline = None

    def probe(self, now: float) -> None:
        """Send segments the peer must answer (an already-acknowledged
        sequence number, no data: a keep-alive), one an RTO apart until it
        answers, `probes` in all: a live peer answers with an ACK; a peer
        that no longer has the connection (it restarted) with RST, which
        resets it here. For a connection with every byte acknowledged and
        nothing more to send, the only way to find a peer that went away.
        More than one, because a restarted peer drops the first packet of
        a session it no longer knows while the session is keyed again."""
        if self.state in _SENDING_STATES:
            self._probes_left = self.config.probes
            self._send_probe(now)

    def _send_probe(self, now: float) -> None:
        self._touch()
        self._queued.append(self._make_segment(self._snd_una - 1, ACK))
        self._probes_left -= 1
        self._probe_deadline = now + self.rto if self._probes_left > 0 else None

    def _send_window_probe(self, now: float) -> None:
        """An already-acknowledged sequence number forces the peer to answer with its window."""
        self._persist_deadline = None
        self._persist_backoff = min(self._persist_backoff + 1, 16)
        self._queued.append(self._make_segment(self._snd_una - 1, ACK))
        self._arm_persist(now)
