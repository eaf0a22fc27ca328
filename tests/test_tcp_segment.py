"""TCP segment codec against the packets exchanged with the Go AXL node."""

from __future__ import annotations

import ipaddress

import pytest

from axl.tcp.segment import (
    ACK,
    FIN,
    SYN,
    ChecksumError,
    TcpDecodeError,
    TcpSegment,
    decode_packet,
    encode_packet,
)
from vectors import load

TRANSCRIPT = load("ipv6_tcp")["transcript"]


def _addr(text: str) -> bytes:
    return ipaddress.IPv6Address(text).packed


@pytest.mark.parametrize("entry", TRANSCRIPT, ids=lambda e: e["meaning"][:40])
def test_every_transcript_packet_decodes_to_the_recorded_fields(entry: dict) -> None:
    packet = decode_packet(bytes.fromhex(entry["ipv6_hex"]))
    parsed, tcp = entry["parsed"], entry["parsed"]["tcp"]
    seg = packet.segment
    assert packet.src == _addr(parsed["src"]) and packet.dst == _addr(parsed["dst"])
    assert packet.hop_limit == parsed["hop_limit"]
    assert (seg.src_port, seg.dst_port, seg.seq, seg.ack) == (
        tcp["src_port"], tcp["dst_port"], tcp["seq"], tcp["ack"])
    assert seg.flags == tcp["flags_byte"] and seg.flag_names() == tcp["flags"]
    assert seg.window == tcp["window"] and seg.urgent == tcp["urgent"]
    assert bytes(seg.payload).hex() == tcp["data_hex"]
    assert tcp["checksum_valid"]
    names = {opt["name"]: opt for opt in tcp["options"]}
    assert seg.mss == (names["MSS"]["mss"] if "MSS" in names else None)
    assert seg.sack_permitted == ("SACK-permitted" in names)
    assert seg.window_scale == (names["WindowScale"]["shift"] if "WindowScale" in names else None)
    if "Timestamps" in names:
        assert seg.timestamps == (names["Timestamps"]["tsval"], names["Timestamps"]["tsecr"])
    else:
        assert seg.timestamps is None


@pytest.mark.parametrize("entry", [e for e in TRANSCRIPT if e["dir"] == "python->axl"],
                         ids=lambda e: e["meaning"][:40])
def test_our_packets_reencode_byte_exactly_from_their_fields(entry: dict) -> None:
    parsed, tcp = entry["parsed"], entry["parsed"]["tcp"]
    mss = next((o["mss"] for o in tcp["options"] if o["name"] == "MSS"), None)
    segment = TcpSegment(tcp["src_port"], tcp["dst_port"], tcp["seq"], tcp["ack"],
                         tcp["flags_byte"], tcp["window"], payload=bytes.fromhex(tcp["data_hex"]),
                         mss=mss)
    packet = encode_packet(_addr(parsed["src"]), _addr(parsed["dst"]), segment, parsed["hop_limit"])
    assert packet.hex() == entry["ipv6_hex"]


def test_go_syn_carries_every_option_gvisor_sends() -> None:
    syn = next(e for e in TRANSCRIPT if e["dir"] == "axl->python" and e["parsed"]["tcp"]["flags"] == "SYN")
    seg = decode_packet(bytes.fromhex(syn["ipv6_hex"])).segment
    assert seg.flags == SYN
    assert seg.mss == 1220 and seg.sack_permitted and seg.window_scale == 8
    assert seg.timestamps == (157640176, 0)


def test_options_we_emit_round_trip() -> None:
    src, dst = bytes([2] + [1] * 15), bytes([2] + [7] * 15)
    segment = TcpSegment(1, 2, 0xFFFFFFFF, 5, SYN | ACK, 1000, mss=65475, window_scale=7,
                         sack_permitted=True, timestamps=(1, 2))
    decoded = decode_packet(encode_packet(src, dst, segment)).segment
    assert decoded == segment


def test_data_segment_round_trips_with_odd_length_payload() -> None:
    src, dst = bytes([2] + [1] * 15), bytes([3] + [7] * 15)
    segment = TcpSegment(40000, 7000, 12345, 678, ACK | FIN, 512, payload=bytes(range(255)) * 3)
    assert decode_packet(encode_packet(src, dst, segment)).segment == segment
    assert segment.seq_length == 766


def _vector_packet(index: int) -> bytearray:
    return bytearray.fromhex(TRANSCRIPT[index]["ipv6_hex"])


def test_corrupted_byte_fails_the_checksum() -> None:
    packet = _vector_packet(3)
    packet[-1] ^= 0x01
    with pytest.raises(ChecksumError):
        decode_packet(bytes(packet))


@pytest.mark.parametrize("mutate", [
    lambda p: p[:50],                                   # TCP header truncated
    lambda p: p[:-1],                                   # payload length mismatch
    lambda p: p[:6] + b"\x11" + p[7:],                  # next header UDP
    lambda p: p[:52] + b"\x40" + p[53:],                # data offset 16 bytes
    lambda p: p[:52] + b"\xf0" + p[53:],                # data offset past the packet
    lambda p: b"\x40" + p[1:],                          # IPv4 version nibble
    lambda p: p[:10],                                   # shorter than the IPv6 header
])
def test_malformed_packets_raise_decode_errors(mutate) -> None:
    with pytest.raises(TcpDecodeError):
        decode_packet(bytes(mutate(_vector_packet(9))))


def _with_options(options: bytes) -> bytes:
    src, dst = bytes([2] + [1] * 15), bytes([2] + [2] * 15)
    base = encode_packet(src, dst, TcpSegment(1, 2, 3, 4, SYN, 5))
    tcp = bytearray(base[40:])
    tcp[12] = ((20 + len(options)) // 4) << 4
    tcp[16:18] = b"\x00\x00"
    tcp[20:] = options
    from axl.packets.ipv6 import build_packet, internet_checksum, pseudo_header
    checksum = internet_checksum(pseudo_header(src, dst, len(tcp), 6) + tcp)
    tcp[16:18] = checksum.to_bytes(2, "big")
    return build_packet(src, dst, 6, bytes(tcp))


def test_unknown_and_odd_options_are_skipped() -> None:
    seg = decode_packet(_with_options(bytes([0x1E, 4, 9, 9, 2, 3, 1, 1, 2, 4, 0x05, 0xB4, 0, 0, 0, 0]))).segment
    assert seg.mss == 1460
    seg = decode_packet(_with_options(bytes([3, 3, 15, 0]))).segment
    assert seg.window_scale == 14


@pytest.mark.parametrize("options", [bytes([2, 1, 0, 0]), bytes([1, 1, 1, 0x1E]), bytes([1, 8, 10, 0])])
def test_option_lengths_past_the_header_are_rejected(options: bytes) -> None:
    with pytest.raises(TcpDecodeError):
        decode_packet(_with_options(options))


def test_checksum_check_can_be_left_to_a_stronger_integrity_check():
    packet = bytearray(encode_packet(bytes([2]) + bytes(15), bytes([2]) + bytes(14) + b"\x01",
                                     TcpSegment(1000, 7000, 1, 0, SYN, 65535)))
    packet[-1] ^= 0xFF  # the checksum no longer matches
    with pytest.raises(ChecksumError):
        decode_packet(bytes(packet))
    assert decode_packet(bytes(packet), verify_checksum=False).segment.dst_port == 7000
