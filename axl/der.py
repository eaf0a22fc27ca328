"""The few DER (X.690) pieces the node writes and reads by hand.

A node's certificate and its PKCS#8 key file have fixed shapes, so encoding
and walking them here keeps `cryptography` (several MB resident, a second
copy of OpenSSL) out of every node; only quic:// links load it.
"""

from __future__ import annotations

OID_ED25519 = bytes.fromhex("06032b6570")


def encode(tag: int, content: bytes) -> bytes:
    """One DER TLV (definite length, short or long form)."""
    size = len(content)
    if size < 0x80:
        return bytes((tag, size)) + content
    length = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes((tag, 0x80 | len(length))) + length + content


def element(der: bytes, pos: int) -> tuple[int, int, int]:
    """Tag, content start and content end of the DER element at `pos`; ValueError if it overruns."""
    if pos + 2 > len(der):
        raise ValueError("truncated DER")
    tag, first, start = der[pos], der[pos + 1], pos + 2
    size = first
    if first >= 0x80:
        count = first & 0x7F
        if not 1 <= count <= 4:
            raise ValueError("bad DER length")
        size = int.from_bytes(der[start:start + count], "big")
        start += count
    if start + size > len(der):
        raise ValueError("truncated DER")
    return tag, start, start + size
