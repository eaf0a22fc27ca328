"""Node identity: the ed25519 key, its peer id, and the Yggdrasil address and
subnet derived from it (yggdrasil-go v0.5.12 src/address/address.go).

The address encodes a prefix of the *inverted* key, so that keys with many
leading zero bits (the "better" keys) get shorter, rarer addresses. The
inverse mapping fills unknown bits with ones; that partial key is what the
bloom transform and lookups by address use.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.exceptions import InvalidSignature

from axl.wire import KEY_SIZE

ADDRESS_PREFIX = 0x02
SUBNET_PREFIX = 0x03


class KeyFileError(ValueError):
    """A private key file is missing, unreadable or not an ed25519 key."""


def peer_id(key: bytes) -> str:
    """The 64-char lowercase hex that names a peer everywhere in the API."""
    return key.hex()


def parse_peer_id(text: str) -> bytes:
    """Peer id text -> 32-byte key; ValueError unless exactly 64 hex chars."""
    if len(text) != 2 * KEY_SIZE or not all(c in "0123456789abcdefABCDEF" for c in text):
        raise ValueError("peer id must be 64 hex characters")
    return bytes.fromhex(text)


def _bits(data: bytes) -> list[int]:
    return [(byte >> (7 - i)) & 1 for byte in data for i in range(8)]


def _pack_bits(bits: list[int]) -> bytes:
    bits = bits + [0] * (-len(bits) % 8)
    return bytes(
        int("".join(map(str, bits[i:i + 8])), 2) for i in range(0, len(bits), 8)
    )


def address_for_key(key: bytes) -> bytes:
    """16-byte IPv6 address in 200::/8 for a public key.

    As in Go: the count of leading ones is kept in one byte (so 256 wraps to
    0), a trailing partial byte is dropped, and a short result is zero-padded.
    """
    inverted = _bits(bytes(b ^ 0xFF for b in key))
    ones = 0
    while ones < len(inverted) and inverted[ones] == 1:
        ones += 1
    rest = inverted[ones + 1:]
    packed = _pack_bits(rest[:len(rest) - len(rest) % 8])
    return (bytes((ADDRESS_PREFIX, ones % 256)) + packed[:14]).ljust(16, b"\0")


def subnet_for_key(key: bytes) -> bytes:
    """8-byte /64 prefix in 300::/8: the address's first 8 bytes, re-prefixed."""
    return bytes((SUBNET_PREFIX,)) + address_for_key(key)[1:8]


def key_for_address_bytes(addr: bytes) -> bytes:
    """GetKey: the partial key an address (16 bytes) or subnet (8 bytes) names.

    Bits the address does not carry come back as ones (they are zero in the
    inverted key before the final inversion).
    """
    ones = addr[1]
    bits = [1] * ones + [0] + _bits(addr[2:])
    bits = (bits + [0] * (8 * KEY_SIZE))[:8 * KEY_SIZE]
    return bytes(b ^ 0xFF for b in _pack_bits(bits))


def bloom_transform(key: bytes) -> bytes:
    """The key as the bloom filters and lookups see it: what the subnet keeps."""
    return key_for_address_bytes(subnet_for_key(key))


def is_overlay_address(addr: bytes) -> bool:
    return len(addr) == 16 and addr[0] in (ADDRESS_PREFIX, SUBNET_PREFIX)


def format_address(addr: bytes) -> str:
    return str(ipaddress.IPv6Address(addr))


def verify(key: bytes, signature: bytes, message: bytes) -> bool:
    """Plain Ed25519 (RFC 8032) verification; False on any failure."""
    try:
        Ed25519PublicKey.from_public_bytes(key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


@dataclass(frozen=True)
class NodeIdentity:
    """The node's ed25519 key pair and everything derived from it."""

    seed: bytes
    public_key: bytes
    _private: Ed25519PrivateKey = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_private", Ed25519PrivateKey.from_private_bytes(self.seed))

    @classmethod
    def from_seed(cls, seed: bytes) -> "NodeIdentity":
        private = Ed25519PrivateKey.from_private_bytes(seed)
        public = private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return cls(seed=seed, public_key=public)

    @classmethod
    def generate(cls) -> "NodeIdentity":
        private = Ed25519PrivateKey.generate()
        seed = private.private_bytes(
            serialization.Encoding.Raw,
            serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )
        return cls.from_seed(seed)

    @classmethod
    def load_pem(cls, path: str | Path) -> "NodeIdentity":
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise KeyFileError(f"cannot read key file {path}: {exc.strerror}") from None
        try:
            private = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise KeyFileError(f"key file {path} is not an unencrypted PEM private key") from exc
        if not isinstance(private, Ed25519PrivateKey):
            raise KeyFileError(f"key file {path} does not hold an ed25519 key")
        seed = private.private_bytes(
            serialization.Encoding.Raw,
            serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )
        return cls.from_seed(seed)

    def private_key(self) -> Ed25519PrivateKey:
        return self._private

    def pem(self) -> bytes:
        """PKCS#8 PEM, as `openssl genpkey -algorithm ed25519` writes it."""
        return self.private_key().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def sign(self, message: bytes) -> bytes:
        return self._private.sign(message)

    @property
    def peer_id(self) -> str:
        return peer_id(self.public_key)

    @property
    def address(self) -> bytes:
        return address_for_key(self.public_key)

    @property
    def subnet(self) -> bytes:
        return subnet_for_key(self.public_key)
