"""The DER walk (axl.der.element) and the peer's certificate key it finds
(axl.link.tls.certificate_ed25519_key), which a tls:// dialer compares
with the key the meta handshake claims. The certificate is the peer's, so
any bytes may come: the walk fails only with ValueError, the key finder only
answers None, and for every certificate `cryptography` reads, ours finds
exactly the Ed25519 key `cryptography` finds (and none for other keys)."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import NameOID
from hypothesis import given
from hypothesis import strategies as st

from axl.der import element, encode
from axl.identity import KeyFileError, NodeIdentity, _pkcs8_seed
from axl.link.tls import certificate_ed25519_key, make_certificate
from fuzzing import FUZZ, noise_or_mutation

SEEDS = st.binary(min_size=32, max_size=32)
WHEN = st.datetimes(min_value=datetime.datetime(1990, 1, 1), max_value=datetime.datetime(2200, 1, 1),
                    timezones=st.just(datetime.timezone.utc))


def _made_by_cryptography(private_key, common_name: str, serial: int, *, key_usage: bool) -> bytes:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
               .public_key(private_key.public_key()).serial_number(serial)
               .not_valid_before(datetime.datetime(2024, 1, 1))
               .not_valid_after(datetime.datetime(9999, 12, 31, 23, 59, 59)))
    if key_usage:
        builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    algorithm = None if isinstance(private_key, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    return builder.sign(private_key, algorithm).public_bytes(serialization.Encoding.DER)


ED_KEYS = [ed25519.Ed25519PrivateKey.from_private_bytes(bytes([n]) * 32) for n in range(3)]
REAL_CERTIFICATES = [make_certificate(NodeIdentity.from_seed(bytes([n]) * 32)) for n in range(3)] + [
    _made_by_cryptography(ED_KEYS[0], "a" * 64, 1, key_usage=True),
    _made_by_cryptography(ED_KEYS[1], "x", 2**150, key_usage=False),
    _made_by_cryptography(ec.derive_private_key(7, ec.SECP256R1()), "ec", 3, key_usage=True),
]


def _cryptography_key(der: bytes) -> bytes | None | str:
    """The Ed25519 key `cryptography` reads from `der`, None for another
    kind of key, "unreadable" when it does not take the certificate."""
    try:
        key = x509.load_der_x509_certificate(der).public_key()
    except (ValueError, UnsupportedAlgorithm, x509.InvalidVersion):
        return "unreadable"
    if not isinstance(key, ed25519.Ed25519PublicKey):
        return None
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


@FUZZ
@given(noise_or_mutation(REAL_CERTIFICATES, 400))
def test_any_certificate_bytes_give_the_key_cryptography_reads_or_none(der):
    ours = certificate_ed25519_key(der)
    assert ours is None or len(ours) == 32
    theirs = _cryptography_key(der)
    if theirs != "unreadable":
        assert ours == theirs


@FUZZ
@given(SEEDS, WHEN)
def test_the_nodes_own_certificates_give_their_key(seed, when):
    identity = NodeIdentity.from_seed(seed)
    der = make_certificate(identity, when)
    assert certificate_ed25519_key(der) == identity.public_key == _cryptography_key(der)


@FUZZ
@given(SEEDS, st.text(min_size=1, max_size=16), st.integers(min_value=1, max_value=2**159 - 1), st.booleans())
def test_certificates_made_elsewhere_give_the_key_cryptography_reads(seed, common_name, serial, key_usage):
    key = ed25519.Ed25519PrivateKey.from_private_bytes(seed)
    der = _made_by_cryptography(key, common_name, serial, key_usage=key_usage)
    assert certificate_ed25519_key(der) == _cryptography_key(der) == key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw)


@FUZZ
@given(st.binary(max_size=64), st.integers(min_value=0, max_value=70))
def test_element_fails_only_with_value_error_and_stays_inside(data, pos):
    try:
        tag, start, end = element(data, pos)
    except ValueError:
        return
    assert tag == data[pos] and pos + 2 <= start <= end <= len(data)


@FUZZ
@given(st.integers(min_value=0, max_value=255), st.binary(max_size=300), st.binary(max_size=8))
def test_encode_then_element_round_trips(tag, content, tail):
    der = encode(tag, content) + tail
    found, start, end = element(der, 0)
    assert (found, der[start:end]) == (tag, content)


@pytest.mark.parametrize("length", [b"\x84\xff\xff\xff\xff", b"\x85\x01\x00\x00\x00\x00", b"\x80", b"\x81\x11"])
def test_a_length_beyond_the_data_or_of_a_bad_form_is_refused(length):
    with pytest.raises(ValueError):
        element(b"\x30" + length + bytes(16), 0)


VALID_KEYS = [der for der in (encode(0x30, encode(0x02, b"\0") + encode(0x30, bytes.fromhex("06032b6570"))
                                     + encode(0x04, encode(0x04, bytes([n]) * 32))) for n in range(2))]


@FUZZ
@given(noise_or_mutation(VALID_KEYS, 80))
def test_key_file_der_fails_only_with_key_file_error(der):
    try:
        seed = _pkcs8_seed(der, "fuzz.pem")
    except KeyFileError:
        return
    assert len(seed) == 32
