"""TLS for `tls://` links.

Yggdrasil verifies nothing at the TLS layer: the peer's identity comes from
the meta handshake. The certificate only has to look like Go's (self-signed
Ed25519, CN = hex key) so Go peers and tools see what they expect.
"""

from __future__ import annotations

import datetime
import os
import ssl
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from axl.identity import NodeIdentity

NOT_AFTER = datetime.datetime(9999, 12, 31, 23, 59, 59, tzinfo=datetime.timezone.utc)


def make_certificate(identity: NodeIdentity, now: datetime.datetime | None = None) -> x509.Certificate:
    """Self-signed certificate with the fields Yggdrasil's own one carries."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, identity.public_key.hex())])
    not_before = now or datetime.datetime.now(datetime.timezone.utc)
    usage = x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=True,
        data_encipherment=False, key_agreement=False, key_cert_sign=False,
        crl_sign=False, encipher_only=False, decipher_only=False,
    )
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(identity.private_key().public_key())
        .serial_number(1)
        .not_valid_before(not_before)
        .not_valid_after(NOT_AFTER)
        .add_extension(usage, critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(identity.private_key(), algorithm=None)
    )


def _load_chain(context: ssl.SSLContext, identity: NodeIdentity) -> None:
    """`ssl` only loads keys from files: write them into a private
    directory and remove it as soon as they are loaded."""
    cert_pem = make_certificate(identity).public_bytes(serialization.Encoding.PEM)
    with tempfile.TemporaryDirectory(prefix="axl-tls-") as tmp:
        os.chmod(tmp, 0o700)
        cert_path = Path(tmp) / "cert.pem"
        key_path = Path(tmp) / "key.pem"
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as key_file:
            key_file.write(identity.pem())
        cert_path.write_bytes(cert_pem)
        context.load_cert_chain(cert_path, key_path)


def server_context(identity: NodeIdentity) -> ssl.SSLContext:
    """Listener side: TLS 1.3 only, no client certificate requested."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.verify_mode = ssl.CERT_NONE
    _load_chain(context, identity)
    return context


def client_context(identity: NodeIdentity) -> ssl.SSLContext:
    """Dialer side: TLS 1.2-1.3, no verification, our certificate offered."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.maximum_version = ssl.TLSVersion.TLSv1_3
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    _load_chain(context, identity)
    return context
