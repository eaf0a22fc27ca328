"""Shared hypothesis settings and byte-mutation strategies for the fuzz tests.

Network input is either noise or a valid message someone tampered with; the
second kind reaches much deeper into a decoder, so every fuzz test draws
from both. The settings are derandomized so a CI run is reproducible.
"""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Callable, Sequence

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# `make fuzz` raises the count (AXL_FUZZ_EXAMPLES) and drops derandomize, so a
# long run explores new inputs; the suite's short run stays deterministic.
_LONG_RUN = int(os.environ.get("AXL_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=_LONG_RUN or 200, deadline=None, derandomize=not _LONG_RUN, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def mutation_of(draw: st.DrawFn, original: bytes) -> bytes:
    """`original` after one to four edits: bit flips, byte overwrites,
    insertions, deletions or a truncation."""
    data = bytearray(original)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        edit = draw(st.sampled_from(("flip", "set", "insert", "delete", "truncate")))
        pos = draw(st.integers(min_value=0, max_value=len(data)))
        if edit == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif edit == "truncate":
            del data[pos:]
        elif pos == len(data):
            continue
        elif edit == "flip":
            data[pos] ^= 1 << draw(st.integers(min_value=0, max_value=7))
        elif edit == "set":
            data[pos] = draw(st.integers(min_value=0, max_value=255))
        else:
            del data[pos:pos + draw(st.integers(min_value=1, max_value=8))]
    return bytes(data)


def noise_or_mutation(valid: Sequence[bytes], max_noise: int = 256) -> st.SearchStrategy[bytes]:
    """Random bytes, or a mutation of one of the `valid` messages."""
    mutated = st.sampled_from(list(valid)).flatmap(mutation_of)
    return st.one_of(st.binary(max_size=max_noise), mutated)


def chunkings(data: bytes) -> st.SearchStrategy[list[bytes]]:
    """`data` cut at a random set of positions (possibly none)."""
    cuts = st.lists(st.integers(min_value=0, max_value=len(data)), max_size=12)
    return cuts.map(lambda points: _split(data, sorted(set(points))))


def with_chunkings(streams: st.SearchStrategy[bytes]) -> st.SearchStrategy[tuple[bytes, list[bytes]]]:
    """A stream from `streams` and a random cutting of it."""
    return streams.flatmap(lambda data: st.tuples(st.just(data), chunkings(data)))


def feed_all(feed: Callable[[bytes], list], chunks: Sequence[bytes],
             error: type[Exception]) -> tuple[list, bool]:
    """What `feed` returns for each chunk in turn, joined, and whether it
    raised `error` (which ends the stream; anything else propagates)."""
    found: list = []
    try:
        for chunk in chunks:
            found += feed(chunk)
    except error:
        return found, True
    return found, False


def _split(data: bytes, points: list[int]) -> list[bytes]:
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


def peak_allocation(action: Callable[[], object]) -> int:
    """Peak bytes traced while `action` runs (its exceptions propagate)."""
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
