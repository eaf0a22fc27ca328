"""TLS for `tls://` links.

Yggdrasil verifies nothing at the TLS layer: the peer's identity comes from
the meta handshake. The certificate has to look like Go's (self-signed
Ed25519, CN = hex key) so Go peers and tools see what they expect.

Our dialers go one step further than Go's. They require TLS 1.3 (Go's
listeners offer nothing older, so only non-Yggdrasil servers are lost), and
a `tls://` or `sockstls://` dialer checks that the server's certificate
holds the key its meta handshake claims: Go derives the certificate from the
node key, so a server that replays another node's meta (to pass `?key=`
pinning) cannot also present that node's certificate, whose private key it
lacks (TLS 1.3 makes the server sign the handshake with it).
"""

from __future__ import annotations

import datetime
import os
import ssl
import tempfile
from pathlib import Path

from axl.der import OID_ED25519, element, encode
from axl.identity import NodeIdentity

NOT_AFTER = datetime.datetime(9999, 12, 31, 23, 59, 59, tzinfo=datetime.timezone.utc)

# DER pieces of the fixed parts; axl.der says why the certificate is built by hand.
OID_COMMON_NAME = bytes.fromhex("0603550403")
VERSION_3 = bytes.fromhex("a003020102")
SERIAL_1 = bytes.fromhex("020101")
CRITICAL = bytes.fromhex("0101ff")
# digitalSignature | keyEncipherment, as Go's template asks
KEY_USAGE = bytes.fromhex("0603551d0f") + CRITICAL + bytes.fromhex("0404030205a0")
EXT_KEY_USAGE_SERVER_AUTH = bytes.fromhex("0603551d25040c300a06082b06010505070301")
BASIC_CONSTRAINTS_NOT_CA = bytes.fromhex("0603551d13") + CRITICAL + bytes.fromhex("04023000")


def _der_time(when: datetime.datetime) -> bytes:
    """RFC 5280: UTCTime through 2049, GeneralizedTime from 2050."""
    when = when.astimezone(datetime.timezone.utc)
    if when.year < 2050:
        return encode(0x17, when.strftime("%y%m%d%H%M%SZ").encode())
    return encode(0x18, when.strftime("%Y%m%d%H%M%SZ").encode())


def make_certificate(identity: NodeIdentity, now: datetime.datetime | None = None) -> bytes:
    """Self-signed certificate (DER) with the fields Yggdrasil's own one carries."""
    cn = identity.public_key.hex().encode()
    name = encode(0x30, encode(0x31, encode(0x30, OID_COMMON_NAME + encode(0x0C, cn))))
    not_before = now or datetime.datetime.now(datetime.timezone.utc)
    algorithm = encode(0x30, OID_ED25519)
    extensions = b"".join(encode(0x30, ext) for ext in (
        KEY_USAGE, EXT_KEY_USAGE_SERVER_AUTH, BASIC_CONSTRAINTS_NOT_CA))
    tbs = encode(0x30, b"".join((
        VERSION_3, SERIAL_1, algorithm, name,
        encode(0x30, _der_time(not_before) + _der_time(NOT_AFTER)),
        name,
        encode(0x30, algorithm + encode(0x03, b"\0" + identity.public_key)),
        encode(0xA3, encode(0x30, extensions)),
    )))
    return encode(0x30, tbs + algorithm + encode(0x03, b"\0" + identity.sign(tbs)))


def certificate_ed25519_key(der: bytes) -> bytes | None:
    """The Ed25519 public key a DER certificate carries, None for any other key or bad DER."""
    try:
        _, tbs, _ = element(der, element(der, 0)[1])
        tag, _, end = element(der, tbs)
        pos = end if tag == 0xA0 else tbs  # the optional version
        for _ in range(5):  # serial, signature algorithm, issuer, validity, subject
            pos = element(der, pos)[2]
        _, spki, _ = element(der, pos)
        _, algorithm, algorithm_end = element(der, spki)
        tag, key, key_end = element(der, algorithm_end)
    except ValueError:
        return None
    if der[algorithm:algorithm_end] != OID_ED25519 or tag != 0x03 or der[key:key_end][:1] != b"\0":
        return None
    return der[key + 1:key_end] if key_end - key == 33 else None


def peer_certificate_key(transport: object) -> bytes | None:
    """The Ed25519 key of the certificate the other end of a TLS transport presented."""
    get_extra_info = getattr(transport, "get_extra_info", None)
    ssl_object = get_extra_info("ssl_object") if get_extra_info is not None else None
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    return certificate_ed25519_key(der) if der else None


def _load_chain(context: ssl.SSLContext, identity: NodeIdentity) -> None:
    """`ssl` only loads keys from files: write them into a private
    directory and remove it as soon as they are loaded."""
    cert_pem = ssl.DER_cert_to_PEM_cert(make_certificate(identity)).encode()
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
    """Dialer side: TLS 1.3 only, no chain verification, our certificate offered."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    _load_chain(context, identity)
    return context
