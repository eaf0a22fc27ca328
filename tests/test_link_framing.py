"""ironwood framing: every captured frame splits correctly and every bad
stream is refused where Go closed the link."""

from __future__ import annotations

import random
import tracemalloc

import pytest
from vectors import load

from axl.link.framing import (
    KEEPALIVE_FRAME,
    MAX_FRAME,
    FrameDecoder,
    FrameError,
    FrameType,
    encode_frame,
)
from axl.wire import DecodeError, Reader, encode_uvarint

FRAMES = load("frames")["frames"]
BAD = {entry["name"]: entry for entry in load("frames")["bad_frames"]}


def _decode_all(stream: bytes) -> list[tuple[int, bytes]]:
    return list(FrameDecoder().feed(stream))


def _frame_parts(frame: bytes) -> tuple[int, bytes]:
    (frame_type, body), = _decode_all(frame)
    return frame_type, body


@pytest.mark.parametrize("vector", FRAMES, ids=lambda v: f"{v['decoded']['name']}-{v['frame_hex'][:12]}")
def test_captured_frames_split_and_reencode(vector: dict) -> None:
    wire = bytes.fromhex(vector["frame_hex"])
    frame_type, body = _frame_parts(wire)
    assert frame_type == vector["decoded"]["type"]
    assert len(body) + 1 == vector["length_prefix"]
    assert encode_frame(frame_type, body) == wire


def test_whole_capture_in_one_feed_and_byte_by_byte() -> None:
    stream = b"".join(bytes.fromhex(v["frame_hex"]) for v in FRAMES)
    expected = [_frame_parts(bytes.fromhex(v["frame_hex"])) for v in FRAMES]
    assert _decode_all(stream) == expected
    decoder = FrameDecoder()
    trickled = [frame for i in range(len(stream)) for frame in decoder.feed(stream[i:i + 1])]
    assert trickled == expected
    assert decoder.pending == 0


def test_random_chunking_is_deterministic() -> None:
    rng = random.Random(7)
    frames = [(rng.randrange(10), rng.randbytes(rng.choice((0, 1, 126, 127, 200, 70000))))
              for _ in range(200)]
    stream = b"".join(encode_frame(t, b) for t, b in frames)
    decoder = FrameDecoder()
    got: list[tuple[int, bytes]] = []
    pos = 0
    while pos < len(stream):
        step = rng.randrange(1, 9000)
        got.extend(decoder.feed(memoryview(stream)[pos:pos + step]))
        pos += step
    assert got == frames


def test_keepalive_frame_constant() -> None:
    assert KEEPALIVE_FRAME == encode_frame(FrameType.KEEPALIVE) == b"\x01\x01"
    assert [int(t) for t in FrameType] == list(range(10))


@pytest.mark.parametrize("name", [
    "frame_length_zero", "frame_unknown_type_10", "frame_length_131071_over_limit",
])
def test_bad_frames_go_closed_on(name: str) -> None:
    assert BAD[name]["go_result"] == "closed"
    with pytest.raises(FrameError):
        _decode_all(bytes.fromhex(BAD[name]["bytes_hex"]))


@pytest.mark.parametrize("name", ["frame_length_overlong_keepalive", "dummy_frame_type0_with_body"])
def test_bad_frames_go_survived(name: str) -> None:
    assert BAD[name]["go_result"] == "survived"
    (frame_type,  _), = _decode_all(bytes.fromhex(BAD[name]["bytes_hex"]))
    assert frame_type in (FrameType.DUMMY, FrameType.KEEPALIVE)


def _sigreq_fields(body: bytes) -> tuple[int, int]:
    reader = Reader(body)
    seq, nonce = reader.uvarint(), reader.uvarint()
    reader.finish()
    return seq, nonce


@pytest.mark.parametrize("name", [n for n in BAD if n.startswith("sigreq_")])
def test_sigreq_body_errors_are_body_level(name: str) -> None:
    """These streams frame correctly; Go's verdict comes from the body."""
    vector = BAD[name]
    (frame_type, body), = _decode_all(bytes.fromhex(vector["bytes_hex"]))
    assert frame_type == FrameType.SIGREQ
    if vector["go_result"] == "closed":
        with pytest.raises(DecodeError):
            _sigreq_fields(body)
    else:
        echo = vector["go_sigres_echo"]
        assert _sigreq_fields(body) == (echo["seq"], echo["nonce"])


@pytest.mark.parametrize("entry", load("uvarint")["decoding"], ids=lambda e: e["bytes"])
def test_length_prefix_follows_go_uvarint(entry: dict) -> None:
    prefix = bytes.fromhex(entry["bytes"])
    decoder = FrameDecoder()
    if not entry["go_accepts"]:
        if len(prefix) < 10:
            assert list(decoder.feed(prefix)) == [] and decoder.pending == len(prefix)
        else:
            with pytest.raises(FrameError, match="bad frame length"):
                list(decoder.feed(prefix + b"\x01"))
        return
    size = entry["value"]
    if size == 0:
        with pytest.raises(FrameError, match="empty"):
            list(decoder.feed(prefix))
    elif size > MAX_FRAME:
        with pytest.raises(FrameError, match="over limit"):
            list(decoder.feed(prefix))
    else:
        body = bytes(size - 1)
        assert list(decoder.feed(prefix + b"\x00" + body)) == [(0, body)]


