"""Two TCP stacks over a simulated lossy wire with a virtual clock."""

from __future__ import annotations

import heapq
import math
import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from axl.tcp.connection import TcpConfig, TcpConnection
from axl.tcp.events import (
    Closed,
    Connected,
    DataReceived,
    NewConnection,
    PeerFinished,
    Reset,
    TcpEvent,
    TimedOut,
)
from axl.tcp.segment import ACK, RST, SYN, TcpSegment, decode_packet, encode_packet
from axl.tcp.stack import MAX_PATHS, TcpStack

A = bytes([0x02] + [0x11] * 15)
B = bytes([0x02] + [0x22] * 15)
PORT = 7000


@dataclass
class Impairment:
    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    delay: float = 0.005
    reorder_delay: float = 0.02
    turn: float = 0.0
    """When set, arrivals wait for the next multiple of `turn`: every packet of
    a turn is taken in before either stack sends, as the daemon takes in all
    the frames one event-loop turn read before its one flush."""


LOSSY = Impairment(loss=0.2, duplicate=0.2, reorder=0.2)
LOSSY_CONFIG = TcpConfig(time_wait=TcpConfig().max_rto)
"""At 20% loss each way a peer's last FIN can need several backed-off retries;
TIME-WAIT must outlast them or the waiting side is answered with RST."""


@dataclass
class Network:
    """Stacks joined by one wire; time jumps to the next delivery or timer."""

    stacks: list[TcpStack]
    impairment: Impairment = field(default_factory=Impairment)
    seed: int = 1
    drop: Callable[[bytes], bool] | None = None
    now: float = 0.0
    largest_packet: int = 0
    sent: list[bytes] = field(default_factory=list)
    events: list[TcpEvent] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._queue: list[tuple[float, int, bytes]] = []
        self._counter = 0
        self._by_address = {stack.local_address: stack for stack in self.stacks}
        self.on_event: Callable[[TcpEvent], None] = self.events.append

    def _flush(self) -> None:
        imp = self.impairment
        for stack in self.stacks:
            for packet in stack.packets_to_send(self.now):
                self.sent.append(packet)
                self.largest_packet = max(self.largest_packet, len(packet))
                if (self.drop is not None and self.drop(packet)) or self._rng.random() < imp.loss:
                    continue
                for _ in range(2 if self._rng.random() < imp.duplicate else 1):
                    delay = imp.delay
                    if self._rng.random() < imp.reorder:
                        delay += self._rng.random() * imp.reorder_delay
                    arrival = self.now + delay
                    if imp.turn:
                        arrival = math.ceil(arrival / imp.turn) * imp.turn
                    self._counter += 1
                    heapq.heappush(self._queue, (arrival, self._counter, packet))

    def _dispatch(self) -> None:
        for stack in self.stacks:
            while (event := stack.next_event()) is not None:
                self.on_event(event)

    def step(self) -> bool:
        self._dispatch()
        self._flush()
        deadlines = [t for t in (s.get_timer() for s in self.stacks) if t is not None]
        if self._queue:
            deadlines.append(self._queue[0][0])
        if not deadlines:
            return False
        self.now = max(self.now, min(deadlines))
        while self._queue and self._queue[0][0] <= self.now:
            packet = heapq.heappop(self._queue)[2]
            stack = self._by_address.get(packet[24:40])
            if stack is not None:
                stack.receive(packet, self.now)
        for stack in self.stacks:
            timer = stack.get_timer()
            if timer is not None and timer <= self.now:
                stack.handle_timer(self.now)
        self._dispatch()
        return True

    def run(self, until: Callable[[], bool], max_time: float = 900.0) -> None:
        while not until():
            assert self.now <= max_time, f"no progress by t={self.now:.3f}"
            assert self.step(), f"network went idle at t={self.now:.3f}"

    def run_idle(self, max_time: float = 900.0) -> None:
        while self.step():
            assert self.now <= max_time


def _pair(**kwargs) -> tuple[TcpStack, TcpStack]:
    a = TcpStack(A, rng=random.Random(11), **kwargs)
    b = TcpStack(B, rng=random.Random(22), **kwargs)
    return a, b


