"""axl.readbuffer, sans-IO: bytes held until served, and searches that
resume where they stopped, so that a request trickled in byte by byte is
looked through once (the front door's heads and the admin socket's
requests both depend on it)."""

from __future__ import annotations

from axl.readbuffer import COMPACT_AFTER, ReadBuffer

HEAD = b"POST /send HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Destination-Peer-Id: " + b"ab" * 32 + b"\r\n\r\n"


def test_a_trickled_terminator_search_never_looks_back():
    """After each byte the next search starts at most len(terminator) - 1
    bytes before the end: the bytes looked at, summed, grow with the input,
    not with its square."""
    buffer = ReadBuffer()
    looked_at = 0
    for index in range(len(HEAD) - 1):
        buffer.append(HEAD[index:index + 1])
        looked_at += len(buffer.data) - buffer.resume_at()
        assert buffer.find(b"\r\n\r\n") is None
        assert len(buffer.data) - buffer.resume_at() <= 3
    assert looked_at <= 4 * len(HEAD)
    buffer.append(HEAD[-1:])
    assert buffer.find(b"\r\n\r\n") == len(HEAD) - 4


def test_requests_served_off_the_front_in_order():
    buffer = ReadBuffer()
    buffer.append(HEAD * 3)
    for _ in range(3):
        length = buffer.find(b"\r\n\r\n")
        assert buffer.take(length + 4) == HEAD
    assert len(buffer) == 0 and buffer.find(b"\r\n\r\n") is None


def test_compaction_keeps_what_is_held_and_where_the_search_stopped():
    buffer = ReadBuffer()
    buffer.append(b"x" * (COMPACT_AFTER + 10))
    buffer.append(b"tail\r\n")
    assert buffer.find(b"\r\n\r\n") is None
    buffer.skip(COMPACT_AFTER)
    assert buffer.front == 0 and len(buffer) == 16, "served bytes are dropped once they are most of it"
    assert len(buffer.data) - buffer.resume_at() <= 3
    buffer.append(b"\r\n")
    assert buffer.find(b"\r\n\r\n") == 14
    assert buffer.take_all() == b"x" * 10 + b"tail\r\n\r\n"
