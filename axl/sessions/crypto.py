"""The NaCl primitives of ironwood's encrypted layer (ironwood 743fe2f, encrypted/).

Ed25519 keys are converted to X25519 the way libsodium and Go's e2c do;
packets are XSalsa20-Poly1305 boxes over a precomputed (HSalsa20) shared key,
with the 16-byte tag in front and a nonce of 16 zero bytes and a u64be counter.

Packets are boxed and opened through PyNaCl's private cffi handle on
libsodium (nacl._sodium), which saves the copies nacl.bindings makes; a
PyNaCl without the calls used here gets the nacl.bindings versions, which
make the same bytes (docs/security.md, "Dependencies' private surfaces").
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Callable, Final

import nacl.bindings as sodium
from nacl.exceptions import CryptoError

BOX_KEY_SIZE: Final = 32
BOX_OVERHEAD: Final = 16
_NONCE_PREFIX: Final = bytes(16)
PRIVATE_CALLS = ("ffi.new_allocator", "ffi.from_buffer", "ffi.buffer",
                 "lib.crypto_box_easy_afternm", "lib.crypto_box_open_easy_afternm")
"""What seal_in_place and open_in_place use of nacl._sodium."""


def missing_private_call() -> str | None:
    """The first of PRIVATE_CALLS this PyNaCl lacks (with its module), or
    None: PyNaCl documents nacl.bindings only, so any release may drop these."""
    try:
        # A call, not an import statement: a compiled module's import does
        # not take a None in sys.modules for a missing module.
        binding = importlib.import_module("nacl._sodium")
    except ImportError:
        return "nacl._sodium"
    for call in PRIVATE_CALLS:
        owner, name = call.split(".")
        if not hasattr(getattr(binding, owner, None), name):
            return f"nacl._sodium.{call}"
    return None


@dataclass(frozen=True)
class KeyPair:
    """An X25519 key pair; the private half is used as a raw scalar (X25519 clamps)."""

    public: bytes
    private: bytes

    @classmethod
    def from_private(cls, private: bytes) -> "KeyPair":
        return cls(public=sodium.crypto_scalarmult_base(private), private=private)


KeyPairFactory = Callable[[], KeyPair]


def random_key_pair() -> KeyPair:
    return KeyPair.from_private(os.urandom(BOX_KEY_SIZE))


def curve_public_key(ed_public: bytes) -> bytes | None:
    """The X25519 public key of an Ed25519 key, or None for a key libsodium
    rejects (off the curve or of small order): nobody could own its secret."""
    try:
        return sodium.crypto_sign_ed25519_pk_to_curve25519(ed_public)
    except CryptoError:
        return None


def curve_private_key(seed: bytes, ed_public: bytes) -> bytes:
    """SHA-512(seed)[:32], the scalar Go's e2c derives (unclamped)."""
    return sodium.crypto_sign_ed25519_sk_to_curve25519(seed + ed_public)


def shared_key(public: bytes, private: bytes) -> bytes | None:
    """crypto_box_beforenm, or None when the peer's key yields the all-zero
    point (libsodium refuses it; only a hostile peer sends one)."""
    try:
        return sodium.crypto_box_beforenm(public, private)
    except CryptoError:
        return None


def box_nonce(counter: int) -> bytes:
    return _NONCE_PREFIX + counter.to_bytes(8, "big")


def seal_in_place(message: bytes | memoryview, counter: int, key: bytes, header: bytes = b"",
                  prefix: bytes = b"") -> memoryview:
    """`header` followed by the box of `prefix` + `message`, as a read-only
    view of the buffer it was encrypted in (nothing else holds that buffer;
    the router copies it once, into the link frame).

    The packet is laid out once in one buffer and encrypted in place by
    libsodium's crypto_box_easy_afternm (tag in front, as crypto_box_afternm
    without its zero padding): PyNaCl's crypto_box_afternm copies a 64 KiB
    message four times (prefix, padding, a zeroed output, the slice off it)
    and the caller twice more to add its prefix and header.
    """
    buffer = bytearray(header)
    buffer += bytes(BOX_OVERHEAD)
    buffer += prefix
    buffer += message
    start = len(header)
    out = ffi.from_buffer("unsigned char[]", buffer)
    length = len(buffer) - start - BOX_OVERHEAD
    if lib.crypto_box_easy_afternm(out + start, out + start + BOX_OVERHEAD, length,
                                   box_nonce(counter), key) != 0:
        raise CryptoError("message too long to box")
    return memoryview(buffer).toreadonly()


def open_in_place(boxed: bytes | memoryview, counter: int, key: bytes,
                  head: int) -> tuple[bytes, memoryview] | None:
    """The plaintext split after `head` bytes (the first part shorter if the
    plaintext is), or None if the tag does not verify.

    libsodium writes the plaintext into one buffer (no padded copy of the
    box, no zeroed output to slice); `boxed` may be a view into the packet.
    The second part is a read-only view of that buffer, which nothing else
    holds: a 64 KiB TCP segment travels up to the stack uncopied. The
    buffer is not zeroed first (bytearray's memset was 3% of a bulk
    receiver): libsodium writes every byte of it, or the view is never made.
    """
    if len(boxed) < BOX_OVERHEAD:
        return None
    plain = _uncleared("unsigned char[]", len(boxed) - BOX_OVERHEAD)
    if lib.crypto_box_open_easy_afternm(plain, ffi.from_buffer(boxed), len(boxed),
                                        box_nonce(counter), key) != 0:
        return None
    view = memoryview(ffi.buffer(plain)).toreadonly()
    return bytes(view[:head]), view[head:]


def seal_by_bindings(message: bytes | memoryview, counter: int, key: bytes, header: bytes = b"",
                     prefix: bytes = b"") -> memoryview:
    """seal_in_place's bytes through nacl.bindings: the same box, with
    PyNaCl's copies of the message and of the box."""
    box = sodium.crypto_box_easy_afternm(prefix + bytes(message), box_nonce(counter), key)
    return memoryview(header + box).toreadonly()


def open_by_bindings(boxed: bytes | memoryview, counter: int, key: bytes,
                     head: int) -> tuple[bytes, memoryview] | None:
    """open_in_place's answer through nacl.bindings, which copies the box first."""
    if len(boxed) < BOX_OVERHEAD:
        return None
    try:
        plain = sodium.crypto_box_open_easy_afternm(bytes(boxed), box_nonce(counter), key)
    except CryptoError:
        return None
    view = memoryview(plain)
    return bytes(view[:head]), view[head:]


MISSING_PRIVATE_CALL = missing_private_call()
if MISSING_PRIVATE_CALL is None:
    from nacl._sodium import ffi, lib

    _uncleared = ffi.new_allocator(should_clear_after_alloc=False)
    """C buffers for libsodium to fill: not zeroed first, as each is written whole."""
    seal, open_parts = seal_in_place, open_in_place
else:
    seal, open_parts = seal_by_bindings, open_by_bindings


def open_box(boxed: bytes | memoryview, counter: int, key: bytes) -> bytes | None:
    """The plaintext, or None if the tag does not verify."""
    parts = open_parts(boxed, counter, key, 0)
    return None if parts is None else bytes(parts[1])
