"""Property tests for the overlay TCP: the segment codec, the message framing
on the stream, and a connection fed arbitrary segments."""

from __future__ import annotations

import dataclasses
import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st
from vectors import load

from axl.tcp.connection import TcpConfig, TcpConnection
from axl.tcp.framing import MessageDecoder, MessageTooLarge, encode_message
from axl.tcp.segment import ACK, FIN, PSH, RST, SYN, TcpSegment, decode_packet, encode_packet
from axl.wire import DecodeError
from fuzzing import FUZZ, chunkings, noise_or_mutation, peak_allocation

VECTOR = load("ipv6_tcp")
LOCAL = ipaddress.IPv6Address(VECTOR["addresses"]["probe"]).packed
REMOTE = ipaddress.IPv6Address(VECTOR["addresses"]["axl"]).packed
CAPTURED = [bytes.fromhex(entry["ipv6_hex"]) for entry in VECTOR["transcript"]]
U32 = st.integers(min_value=0, max_value=0xFFFFFFFF)
U16 = st.integers(min_value=0, max_value=0xFFFF)

segments = st.builds(
    TcpSegment,
    src_port=U16, dst_port=U16, seq=U32, ack=U32,
    flags=st.integers(min_value=0, max_value=0x3F), window=U16,
    payload=st.binary(max_size=64),
    mss=st.none() | U16,
    window_scale=st.none() | st.integers(min_value=0, max_value=14),
    sack_permitted=st.booleans(),
    timestamps=st.none() | st.tuples(U32, U32),
    urgent=U16,
)


# --- segment codec ------------------------------------------------------

@FUZZ
@given(noise_or_mutation(CAPTURED, 120))
def test_decode_packet_fails_only_with_decode_error(packet):
    try:
        decoded = decode_packet(packet)
    except DecodeError:
        return
    again = decode_packet(encode_packet(decoded.src, decoded.dst, decoded.segment, decoded.hop_limit))
    assert again.segment.payload == decoded.segment.payload
    assert (again.segment.seq, again.segment.ack, again.segment.flags) == (
        decoded.segment.seq, decoded.segment.ack, decoded.segment.flags)


@FUZZ
@given(segments)
def test_encode_then_decode_round_trips(segment):
    decoded = decode_packet(encode_packet(LOCAL, REMOTE, segment)).segment
    assert decoded == dataclasses.replace(segment, payload=bytes(segment.payload))


# --- message framing ------------------------------------------------------

messages = st.lists(st.binary(max_size=300), max_size=6)


@FUZZ
@given(messages.flatmap(lambda ms: st.tuples(st.just(ms), chunkings(b"".join(map(encode_message, ms))))))
def test_message_decoder_any_chunking_yields_the_same_messages(case):
    sent, chunks = case
    decoder = MessageDecoder(max_size=300)
    received = [message for chunk in chunks for message in decoder.feed(chunk)]
    assert received == sent
    assert not decoder.partial


@FUZZ
@given(st.binary(max_size=200).flatmap(chunkings))
def test_message_decoder_on_noise_fails_only_with_too_large(chunks):
    decoder = MessageDecoder(max_size=64)
    try:
        for chunk in chunks:
            for message in decoder.feed(chunk):
                assert len(message) <= 64
    except MessageTooLarge as exc:
        assert exc.size > 64
    assert decoder.buffered <= 200


@pytest.mark.parametrize("max_size", [1024, (1 << 32) - 1])
def test_claimed_length_is_not_preallocated(max_size):
    decoder = MessageDecoder(max_size=max_size)
    header = (1 << 31).to_bytes(4, "big")

    def feed() -> None:
        if max_size < 1 << 31:
            with pytest.raises(MessageTooLarge):
                decoder.feed(header + b"abcdef")
        else:
            assert decoder.feed(header + b"abcdef") == []

    assert peak_allocation(feed) < 64 * 1024
    assert decoder.buffered <= 10


def test_length_over_the_limit_refused_from_the_header_alone():
    with pytest.raises(MessageTooLarge):
        MessageDecoder(max_size=1024).feed((1025).to_bytes(4, "big"))


# --- a connection fed arbitrary segments ----------------------------------

IRS = 0x7000_0000
ISS = 0x1000


def _established() -> TcpConnection:
    conn = TcpConnection(7000, REMOTE, 40000, iss=ISS, config=TcpConfig(
        send_buffer_size=4096, recv_buffer_size=4096))
    syn = TcpSegment(40000, 7000, IRS, 0, SYN, 65535, mss=1220, window_scale=2)
    conn.open_passive(syn)
    conn.segments_to_send(0.0)
    conn.receive_segment(TcpSegment(40000, 7000, IRS + 1, ISS + 1, ACK, 1000), 0.01)
    conn.send(b"x" * 3000)
    conn.segments_to_send(0.01)
    return conn


near = st.integers(min_value=-5000, max_value=5000)
# Mostly in-window offsets and plausible acks, so the data path is reached too.
seq_offsets = st.one_of(st.just(0), st.integers(min_value=0, max_value=1500), near)
ack_offsets = st.one_of(st.integers(min_value=0, max_value=3001), near)
flag_sets = st.one_of(st.sampled_from([ACK, ACK | PSH, ACK | FIN]),
                      st.sampled_from([RST, SYN, SYN | ACK, RST | ACK, 0, 0x3F]))
hostile_segments = st.builds(
    lambda dseq, dack, flags, window, payload, mss: TcpSegment(
        40000, 7000, (IRS + 1 + dseq) % (1 << 32), (ISS + 1 + dack) % (1 << 32), flags, window,
        payload, mss=mss),
    seq_offsets, ack_offsets, flag_sets, U16, st.binary(max_size=1500), st.none() | U16,
)


@FUZZ
@given(st.lists(st.tuples(hostile_segments, st.booleans()), min_size=1, max_size=12))
def test_connection_takes_any_segments_without_raising(steps):
    conn = _established()
    now = 0.02
    for segment, fire_timer in steps:
        now += 0.3
        conn.receive_segment(segment, now)
        if fire_timer and conn.get_timer() is not None:
            conn.handle_timer(max(now, conn.get_timer()))
        for out in conn.segments_to_send(now):
            assert len(out.payload) <= conn.send_mss
            encode_packet(LOCAL, REMOTE, out)
        conn.read()
        while conn.next_event() is not None:
            pass
