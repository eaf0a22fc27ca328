"""seal / open_parts build and read packets in one buffer; their bytes must be
PyNaCl's crypto_box_afternm box (what Go's box.SealAfterPrecomputation makes)."""

import os

import nacl.bindings as sodium

from axl.sessions.crypto import box_nonce, open_box, open_parts, seal

KEY = bytes(range(32))


def test_seal_is_header_then_the_box_of_prefix_and_message():
    for length in (0, 1, 1000, 65475):
        message, prefix = os.urandom(length), os.urandom(32)
        packet = seal(message, 9, KEY, header=b"\x04\x01\x02\x09", prefix=prefix)
        assert packet == b"\x04\x01\x02\x09" + sodium.crypto_box_afternm(prefix + message, box_nonce(9), KEY)
        assert seal(message, 9, KEY) == sodium.crypto_box_afternm(message, box_nonce(9), KEY)


def test_open_parts_splits_a_view_and_refuses_a_bad_tag_or_nonce():
    message = os.urandom(5000)
    packet = b"hdr" + sodium.crypto_box_afternm(b"k" * 32 + message, box_nonce(3), KEY)
    assert open_parts(memoryview(packet)[3:], 3, KEY, 32) == (b"k" * 32, message)
    assert open_parts(packet[3:], 4, KEY, 32) is None
    tampered = bytearray(packet[3:])
    tampered[-1] ^= 1
    assert open_parts(bytes(tampered), 3, KEY, 32) is None
    assert open_parts(b"\x00" * 15, 3, KEY, 32) is None


def test_open_parts_gives_a_short_head_when_the_plaintext_is_short():
    packet = sodium.crypto_box_afternm(b"abc", box_nonce(1), KEY)
    assert open_parts(packet, 1, KEY, 32) == (b"abc", b"")
    assert open_box(packet, 1, KEY) == b"abc"
