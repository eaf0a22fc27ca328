"""Minimal IPv6 header helpers shared by the packet device and the TCP stack.

Only what the overlay needs: read the fixed 40-byte header, build one, and
compute the RFC 2460 / RFC 4443 pseudo-header checksum used by ICMPv6 and
TCP over IPv6. Extension headers are not interpreted; callers treat the
header's next-header field as opaque unless they know it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from axl.wire import BytesLike, DecodeError

HEADER_SIZE: Final = 40
ADDRESS_SIZE = 16
NEXT_HEADER_TCP: Final = 6
NEXT_HEADER_ICMPV6 = 58
DEFAULT_HOP_LIMIT = 64

_HEADER: Final = struct.Struct("!IHBB16s16s")


@dataclass(init=False)
class IPv6Header:
    """The fixed IPv6 header fields (RFC 8200 section 3)."""

    src: bytes
    dst: bytes
    next_header: int
    payload_length: int
    hop_limit: int
    traffic_class: int
    flow_label: int

    def __init__(self, src: bytes, dst: bytes, next_header: int, payload_length: int,
                 hop_limit: int = DEFAULT_HOP_LIMIT, traffic_class: int = 0, flow_label: int = 0) -> None:
        self.src = src
        self.dst = dst
        self.next_header = next_header
        self.payload_length = payload_length
        self.hop_limit = hop_limit
        self.traffic_class = traffic_class
        self.flow_label = flow_label

    def encode(self) -> bytes:
        first_word = (6 << 28) | (self.traffic_class << 20) | self.flow_label
        return _HEADER.pack(
            first_word, self.payload_length, self.next_header, self.hop_limit,
            self.src, self.dst,
        )


def parse_header(packet: BytesLike) -> IPv6Header:
    """Decode the fixed header; DecodeError if it is short or not version 6.

    The payload length is returned as written; callers decide whether it must
    match the bytes present.
    """
    if len(packet) < HEADER_SIZE:
        raise DecodeError("IPv6 packet shorter than its header")
    first_word, length, next_header, hop_limit, src, dst = _HEADER.unpack_from(packet)
    if first_word >> 28 != 6:
        raise DecodeError("not an IPv6 packet")
    return IPv6Header(
        src=src, dst=dst, next_header=next_header, payload_length=length,
        hop_limit=hop_limit, traffic_class=(first_word >> 20) & 0xFF,
        flow_label=first_word & 0xFFFFF,
    )


def build_packet(src: bytes, dst: bytes, next_header: int, payload: bytes,
                 hop_limit: int = DEFAULT_HOP_LIMIT) -> bytes:
    """Header plus payload, with the payload length filled in."""
    header = IPv6Header(src=src, dst=dst, next_header=next_header,
                        payload_length=len(payload), hop_limit=hop_limit)
    return header.encode() + payload


def pseudo_header(src: bytes, dst: bytes, length: int, next_header: int) -> bytes:
    """The 40-byte pseudo-header upper-layer checksums cover (RFC 8200 8.1)."""
    if len(src) != ADDRESS_SIZE or len(dst) != ADDRESS_SIZE:
        raise ValueError("IPv6 addresses are 16 bytes")
    return src + dst + struct.pack("!I3xB", length, next_header)


def internet_checksum(*parts: BytesLike) -> int:
    """RFC 1071 ones'-complement checksum of the parts one after another (an
    odd-length last part is zero-padded; every other part must be even).

    Parts let a caller sum a pseudo-header and a 64 KiB segment without first
    copying them into one buffer. A buffer that already contains a correct
    checksum sums to 0.
    """
    total = 0
    for part in parts:
        total += _congruent_word_sum(part)
    # Any value of 0xFFFF's residue class is a valid end-around-carry sum
    # except that a nonzero sum is never 0: it is then 0xFFFF.
    folded = total % 0xFFFF
    if folded == 0 and total:
        folded = 0xFFFF
    return ~folded & 0xFFFF


def _congruent_word_sum(data: BytesLike) -> int:
    """A number congruent, modulo 0xFFFF, to the sum of the 16-bit words of
    `data`, and zero only if every word is zero.

    2**16 is 1 modulo 0xFFFF, so any run of whole words read as one integer
    is congruent to its word sum, and so are the sum of such runs and the sum
    of an integer's upper and lower halves (split at a multiple of 16 bits).
    The data is read in 4 KiB runs whose sum is then halved until 64 bits
    remain: halving the whole buffer read as one integer costs passes over
    ten times as many digits, and one `%` of it divides digit by digit.
    """
    if len(data) % 2:
        data = bytes(data) + b"\x00"
    if len(data) <= _RUN:
        value = int.from_bytes(data, "big")
    else:
        value = 0
        with memoryview(data) as view:
            for start in range(0, len(data), _RUN):
                value += int.from_bytes(view[start:start + _RUN], "big")
    bits = value.bit_length()
    while bits > 64:
        half = (bits // 32 + 1) * 16
        value = (value >> half) + (value & ((1 << half) - 1))
        bits = half + 1
    return value


_RUN: Final = 4096


ICMPV6_PACKET_TOO_BIG = 2
PTB_HOP_LIMIT = 255
PTB_MAX_QUOTE = 512


def packet_too_big(offending: BytesLike, mtu: int) -> bytes:
    """ICMPv6 Packet Too Big (RFC 4443 3.2) answering `offending`, laid out as
    Yggdrasil's ipv6rwc builds it: addresses swapped, hop limit 255, and at
    most 512 bytes of the offending packet quoted."""
    src, dst = bytes(offending[24:40]), bytes(offending[8:24])
    body = bytearray(struct.pack("!BBHI", ICMPV6_PACKET_TOO_BIG, 0, 0, mtu))
    body += offending[:PTB_MAX_QUOTE]
    checksum = internet_checksum(pseudo_header(src, dst, len(body), NEXT_HEADER_ICMPV6), body)
    struct.pack_into("!H", body, 2, checksum)
    return build_packet(src, dst, NEXT_HEADER_ICMPV6, bytes(body), hop_limit=PTB_HOP_LIMIT)
