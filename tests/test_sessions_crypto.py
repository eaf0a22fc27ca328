"""seal / open_parts build and read packets in one buffer; their bytes must be
PyNaCl's crypto_box_afternm box (what Go's box.SealAfterPrecomputation makes).
The nacl.bindings versions, used when PyNaCl lacks the private calls, must
make and read the same bytes."""

import os

import nacl.bindings as sodium
import pytest

from axl.sessions import crypto
from axl.sessions.crypto import box_nonce, open_box

KEY = bytes(range(32))
IMPLEMENTATIONS = pytest.mark.parametrize("seal, open_parts", [
    (crypto.seal_in_place, crypto.open_in_place),
    (crypto.seal_by_bindings, crypto.open_by_bindings),
], ids=["in place", "by bindings"])


@IMPLEMENTATIONS
def test_seal_is_header_then_the_box_of_prefix_and_message(seal, open_parts):
    for length in (0, 1, 1000, 65475):
        message, prefix = os.urandom(length), os.urandom(32)
        packet = seal(message, 9, KEY, header=b"\x04\x01\x02\x09", prefix=prefix)
        assert packet == b"\x04\x01\x02\x09" + sodium.crypto_box_afternm(prefix + message, box_nonce(9), KEY)
        assert seal(memoryview(message), 9, KEY) == sodium.crypto_box_afternm(message, box_nonce(9), KEY)
        assert packet.readonly


@IMPLEMENTATIONS
def test_open_parts_splits_a_view_and_refuses_a_bad_tag_or_nonce(seal, open_parts):
    message = os.urandom(5000)
    packet = b"hdr" + sodium.crypto_box_afternm(b"k" * 32 + message, box_nonce(3), KEY)
    head, rest = open_parts(memoryview(packet)[3:], 3, KEY, 32)
    assert (head, rest) == (b"k" * 32, message) and rest.readonly
    assert open_parts(packet[3:], 4, KEY, 32) is None
    tampered = bytearray(packet[3:])
    tampered[-1] ^= 1
    assert open_parts(bytes(tampered), 3, KEY, 32) is None
    assert open_parts(b"\x00" * 15, 3, KEY, 32) is None


@IMPLEMENTATIONS
def test_open_parts_gives_a_short_head_when_the_plaintext_is_short(seal, open_parts):
    packet = sodium.crypto_box_afternm(b"abc", box_nonce(1), KEY)
    assert open_parts(packet, 1, KEY, 32) == (b"abc", b"")


def test_open_box_reads_what_seal_made():
    packet = crypto.seal(b"abc", 1, KEY)
    assert open_box(packet, 1, KEY) == b"abc"
    assert open_box(packet, 2, KEY) is None
