"""TCP segments carried in IPv6 packets: the wire codec of the transport.

The overlay delivers whole IPv6 packets, so a segment is always encoded into
(and decoded from) a complete packet: 40-byte IPv6 header, TCP header with
options, payload, and the checksum over the RFC 8200 pseudo-header. Extension
headers are not used by either the Go node (gVisor) or us, so a packet whose
next header is not TCP is rejected rather than walked.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from axl.packets.ipv6 import (
    HEADER_SIZE as IPV6_HEADER_SIZE,
    NEXT_HEADER_TCP,
    IPv6Header,
    internet_checksum,
    parse_header,
    pseudo_header,
)
from axl.wire import DecodeError

FIN: Final = 0x01
SYN: Final = 0x02
RST: Final = 0x04
PSH: Final = 0x08
ACK: Final = 0x10
URG = 0x20

TCP_HEADER_SIZE: Final = 20
MAX_OPTIONS_SIZE = 40
MAX_WINDOW_SCALE = 14

OPT_END = 0
OPT_NOP: Final = 1
OPT_MSS = 2
OPT_WINDOW_SCALE = 3
OPT_SACK_PERMITTED = 4
OPT_TIMESTAMPS = 8

_TCP_HEADER: Final = struct.Struct("!HHIIBBHHH")
_FLAG_NAMES = ((FIN, "FIN"), (SYN, "SYN"), (RST, "RST"), (PSH, "PSH"), (ACK, "ACK"), (URG, "URG"))


class TcpDecodeError(DecodeError):
    """An IPv6 packet that does not carry a well-formed TCP segment."""


class ChecksumError(TcpDecodeError):
    """The TCP checksum does not match the pseudo-header and segment."""


@dataclass(init=False)
class TcpSegment:
    """One TCP segment: header fields, the options we understand, payload.

    Sequence and acknowledgement numbers are the 32-bit wire values; the
    connection unwraps them. `window` is the raw 16-bit field (unscaled).
    """

    src_port: int
    dst_port: int
    seq: int
    ack: int
    flags: int
    window: int
    payload: bytes | memoryview
    mss: int | None
    window_scale: int | None
    sack_permitted: bool
    timestamps: tuple[int, int] | None
    urgent: int

    def __init__(self, src_port: int, dst_port: int, seq: int, ack: int, flags: int, window: int,
                 payload: bytes | memoryview = b"", mss: int | None = None,
                 window_scale: int | None = None, sack_permitted: bool = False,
                 timestamps: tuple[int, int] | None = None, urgent: int = 0) -> None:
        self.src_port = src_port
        self.dst_port = dst_port
        self.seq = seq
        self.ack = ack
        self.flags = flags
        self.window = window
        self.payload = payload
        self.mss = mss
        self.window_scale = window_scale
        self.sack_permitted = sack_permitted
        self.timestamps = timestamps
        self.urgent = urgent

    @property
    def seq_length(self) -> int:
        """Sequence space the segment occupies: payload plus SYN and FIN."""
        return len(self.payload) + (1 if self.flags & SYN else 0) + (1 if self.flags & FIN else 0)

    def flag_names(self) -> str:
        return "|".join(name for bit, name in _FLAG_NAMES if self.flags & bit)

    def encode_options(self) -> bytes:
        """Options in the order Linux uses; every group is 4-byte aligned."""
        out = bytearray()
        if self.mss is not None:
            out += struct.pack("!BBH", OPT_MSS, 4, self.mss)
        if self.sack_permitted:
            out += bytes((OPT_NOP, OPT_NOP, OPT_SACK_PERMITTED, 2))
        if self.timestamps is not None:
            out += struct.pack("!BBBBII", OPT_NOP, OPT_NOP, OPT_TIMESTAMPS, 10, *self.timestamps)
        if self.window_scale is not None:
            out += bytes((OPT_NOP, OPT_WINDOW_SCALE, 3, self.window_scale))
        return bytes(out)


@dataclass(init=False)
class TcpPacket:
    """A decoded IPv6 packet carrying TCP: the addresses and the segment."""

    src: bytes
    dst: bytes
    segment: TcpSegment
    hop_limit: int

    def __init__(self, src: bytes, dst: bytes, segment: TcpSegment, hop_limit: int = 64) -> None:
        self.src = src
        self.dst = dst
        self.segment = segment
        self.hop_limit = hop_limit


def encode_packet(src: bytes, dst: bytes, segment: TcpSegment, hop_limit: int = 64,
                  checksum: bool = True) -> bytes:
    """The full IPv6 packet for `segment`, checksum filled in (left 0 when
    `checksum` is false: for a peer known not to check it)."""
    options = segment.encode_options()
    header_size = TCP_HEADER_SIZE + len(options)
    payload = segment.payload
    tcp_length = header_size + len(payload)
    header = bytearray(_TCP_HEADER.pack(
        segment.src_port, segment.dst_port, segment.seq & 0xFFFFFFFF, segment.ack & 0xFFFFFFFF,
        (header_size // 4) << 4, segment.flags, segment.window, 0, segment.urgent,
    ) + options)
    # The header is a multiple of 4 bytes, so the parts sum as one buffer
    # would; the payload is copied once, into the packet.
    if checksum:
        struct.pack_into("!H", header, 16, internet_checksum(
            pseudo_header(src, dst, tcp_length, NEXT_HEADER_TCP), header, payload))
    ip_header = IPv6Header(src=src, dst=dst, next_header=NEXT_HEADER_TCP,
                           payload_length=tcp_length, hop_limit=hop_limit)
    return b"".join((ip_header.encode(), header, payload))


def decode_packet(packet: bytes | memoryview, verify_checksum: bool = True) -> TcpPacket:
    """Parse and verify one IPv6/TCP packet; TcpDecodeError on anything malformed.

    `verify_checksum=False` is for packets whose integrity something stronger
    already proved (the session's Poly1305 tag, end to end). The payload is
    a view of `packet`, not a copy: the packet must not change afterwards.
    """
    try:
        header = parse_header(packet)
    except DecodeError as error:
        raise TcpDecodeError(str(error)) from error
    if header.next_header != NEXT_HEADER_TCP:
        raise TcpDecodeError(f"next header {header.next_header} is not TCP")
    if IPV6_HEADER_SIZE + header.payload_length != len(packet):
        raise TcpDecodeError("IPv6 payload length does not match the packet")
    tcp = memoryview(packet).toreadonly()[IPV6_HEADER_SIZE:]
    if len(tcp) < TCP_HEADER_SIZE:
        raise TcpDecodeError("TCP header truncated")
    src_port, dst_port, seq, ack, offset_byte, flags, window, _, urgent = _TCP_HEADER.unpack_from(tcp)
    header_size = (offset_byte >> 4) * 4
    if header_size < TCP_HEADER_SIZE or header_size > len(tcp):
        raise TcpDecodeError(f"bad TCP data offset {header_size}")
    if verify_checksum:
        pseudo = pseudo_header(header.src, header.dst, len(tcp), NEXT_HEADER_TCP)
        if internet_checksum(pseudo, tcp) != 0:
            raise ChecksumError("TCP checksum mismatch")
    segment = TcpSegment(src_port=src_port, dst_port=dst_port, seq=seq, ack=ack,
                         flags=flags, window=window, payload=tcp[header_size:],
                         urgent=urgent)
    _parse_options(tcp[TCP_HEADER_SIZE:header_size], segment)
    return TcpPacket(src=header.src, dst=header.dst, segment=segment, hop_limit=header.hop_limit)


def _parse_options(options: memoryview, segment: TcpSegment) -> None:
    """Fill the options we use; unknown kinds are skipped by their length.

    A known option with the wrong length is ignored (as Linux does); a length
    that runs past the header or is below 2 makes the segment malformed.
    """
    pos = 0
    end = len(options)
    while pos < end:
        kind = options[pos]
        if kind == OPT_END:
            return
        if kind == OPT_NOP:
            pos += 1
            continue
        if pos + 1 >= end:
            raise TcpDecodeError("TCP option length missing")
        length = options[pos + 1]
        if length < 2 or pos + length > end:
            raise TcpDecodeError(f"bad TCP option length {length}")
        body = options[pos + 2:pos + length]
        _apply_option(kind, body, segment)
        pos += length


def _apply_option(kind: int, body: memoryview, segment: TcpSegment) -> None:
    if kind == OPT_MSS and len(body) == 2:
        segment.mss = int.from_bytes(body, "big")
    elif kind == OPT_WINDOW_SCALE and len(body) == 1:
        segment.window_scale = min(body[0], MAX_WINDOW_SCALE)
    elif kind == OPT_SACK_PERMITTED and len(body) == 0:
        segment.sack_permitted = True
    elif kind == OPT_TIMESTAMPS and len(body) == 8:
        tsval, tsecr = struct.unpack("!II", body)
        segment.timestamps = (tsval, tsecr)
