"""Node identity: the ed25519 key, its peer id, and the Yggdrasil address and
subnet derived from it (yggdrasil-go v0.5.12 src/address/address.go).

The address encodes a prefix of the *inverted* key, so that keys with many
leading zero bits (the "better" keys) get shorter, rarer addresses. The
inverse mapping fills unknown bits with ones; that partial key is what the
bloom transform and lookups by address use.

Signing and verifying go through libsodium (PyNaCl, which the sessions need
anyway) and the PKCS#8 key file is read and written by hand (axl.der), so a
node does not load `cryptography` and its own copy of OpenSSL.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import nacl.bindings as sodium
from nacl.exceptions import CryptoError

from axl.der import OID_ED25519, element, encode
from axl.wire import KEY_SIZE

ADDRESS_PREFIX: Final = 0x02
SUBNET_PREFIX: Final = 0x03
SIGNATURE_SIZE = 64
PEM_BEGIN = b"-----BEGIN PRIVATE KEY-----"
PEM_END = b"-----END PRIVATE KEY-----"
PKCS8_VERSIONS = (b"\x00", b"\x01")  # v1, and v2 (RFC 5958) that may add the public key


class KeyFileError(ValueError):
    """A private key file is missing, unreadable or not an ed25519 key."""


class KeyFileMissing(KeyFileError):
    """No file at the key path: a new node's usual first error, which `axl-node genkey` fixes."""


def peer_id(key: bytes) -> str:
    """The 64-char lowercase hex that names a peer everywhere in the API."""
    return key.hex()


def parse_peer_id(text: str) -> bytes:
    """Peer id text -> 32-byte key; ValueError unless exactly 64 hex chars.

    Every /send parses one, so the check is bytes.fromhex's own (in C): it
    skips whitespace, which 64 characters then cannot hide, as the key
    comes out short."""
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(text) != 2 * KEY_SIZE or len(key) != KEY_SIZE:
        raise ValueError("peer id must be 64 hex characters")
    return key


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
    if len(key) != KEY_SIZE or len(signature) != SIGNATURE_SIZE:
        return False
    try:
        sodium.crypto_sign_open(signature + message, key)
    except CryptoError:
        return False
    return True


def _pem_der(data: bytes, path: str | Path) -> bytes:
    """The DER inside the file's PEM "PRIVATE KEY" (PKCS#8) block; KeyFileError otherwise."""
    begin, end = data.find(PEM_BEGIN), data.find(PEM_END)
    if begin < 0 or end < begin:
        raise KeyFileError(f"key file {path} is not an unencrypted PEM private key (BEGIN PRIVATE KEY)")
    try:
        return base64.b64decode(b"".join(data[begin + len(PEM_BEGIN):end].split()), validate=True)
    except binascii.Error:
        raise KeyFileError(f"key file {path} is not an unencrypted PEM private key (bad base64)") from None


def _pkcs8_seed(der: bytes, path: str | Path) -> bytes:
    """The Ed25519 seed of a PKCS#8 PrivateKeyInfo (RFC 8410); KeyFileError otherwise."""
    try:
        _, pos, _ = element(der, 0)
        _, version, version_end = element(der, pos)
        _, algorithm, algorithm_end = element(der, version_end)
        tag, key, key_end = element(der, algorithm_end)
        inner_tag, seed, seed_end = element(der, key)
    except ValueError:
        raise KeyFileError(f"key file {path} is not an unencrypted PEM private key") from None
    if der[version:version_end] not in PKCS8_VERSIONS or der[algorithm:algorithm_end] != OID_ED25519:
        raise KeyFileError(f"key file {path} does not hold an ed25519 key")
    if tag != 0x04 or inner_tag != 0x04 or seed_end - seed != KEY_SIZE or seed_end != key_end:
        raise KeyFileError(f"key file {path} does not hold an ed25519 key")
    return der[seed:seed_end]


@dataclass(frozen=True)
class NodeIdentity:
    """The node's ed25519 key pair and everything derived from it."""

    seed: bytes
    public_key: bytes
    _secret: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_secret", sodium.crypto_sign_seed_keypair(self.seed)[1])

    @classmethod
    def from_seed(cls, seed: bytes) -> "NodeIdentity":
        """ValueError unless `seed` is 32 bytes."""
        if len(seed) != KEY_SIZE:
            raise ValueError(f"an ed25519 seed is {KEY_SIZE} bytes, not {len(seed)}")
        public, _ = sodium.crypto_sign_seed_keypair(seed)
        return cls(seed=seed, public_key=public)

    @classmethod
    def generate(cls) -> "NodeIdentity":
        return cls.from_seed(os.urandom(KEY_SIZE))

    @classmethod
    def load_pem(cls, path: str | Path) -> "NodeIdentity":
        try:
            data = Path(path).read_bytes()
        except FileNotFoundError as exc:
            raise KeyFileMissing(f"cannot read key file {path}: {exc.strerror}") from None
        except OSError as exc:
            raise KeyFileError(f"cannot read key file {path}: {exc.strerror}") from None
        return cls.from_seed(_pkcs8_seed(_pem_der(data, path), path))

    def pem(self) -> bytes:
        """PKCS#8 PEM, as `openssl genpkey -algorithm ed25519` writes it."""
        der = encode(0x30, encode(0x02, b"\0") + encode(0x30, OID_ED25519) + encode(0x04, encode(0x04, self.seed)))
        return PEM_BEGIN + b"\n" + base64.encodebytes(der) + PEM_END + b"\n"

    def sign(self, message: bytes) -> bytes:
        return sodium.crypto_sign(message, self._secret)[:SIGNATURE_SIZE]

    @property
    def peer_id(self) -> str:
        return peer_id(self.public_key)

    @property
    def address(self) -> bytes:
        return address_for_key(self.public_key)

    @property
    def subnet(self) -> bytes:
        return subnet_for_key(self.public_key)
