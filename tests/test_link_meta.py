"""The meta handshake against the bytes Go sent and accepted."""

from __future__ import annotations

import hashlib

import pytest
from vectors import load

from axl.identity import NodeIdentity
from axl.link.meta import (
    HEADER_SIZE,
    MAX_META_LENGTH,
    LinkMeta,
    MetaError,
    decode_meta,
    encode_meta,
    meta_bytes_needed,
)
from axl.wire import DecodeError

VALID = [v for v in load("meta")["python_sent"] if v["kind"] == "valid"]
GO_SENT = load("meta")["go_sent"]


def _by_kind(kind: str) -> dict:
    return next(v for v in load("meta")["python_sent"] if v["kind"] == kind)


def _identity(seed_hex: str) -> NodeIdentity:
    return NodeIdentity.from_seed(bytes.fromhex(seed_hex))


@pytest.mark.parametrize("vector", VALID, ids=lambda v: f"{v['input']['key']}-{v['go_listener']['port']}-{v['input']['priority']}")
def test_python_sent_reencodes_and_decodes(vector: dict) -> None:
    given = vector["input"]
    identity = _identity(given["seed"])
    password = given["password"].encode()
    wire = encode_meta(identity, given["priority"], password)
    assert wire.hex() == vector["meta_hex"]
    assert len(wire) == 123 and wire[4:6] == b"\x00\x75"
    signed = hashlib.blake2b(identity.public_key, digest_size=64, key=password).hexdigest()
    assert signed == vector["hash_signed"]
    assert decode_meta(wire, password) == LinkMeta(identity.public_key, given["priority"], 0, 5)


def test_listener_accepting_means_our_decoder_accepts() -> None:
    for vector in VALID:
        listener = vector["go_listener"]
        meta = decode_meta(bytes.fromhex(vector["meta_hex"]), listener["password"].encode())
        effective = max(listener["priority"], meta.priority)
        assert effective == vector["go_effective_priority_from_getPeers"]


@pytest.mark.parametrize("vector", GO_SENT, ids=lambda v: f"{v['key']}-{v['password']}-{v['priority']}")
def test_go_sent_decodes_and_reencodes(vector: dict) -> None:
    captured = bytes.fromhex(vector["captured_meta_hex"])
    identity = _identity(vector["seed"])
    password = vector["password"].encode()
    meta = decode_meta(captured, password)
    assert meta.key == identity.public_key
    assert meta.priority == vector["priority"]
    assert encode_meta(identity, vector["priority"], password) == captured


def test_wrong_password_is_bad_signature() -> None:
    vector = _by_kind("wrong_password")
    with pytest.raises(MetaError, match="bad signature"):
        decode_meta(bytes.fromhex(vector["meta_hex"]), b"vector-pw")


def test_password_sent_to_listener_without_one() -> None:
    vector = _by_kind("password_but_listener_has_none")
    with pytest.raises(MetaError, match="bad signature"):
        decode_meta(bytes.fromhex(vector["meta_hex"]), b"")
    assert decode_meta(bytes.fromhex(vector["meta_hex"]), b"vector-pw").minor == 5


def test_minor_version_4_is_incompatible() -> None:
    with pytest.raises(MetaError, match="incompatible version"):
        decode_meta(bytes.fromhex(_by_kind("minor_version_4")["meta_hex"]))


def test_flipped_signature_bit() -> None:
    with pytest.raises(MetaError, match="bad signature"):
        decode_meta(bytes.fromhex(_by_kind("bad_signature")["meta_hex"]))


def test_missing_priority_tlv_means_zero() -> None:
    vector = _by_kind("no_priority_tlv")
    meta = decode_meta(bytes.fromhex(vector["meta_hex"]))
    assert meta.priority == 0
    assert meta.key == _identity(vector["input"]["seed"]).public_key


def test_unknown_tlv_is_skipped() -> None:
    meta = decode_meta(bytes.fromhex(_by_kind("extra_unknown_tlv")["meta_hex"]))
    assert (meta.major, meta.minor, meta.priority) == (0, 5, 0)


def _resigned(identity: NodeIdentity, tlvs: bytes) -> bytes:
    sig = identity.sign(hashlib.blake2b(identity.public_key, digest_size=64).digest())
    body = tlvs + sig
    return b"meta" + len(body).to_bytes(2, "big") + body


@pytest.mark.parametrize("tail, reason", [
    (b"\x00\x03\x00\x09\x01", "field 3 of 9 bytes runs past the end"),
    (b"\x00\x00\x00\x00", "field 0 is 0 bytes, not 2"),
    (b"\x00\x03\x00\x02\x01\x01", "field 3 is 2 bytes, not 1"),
    (b"\x00\x02\x00\x21" + bytes(33), "field 2 is 33 bytes, not 32"),
    (b"\x00", "1 bytes left after the fields"),
    (b"\x00\x09\x00", "3 bytes left after the fields"),
])
def test_the_strict_decoder_of_0_5_14_refuses_bad_lengths(tail: bytes, reason: str) -> None:
    """What 0.5.12 read past (an overrunning entry, a field of the wrong
    size, bytes after the last entry), 0.5.14 refuses, and so do we."""
    identity = NodeIdentity.from_seed(bytes(range(32)))
    good = encode_meta(identity, 7)[HEADER_SIZE:-64]
    assert decode_meta(_resigned(identity, good)).priority == 7
    with pytest.raises(MetaError, match=f"invalid handshake length: {reason}"):
        decode_meta(_resigned(identity, good + tail))


def test_header_checks_before_body() -> None:
    assert meta_bytes_needed(b"met") == HEADER_SIZE
    assert meta_bytes_needed(b"meta\x00\x75") == 123
    with pytest.raises(MetaError, match="not Yggdrasil"):
        meta_bytes_needed(b"GET / HTTP/1.1\r\n")
    with pytest.raises(MetaError, match="length"):
        meta_bytes_needed(b"meta\x00\x3f")
    with pytest.raises(MetaError, match="over limit"):
        meta_bytes_needed(b"meta" + (MAX_META_LENGTH + 1).to_bytes(2, "big"))
    assert issubclass(MetaError, DecodeError)


def test_incomplete_message_is_refused() -> None:
    wire = encode_meta(NodeIdentity.from_seed(bytes(32)), 0)
    with pytest.raises(MetaError):
        decode_meta(wire[:-1])


def test_encode_refuses_bad_inputs() -> None:
    identity = NodeIdentity.from_seed(bytes(32))
    with pytest.raises(ValueError):
        encode_meta(identity, 256)
    with pytest.raises(MetaError, match="password"):
        encode_meta(identity, 0, b"x" * 65)
