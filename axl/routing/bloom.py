"""Bloom filters as ironwood uses them to steer path lookups along the tree.

The filter must match Go's bits-and-blooms/bloom v3.7.0 bit for bit: peers
forward a lookup only to neighbours whose filter claims the destination, so a
single wrong bit position makes a node unreachable. The 8192 bits are kept as
one Python int (bit b of the int is bit b%64 of word b//64), which makes
union, equality and membership single big-int operations.
"""

from __future__ import annotations

from dataclasses import dataclass

import mmh3

from axl.wire import DecodeError, Reader

BLOOM_WORDS = 128
BLOOM_BITS = BLOOM_WORDS * 64
BLOOM_HASHES = 8
FLAG_BYTES = BLOOM_WORDS // 8
WORD_MASK = (1 << 64) - 1
_U64 = 1 << 64


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
        flags0 = bytearray(FLAG_BYTES)
        flags1 = bytearray(FLAG_BYTES)
        kept = bytearray()
        for j, word in enumerate(self.words()):
            if word == 0:
                flags0[j // 8] |= 0x80 >> (j % 8)
            elif word == WORD_MASK:
                flags1[j // 8] |= 0x80 >> (j % 8)
            else:
                kept += word.to_bytes(8, "big")
        return bytes(flags0) + bytes(flags1) + bytes(kept)

    @classmethod
    def decode(cls, body: bytes) -> "BloomFilter":
        reader = Reader(body)
        flags0 = reader.take(FLAG_BYTES)
        flags1 = reader.take(FLAG_BYTES)
        words = []
        for j in range(BLOOM_WORDS):
            bit = 0x80 >> (j % 8)
            zero = flags0[j // 8] & bit
            ones = flags1[j // 8] & bit
            if zero and ones:
                raise DecodeError(f"bloom word {j} flagged both all-zero and all-ones")
            if zero:
                words.append(0)
            elif ones:
                words.append(WORD_MASK)
            else:
                words.append(int.from_bytes(reader.take(8), "big"))
        reader.finish()
        return cls.from_words(words)


def key_mask(key: bytes) -> int:
    """The key's 8 bits as an int mask, to test many filters for one key cheaply."""
    return _mask_for(key)


def matches_mask(bloom: BloomFilter, mask: int) -> bool:
    return bloom.bits & mask == mask
