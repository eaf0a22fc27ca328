"""TcpConnection driven segment by segment: the Go transcript, timers, resets."""

from __future__ import annotations

import dataclasses
import ipaddress

import pytest

from axl.tcp.connection import State, TcpConfig, TcpConnection, unwrap_seq, window_scale_for
from axl.tcp.events import Closed, Connected, DataReceived, PeerFinished, Reset, TimedOut
from axl.tcp.framing import encode_message
from axl.tcp.segment import ACK, FIN, RST, SYN, TcpSegment, decode_packet, encode_packet
from vectors import load

VECTOR = load("ipv6_tcp")
PROBE = ipaddress.IPv6Address(VECTOR["addresses"]["probe"]).packed
AXL = ipaddress.IPv6Address(VECTOR["addresses"]["axl"]).packed
TRANSCRIPT = VECTOR["transcript"]


def _packet(index: int) -> bytes:
    return bytes.fromhex(TRANSCRIPT[index]["ipv6_hex"])


def _events(conn: TcpConnection) -> list:
    out = []
    while (event := conn.next_event()) is not None:
        out.append(event)
    return out


def _encoded(conn: TcpConnection, now: float) -> list[bytes]:
    return [encode_packet(PROBE, AXL, seg) for seg in conn.segments_to_send(now)]


def test_replays_the_go_node_exchange_byte_for_byte() -> None:
    config = TcpConfig(mss=1220, offer_window_scale=False)
    conn = TcpConnection(40000, AXL, 7000, iss=0x1000, config=config)
    conn.open_active()
    assert _encoded(conn, 0.0) == [_packet(0)]

    conn.receive_segment(decode_packet(_packet(1)).segment, 0.015)
    assert [type(e) for e in _events(conn)] == [Connected]
    assert conn.send_mss == 1220
    assert _encoded(conn, 0.015) == [_packet(2)]

    body = b"hello AXL: ygg05 test vector message"
    assert conn.send(encode_message(body)) == 40
    assert _encoded(conn, 0.016) == [_packet(3)]
    conn.receive_segment(decode_packet(_packet(4)).segment, 0.03)
    assert conn.unacknowledged == 0 and conn.get_timer() is None

    conn.close()
    assert _encoded(conn, 0.031) == [_packet(5)]
    conn.receive_segment(decode_packet(_packet(6)).segment, 0.04)
    assert conn.state is State.FIN_WAIT_2
    conn.receive_segment(decode_packet(_packet(7)).segment, 0.05)
    assert [type(e) for e in _events(conn)] == [PeerFinished, Closed]
    assert _encoded(conn, 0.05) == [_packet(8)]
    assert conn.state is State.TIME_WAIT
    conn.handle_timer(conn.get_timer())
    assert conn.is_closed


def test_go_syn_is_answered_with_window_scale_but_no_sack_or_timestamps() -> None:
    syn = decode_packet(_packet(9)).segment
    conn = TcpConnection(7000, AXL, syn.src_port, iss=77, config=TcpConfig())
    conn.open_passive(syn)
    [syn_ack] = conn.segments_to_send(0.0)
    assert syn_ack.flags == SYN | ACK and syn_ack.ack == syn.seq + 1
    assert syn_ack.window_scale == window_scale_for(TcpConfig().recv_buffer_size)
    assert not syn_ack.sack_permitted and syn_ack.timestamps is None
    assert conn.send_mss == 1220


def _handshake(config: TcpConfig | None = None, server_iss: int = 0xFFFFFF00,
               answered_at: float = 0.01) -> tuple[TcpConnection, TcpConnection]:
    """A client and a server connected; the SYN-ACK reaches the client at `answered_at`."""
    client = TcpConnection(50000, AXL, 7000, iss=1000, config=config)
    server = TcpConnection(7000, PROBE, 50000, iss=server_iss, config=config)
    client.open_active()
    [syn] = client.segments_to_send(0.0)
    server.open_passive(syn)
    for segment in server.segments_to_send(0.0):
        client.receive_segment(segment, answered_at)
    for segment in client.segments_to_send(answered_at):
        server.receive_segment(segment, answered_at + 0.01)
    assert client.state is server.state is State.ESTABLISHED
    return client, server