class Transfers:
    """Application side: pushes each connection's outgoing bytes, collects incoming ones."""

    def __init__(self, net: Network) -> None:
        self.outgoing: dict[TcpConnection, memoryview] = {}
        self.received: dict[TcpConnection, bytearray] = defaultdict(bytearray)
        self.kinds: dict[TcpConnection, list[type]] = defaultdict(list)
        self.close_when_done = True
        net.on_event = self.on_event

    def on_event(self, event: TcpEvent) -> None:
        conn = event.connection
        self.kinds[conn].append(type(event))
        if isinstance(event, DataReceived):
            self.received[conn] += event.data
        elif isinstance(event, PeerFinished) and conn not in self.outgoing and self.close_when_done:
            conn.close()

    def pump(self) -> None:
        for conn, rest in list(self.outgoing.items()):
            if rest.nbytes and conn.send_space:
                taken = conn.send(rest)
                self.outgoing[conn] = rest = rest[taken:]
            if not rest.nbytes and self.close_when_done:
                conn.close()
                del self.outgoing[conn]

    def closed(self, count: int) -> bool:
        self.pump()
        return sum(kinds.count(Closed) for kinds in self.kinds.values()) >= count


def _accepted(transfers: Transfers) -> list[TcpConnection]:
    return [c for c, kinds in transfers.kinds.items() if NewConnection in kinds]


def _bidirectional(size: int, mss: int | None, impairment: Impairment, seed: int) -> Network:
    a, b = _pair(config=LOSSY_CONFIG)
    b.listen(PORT, mss=mss)
    net = Network([a, b], impairment, seed=seed)
    transfers = Transfers(net)
    rng = random.Random(seed)
    upload, download = rng.randbytes(size), rng.randbytes(size)
    client = a.connect(B, PORT, mss=mss)
    transfers.outgoing[client] = memoryview(upload)
    net.run(lambda: bool(_accepted(transfers)) or transfers.closed(99))
    [server] = _accepted(transfers)
    transfers.outgoing[server] = memoryview(download)
    net.run(lambda: transfers.closed(2))
    assert bytes(transfers.received[server]) == upload
    assert bytes(transfers.received[client]) == download
    for conn in (client, server):
        kinds = transfers.kinds[conn]
        assert kinds[-2:] == [PeerFinished, Closed]
        assert not {Reset, TimedOut} & set(kinds)
    net.run_idle()
    assert not a.connections and not b.connections
    return net


@pytest.mark.parametrize("mss", [1220, None])
def test_one_mebibyte_each_way_through_20_percent_loss_duplication_reordering(mss) -> None:
    net = _bidirectional(1 << 20, mss, LOSSY, seed=3)
    if mss == 1220:
        assert net.largest_packet <= 1280


@pytest.mark.parametrize("seed", range(4))
def test_acknowledgements_taken_in_together_before_the_sender_sends(seed) -> None:
    """A partial acknowledgement during fast recovery and the one completing
    it can be taken in before the sender next sends (several frames read in
    one event-loop turn). The retransmission the first asked for is then
    moot, and resending past everything sent so far would make the
    receiver's acknowledgement look like one for unsent data: the transfer
    stalled until its deadline."""
    _bidirectional(1 << 20, 1220, Impairment(loss=0.05, reorder=0.2, turn=0.02), seed=seed)


def test_sixteen_mebibytes_each_way_with_large_segments() -> None:
    net = _bidirectional(16 << 20, None, Impairment(), seed=4)
    assert net.largest_packet > 60000


def test_several_connections_at_once_over_a_lossy_wire() -> None:
    a, b = _pair(config=LOSSY_CONFIG)
    a.listen(PORT)
    b.listen(PORT, mss=1220)
    net = Network([a, b], LOSSY, seed=9)
    transfers = Transfers(net)
    rng = random.Random(9)
    payloads = {}
    for i in range(6):
        src, dst = (a, B) if i % 2 else (b, A)
        conn = src.connect(dst, PORT)
        payloads[conn] = rng.randbytes(100_000 + i * 7919)
        transfers.outgoing[conn] = memoryview(payloads[conn])
    net.run(lambda: transfers.closed(12))
    accepted = _accepted(transfers)
    assert len(accepted) == 6
    by_tuple = {(c.remote_address, c.remote_port, c.local_port): c for c in accepted}
    for conn, payload in payloads.items():
        own_address = A if conn.remote_address == B else B
        peer = by_tuple[(own_address, conn.local_port, conn.remote_port)]
        assert bytes(transfers.received[peer]) == payload
    # The connections to one address share what they saw of the path (/metrics).
    assert set(a.paths) == {B} and set(b.paths) == {A}
    assert all(conn.path is a.paths[B] for conn in a.connections)
    for stack, other in ((a, B), (b, A)):
        assert stack.paths[other].retransmits > 0 and stack.paths[other].srtt is not None


