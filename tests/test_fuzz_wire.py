"""Property tests for the shared byte helpers: uvarints and the bounded Reader."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from axl.wire import MAX_UVARINT_LEN, DecodeError, Reader, decode_uvarint, encode_uvarint
from fuzzing import FUZZ, mutation_of, peak_allocation, with_chunkings

U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)


@FUZZ
@given(st.binary(max_size=24), st.integers(min_value=0, max_value=24))
def test_decode_uvarint_on_any_bytes_only_raises_decode_error(data, offset):
    try:
        value, end = decode_uvarint(data, offset)
    except DecodeError:
        return
    assert 0 <= value < 1 << 64
    assert offset < end <= min(len(data), offset + MAX_UVARINT_LEN)


@FUZZ
@given(U64, st.binary(max_size=8), st.binary(max_size=8))
def test_uvarint_round_trip_inside_other_bytes(value, before, after):
    encoded = encode_uvarint(value)
    assert decode_uvarint(before + encoded + after, len(before)) == (value, len(before) + len(encoded))
    assert len(encoded) == max(1, (value.bit_length() + 6) // 7)


@FUZZ
@given(U64, st.integers(min_value=1, max_value=MAX_UVARINT_LEN))
def test_overlong_padding_decodes_to_the_same_value_when_it_fits(value, width):
    encoded = bytearray(encode_uvarint(value))
    while len(encoded) < width:
        encoded[-1] |= 0x80
        encoded.append(0)
    assert decode_uvarint(bytes(encoded)) == (value, len(encoded))


@FUZZ
@given(U64)
def test_every_truncation_of_a_uvarint_is_refused(value):
    encoded = encode_uvarint(value)
    for cut in range(len(encoded)):
        with pytest.raises(DecodeError):
            decode_uvarint(encoded[:cut])


@FUZZ
@given(st.binary(max_size=64), st.lists(st.integers(min_value=-3, max_value=80), max_size=12))
def test_reader_reads_only_what_is_there(data, sizes):
    reader = Reader(data)
    for size in sizes:
        before = reader.remaining
        try:
            if size < 0:
                reader.uvarint()
            else:
                assert len(reader.take(size)) == size
        except DecodeError:
            assert reader.remaining == before
            continue
        assert reader.remaining < before or size == 0
    assert 0 <= reader.remaining <= len(data)


def test_huge_claimed_take_is_refused_without_allocating():
    reader = Reader(encode_uvarint(1 << 31) + b"abcde")

    def take_claimed() -> None:
        with pytest.raises(DecodeError):
            reader.take(reader.uvarint())

    assert peak_allocation(take_claimed) < 64 * 1024


@FUZZ
@given(with_chunkings(st.binary(min_size=1, max_size=64)))
def test_chunkings_reassemble(case):
    data, chunks = case
    assert b"".join(chunks) == data


@FUZZ
@given(st.binary(min_size=4, max_size=64).flatmap(lambda b: st.tuples(st.just(b), mutation_of(b))))
def test_mutations_stay_small(case):
    original, mutated = case
    assert len(mutated) <= len(original) + 4 * 8