def test_syn_retries_back_off_and_time_out_within_ten_seconds() -> None:
    conn = TcpConnection(50000, AXL, 7000, iss=1, config=TcpConfig())
    conn.open_active()
    sent_at = []
    now = 0.0
    while not conn.is_closed:
        if conn.segments_to_send(now):
            sent_at.append(now)
        now = conn.get_timer()
        conn.handle_timer(now)
    assert sent_at == [0.0, 1.0, 3.0, 5.0, 7.0]
    assert now == 9.0
    assert [type(e) for e in _events(conn)] == [TimedOut]


def test_rst_answering_syn_means_refused() -> None:
    conn = TcpConnection(50000, AXL, 7000, iss=5, config=TcpConfig())
    conn.open_active()
    [syn] = conn.segments_to_send(0.0)
    conn.receive_segment(TcpSegment(7000, 50000, 0, syn.seq + 1, RST | ACK, 0), 0.01)
    [event] = _events(conn)
    assert isinstance(event, Reset) and event.reason == "refused"
    assert conn.is_closed and conn.get_timer() is None


def test_rst_with_wrong_ack_in_syn_sent_is_ignored() -> None:
    conn = TcpConnection(50000, AXL, 7000, iss=5, config=TcpConfig())
    conn.open_active()
    conn.segments_to_send(0.0)
    conn.receive_segment(TcpSegment(7000, 50000, 0, 999, RST | ACK, 0), 0.01)
    assert conn.state is State.SYN_SENT and _events(conn) == []


def test_retransmission_timer_doubles_then_gives_up_with_reset() -> None:
    config = TcpConfig(max_retransmits=5)
    client, server = _handshake(config)
    _events(client)
    client.send(b"x" * 100)
    [first] = client.segments_to_send(1.0)
    rto = client.rto
    assert rto >= config.min_rto
    times, now = [], 1.0
    while not client.is_closed:
        now = client.get_timer()
        client.handle_timer(now)
        segments = client.segments_to_send(now)
        times.append(now)
        if client.is_closed:
            assert [s.flags for s in segments] == [RST | ACK]
        else:
            assert [s.seq for s in segments] == [first.seq]
    gaps = [round(b - a, 6) for a, b in zip([1.0] + times, times)]
    assert gaps == [round(min(rto * 2 ** i, config.max_rto), 6) for i in range(6)]
    assert [type(e) for e in _events(client)] == [TimedOut]
    assert client.path.timeouts == client.path.retransmits == 5


def test_backoff_is_forgotten_once_new_data_is_acknowledged() -> None:
    client, server = _handshake()
    client.send(b"y" * 10)
    client.segments_to_send(1.0)
    base = client.rto
    client.handle_timer(client.get_timer())
    [retransmitted] = client.segments_to_send(2.0)
    assert client.rto == pytest.approx(base * 2)
    server.receive_segment(retransmitted, 2.1)
    for segment in server.segments_to_send(2.1):
        client.receive_segment(segment, 2.2)
    assert client.rto == pytest.approx(base) and client.get_timer() is None


def _through_codec(segment: TcpSegment, src: bytes, dst: bytes) -> TcpSegment:
    """What the peer reads: the segment encoded as an IPv6 packet and decoded again."""
    return decode_packet(encode_packet(src, dst, segment)).segment


