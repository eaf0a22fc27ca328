"""Bodies of the ironwood link frames of types 2-9, and the bytes they sign.

Every decoder consumes its body exactly (traffic's payload is "the rest"),
so a frame Go would reject is rejected here too. Paths are coordinates: a
list of uvarint ports ended by a 0; ports are never 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from axl.identity import verify
from axl.routing.bloom import BloomFilter
from axl.wire import KEY_SIZE, MAX_FRAME, DecodeError, FrameType, Reader, decode_uvarint, encode_uvarint

MAX_WATERMARK = (1 << 64) - 1

# Short names for the frame types this layer handles (one definition: wire.FrameType).
TYPE_DUMMY: Final = FrameType.DUMMY
TYPE_KEEPALIVE: Final = FrameType.KEEPALIVE
TYPE_SIGREQ = FrameType.SIGREQ
TYPE_SIGRES = FrameType.SIGRES
TYPE_ANNOUNCE: Final = FrameType.ANNOUNCE
TYPE_BLOOM: Final = FrameType.BLOOM
TYPE_PATH_LOOKUP = FrameType.PATH_LOOKUP
TYPE_PATH_NOTIFY = FrameType.PATH_NOTIFY
TYPE_PATH_BROKEN = FrameType.PATH_BROKEN
TYPE_TRAFFIC: Final = FrameType.TRAFFIC

QUEUED_TYPES = frozenset({TYPE_PATH_LOOKUP, TYPE_PATH_NOTIFY, TYPE_PATH_BROKEN, TYPE_TRAFFIC})


def encode_path(path: list[int]) -> bytes:
    if not path:
        return b"\x00"
    if 0 < min(path) and max(path) < 0x80:  # every port one byte: the usual tree
        return bytes(path) + b"\x00"
    if any(port <= 0 for port in path):
        raise ValueError("a path port must be at least 1")
    return b"".join([encode_uvarint(port) for port in path]) + b"\x00"


def read_path(reader: Reader) -> list[int]:
    """Ports up to the 0 terminator; each port costs at least one byte, so this is bounded."""
    path: list[int] = []
    while True:
        port = reader.uvarint()
        if port == 0:
            return path
        path.append(port)


def sig_bytes(node: bytes, parent: bytes, seq: int, nonce: int, port: int) -> bytes:
    """What both the parent (psig) and the node (sig) sign for a tree info."""
    return node + parent + encode_uvarint(seq) + encode_uvarint(nonce) + encode_uvarint(port)


def notify_info_bytes(seq: int, path: list[int]) -> bytes:
    """What a PathNotify's source signs: its seq and its coordinates."""
    return encode_uvarint(seq) + encode_path(path)


@dataclass(frozen=True)
class SigReq:
    seq: int
    nonce: int

    def encode(self) -> bytes:
        return encode_uvarint(self.seq) + encode_uvarint(self.nonce)

    @classmethod
    def decode(cls, body: bytes) -> "SigReq":
        reader = Reader(body)
        req = cls(reader.uvarint(), reader.uvarint())
        reader.finish()
        return req


@dataclass(frozen=True)
class SigRes:
    seq: int
    nonce: int
    port: int
    psig: bytes

    def encode(self) -> bytes:
        return SigReq(self.seq, self.nonce).encode() + encode_uvarint(self.port) + self.psig

    @classmethod
    def decode(cls, body: bytes) -> "SigRes":
        reader = Reader(body)
        res = cls(reader.uvarint(), reader.uvarint(), reader.uvarint(), reader.sig())
        reader.finish()
        return res

    @property
    def request(self) -> SigReq:
        return SigReq(self.seq, self.nonce)


@dataclass(frozen=True)
class Announce:
    """A node's tree info: who its parent is, countersigned by that parent."""

    key: bytes
    parent: bytes
    seq: int
    nonce: int
    port: int
    psig: bytes
    sig: bytes

    def encode(self) -> bytes:
        res = SigRes(self.seq, self.nonce, self.port, self.psig)
        return self.key + self.parent + res.encode() + self.sig

    @classmethod
    def decode(cls, body: bytes) -> "Announce":
        reader = Reader(body)
        key, parent = reader.key(), reader.key()
        seq, nonce, port = reader.uvarint(), reader.uvarint(), reader.uvarint()
        ann = cls(key, parent, seq, nonce, port, reader.sig(), reader.sig())
        reader.finish()
        return ann

    def signed_bytes(self) -> bytes:
        return sig_bytes(self.key, self.parent, self.seq, self.nonce, self.port)

    def check(self) -> bool:
        """Both signatures valid, and port 0 only for a root (key == parent)."""
        if self.port == 0 and self.key != self.parent:
            return False
        signed = self.signed_bytes()
        return verify(self.key, self.sig, signed) and verify(self.parent, self.psig, signed)


@dataclass(frozen=True)
class PathLookup:
    source: bytes
    dest: bytes
    from_path: list[int] = field(default_factory=list)

    def encode(self) -> bytes:
        return self.source + self.dest + encode_path(self.from_path)

    @classmethod
    def decode(cls, body: bytes) -> "PathLookup":
        reader = Reader(body)
        lookup = cls(reader.key(), reader.key(), read_path(reader))
        reader.finish()
        return lookup


