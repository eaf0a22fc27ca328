"""The TLS certificate and contexts for tls:// links."""

from __future__ import annotations

import datetime
import ssl
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from axl.identity import NodeIdentity
from axl.link.tls import certificate_ed25519_key, client_context, make_certificate, server_context

IDENTITY = NodeIdentity.from_seed(bytes(range(32)))


def test_certificate_fields_match_yggdrasil() -> None:
    now = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    cert = x509.load_der_x509_certificate(make_certificate(IDENTITY, now))
    cn = IDENTITY.public_key.hex()
    assert cert.serial_number == 1
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == cn
    assert cert.issuer == cert.subject
    assert cert.not_valid_before_utc == now
    assert cert.not_valid_after_utc == datetime.datetime(9999, 12, 31, 23, 59, 59, tzinfo=datetime.timezone.utc)
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature and usage.key_encipherment and not usage.key_cert_sign
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    public = cert.public_key()
    assert isinstance(public, Ed25519PublicKey)
    assert public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw) == IDENTITY.public_key
    public.verify(cert.signature, cert.tbs_certificate_bytes)
    assert len(cert.public_bytes(serialization.Encoding.DER)) == 384


def reference_certificate(identity: NodeIdentity, now: datetime.datetime) -> bytes:
    """The same certificate from cryptography's builder, as an independent encoder."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, identity.public_key.hex())])
    private = Ed25519PrivateKey.from_private_bytes(identity.seed)
    usage = x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=True,
        data_encipherment=False, key_agreement=False, key_cert_sign=False,
        crl_sign=False, encipher_only=False, decipher_only=False,
    )
    return (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(private.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(datetime.datetime(9999, 12, 31, 23, 59, 59, tzinfo=datetime.timezone.utc))
        .add_extension(usage, critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(private, algorithm=None)
        .public_bytes(serialization.Encoding.DER)
    )


def test_certificate_bytes_equal_an_independent_encoder() -> None:
    for now in (datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
                datetime.datetime(2051, 6, 7, 8, 9, 10, tzinfo=datetime.timezone.utc)):
        assert make_certificate(IDENTITY, now) == reference_certificate(IDENTITY, now)


def test_contexts_require_tls_1_3_and_verify_no_chain() -> None:
    server = server_context(IDENTITY)
    assert server.minimum_version == ssl.TLSVersion.TLSv1_3
    assert server.verify_mode == ssl.CERT_NONE
    client = client_context(IDENTITY)
    assert client.minimum_version == ssl.TLSVersion.TLSv1_3
    assert client.check_hostname is False and client.verify_mode == ssl.CERT_NONE


def test_key_material_does_not_stay_on_disk() -> None:
    tmp = Path(tempfile.gettempdir())
    before = set(tmp.glob("axl-tls-*"))
    server_context(IDENTITY)
    client_context(IDENTITY)
    assert set(tmp.glob("axl-tls-*")) == before


def test_certificate_key_is_read_back_and_garbage_is_not_a_key() -> None:
    der = make_certificate(IDENTITY)
    assert certificate_ed25519_key(der) == IDENTITY.public_key
    assert certificate_ed25519_key(der[:200]) is None
    assert certificate_ed25519_key(b"\x30\x03\x02\x01\x01") is None
    assert certificate_ed25519_key(b"") is None
