import pytest

from axl.wire import DecodeError, Reader, decode_uvarint, encode_uvarint
from vectors import load


def test_canonical_encodings():
    for case in load("uvarint")["canonical_encodings"]:
        assert encode_uvarint(case["value"]).hex() == case["encoding"]


def test_decoding_matches_go():
    for case in load("uvarint")["decoding"]:
        data = bytes.fromhex(case["bytes"])
        if case["go_accepts"]:
            assert decode_uvarint(data) == (case["value"], case["consumed"]), case
        else:
            with pytest.raises(DecodeError):
                decode_uvarint(data)


def test_reader_bounds():
    reader = Reader(b"\x05abc")
    assert reader.uvarint() == 5
    with pytest.raises(DecodeError):
        reader.take(4)
    assert reader.take(3) == b"abc"
    reader.finish()
    with pytest.raises(DecodeError):
        Reader(b"\x01\x02").finish()
