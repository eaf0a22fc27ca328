import base64
import subprocess

import pytest

from axl.identity import (
    KeyFileError,
    NodeIdentity,
    address_for_key,
    bloom_transform,
    format_address,
    key_for_address_bytes,
    parse_peer_id,
    subnet_for_key,
    verify,
)
from vectors import load


@pytest.mark.parametrize("case", load("address")["vectors"], ids=lambda c: c["label"])
def test_address_vectors(case):
    expected = case["expected"]
    ident = NodeIdentity.from_seed(bytes.fromhex(case["input"]["seed"]))
    key = ident.public_key
    assert key.hex() == expected["public_key"]
    assert address_for_key(key).hex() == expected["address_bytes"]
    assert format_address(address_for_key(key)) == expected["address"]
    assert subnet_for_key(key).hex() == expected["subnet_prefix_bytes"]
    assert key_for_address_bytes(address_for_key(key)).hex() == expected["key_from_address"]
    assert key_for_address_bytes(subnet_for_key(key)).hex() == expected["key_from_subnet"]
    assert bloom_transform(key).hex() == expected["key_from_subnet"]


def test_pem_round_trip_readable_by_openssl(tmp_path):
    ident = NodeIdentity.generate()
    path = tmp_path / "key.pem"
    path.write_bytes(ident.pem())
    assert NodeIdentity.load_pem(path) == ident
    out = subprocess.run(["openssl", "pkey", "-in", str(path), "-noout", "-text"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "ED25519" in out.stdout.upper()


def test_openssl_generated_key_loads(tmp_path):
    path = tmp_path / "k.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(path)], check=True)
    assert len(NodeIdentity.load_pem(path).public_key) == 32


def test_bad_key_files(tmp_path):
    with pytest.raises(KeyFileError, match="cannot read"):
        NodeIdentity.load_pem(tmp_path / "missing.pem")
    junk = tmp_path / "junk.pem"
    junk.write_text("not a key")
    with pytest.raises(KeyFileError, match="not an unencrypted PEM"):
        NodeIdentity.load_pem(junk)


RFC8032_SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC8032_PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
RFC8032_SIGNATURE = bytes.fromhex(
    "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")


def test_rfc8032_test_1_signs_and_verifies():
    ident = NodeIdentity.from_seed(RFC8032_SEED)
    assert ident.public_key == RFC8032_PUBLIC
    assert ident.sign(b"") == RFC8032_SIGNATURE
    assert verify(RFC8032_PUBLIC, RFC8032_SIGNATURE, b"")


def test_verify_refuses_what_is_not_that_signature():
    ident = NodeIdentity.generate()
    signature = ident.sign(b"message")
    assert verify(ident.public_key, signature, b"message")
    assert not verify(ident.public_key, signature, b"messagE")
    assert not verify(NodeIdentity.generate().public_key, signature, b"message")
    assert not verify(ident.public_key, signature[:63], b"message")
    assert not verify(ident.public_key, signature[:63], signature[63:] + b"message")
    assert not verify(ident.public_key[:31], signature, b"message")


def test_pkcs8_v2_key_with_public_key_loads(tmp_path):
    """RFC 5958 OneAsymmetricKey (version 1) may carry the public key after the seed."""
    der = (bytes.fromhex("3051020101300506032b657004220420") + RFC8032_SEED
           + bytes.fromhex("812100") + RFC8032_PUBLIC)
    path = tmp_path / "v2.pem"
    path.write_bytes(b"-----BEGIN PRIVATE KEY-----\n" + base64.encodebytes(der) + b"-----END PRIVATE KEY-----\n")
    assert NodeIdentity.load_pem(path).public_key == RFC8032_PUBLIC


def test_other_keys_are_refused_by_name(tmp_path):
    x25519 = tmp_path / "x25519.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "x25519", "-out", str(x25519)], check=True)
    with pytest.raises(KeyFileError, match="does not hold an ed25519 key"):
        NodeIdentity.load_pem(x25519)
    encrypted = tmp_path / "encrypted.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-aes256", "-pass", "pass:x",
                    "-out", str(encrypted)], check=True)
    with pytest.raises(KeyFileError, match="not an unencrypted PEM"):
        NodeIdentity.load_pem(encrypted)
    bad_base64 = tmp_path / "bad-base64.pem"
    bad_base64.write_bytes(NodeIdentity.generate().pem().replace(b"\n-----END", b"A==\n-----END"))
    with pytest.raises(KeyFileError, match="bad base64"):
        NodeIdentity.load_pem(bad_base64)
    truncated = tmp_path / "truncated.pem"
    der = base64.b64decode(b"".join(NodeIdentity.generate().pem().splitlines()[1:-1]))[:-4]
    truncated.write_bytes(b"-----BEGIN PRIVATE KEY-----\n" + base64.encodebytes(der) + b"-----END PRIVATE KEY-----\n")
    with pytest.raises(KeyFileError, match="not an unencrypted PEM private key$"):
        NodeIdentity.load_pem(truncated)


def test_parse_peer_id():
    assert parse_peer_id("ab" * 32) == b"\xab" * 32
    for bad in ("ab" * 31, "zz" * 32, "", "ab " * 16 + "ab" * 8, "ab" * 31 + "  ", "\u00e9" * 64):
        with pytest.raises(ValueError):
            parse_peer_id(bad)
