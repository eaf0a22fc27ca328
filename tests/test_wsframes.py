"""The front door's WebSocket frames (axl.bridge.wsframes), sans-IO: the
handshake token, masking, the server's frames, and the close codes RFC
6455 asks of the reader (its fuzzing: test_fuzz_wsframes.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from axl.bridge import wsframes
from axl.bridge.wsframes import (BINARY, CONTINUATION, PING, TEXT, FrameError, FrameReader,
                                 accept_token, close_frame, frame, frame_head, read_close, unmask, valid_key)
from fuzzing import FUZZ
from wsclient import LIMIT, client_frame, read_all

def test_the_accept_token_is_rfc_6455s_example() -> None:
    # RFC 6455 section 1.3
    assert accept_token("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


@pytest.mark.parametrize("key, valid", [
    ("dGhlIHNhbXBsZSBub25jZQ==", True), ("dGhlIHNhbXBsZSBub25jZQ", False), ("", False),
    ("dGhlIHNhbXBsZSBub25jZSE=", False), ("dGhl!HNhbXBsZSBub25jZQ==", False), ("dGhlIHNhbXBsZSBub25jZQ==é", False),
])
def test_a_key_is_16_bytes_of_base64(key: str, valid: bool) -> None:
    assert valid_key(key) is valid


@pytest.mark.parametrize("size, head", [
    (0, b"\x82\x00"), (125, b"\x82\x7d"), (126, b"\x82\x7e\x00\x7e"), (65535, b"\x82\x7e\xff\xff"),
    (65536, b"\x82\x7f\x00\x00\x00\x00\x00\x01\x00\x00"),
])
def test_a_server_frame_head_takes_the_shortest_length(size: int, head: bytes) -> None:
    assert frame_head(BINARY, size) == head


@FUZZ
@given(st.binary(min_size=4, max_size=4), st.binary(max_size=2000))
def test_both_maskers_give_the_payload_xor_the_mask(mask: bytes, payload: bytes) -> None:
    expected = bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))
    assert unmask(mask, payload) == expected
    data = bytearray(payload)
    wsframes.mask_in_place(mask, data)
    assert data == expected


def test_control_frames_may_come_between_a_messages_fragments() -> None:
    data = (client_frame(BINARY, b"one ", final=False) + client_frame(PING, b"?")
            + client_frame(CONTINUATION, b"two"))
    assert read_all(data, []) == [(PING, b"?"), (BINARY, b"one two")]


@pytest.mark.parametrize("data, code", [
    (bytes([0x82, 0x03]) + b"abc", 1002),  # not masked
    (bytes([0xC2, 0x80]) + bytes(4), 1002),  # a reserved bit (no extension agreed)
    (bytes([0x83, 0x80]) + bytes(4), 1002),  # opcode 3 is reserved
    (client_frame(PING, bytes(126)), 1002),  # a control frame over 125 bytes
    (client_frame(PING, b"x", final=False), 1002),  # a fragmented control frame
    (client_frame(CONTINUATION, b"x"), 1002),  # nothing to continue
    (client_frame(TEXT, b"a", final=False) + client_frame(BINARY, b"b"), 1002),  # a message within a message
    (client_frame(BINARY, bytes(LIMIT + 1)), 1009),
    (client_frame(BINARY, bytes(LIMIT), final=False) + client_frame(CONTINUATION, b"x"), 1009),
])
def test_what_rfc_6455_forbids_is_a_frame_error_with_its_code(data: bytes, code: int) -> None:
    with pytest.raises(FrameError) as caught:
        read_all(data, [])
    assert caught.value.code == code and "\n" not in caught.value.reason


def test_an_oversized_message_is_refused_on_its_head_alone() -> None:
    reader = FrameReader(LIMIT)
    reader.feed(bytes([0x82, 0xFF]) + (1 << 40).to_bytes(8, "big") + bytes(4))
    with pytest.raises(FrameError) as caught:
        reader.next_message()
    assert caught.value.code == 1009


@pytest.mark.parametrize("payload, expected", [
    (b"", (1005, "")), (b"\x03\xe8", (1000, "")), (b"\x03\xe9going", (1001, "going")), (b"\x0f\xa0app", (4000, "app")),
])
def test_a_close_frame_gives_its_code_and_reason(payload: bytes, expected: tuple[int, str]) -> None:
    assert read_close(payload) == expected


@pytest.mark.parametrize("payload, code", [(b"\x03", 1002), (b"\x03\xed", 1002), (b"\x00\x00", 1002),
                                           (b"\x03\xe8\xff", 1007)])
def test_a_bad_close_frame_is_a_frame_error(payload: bytes, code: int) -> None:
    with pytest.raises(FrameError) as caught:
        read_close(payload)
    assert caught.value.code == code


def test_the_servers_close_frame_fits_a_control_frame() -> None:
    closing = close_frame(1008, "é" * 100)
    assert closing[0] == 0x88 and closing[1] <= 125
    assert read_close(closing[2:])[0] == 1008
    assert frame(TEXT, b"hi") == b"\x81\x02hi"
