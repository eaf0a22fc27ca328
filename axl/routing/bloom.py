"""Bloom filters as ironwood uses them to steer path lookups along the tree.

The filter must match Go's bits-and-blooms/bloom v3.7.0 bit for bit: peers
forward a lookup only to neighbours whose filter claims the destination, so a
single wrong bit position makes a node unreachable. The 8192 bits are kept as
one Python int (bit b of the int is bit b%64 of word b//64), which makes
union, equality and membership single big-int operations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import mmh3

from axl.wire import DecodeError

BLOOM_WORDS = 128
BLOOM_BITS = BLOOM_WORDS * 64
BLOOM_HASHES = 8
FLAG_BYTES = BLOOM_WORDS // 8
BLOOM_BYTES = BLOOM_WORDS * 8
WORD_MASK = (1 << 64) - 1
_U64: Final = 1 << 64
_ZERO_WORD = bytes(8)
_ONES_WORD = b"\xff" * 8


def bit_positions(key: bytes) -> list[int]:
    """The k=8 bit indexes bits-and-blooms derives from two 128-bit murmur hashes."""
    h1, h2 = mmh3.hash64(key, 0, True, False)
    h3, h4 = mmh3.hash64(key + b"\x01", 0, True, False)
    hashes = (h1, h2, h3, h4)
    positions = []
    for i in range(BLOOM_HASHES):
        step = hashes[2 + ((i + i % 2) % 4) // 2]
        positions.append(((hashes[i % 2] + i * step) % _U64) % BLOOM_BITS)
    return positions


def _mask_for(key: bytes) -> int:
    mask = 0
    for bit in bit_positions(key):
        mask |= 1 << bit
    return mask


@dataclass(eq=True)
class BloomFilter:
    """A fixed-size (8192 bit, k=8) filter; `bits` holds all 128 words."""

    bits: int = 0

    def add(self, key: bytes) -> None:
        self.bits |= _mask_for(key)

    def contains(self, key: bytes) -> bool:
        mask = _mask_for(key)
        return self.bits & mask == mask

    def union(self, other: "BloomFilter") -> "BloomFilter":
        return BloomFilter(self.bits | other.bits)

    def update(self, other: "BloomFilter") -> None:
        self.bits |= other.bits

    def copy(self) -> "BloomFilter":
        return BloomFilter(self.bits)

    def words(self) -> list[int]:
        bits = self.bits
        return [(bits >> (64 * j)) & WORD_MASK for j in range(BLOOM_WORDS)]

    @classmethod
    def from_words(cls, words: list[int]) -> "BloomFilter":
        if len(words) != BLOOM_WORDS:
            raise ValueError(f"a filter has {BLOOM_WORDS} words, got {len(words)}")
        bits = 0
        for j, word in enumerate(words):
            bits |= (word & WORD_MASK) << (64 * j)
        return cls(bits)

    def encode(self) -> bytes:
        """Wire body: flags0 (all-zero words), flags1 (all-one words), the rest big-endian."""
        raw = self.bits.to_bytes(BLOOM_BYTES, "big")  # word j sits at chunk 127 - j
        flags0 = flags1 = 0
        kept = []
        for j in range(BLOOM_WORDS):
            word = raw[BLOOM_BYTES - 8 * (j + 1):BLOOM_BYTES - 8 * j]
            if word == _ZERO_WORD:
                flags0 |= 1 << (BLOOM_WORDS - 1 - j)
            elif word == _ONES_WORD:
                flags1 |= 1 << (BLOOM_WORDS - 1 - j)
            else:
                kept.append(word)
        return flags0.to_bytes(FLAG_BYTES, "big") + flags1.to_bytes(FLAG_BYTES, "big") + b"".join(kept)

    @classmethod
    def decode(cls, body: bytes) -> "BloomFilter":
        """Inverse of encode; the body must hold exactly the words the flags leave out."""
        if len(body) < 2 * FLAG_BYTES:
            raise DecodeError(f"bloom needs {2 * FLAG_BYTES} flag bytes, have {len(body)}")
        flags0 = int.from_bytes(body[:FLAG_BYTES], "big")
        flags1 = int.from_bytes(body[FLAG_BYTES:2 * FLAG_BYTES], "big")
        if flags0 & flags1:
            j = BLOOM_WORDS - (flags0 & flags1).bit_length()
            raise DecodeError(f"bloom word {j} flagged both all-zero and all-ones")
        expected = 2 * FLAG_BYTES + 8 * (BLOOM_WORDS - (flags0 | flags1).bit_count())
        if len(body) != expected:
            raise DecodeError(f"bloom body is {len(body)} bytes, its flags say {expected}")
        chunks = []
        pos = 2 * FLAG_BYTES
        for j in range(BLOOM_WORDS):
            bit = 1 << (BLOOM_WORDS - 1 - j)
            if flags0 & bit:
                chunks.append(_ZERO_WORD)
            elif flags1 & bit:
                chunks.append(_ONES_WORD)
            else:
                chunks.append(body[pos:pos + 8])
                pos += 8
        chunks.reverse()
        return cls(int.from_bytes(b"".join(chunks), "big"))


def key_mask(key: bytes) -> int:
    """The key's 8 bits as an int mask, to test many filters for one key cheaply."""
    return _mask_for(key)


def matches_mask(bloom: BloomFilter, mask: int) -> bool:
    return bloom.bits & mask == mask