def test_sequence_numbers_wrap_around_32_bits() -> None:
    """The server's sequence space crosses 2^32 in the middle of a transfer of
    full 1220-byte segments, every one of them (and every ACK) going through the
    codec: on the wire a segment's seq falls below its predecessor's."""
    assert unwrap_seq(5, 0xFFFFFFF0) == 0x100000005
    client, server = _handshake(TcpConfig(mss=1220), server_iss=(1 << 32) - 3000)
    data = bytes(range(256)) * 40
    assert server.send(data) == len(data)
    wire_seqs, received = [], b""
    for step in range(20):
        now = 1.0 + step / 10
        for segment in server.segments_to_send(now):
            wire = _through_codec(segment, AXL, PROBE)
            wire_seqs.append(wire.seq)
            client.receive_segment(wire, now)
        received += b"".join(e.data for e in _events(client) if isinstance(e, DataReceived))
        for segment in client.segments_to_send(now):
            server.receive_segment(_through_codec(segment, PROBE, AXL), now)
        if server.unacknowledged == 0:
            break
    assert received == data
    assert server.unacknowledged == 0
    assert max(wire_seqs) < 1 << 32
    assert any(later < earlier for earlier, later in zip(wire_seqs, wire_seqs[1:])), wire_seqs


def test_abort_sends_rst_and_peer_sees_reset() -> None:
    client, server = _handshake()
    _events(server)
    client.abort()
    [rst] = client.segments_to_send(1.0)
    assert rst.flags & RST
    server.receive_segment(rst, 1.1)
    assert [(type(e), e.reason) for e in _events(server)] == [(Reset, "reset by peer")]
    assert server.is_closed


def test_rst_outside_the_window_is_ignored() -> None:
    client, server = _handshake()
    _events(server)
    server.receive_segment(TcpSegment(50000, 7000, 12345678, 0, RST, 0), 1.0)
    assert server.state is State.ESTABLISHED and _events(server) == []


def test_send_after_close_is_refused() -> None:
    client, _ = _handshake()
    client.close()
    assert client.send_space == 0
    with pytest.raises(ConnectionError):
        client.send(b"late")


def test_fin_queued_before_handshake_follows_the_data() -> None:
    client = TcpConnection(50000, AXL, 7000, iss=1000)
    client.open_active()
    client.send(b"early")
    client.close()
    [syn] = client.segments_to_send(0.0)
    server = TcpConnection(7000, PROBE, 50000, iss=9)
    server.open_passive(syn)
    for segment in server.segments_to_send(0.0):
        client.receive_segment(segment, 0.01)
    [data] = client.segments_to_send(0.01)
    assert data.payload == b"early" and data.flags & FIN and client.state is State.FIN_WAIT_1


def test_path_change_cuts_a_backed_off_retransmission_short():
    from axl.tcp.stack import TcpStack

    client = TcpStack(bytes([2]) + bytes(15))
    server = TcpStack(bytes([2]) + bytes(14) + b"\x01")
    server.listen(7000)
    conn = client.connect(server.local_address, 7000)
    now = 0.0
    for _ in range(3):  # handshake
        for packet in client.packets_to_send(now):
            server.receive(packet, now)
        for packet in server.packets_to_send(now):
            client.receive(packet, now)
    conn.send(b"x" * 1000)
    client.packets_to_send(now)  # lost
    for _ in range(4):  # four timeouts with nobody answering: the backoff grows
        now = client.get_timer()
        client.handle_timer(now)
        client.packets_to_send(now)
    backed_off = client.get_timer() - now
    assert backed_off > 1.0
    client.path_changed(server.local_address, now + 0.1)
    assert client.get_timer() == now + 0.1
    client.handle_timer(now + 0.1)
    assert client.packets_to_send(now + 0.1), "the head is retransmitted at once"



def test_a_probe_is_answered_by_a_live_peer_and_stops() -> None:
    """A keep-alive: an already-acknowledged sequence number, no data; the
    peer answers with an ACK and no second probe follows."""
    client, server = _handshake()
    client.probe(1.0)
    [probe] = client.segments_to_send(1.0)
    assert probe.seq_length == 0 and probe.flags == ACK
    server.receive_segment(probe, 1.0)
    [answer] = server.segments_to_send(1.0)
    assert answer.flags == ACK
    client.receive_segment(answer, 1.01)
    assert client.get_timer() is None
    assert client.segments_to_send(30.0) == []
    assert client.state is State.ESTABLISHED


