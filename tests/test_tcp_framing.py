"""AXL message framing: u32be length || body."""

from __future__ import annotations

import random

import pytest

from axl.tcp.framing import MessageDecoder, MessageTooLarge, encode_message, message_header


def test_encode_prefixes_the_big_endian_length() -> None:
    assert encode_message(b"hello") == b"\x00\x00\x00\x05hello"
    assert encode_message(b"") == b"\x00\x00\x00\x00"
    assert message_header(0x01020304) == b"\x01\x02\x03\x04"


def test_vector_message_frames_like_the_go_node() -> None:
    body = b"hello AXL: ygg05 test vector message"
    assert encode_message(body).hex().startswith("00000024")


def test_messages_split_at_every_boundary_are_reassembled() -> None:
    rng = random.Random(7)
    bodies = [rng.randbytes(rng.randrange(0, 3000)) for _ in range(40)] + [b""]
    stream = b"".join(encode_message(b) for b in bodies)
    decoder = MessageDecoder(max_size=4096)
    out: list[bytes] = []
    pos = 0
    while pos < len(stream):
        step = rng.randrange(1, 700)
        out += decoder.feed(stream[pos:pos + step])
        pos += step
    assert out == bodies
    assert not decoder.partial


def test_one_byte_at_a_time() -> None:
    decoder = MessageDecoder(max_size=10)
    stream = encode_message(b"abc") + encode_message(b"")
    out = [m for byte in stream for m in decoder.feed(bytes([byte]))]
    assert out == [b"abc", b""]


def test_exactly_max_size_is_allowed_and_one_more_is_refused_from_the_header() -> None:
    decoder = MessageDecoder(max_size=16)
    assert decoder.feed(encode_message(bytes(16))) == [bytes(16)]
    decoder = MessageDecoder(max_size=16)
    with pytest.raises(MessageTooLarge) as info:
        decoder.feed(message_header(17))
    assert info.value.size == 17 and info.value.max_size == 16


def test_partial_tracks_an_incomplete_message() -> None:
    decoder = MessageDecoder()
    assert not decoder.partial
    assert decoder.feed(b"\x00\x00") == []
    assert decoder.partial
    assert decoder.feed(b"\x00\x02x") == []
    assert decoder.partial and decoder.buffered == 1
    assert decoder.feed(b"y") == [b"xy"]
    assert not decoder.partial


def test_sixteen_mebibytes_in_chunks() -> None:
    body = random.Random(3).randbytes(16 * 1024 * 1024)
    decoder = MessageDecoder()
    header = message_header(len(body))
    out = decoder.feed(header)
    view = memoryview(body)
    for start in range(0, len(body), 65536):
        out += decoder.feed(view[start:start + 65536])
    assert out == [body]
