"""The Yggdrasil v0.5 link handshake ("meta"), sans-IO.

Both ends send this 123-byte message right after connecting. The signature
only covers a keyed hash of the sender's own key, so it proves knowledge of
the link password, not possession of the key: that comes later from the
signed tree messages.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Final

from axl.identity import NodeIdentity, verify
from axl.wire import KEY_SIZE, SIG_SIZE, DecodeError

MAGIC: Final = b"meta"
HEADER_SIZE: Final = 6
PROTOCOL_MAJOR = 0
PROTOCOL_MINOR = 5
MAX_META_LENGTH = 1024
MAX_PASSWORD_BYTES = 64

TLV_MAJOR = 0
TLV_MINOR = 1
TLV_PUBLIC_KEY = 2
TLV_PRIORITY = 3

_TLV_HEADER = struct.Struct(">HH")
_U16 = struct.Struct(">H")


class MetaError(DecodeError):
    """The peer's handshake is unusable; the message is the reason logged."""


@dataclass(frozen=True)
class LinkMeta:
    key: bytes
    priority: int
    major: int
    minor: int


def _password_hash(key: bytes, password: bytes) -> bytes:
    if len(password) > MAX_PASSWORD_BYTES:
        raise MetaError(f"password longer than {MAX_PASSWORD_BYTES} bytes")
    return hashlib.blake2b(key, digest_size=64, key=password).digest()


def _tlv(kind: int, value: bytes) -> bytes:
    return _TLV_HEADER.pack(kind, len(value)) + value


def encode_meta(identity: NodeIdentity, priority: int, password: bytes = b"") -> bytes:
    """Build our handshake exactly as v0.5.12 does: TLVs 0, 1, 2, 3 in order."""
    if not 0 <= priority <= 255:
        raise ValueError(f"priority out of range: {priority}")
    body = b"".join((
        _tlv(TLV_MAJOR, _U16.pack(PROTOCOL_MAJOR)),
        _tlv(TLV_MINOR, _U16.pack(PROTOCOL_MINOR)),
        _tlv(TLV_PUBLIC_KEY, identity.public_key),
        _tlv(TLV_PRIORITY, bytes((priority,))),
        identity.sign(_password_hash(identity.public_key, password)),
    ))
    return MAGIC + _U16.pack(len(body)) + body


def meta_bytes_needed(buf: bytes | bytearray | memoryview) -> int:
    """Total size of the meta message at the start of `buf`, or the header
    size while the header is incomplete.

    The stream code reads until it holds this many bytes. A bad header or a
    declared length outside [64, MAX_META_LENGTH] is refused before any of
    the body is awaited, so a peer cannot make us buffer 64 KiB for nothing.
    """
    if len(buf) < HEADER_SIZE:
        return HEADER_SIZE
    if bytes(buf[:4]) != MAGIC:
        raise MetaError("invalid handshake: remote side is not Yggdrasil")
    (length,) = _U16.unpack_from(buf, 4)
    if length < SIG_SIZE:
        raise MetaError(f"invalid handshake length {length}")
    if length > MAX_META_LENGTH:
        raise MetaError(f"handshake length {length} over limit {MAX_META_LENGTH}")
    return HEADER_SIZE + length


@dataclass
class _Fields:
    major: int = 0
    minor: int = 0
    key: bytes = b""
    priority: int = 0


# The value size of each TLV this decoder reads; other kinds are skipped.
_FIELD_SIZES = {TLV_MAJOR: 2, TLV_MINOR: 2, TLV_PUBLIC_KEY: KEY_SIZE, TLV_PRIORITY: 1}


def _parse_tlvs(tlvs: memoryview) -> _Fields:
    """yggdrasil 0.5.14's strict decoder: an entry running past the end, a
    known field of any other size, or 1-3 bytes left over refuse the
    handshake ("invalid handshake length", as Go says); 0.5.12 read on
    regardless. Unknown kinds are skipped whatever their length."""
    fields = _Fields()
    while len(tlvs) >= _TLV_HEADER.size:
        kind, length = _TLV_HEADER.unpack_from(tlvs)
        tlvs = tlvs[_TLV_HEADER.size:]
        if len(tlvs) < length:
            raise MetaError(f"invalid handshake length: field {kind} of {length} bytes "
                            f"runs past the end")
        expected = _FIELD_SIZES.get(kind)
        if expected is not None and length != expected:
            raise MetaError(f"invalid handshake length: field {kind} is {length} bytes, "
                            f"not {expected}")
        value = bytes(tlvs[:length])
        if kind in (TLV_MAJOR, TLV_MINOR):
            (number,) = _U16.unpack(value)
            if kind == TLV_MAJOR:
                fields.major = number
            else:
                fields.minor = number
        elif kind == TLV_PUBLIC_KEY:
            fields.key = value
        elif kind == TLV_PRIORITY:
            fields.priority = value[0]
        tlvs = tlvs[length:]
    if len(tlvs):
        raise MetaError(f"invalid handshake length: {len(tlvs)} bytes left after the fields")
    return fields


def decode_meta(buf: bytes | bytearray | memoryview, password: bytes = b"") -> LinkMeta:
    """Decode and check a complete meta message with Go's rules and order:
    framing, TLVs, signature, then version."""
    view = memoryview(bytes(buf))
    total = meta_bytes_needed(view)
    if len(view) != total:
        raise MetaError(f"handshake is {len(view)} bytes, header says {total}")
    body = view[HEADER_SIZE:]
    signature = bytes(body[-SIG_SIZE:])
    fields = _parse_tlvs(body[:-SIG_SIZE])
    if len(fields.key) != KEY_SIZE:
        raise MetaError("handshake carries no public key")
    if not verify(fields.key, signature, _password_hash(fields.key, password)):
        raise MetaError("bad signature: password does not match remote side")
    if (fields.major, fields.minor) != (PROTOCOL_MAJOR, PROTOCOL_MINOR):
        raise MetaError(
            f"incompatible version (local {PROTOCOL_MAJOR}.{PROTOCOL_MINOR}, "
            f"remote {fields.major}.{fields.minor})"
        )
    return LinkMeta(key=fields.key, priority=fields.priority,
                    major=fields.major, minor=fields.minor)
