"""Property tests for the link layer's decoders: the meta handshake and
ironwood framing must fail only with DecodeError, whatever arrives."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from vectors import load

from axl.link.framing import MAX_FRAME, MAX_FRAME_TYPE, FrameDecoder, FrameError, encode_frame
from axl.link.meta import HEADER_SIZE, MAX_META_LENGTH, LinkMeta, MetaError, decode_meta, meta_bytes_needed
from axl.wire import DecodeError, encode_uvarint
from fuzzing import FUZZ, feed_all, noise_or_mutation, peak_allocation, with_chunkings

VALID_META = [bytes.fromhex(v["meta_hex"]) for v in load("meta")["python_sent"]] + [
    bytes.fromhex(v["captured_meta_hex"]) for v in load("meta")["go_sent"]
]
CAPTURED_FRAMES = [bytes.fromhex(v["frame_hex"]) for v in load("frames")["frames"]]
BAD_FRAMES = [bytes.fromhex(v["bytes_hex"]) for v in load("frames")["bad_frames"]]
CAPTURED_STREAM = b"".join(CAPTURED_FRAMES)


# --- meta handshake -----------------------------------------------------

@FUZZ
@given(noise_or_mutation(VALID_META), st.sampled_from([b"", b"vector-pw"]))
def test_decode_meta_fails_only_with_meta_error(data, password):
    try:
        meta = decode_meta(data, password)
    except MetaError:
        return
    assert isinstance(meta, LinkMeta)
    assert len(meta.key) == 32 and 0 <= meta.priority <= 255


@FUZZ
@given(noise_or_mutation(VALID_META))
def test_meta_bytes_needed_stays_within_its_limit(data):
    for cut in [*range(min(len(data), HEADER_SIZE + 1)), len(data)]:
        try:
            needed = meta_bytes_needed(data[:cut])
        except DecodeError:
            continue
        assert HEADER_SIZE <= needed <= HEADER_SIZE + MAX_META_LENGTH


@pytest.mark.parametrize("claimed", [0xFFFF, MAX_META_LENGTH + 1, 63])
def test_meta_length_outside_limits_refused_from_the_header(claimed):
    header = b"meta" + claimed.to_bytes(2, "big")
    with pytest.raises(MetaError):
        meta_bytes_needed(header)


# --- framing ------------------------------------------------------------

def _decode_chunks(chunks: list[bytes]) -> tuple[list[tuple[int, bytes]], bool]:
    """Every frame decoded and whether the stream was refused."""
    return feed_all(FrameDecoder().feed, chunks, FrameError)


@FUZZ
@given(with_chunkings(noise_or_mutation(CAPTURED_FRAMES + BAD_FRAMES + [CAPTURED_STREAM])))
def test_frame_decoder_any_chunking_same_result_and_only_frame_errors(case):
    data, chunks = case
    whole = _decode_chunks([data])
    assert _decode_chunks(chunks) == whole
    for ftype, body in whole[0]:
        assert 0 <= ftype <= MAX_FRAME_TYPE and len(body) < MAX_FRAME


frame_lists = st.lists(
    st.tuples(st.integers(min_value=0, max_value=MAX_FRAME_TYPE),
              st.one_of(st.binary(max_size=40), st.binary(min_size=126, max_size=300))),
    min_size=1, max_size=6,
)


@FUZZ
@given(frame_lists)
def test_valid_frames_decode_identically_split_anywhere(frames):
    stream = b"".join(encode_frame(ftype, body) for ftype, body in frames)
    for cut in range(len(stream) + 1):
        assert _decode_chunks([stream[:cut], stream[cut:]]) == (frames, False)


def test_frame_claiming_two_gigabytes_refused_without_buffering():
    data = encode_uvarint(1 << 31) + b"\x09" + bytes(4)
    decoder = FrameDecoder()

    def feed() -> None:
        with pytest.raises(FrameError):
            list(decoder.feed(data))

    assert peak_allocation(feed) < 64 * 1024


def test_frame_claiming_the_maximum_waits_without_preallocating():
    decoder = FrameDecoder()
    data = encode_uvarint(MAX_FRAME) + b"\x09" + bytes(8)
    assert peak_allocation(lambda: list(decoder.feed(data))) < 64 * 1024
    assert decoder.pending == len(data)