@dataclass(frozen=True)
class PathNotify:
    """A destination's answer to a lookup: its coordinates, signed with a time seq."""

    path: list[int]
    watermark: int
    source: bytes
    dest: bytes
    info_seq: int
    info_path: list[int]
    info_sig: bytes

    def encode(self) -> bytes:
        return (
            encode_path(self.path) + encode_uvarint(self.watermark) + self.source + self.dest
            + notify_info_bytes(self.info_seq, self.info_path) + self.info_sig
        )

    @classmethod
    def decode(cls, body: bytes) -> "PathNotify":
        reader = Reader(body)
        path, watermark = read_path(reader), reader.uvarint()
        source, dest = reader.key(), reader.key()
        info_seq, info_path = reader.uvarint(), read_path(reader)
        notify = cls(path, watermark, source, dest, info_seq, info_path, reader.sig())
        reader.finish()
        return notify

    def check(self) -> bool:
        return verify(self.source, self.info_sig, notify_info_bytes(self.info_seq, self.info_path))


@dataclass(frozen=True)
class PathBroken:
    path: list[int]
    watermark: int
    source: bytes
    dest: bytes

    def encode(self) -> bytes:
        return encode_path(self.path) + encode_uvarint(self.watermark) + self.source + self.dest

    @classmethod
    def decode(cls, body: bytes) -> "PathBroken":
        reader = Reader(body)
        broken = cls(read_path(reader), reader.uvarint(), reader.key(), reader.key())
        reader.finish()
        return broken


@dataclass(init=False)
class Traffic:
    path: list[int]
    from_path: list[int]
    source: bytes
    dest: bytes
    watermark: int
    payload: bytes | memoryview

    def __init__(self, path: list[int], from_path: list[int], source: bytes, dest: bytes, watermark: int,
                 payload: bytes | memoryview) -> None:
        self.path = path
        self.from_path = from_path
        self.source = source
        self.dest = dest
        self.watermark = watermark
        self.payload = payload

    def head(self, watermark: int | None = None) -> bytes:
        """The body up to the payload. `watermark`, when given, is written
        instead of the stored one: a forwarder lowers it on every packet, and
        a new frame (as `dataclasses.replace` makes) costs more than
        the encoding itself."""
        return (encode_path(self.path) + encode_path(self.from_path) + self.source + self.dest
                + encode_uvarint(self.watermark if watermark is None else watermark))

    def encode(self, watermark: int | None = None) -> bytes:
        return self.head(watermark) + self.payload

    @classmethod
    def decode(cls, body: bytes) -> "Traffic":
        """The payload is a read-only view of `body` (a received frame's
        bytes), not a copy: it goes on to the session or the next link."""
        path, pos = _path_at(body, 0)
        from_path, pos = _path_at(body, pos)
        keys_end = pos + 2 * KEY_SIZE
        if keys_end > len(body):
            raise DecodeError(f"need {2 * KEY_SIZE} bytes, have {len(body) - pos}")
        watermark, pos = decode_uvarint(body, keys_end)
        payload = memoryview(body).toreadonly()[pos:]
        return cls(path, from_path, bytes(body[keys_end - 2 * KEY_SIZE:keys_end - KEY_SIZE]),
                   bytes(body[keys_end - KEY_SIZE:keys_end]), watermark, payload)


def _path_at(body: bytes | memoryview, pos: int) -> tuple[list[int], int]:
    """`read_path` for the traffic path, on every packet: one-byte ports are
    read without a Reader and a uvarint call each."""
    path: list[int] = []
    end = len(body)
    while True:
        if pos >= end:
            raise DecodeError("truncated uvarint")
        port = body[pos]
        if port < 0x80:
            pos += 1
        else:
            port, pos = decode_uvarint(body, pos)
        if port == 0:
            return path, pos
        path.append(port)


def traffic_frame(head: bytes, payload: bytes | memoryview) -> bytes:
    """The link frame of a traffic body (`uvarint(N) || type || head ||
    payload`, as wire.encode_frame writes it) in one join: encoding the body
    and then framing it copied a 64 KiB payload twice."""
    return b"".join((encode_uvarint(1 + len(head) + len(payload)), _TRAFFIC_TYPE, head, payload))


_TRAFFIC_TYPE = bytes((TYPE_TRAFFIC,))


RoutingFrame = SigReq | SigRes | Announce | BloomFilter | PathLookup | PathNotify | PathBroken | Traffic

FRAME_DECODERS: dict[int, Callable[[bytes], RoutingFrame]] = {
    TYPE_SIGREQ: SigReq.decode,
    TYPE_SIGRES: SigRes.decode,
    TYPE_ANNOUNCE: Announce.decode,
    TYPE_BLOOM: BloomFilter.decode,
    TYPE_PATH_LOOKUP: PathLookup.decode,
    TYPE_PATH_NOTIFY: PathNotify.decode,
    TYPE_PATH_BROKEN: PathBroken.decode,
    TYPE_TRAFFIC: Traffic.decode,
}


def decode_body(ftype: int, body: bytes) -> RoutingFrame:
    """Decode the body of a routing frame (types 2-9); DecodeError for any other type."""
    decode = FRAME_DECODERS.get(ftype)
    if decode is None:
        raise DecodeError(f"not a routing frame type: {ftype}")
    return decode(body)


def split_frame(frame: bytes) -> tuple[int, bytes]:
    """Inverse of wire.encode_frame for one whole frame: (type, body)."""
    reader = Reader(frame)
    length = reader.uvarint()
    if length == 0 or length > MAX_FRAME:
        raise DecodeError(f"bad frame length {length}")
    content = reader.take(length)
    reader.finish()
    return content[0], content[1:]