def test_largest_frame_passes_and_one_more_fails() -> None:
    body = bytes(MAX_FRAME - 1)
    assert _decode_all(encode_frame(FrameType.TRAFFIC, body)) == [(9, body)]
    with pytest.raises(ValueError):
        encode_frame(FrameType.TRAFFIC, body + b"\x00")
    with pytest.raises(FrameError):
        _decode_all(encode_uvarint(MAX_FRAME + 1))


def test_error_sticks_and_earlier_frames_are_delivered() -> None:
    decoder = FrameDecoder()
    frames = decoder.feed(KEEPALIVE_FRAME + b"\x01\x0a")
    assert next(frames) == (1, b"")
    with pytest.raises(FrameError, match="unknown frame type 10"):
        next(frames)
    with pytest.raises(FrameError):
        list(decoder.feed(KEEPALIVE_FRAME))


def test_partial_frame_waits_and_counts_pending() -> None:
    wire = encode_frame(FrameType.TRAFFIC, b"x" * 300)
    decoder = FrameDecoder()
    assert list(decoder.feed(wire[:100])) == []
    assert decoder.pending == 100
    assert list(decoder.feed(wire[100:])) == [(9, b"x" * 300)]
    assert decoder.pending == 0


def test_abandoned_iteration_keeps_unread_frames() -> None:
    decoder = FrameDecoder()
    frames = decoder.feed(encode_frame(2, b"a") + encode_frame(3, b"b"))
    assert next(frames) == (2, b"a")
    assert list(decoder.feed(encode_frame(4, b"c"))) == [(3, b"b"), (4, b"c")]


def _transient_allocation(decoder: FrameDecoder, chunks: list[bytes]) -> tuple[int, list]:
    """Sum over feeds of the memory each feed allocated beyond what it kept: the bytes it copied."""
    frames = []
    tracemalloc.start()
    try:
        total = 0
        for chunk in chunks:
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            frames += decoder.feed(chunk)
            total += tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    return total, frames


def test_a_large_frame_in_small_chunks_costs_linear_copying() -> None:
    body = random.Random(4).randbytes(MAX_FRAME - 1)
    wire = encode_frame(FrameType.TRAFFIC, body)
    chunks = [wire[i:i + 64] for i in range(0, len(wire), 64)]
    copied, frames = _transient_allocation(FrameDecoder(), chunks)
    assert frames == [(FrameType.TRAFFIC, body)]
    # Linear: a few copies of the frame plus a constant per feed (the iterator).
    # Concatenating bytes per chunk allocated ~134 MB here, half the frame per feed.
    bound = 4 * len(wire) + 1024 * len(chunks)
    assert copied < bound, f"{copied} bytes allocated to decode {len(wire)} in {len(chunks)} chunks"


def test_frames_are_read_straight_from_a_buffer_the_next_read_reuses() -> None:
    """The link feeds a view of one read buffer and refills it after each
    feed: a frame split across reads must have been copied out in time."""
    frames = [(FrameType.TRAFFIC, random.Random(n).randbytes(3000)) for n in range(5)]
    wire = b"".join(encode_frame(t, b) for t, b in frames)
    read_buffer = bytearray(4096)
    decoder = FrameDecoder()
    got: list[tuple[int, bytes]] = []
    for pos in range(0, len(wire), len(read_buffer)):
        chunk = wire[pos:pos + len(read_buffer)]
        read_buffer[:len(chunk)] = chunk
        got.extend(decoder.feed(memoryview(read_buffer)[:len(chunk)]))
        read_buffer[:] = bytes(len(read_buffer))
    assert got == frames
    assert decoder.pending == 0


def test_abandoned_iteration_after_a_gathered_frame_keeps_unread_frames() -> None:
    wire = encode_frame(2, b"a" * 100) + encode_frame(3, b"b") + encode_frame(4, b"c")
    decoder = FrameDecoder()
    assert list(decoder.feed(wire[:50])) == []
    frames = decoder.feed(wire[50:])
    assert next(frames) == (2, b"a" * 100)
    assert decoder.pending == len(encode_frame(3, b"b") + encode_frame(4, b"c"))
    assert list(decoder.feed(encode_frame(5, b"d"))) == [(3, b"b"), (4, b"c"), (5, b"d")]


def test_whole_frames_in_one_feed_are_copied_once() -> None:
    """Nothing gathered: each body is copied once, into the bytes handed out,
    and only the incomplete last frame is gathered (at most twice its size,
    with the buffer's growth); gathering the whole feed cost ~700 kB here."""
    rng = random.Random(5)
    frames = [(FrameType.TRAFFIC, rng.randbytes(60000)) for _ in range(4)]
    wire = b"".join(encode_frame(t, b) for t, b in frames)
    cut = len(wire) - 20000
    copied, got = _transient_allocation(FrameDecoder(), [wire[:cut], wire[cut:]])
    assert got == frames
    bodies = sum(len(body) for _, body in frames)
    assert copied < bodies + 2 * len(encode_frame(*frames[-1])) + 4096, \
        f"{copied} bytes allocated for {bodies} of bodies"
