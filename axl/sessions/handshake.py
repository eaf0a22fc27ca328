"""Session Init and Ack packets: 193 bytes, sealed to the recipient's
converted key with a fresh ephemeral key, signed by the sender's Ed25519 key.

Layout: type || ephemeral_pub(32) || box(sig(64) || current(32) || next(32)
|| u64be key_seq || u64be seq, nonce 0, DH(recipient, ephemeral)). The
signature covers ephemeral_pub || current || next || key_seq || seq, which
binds the ephemeral key to the sender's identity.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from axl.identity import NodeIdentity, verify
from axl.sessions.crypto import (
    BOX_KEY_SIZE, BOX_OVERHEAD, KeyPair, curve_public_key, open_box, seal, shared_key,
)
from axl.wire import SIG_SIZE

TYPE_DUMMY = 0
TYPE_INIT = 1
TYPE_ACK = 2
TYPE_TRAFFIC = 3

_FIELDS = struct.Struct("!32s32sQQ")
_PAYLOAD_SIZE = SIG_SIZE + _FIELDS.size
HANDSHAKE_SIZE = 1 + BOX_KEY_SIZE + BOX_OVERHEAD + _PAYLOAD_SIZE


@dataclass(frozen=True)
class Handshake:
    """The fields an Init or Ack carries: the sender's session keys."""

    current: bytes
    next: bytes
    key_seq: int
    seq: int


def seal_handshake(kind: int, fields: Handshake, identity: NodeIdentity,
                   recipient: bytes, ephemeral: KeyPair) -> bytes | None:
    """The 193-byte packet, or None if the recipient's key has no X25519 form."""
    recipient_curve = curve_public_key(recipient)
    if recipient_curve is None:
        return None
    key = shared_key(recipient_curve, ephemeral.private)
    if key is None:
        return None
    body = _FIELDS.pack(fields.current, fields.next, fields.key_seq, fields.seq)
    signature = identity.sign(ephemeral.public + body)
    return b"".join((bytes((kind,)), ephemeral.public, seal(signature + body, 0, key)))


def open_handshake(packet: bytes, sender: bytes, own_curve_private: bytes) -> Handshake | None:
    """Decrypt and authenticate an Init or Ack from `sender`; None if it is
    the wrong size, does not decrypt, or the signature does not verify."""
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
    if not verify(sender, signature, ephemeral_public + body):
        return None
    current, next_key, key_seq, seq = _FIELDS.unpack(body)
    return Handshake(current=current, next=next_key, key_seq=key_seq, seq=seq)