def test_unanswered_probes_repeat_an_rto_apart_and_a_peer_that_lost_the_connection_resets_it() -> None:
    """The first probes go nowhere (a restarted peer drops the packets of a
    session it no longer knows); a later one reaches the peer, which has no
    such connection and answers RST, as a TcpStack does."""
    client, _server = _handshake()
    _events(client)
    client.probe(1.0)
    sent = client.segments_to_send(1.0)
    now = 1.0
    while (due := client.get_timer()) is not None:
        now = due
        client.handle_timer(now)
        sent += client.segments_to_send(now)
    assert len(sent) == TcpConfig().probes and now - 1.0 < TcpConfig().probes * TcpConfig().max_rto
    client.probe(now)
    [probe] = client.segments_to_send(now)
    client.receive_segment(TcpSegment(7000, 50000, probe.ack, 0, RST, 0), now + 0.01)
    assert [type(event) for event in _events(client)] == [Reset]
    assert client.is_closed

def _exchange(sender: TcpConnection, receiver: TcpConnection, now: float) -> list[TcpSegment]:
    """Deliver everything `sender` has due to `receiver`; return what the receiver answers."""
    for segment in sender.segments_to_send(now):
        receiver.receive_segment(segment, now)
    return receiver.segments_to_send(now)


def test_unconsumed_data_closes_the_window_and_consuming_reopens_it() -> None:
    buffer = 16384
    client, server = _handshake(TcpConfig(mss=1220, recv_buffer_size=buffer, hold_until_consumed=True))
    _events(server)
    client.send(b"x" * 4 * buffer)
    now, windows = 1.0, []
    for _ in range(20):
        for segment in _exchange(client, server, now):
            windows.append(segment.window)
            client.receive_segment(segment, now)
        now += 0.01
    delivered = sum(len(e.data) for e in _events(server) if isinstance(e, DataReceived))
    assert delivered == server.unconsumed == buffer
    assert windows[-1] == 0 and client.unacknowledged == 3 * buffer
    server.consumed(buffer // 2)
    [update] = server.segments_to_send(now)
    assert update.flags == ACK and update.window << client._snd_wscale >= buffer // 2
    client.receive_segment(update, now)
    for step in range(1, 4):
        for segment in _exchange(client, server, now + step / 100):
            client.receive_segment(segment, now + step / 100)
    assert sum(len(e.data) for e in _events(server) if isinstance(e, DataReceived)) >= buffer // 2


def test_a_reader_that_consumes_promptly_keeps_the_window_open() -> None:
    client, server = _handshake(TcpConfig(mss=1220, recv_buffer_size=16384, hold_until_consumed=True))
    _events(server)
    client.send(b"y" * 100_000)
    now, delivered = 1.0, 0
    while delivered < 100_000:
        assert now < 10.0, "the transfer stalled"
        for segment in _exchange(client, server, now):
            client.receive_segment(segment, now)
        chunks = [e.data for e in _events(server) if isinstance(e, DataReceived)]
        server.consumed(sum(map(len, chunks)))
        delivered += sum(map(len, chunks))
        for segment in server.segments_to_send(now):
            client.receive_segment(segment, now)
        now += 0.01
    assert server.unconsumed == 0


@pytest.mark.parametrize("offered", [1, 63, 536, None])
def test_a_tiny_peer_mss_is_raised_to_the_ipv6_minimum(offered: int | None) -> None:
    syn = TcpSegment(40000, 7000, 5, 0, SYN, 65535, mss=offered)
    conn = TcpConnection(7000, PROBE, 40000, iss=9, config=TcpConfig())
    conn.open_passive(syn)
    conn.segments_to_send(0.0)
    conn.receive_segment(TcpSegment(40000, 7000, 6, 10, ACK, 65535), 0.01)
    conn.send(b"z" * 5000)
    data = [s for s in conn.segments_to_send(0.02) if s.payload]
    assert conn.send_mss == 1220
    assert [len(s.payload) for s in data] == [1220, 1220, 1220, 1220, 120]


def test_retransmit_now_resends_an_unanswered_syn_at_once() -> None:
    """After the session under it was re-keyed, a SYN waits for no timer (path_changed would, at backoff 0)."""
    conn = TcpConnection(50000, AXL, 7000, iss=1, config=TcpConfig())
    conn.open_active()
    [syn] = conn.segments_to_send(0.0)
    conn.path_changed(0.01)
    assert conn.get_timer() == 1.0
    conn.retransmit_now(0.01)
    assert conn.get_timer() == 0.01
    conn.handle_timer(0.01)
    assert [s.flags for s in conn.segments_to_send(0.01)] == [SYN]


def test_a_delayed_ack_rides_on_data_or_leaves_after_the_delay() -> None:
    config = TcpConfig(mss=1220)
    client, server = _handshake(config)
    server.delays_acks = True
    _events(server)
    client.send(b"request")
    assert _exchange(client, server, 1.0) == [], "no bare ACK for in-order data"
    assert server.get_timer() == pytest.approx(1.0 + config.ack_delay)
    server.send(b"answer")
    [answer] = server.segments_to_send(1.001)
    assert answer.payload == b"answer" and answer.ack == client._snd_max
    assert server.get_timer() == pytest.approx(1.001 + server.rto), "only the answer's RTO is left"

    client.receive_segment(answer, 1.002)
    client.send(b"another")
    assert _exchange(client, server, 2.0) == []
    server.handle_timer(2.0 + config.ack_delay)
    [bare] = server.segments_to_send(2.0 + config.ack_delay)
    assert bare.flags == ACK and not bare.payload and bare.ack == client._snd_max


def test_a_delayed_ack_goes_at_once_for_every_second_full_segment() -> None:
    client, server = _handshake(TcpConfig(mss=1220))
    server.delays_acks = True
    client.send(b"x" * 1220)
    assert _exchange(client, server, 1.0) == []
    client.send(b"y" * 1220)
    [ack] = _exchange(client, server, 1.01)
    assert ack.flags == ACK and ack.ack == client._snd_max


def test_a_delayed_ack_goes_at_once_when_data_fills_a_gap() -> None:
    client, server = _handshake(TcpConfig(mss=1220))
    server.delays_acks = True
    client.send(b"a" * 600)
    [first] = client.segments_to_send(1.0)
    client.send(b"b" * 600)
    [second] = client.segments_to_send(1.0)
    server.receive_segment(second, 1.01)
    [duplicate_ack] = server.segments_to_send(1.01)
    assert duplicate_ack.ack == first.seq, "out of order: a duplicate ACK at once"
    server.receive_segment(first, 1.02)
    [ack] = server.segments_to_send(1.02)
    assert ack.flags == ACK and ack.ack == client._snd_max, "the gap filled: ACKed at once"


def test_a_delayed_ack_does_not_stall_a_sender_held_by_the_syn_window() -> None:
    # The SYN-ACK's window is unscaled (at most 65535 bytes), so right after the
    # handshake a sender of MAX_MSS segments has room for one segment only and
    # waits for the ACK that brings the scaled window; a receiver that has not
    # consumed yet (hold_until_consumed) sends no window update meanwhile.
    client, server = _handshake(TcpConfig(hold_until_consumed=True))
    server.delays_acks = True
    client.send(b"x" * 300_000)
    [segment] = client.segments_to_send(1.0)
    server.receive_segment(segment, 1.0)
    assert client.segments_to_send(1.0) == [], "the sender is window-limited"
    assert server.segments_to_send(1.0), (
        f"the receiver holds its ACK until {server.get_timer()}: the sender idles for the ack delay")


def test_acknowledgements_read_together_in_fast_recovery_leave_nothing_to_resend() -> None:
    """In fast recovery a partial acknowledgement asks to resend the next
    hole, and the full one arrives before the sender next sends (a daemon
    flushes once per event-loop turn, after every frame it read). Nothing
    is left to resend then: a "resend" would put unsent data on the wire
    without counting it as sent, the peer's acknowledgement of it would be
    dropped as one for unsent data, and the transfer would stall for good."""
    client, server = _handshake(TcpConfig(mss=1220))
    _events(client)
    data = bytes(range(256)) * 100
    client.send(data)
    flight = client.segments_to_send(1.0)
    assert len(flight) == 10 and sum(len(s.payload) for s in flight) < len(data)
    lost, late = flight[1], flight[4]
    acks = []
    for segment in flight:
        if segment not in (lost, late):
            server.receive_segment(segment, 1.01)
            acks += server.segments_to_send(1.01)  # one ACK per segment, as gVisor sends them
    for ack in acks:
        client.receive_segment(ack, 1.02)
    recovery = client.segments_to_send(1.02)
    assert recovery[0].seq == lost.seq
    answers = []
    for segment in recovery:
        server.receive_segment(segment, 1.03)
        answers += server.segments_to_send(1.03)
    assert answers[0].ack == late.seq, "a partial acknowledgement: the late segment is the next hole"
    server.receive_segment(late, 1.03)
    answers += server.segments_to_send(1.03)
    for answer in answers:
        client.receive_segment(answer, 1.04)
    assert client.unacknowledged == len(data) - (answers[-1].ack - flight[0].seq)
    now = 1.04
    while (segments := client.segments_to_send(now)) and now < 5:
        for segment in segments:
            server.receive_segment(segment, now)
        for ack in server.segments_to_send(now):
            client.receive_segment(ack, now)
        now += 0.01
    received = b"".join(bytes(e.data) for e in _events(server) if isinstance(e, DataReceived))
    assert received == data and client.unacknowledged == 0


def test_a_queue_as_long_as_the_path_is_no_reason_to_time_out() -> None:
    """Round trips of 0.2 s for a while (a long path, idle), then one of
    0.39 s: a relay's queue filling as a transfer speeds up. The RTO keeps
    min_rto of room above the smoothed RTT, so nothing is resent: a timeout
    here would drop the window to one segment and halve ssthresh, and the
    transfer would crawl in congestion avoidance for the rest of its life."""
    client, server = _handshake()
    now = 1.0
    for _ in range(30):
        client.send(b"q" * 100)
        for segment in client.segments_to_send(now):
            server.receive_segment(segment, now + 0.1)
        for segment in server.segments_to_send(now + 0.1):
            client.receive_segment(segment, now + 0.2)
        now += 0.5
    client.send(b"b" * 1000)
    [sent] = client.segments_to_send(now)
    late = now + 0.39
    while (deadline := client.get_timer()) is not None and deadline <= late:
        client.handle_timer(deadline)
    assert client.segments_to_send(late) == []
    assert client.path.timeouts == client.path.retransmits == 0
    server.receive_segment(sent, now + 0.3)
    for segment in server.segments_to_send(now + 0.3):
        client.receive_segment(segment, late)
    assert client.unacknowledged == 0


@pytest.mark.parametrize("flush_between", [False, True])
def test_a_first_flight_acknowledged_as_gvisor_does_keeps_slow_start(flush_between: bool) -> None:
    """Go's TCP answers a new connection's first flight with a run of
    acknowledgements of the SYN alone, then one covering the flight. All the
    data arrived: the "duplicates" must not halve the window for good (on a
    200 ms path a connection left in congestion avoidance at 5 segments
    carried under 0.02 of the path). Read in one turn, or with the resend
    sent in between and the full acknowledgement right after it, the
    window goes on growing from where it was."""
    client, server = _handshake(TcpConfig(mss=1220))
    client.send(bytes(400_000))
    flight = client.segments_to_send(1.0)
    assert len(flight) == 10
    for segment in flight:
        server.receive_segment(segment, 1.1)
    [full] = server.segments_to_send(1.1)
    assert full.ack == flight[-1].seq + len(flight[-1].payload)
    for _ in range(9):
        client.receive_segment(dataclasses.replace(full, ack=flight[0].seq), 1.2)
    sent = []
    if flush_between:
        sent = client.segments_to_send(1.2)
        assert sent[0].seq == flight[0].seq, "the fast retransmit left"
    client.receive_segment(full, 1.2005)
    sent += client.segments_to_send(1.2005)
    new = [segment for segment in sent if segment.seq >= full.ack]
    assert len(new) >= 20, "slow start goes on: 10 acknowledged, 20 may be in flight"


def test_the_path_keeps_its_least_rtt_while_the_smoothed_one_grows() -> None:
    """A receiver whose answers come late (commits, delayed ACKs) raises the
    smoothed RTT; the least sample stays the path's own delay, which is what
    a message stream sizes its window by."""
    client, server = _handshake()
    assert client.path.min_rtt == pytest.approx(0.01)
    now = 1.0
    for _ in range(20):
        client.send(b"x" * 100)
        for segment in client.segments_to_send(now):
            server.receive_segment(segment, now)
        for segment in server.segments_to_send(now + 0.05):
            client.receive_segment(segment, now + 0.05)
        now += 0.1
    assert client.path.srtt > 0.04 and client.path.min_rtt == pytest.approx(0.01)


def test_a_handshake_that_waited_for_the_overlay_does_not_hold_the_rto_at_seconds() -> None:
    """The SYN waited a second for the path lookup and session under it; the
    first data round trip (10 ms) replaces that sample, so a loss right
    after costs about min_rto, not the seconds an average would keep."""
    client, server = _handshake(answered_at=1.0)
    assert client.path.srtt == pytest.approx(1.0)
    client.send(b"d" * 100)
    for segment in client.segments_to_send(2.0):
        server.receive_segment(segment, 2.0)
    for segment in server.segments_to_send(2.01):
        client.receive_segment(segment, 2.01)
    assert client.path.srtt == pytest.approx(0.01)
    assert client.rto == pytest.approx(0.21)


def test_duplicate_acks_let_new_segments_out_until_fast_retransmit() -> None:
    """Limited Transmit (RFC 3042): each of the first two duplicate ACKs lets
    one new segment out beyond cwnd, and their own duplicates reach the
    three that start fast retransmit. With few segments in flight (a message
    stream's are 64 KiB) a loss is otherwise found only by the RTO: through
    a router that drops one segment in four, every loss cost 0.2 s."""
    client, server = _handshake(TcpConfig(mss=1220))
    client.send(b"w" * 100)
    for segment in client.segments_to_send(0.5):
        server.receive_segment(segment, 0.5)
    for segment in server.segments_to_send(0.5):
        client.receive_segment(segment, 0.51)  # the window as the data's ACKs will carry it
    client.send(bytes(100_000))
    flight = client.segments_to_send(1.0)
    lost = flight[0]
    sent = _each_answered(client, server, flight[1:3], 1.1)
    assert [s.seq for s in sent] == [flight[-1].seq + 1220, flight[-1].seq + 2440], "one new segment per duplicate"
    resent = _each_answered(client, server, sent, 1.3)
    assert resent[0].seq == lost.seq and client.path.timeouts == 0, "fast retransmit, no timeout"


def _each_answered(client: TcpConnection, server: TcpConnection, segments: list, now: float) -> list:
    """Each segment reaches the server at `now`; what the client sends on each of its answers, 0.1 s later."""
    sent = []
    for segment in segments:
        server.receive_segment(segment, now)
        for ack in server.segments_to_send(now):
            client.receive_segment(ack, now + 0.1)
            sent += client.segments_to_send(now + 0.1)
    return sent