def _open(net: Network, transfers: Transfers, a: TcpStack) -> tuple[TcpConnection, TcpConnection]:
    client = a.connect(B, PORT)
    net.run(lambda: bool(_accepted(transfers)))
    return client, _accepted(transfers)[0]


@pytest.mark.parametrize("first", ["client", "server", "both"])
def test_close_handshake_in_every_order(first: str) -> None:
    a, b = _pair()
    b.listen(PORT)
    net = Network([a, b])
    transfers = Transfers(net)
    client, server = _open(net, transfers, a)
    client.send(b"ping")
    server.send(b"pong")
    closers = {"client": [client], "server": [server], "both": [client, server]}[first]
    for conn in closers:
        conn.close()
    net.run(lambda: all(PeerFinished in transfers.kinds[c] for c in closers))
    for conn in (client, server):
        if conn not in closers:
            assert Closed not in transfers.kinds[conn]
            conn.close()
    net.run(lambda: transfers.closed(2))
    assert bytes(transfers.received[server]) == b"ping"
    assert bytes(transfers.received[client]) == b"pong"
    for conn in (client, server):
        assert transfers.kinds[conn][-3:] == [DataReceived, PeerFinished, Closed]
    net.run_idle()
    assert not a.connections and not b.connections


def test_connecting_to_a_port_nobody_listens_on_is_refused() -> None:
    a, b = _pair()
    net = Network([a, b])
    conn = a.connect(B, 7001)
    net.run(lambda: bool(net.events))
    [event] = net.events
    assert isinstance(event, Reset) and event.reason == "refused" and event.connection is conn
    rst = decode_packet(net.sent[-1]).segment
    assert rst.flags == RST | ACK and rst.seq == 0
    net.run_idle()
    assert not a.connections


def test_unknown_segments_get_rst_but_a_rst_never_does() -> None:
    b = TcpStack(B, rng=random.Random(1))
    b.listen(PORT)
    stray = TcpSegment(40000, PORT, 123, 456789, ACK, 100, payload=b"late")
    b.receive(encode_packet(A, B, stray), 0.0)
    [reply] = b.packets_to_send(0.0)
    segment = decode_packet(reply).segment
    assert segment.flags == RST and segment.seq == 456789
    b.receive(encode_packet(A, B, TcpSegment(40000, PORT, 1, 2, RST | ACK, 0)), 0.0)
    b.receive(encode_packet(A, B, TcpSegment(40000, PORT, 1, 0, RST, 0)), 0.0)
    assert b.packets_to_send(0.0) == []


def test_go_syn_without_a_listener_gets_the_rst_ack_it_got_in_the_transcript() -> None:
    from vectors import load
    entries = load("ipv6_tcp")["transcript"]
    go_syn, our_rst = bytes.fromhex(entries[9]["ipv6_hex"]), bytes.fromhex(entries[10]["ipv6_hex"])
    probe = TcpStack(decode_packet(go_syn).dst, rng=random.Random(1))
    probe.receive(go_syn, 0.0)
    [reply] = probe.packets_to_send(0.0)
    ours, expected = decode_packet(reply).segment, decode_packet(our_rst).segment
    assert (ours.flags, ours.seq, ours.ack, ours.src_port, ours.dst_port) == (
        expected.flags, expected.seq, expected.ack, expected.src_port, expected.dst_port)


