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


def test_parse_peer_id():
    assert parse_peer_id("ab" * 32) == b"\xab" * 32
    for bad in ("ab" * 31, "zz" * 32, "", "ab " * 16 + "ab" * 8):
        with pytest.raises(ValueError):
            parse_peer_id(bad)
