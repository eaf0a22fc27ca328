"""The TCP send buffer: what it reads back is what was appended, whatever the
chunking, the drops and the reads; immutable chunks are kept, not copied."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from axl.tcp.buffers import ReceiveQueue, SendBuffer
from fuzzing import FUZZ


def test_a_segment_inside_one_bytes_chunk_is_a_view_of_it() -> None:
    payload = bytes(range(256)) * 64
    buffer = SendBuffer()
    buffer.append(memoryview(payload)[:10_000])
    piece = buffer.read(1000, 5000)
    assert isinstance(piece, memoryview) and piece.obj is payload
    assert piece == payload[1000:6000]


def test_a_mutable_buffer_is_copied_so_later_changes_do_not_leak_into_the_stream() -> None:
    data = bytearray(b"abcdef")
    view_source = bytearray(b"ghij")
    buffer = SendBuffer()
    buffer.append(data)
    buffer.append(memoryview(view_source).toreadonly())
    data[:] = b"XXXXXX"
    view_source[:] = b"YYYY"
    assert buffer.read(0, 10) == b"abcdefghij"


def test_a_read_across_chunks_joins_them_and_drops_release_the_front() -> None:
    buffer = SendBuffer()
    for part in (b"abc", b"", b"defg", b"hi"):
        buffer.append(part)
    assert len(buffer) == 9
    assert buffer.read(2, 6) == b"cdefgh"
    buffer.drop(4)
    assert len(buffer) == 5 and buffer.read(0, 5) == b"efghi"
    buffer.drop(5)
    assert len(buffer) == 0 and buffer.read(0, 0) == b""


def test_many_small_chunks_dropped_one_by_one_read_right_after_compaction() -> None:
    buffer = SendBuffer()
    stream = bytes(range(250))
    for byte in stream:
        buffer.append(bytes((byte,)))
    for dropped in range(1, 240):
        buffer.drop(1)
        assert buffer.read(0, 10) == stream[dropped:dropped + 10]


operations = st.lists(st.one_of(
    st.tuples(st.just("append"), st.binary(max_size=40), st.booleans()),
    st.tuples(st.just("drop"), st.integers(min_value=0, max_value=60), st.booleans()),
), max_size=300)


@FUZZ
@given(operations, st.data())
def test_reads_match_a_plain_byte_string_model(ops: list, data: st.DataObject) -> None:
    buffer, model = SendBuffer(), b""
    for kind, arg, mutable in ops:
        if kind == "append":
            buffer.append(bytearray(arg) if mutable else arg)
            model += arg
        else:
            count = min(arg, len(model))
            buffer.drop(count)
            model = model[count:]
        assert len(buffer) == len(model)
        offset = data.draw(st.integers(min_value=0, max_value=len(model)))
        size = data.draw(st.integers(min_value=0, max_value=len(model) - offset))
        assert bytes(buffer.read(offset, size)) == model[offset:offset + size]


def test_receive_queue_hands_a_lone_chunk_over_as_it_is_and_joins_several() -> None:
    queue = ReceiveQueue()
    view = memoryview(b"segment payload").toreadonly()
    queue.append(view)
    queue.append(b"")
    assert len(queue) == 15 and queue.take() is view and len(queue) == 0
    queue.append(b"abc")
    queue.append(memoryview(b"defgh"))
    assert queue.take(4) == b"abcd" and len(queue) == 4
    assert queue.take() == b"efgh" and not queue
