import pytest

from axl.packets.ipv6 import (
    HEADER_SIZE, NEXT_HEADER_TCP, IPv6Header, build_packet, internet_checksum,
    parse_header, pseudo_header,
)
from axl.wire import DecodeError
from vectors import load


def test_checksum_rfc1071_example():
    # RFC 1071 section 3 example: sum of 0001 f203 f4f5 f6f7 is ddf2 -> complement 220d
    assert internet_checksum(bytes.fromhex("0001f203f4f5f6f7")) == 0x220D


def test_checksum_odd_length_pads_with_zero():
    assert internet_checksum(b"\x12") == internet_checksum(b"\x12\x00")


def test_checksum_of_all_zero_is_ffff():
    assert internet_checksum(bytes(8)) == 0xFFFF


def test_pseudo_header_layout():
    src, dst = bytes(range(16)), bytes(range(16, 32))
    ph = pseudo_header(src, dst, 0x01020304, 58)
    assert ph == src + dst + bytes.fromhex("01020304") + bytes(3) + b"\x3a"


def test_pseudo_header_rejects_bad_address():
    with pytest.raises(ValueError):
        pseudo_header(bytes(15), bytes(16), 0, 6)


def test_captured_tcp_checksums_verify():
    packets = [bytes.fromhex(e["ipv6_hex"]) for e in load("ipv6_tcp")["transcript"]]
    assert packets
    for packet in packets:
        header = parse_header(packet)
        assert header.next_header == NEXT_HEADER_TCP
        segment = packet[HEADER_SIZE:]
        assert header.payload_length == len(segment)
        ph = pseudo_header(header.src, header.dst, len(segment), header.next_header)
        assert internet_checksum(ph + segment) == 0


def test_header_roundtrip():
    header = IPv6Header(src=b"\x02" * 16, dst=b"\x03" * 16, next_header=17,
                        payload_length=5, hop_limit=9, traffic_class=0xAB, flow_label=0x12345)
    assert parse_header(header.encode() + bytes(5)) == header


def test_build_packet_sets_length():
    packet = build_packet(b"\x02" * 16, b"\x02" * 16, 6, b"abc")
    assert packet[0] >> 4 == 6
    assert parse_header(packet).payload_length == 3
    assert packet.endswith(b"abc")


def test_parse_rejects_short_and_wrong_version():
    with pytest.raises(DecodeError):
        parse_header(bytes(39))
    with pytest.raises(DecodeError):
        parse_header(b"\x40" + bytes(39))


def _checksum_by_words(data: bytes) -> int:
    """RFC 1071 written out word by word, to check the big-integer shortcut against."""
    import struct

    if len(data) % 2:
        data += b"\x00"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def test_checksum_matches_the_word_by_word_sum_on_edge_cases():
    import random

    rng = random.Random(7)
    cases = [b"", b"\x00", b"\x00\x00", b"\xff\xff", b"\xff\xff" * 3, b"\xff", b"\xff\xfe\x00\x01"]
    cases += [bytes(rng.choice((0, 255, rng.randrange(256))) for _ in range(rng.randrange(200)))
              for _ in range(500)]
    cases.append(bytes(rng.randrange(256) for _ in range(65536)))
    for data in cases:
        assert internet_checksum(data) == _checksum_by_words(data)