def test_connections_over_the_cap_are_reset() -> None:
    a, b = _pair()
    b.max_connections = 2
    b.listen(PORT)
    net = Network([a, b])
    conns = [a.connect(B, PORT) for _ in range(3)]
    net.run(lambda: len(net.events) >= 5)
    kinds = {conn: [type(e) for e in net.events if e.connection is conn] for conn in conns}
    assert sorted(len(v) for v in kinds.values()) == [1, 1, 1]
    assert sum(v == [Connected] for v in kinds.values()) == 2
    assert sum(v == [Reset] for v in kinds.values()) == 1
    assert sum(isinstance(e, NewConnection) for e in net.events) == 2
    assert b.accepted_count() == 2 and b.refused_over_cap == 1


def test_syn_to_an_unreachable_peer_times_out() -> None:
    a = TcpStack(A, rng=random.Random(1))
    net = Network([a])
    a.connect(B, PORT)
    net.run(lambda: bool(net.events), max_time=20)
    assert [type(e) for e in net.events] == [TimedOut]
    assert net.now == pytest.approx(9.0)
    assert len(net.sent) == 5 and all(decode_packet(p).segment.flags == SYN for p in net.sent)


def test_peer_mss_1220_keeps_every_packet_within_1280_bytes() -> None:
    a, b = _pair()
    b.listen(PORT, mss=1220)
    net = Network([a, b], seed=2)
    transfers = Transfers(net)
    client = a.connect(B, PORT)
    data = random.Random(1).randbytes(300_000)
    transfers.outgoing[client] = memoryview(data)
    net.run(lambda: bool(_accepted(transfers)) or transfers.closed(99))
    [server] = _accepted(transfers)
    transfers.outgoing[server] = memoryview(data)
    net.run(lambda: transfers.closed(2))
    assert client.send_mss == server.send_mss == 1220
    assert net.largest_packet == 1280
    assert bytes(transfers.received[server]) == data == bytes(transfers.received[client])


def test_mss_chooser_picks_the_advertised_mss_per_destination() -> None:
    a, b = _pair()
    a.mss_for_remote = lambda address: 1220 if address == B else None
    b.listen(PORT)
    net = Network([a, b])
    conn = a.connect(B, PORT)
    assert conn.advertised_mss == 1220
    net.run(lambda: bool(net.events))
    assert conn.send_mss == 1220


@pytest.mark.parametrize("lose_window_update", [False, True])
def test_zero_window_recovers_when_the_reader_drains_late(lose_window_update: bool) -> None:
    config = TcpConfig(recv_buffer_size=32768)
    a, b = _pair(config=config)
    b.listen(PORT)
    net = Network([a, b])
    transfers = Transfers(net)
    transfers.close_when_done = False
    paused = []

    def on_event(event: TcpEvent) -> None:
        transfers.on_event(event)
        if isinstance(event, NewConnection):
            event.connection.pause_reading()
            paused.append(event.connection)

    net.on_event = on_event
    client = a.connect(B, PORT)
    data = random.Random(8).randbytes(200_000)
    transfers.outgoing[client] = memoryview(data)
    net.run(lambda: transfers.pump() or (bool(paused) and client._snd_wnd == 0
                                         and client.bytes_in_flight == 0))
    [server] = paused
    stalled_at, delivered, sent_before = net.now, len(transfers.received[server]), len(net.sent)
    net.run(lambda: net.now > stalled_at + 3)
    probes = [decode_packet(p).segment for p in net.sent[sent_before:]]
    assert len(probes) >= 4
    assert all(not s.payload for s in probes)
    assert len(transfers.received[server]) == delivered < len(data)
    if lose_window_update:
        net.drop = lambda packet: decode_packet(packet).segment.src_port == PORT
        transfers.received[server] += server.read()
        net.step()
        net.drop = None
    server.resume_reading()
    net.run(lambda: transfers.pump() or len(transfers.received[server]) == len(data))
    assert bytes(transfers.received[server]) == data


def test_an_in_order_segment_reaches_the_application_as_a_read_only_view_of_its_packet() -> None:
    a, b = _pair()
    b.listen(PORT)
    net = Network([a, b])
    transfers = Transfers(net)
    client, server = _open(net, transfers, a)
    client.send(b"x" * 5000)
    [packet] = a.packets_to_send(net.now)
    b.receive(packet, net.now)
    delivered = [e.data for e in iter(b.next_event, None) if isinstance(e, DataReceived)]
    assert delivered == [b"x" * 5000]
    assert isinstance(delivered[0], memoryview) and delivered[0].readonly
    assert delivered[0].obj is packet


