"""Session Init and Ack packets: 193 bytes, sealed to the recipient's
converted key with a fresh ephemeral key, signed by the sender's Ed25519 key.

Layout: type || ephemeral_pub(32) || box(sig(64) || current(32) || next(32)
|| u64be key_seq || u64be seq, nonce 0, DH(recipient, ephemeral)). The
signature covers ephemeral_pub || current || next || key_seq || seq, which
binds the ephemeral key to the sender's identity.

With a GroupPassword (yggdrasil 0.5.14, ironwood d50055b) the signed bytes
are prefixed with SHA-256("ironwood/encrypted" || 0x00 || password): the
packet keeps its size and layout, but only a node that knows the password
can make or check the signature, so a handshake across two passwords fails
to verify and is dropped like any forgery. An empty password prefixes
nothing: the bytes are those of 0.5.12.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Final

from axl.identity import NodeIdentity, verify
from axl.sessions.crypto import (
    BOX_KEY_SIZE, BOX_OVERHEAD, KeyPair, curve_public_key, open_box, seal, shared_key,
)
from axl.wire import SIG_SIZE

TYPE_DUMMY: Final = 0
TYPE_INIT: Final = 1
TYPE_ACK: Final = 2
TYPE_TRAFFIC: Final = 3

_FIELDS = struct.Struct("!32s32sQQ")
_PAYLOAD_SIZE = SIG_SIZE + _FIELDS.size
HANDSHAKE_SIZE = 1 + BOX_KEY_SIZE + BOX_OVERHEAD + _PAYLOAD_SIZE
GROUP_DOMAIN = b"ironwood/encrypted\x00"


def group_secret(password: str) -> bytes:
    """What a handshake signature is prefixed with under `password`: 32
    bytes, or b"" for no password (the open network). The password's
    bytes are its UTF-8, as Go's string; a lone surrogate (which a JSON
    string can hold) counts as U+FFFD, the rune Go's JSON decoder makes of it."""
    if not password:
        return b""
    text = password.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return hashlib.sha256(GROUP_DOMAIN + text.encode()).digest()


@dataclass(frozen=True)
class Handshake:
    """The fields an Init or Ack carries: the sender's session keys."""

    current: bytes
    next: bytes
    key_seq: int
    seq: int


def seal_handshake(kind: int, fields: Handshake, identity: NodeIdentity,
                   recipient: bytes, ephemeral: KeyPair, group: bytes = b"") -> bytes | None:
    """The 193-byte packet, or None if the recipient's key has no X25519
    form; `group` is the `group_secret` the signature is made under."""
    recipient_curve = curve_public_key(recipient)
    if recipient_curve is None:
        return None
    key = shared_key(recipient_curve, ephemeral.private)
    if key is None:
        return None
    body = _FIELDS.pack(fields.current, fields.next, fields.key_seq, fields.seq)
    signature = identity.sign(group + ephemeral.public + body)
    return b"".join((bytes((kind,)), ephemeral.public, seal(signature + body, 0, key)))


def open_handshake(packet: bytes, sender: bytes, own_curve_private: bytes,
                   group: bytes = b"") -> Handshake | None:
    """Decrypt and authenticate an Init or Ack from `sender`; None if it is
    the wrong size, does not decrypt, or the signature does not verify
    under `group` (the sender has another GroupPassword, or forged it)."""
    if len(packet) != HANDSHAKE_SIZE:
        return None
    ephemeral_public = packet[1:1 + BOX_KEY_SIZE]
    key = shared_key(ephemeral_public, own_curve_private)
    if key is None:
        return None
    payload = open_box(packet[1 + BOX_KEY_SIZE:], 0, key)
    if payload is None or len(payload) != _PAYLOAD_SIZE:
        return None
    signature, body = payload[:SIG_SIZE], payload[SIG_SIZE:]
    if not verify(sender, signature, group + ephemeral_public + body):
        return None
    current, next_key, key_seq, seq = _FIELDS.unpack(body)
    return Handshake(current=current, next=next_key, key_seq=key_seq, seq=seq)
