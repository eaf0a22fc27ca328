"""The front door's WebSocket reader (axl.bridge.wsframes) on what a local
client may send: valid messages come back exactly, in any fragmentation
and any cutting of the bytes; any other bytes give messages within the
limit or a FrameError with the close code RFC 6455 asks for, never another
exception."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from axl.bridge.wsframes import BINARY, CLOSE, CONTINUATION, PING, PONG, TEXT, FrameError
from fuzzing import FUZZ, noise_or_mutation
from wsclient import client_frame, read_all

messages = st.lists(st.one_of(
    st.tuples(st.sampled_from([TEXT, BINARY]), st.binary(max_size=700), st.integers(1, 4)),
    st.tuples(st.sampled_from([PING, PONG]), st.binary(max_size=125), st.just(1)),
), max_size=8)


@FUZZ
@given(messages, st.lists(st.integers(1, 300), max_size=12))
def test_the_reader_gives_back_each_message_in_any_fragments_and_chunks(sent, chunks) -> None:
    data = b""
    for opcode, payload, pieces in sent:
        step = -(-len(payload) // pieces) or 1
        parts = [payload[i:i + step] for i in range(0, len(payload), step)] or [b""]
        for index, part in enumerate(parts):
            data += client_frame(opcode if index == 0 else CONTINUATION, part, final=index == len(parts) - 1)
    assert read_all(data, chunks) == [(opcode, payload) for opcode, payload, _ in sent]


@FUZZ
@given(noise_or_mutation([client_frame(BINARY, b"x" * 200), client_frame(TEXT, b"done"),
                          client_frame(CLOSE, b"\x03\xe8bye")], 300), st.lists(st.integers(1, 50), max_size=6))
def test_any_bytes_give_messages_within_the_limit_or_a_frame_error(data, chunks) -> None:
    try:
        taken = read_all(data, chunks, limit=256)
    except FrameError as exc:
        assert exc.code in (1002, 1009)
        return
    assert all(len(payload) <= 256 and opcode in (TEXT, BINARY, CLOSE, PING, PONG) for opcode, payload in taken)