def test_malformed_packets_raise_and_leave_the_stack_working() -> None:
    from axl.wire import DecodeError
    a, b = _pair()
    b.listen(PORT)
    packet = bytearray(encode_packet(A, B, TcpSegment(1, PORT, 0, 0, SYN, 1000)))
    packet[-1] ^= 0xFF
    with pytest.raises(DecodeError):
        b.receive(bytes(packet), 0.0)
    with pytest.raises(DecodeError):
        b.receive(b"\x60" + bytes(10), 0.0)
    assert b.packets_to_send(0.0) == [] and not b.connections


def test_clock_based_isn_grows_for_a_reused_tuple() -> None:
    """RFC 6528: the same 4-tuple later gets a higher initial sequence number."""
    stack = TcpStack(A, rng=random.Random(3))
    first = stack.connect(B, PORT, now=100.0)
    port = first.local_port
    isn_first = decode_packet(stack.packets_to_send(100.0)[0]).segment.seq
    first.abort()
    stack.packets_to_send(100.0)
    assert stack._clock_iss(B, PORT, port, 130.0) - isn_first == 30 * 250_000
    other = stack._clock_iss(B, PORT + 1, port, 100.0)
    assert other != isn_first, "other tuples start elsewhere"


def test_segments_on_an_unchecksummed_port_carry_checksum_zero_once_synchronized() -> None:
    """Handshake segments carry a valid checksum on every port; on the
    unchecksummed port only segments after the peer's answer go without."""
    stream_port = 7001
    a, b = _pair(verify_checksums=False, unchecksummed_ports=frozenset({stream_port}))
    b.listen(PORT)
    b.listen(stream_port)
    net = Network([a, b])
    transfers = Transfers(net)
    for port in (PORT, stream_port):
        transfers.outgoing[a.connect(B, port)] = memoryview(bytes(5000))
    net.run(lambda: transfers.closed(4))
    on_port = defaultdict(list)
    for packet in net.sent:
        segment = decode_packet(packet, verify_checksum=False).segment
        on_port[stream_port in (segment.src_port, segment.dst_port), bool(segment.flags & SYN)].append(packet)
    assert on_port[True, True] and on_port[True, False] and on_port[False, False]
    assert all(packet[40 + 16:40 + 18] == b"\0\0" for packet in on_port[True, False])
    for packet in on_port[True, True] + on_port[False, True] + on_port[False, False]:
        decode_packet(packet)  # raises ChecksumError on a wrong checksum
    assert sum(len(data) for data in transfers.received.values()) == 10000


def test_a_syn_to_the_unchecksummed_port_of_a_checking_stack_is_refused_at_once() -> None:
    """A peer that verifies checksums and does not listen on the port (a Go
    node's gVisor stack) answers the first SYN with RST instead of dropping it."""
    stream_port = 7001
    a = TcpStack(A, rng=random.Random(11), verify_checksums=False,
                 unchecksummed_ports=frozenset({stream_port}))
    b = TcpStack(B, rng=random.Random(22))
    b.listen(PORT)
    net = Network([a, b])
    transfers = Transfers(net)
    conn = a.connect(B, stream_port)
    net.run(lambda: Reset in transfers.kinds[conn])
    assert net.now < TcpConfig().initial_rto, "refused by the first SYN, not a retry"


def test_path_stats_past_the_cap_forget_idle_addresses_not_a_live_connection() -> None:
    """Many short-lived destinations (a client sending to ever new ids) must
    not push a live connection's address out of `paths`: its counters would
    go on in an object /metrics no longer shows."""
    stack = TcpStack(A)
    live = stack.connect(B, PORT)
    for index in range(MAX_PATHS + 10):
        stack.connect(bytes([0x03]) + index.to_bytes(15, "big"), PORT).abort()
        for _ in stack.packets_to_send(0.0):
            pass
    assert len(stack.paths) == MAX_PATHS
    assert stack.paths[B] is live.path
