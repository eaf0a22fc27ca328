"""Property tests for routing: frame bodies of types 2-9, blooms, and the
router fed hostile frames on a live link. The only failure a peer may cause
is a DecodeError (the link closes); nothing else may escape."""

from __future__ import annotations

import hashlib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from vectors import load

from axl.identity import NodeIdentity
from axl.routing.actions import SendFrame, SendTraffic
from axl.routing.bloom import BLOOM_BITS, BLOOM_WORDS, WORD_MASK, BloomFilter
from axl.routing.frames import (
    FRAME_DECODERS, TYPE_ANNOUNCE, TYPE_BLOOM, TYPE_PATH_LOOKUP, Announce, PathLookup, decode_body,
    sig_bytes, split_frame,
)
from axl.routing.router import Router
from axl.wire import DecodeError, encode_frame, encode_uvarint
from fuzzing import FUZZ, noise_or_mutation, peak_allocation

NOW = 1_700_000_000.0
ROUTING_TYPES = sorted(FRAME_DECODERS)
CAPTURED_FRAMES = [bytes.fromhex(v["frame_hex"]) for v in load("frames")["frames"]]
CAPTURED = [(ftype, body) for ftype, body in map(split_frame, CAPTURED_FRAMES) if ftype in FRAME_DECODERS]
BLOOM_BODIES = [bytes.fromhex(f["wire_hex"]) for f in load("bloom")["filters"]]


def _identity(n: int) -> NodeIdentity:
    return NodeIdentity.from_seed(hashlib.sha256(f"fuzz-routing/{n}".encode()).digest())


class _Line:
    """Three routers in a line, A - B - C, wired by a synchronous pump that
    records every frame each link end receives (the corpus mutations start from)."""

    def __init__(self) -> None:
        self.now = NOW
        self.routers = [Router(_identity(n), now=NOW, rng=random.Random(n)) for n in range(3)]
        self.ends = {1: (0, 2), 2: (1, 1), 3: (1, 4), 4: (2, 3)}  # link id -> (node, far link id)
        self.received: dict[tuple[int, int], list[tuple[int, bytes]]] = {
            (node, link_id): [] for link_id, (node, _) in self.ends.items()
        }
        added = [
            (node, self.routers[node].add_link(link_id, self.routers[other].key, 0, NOW))
            for node, link_id, other in ((0, 1, 1), (1, 2, 0), (1, 3, 2), (2, 4, 1))
        ]
        for node, actions in added:
            self._pump(node, actions)

    def _pump(self, node: int, actions: list) -> None:
        queue = [(node, action) for action in actions]
        while queue:
            sender, action = queue.pop(0)
            if not isinstance(action, (SendFrame, SendTraffic)):
                continue
            receiver, link_id = self._far_end(sender, action.link_id)
            ftype, body = split_frame(action.frame)
            self.received[(receiver, link_id)].append((ftype, body))
            replies = self.routers[receiver].handle_frame(link_id, ftype, body, self.now)
            queue += [(receiver, reply) for reply in replies]

    def _far_end(self, sender: int, link_id: int) -> tuple[int, int]:
        """(receiving node, its id for the link) of `sender`'s link `link_id`."""
        node, far_link = self.ends[link_id]
        assert node == sender
        return self.ends[far_link][0], far_link

    def run(self, seconds: int) -> None:
        for _ in range(seconds):
            self.now += 1
            for node, router in enumerate(self.routers):
                self._pump(node, router.tick(self.now))

    def send(self, src: int, dst: int, payload: bytes) -> None:
        self._pump(src, self.routers[src].send(self.routers[dst].key, payload, self.now))


def _build_line() -> _Line:
    line = _Line()
    line.run(4)
    line.send(0, 2, b"first")
    line.run(2)
    line.send(0, 2, b"second")
    line.send(2, 0, b"reply")
    line.run(1)
    return line


# Each case takes a router from a line built again (6 ms), not a copy of
# LINE's: the compiled build's Router cannot be copied.
LINE = _build_line()
LINE_CORPUS = [frame for frames in LINE.received.values() for frame in frames]


def test_the_line_converged_and_carried_every_kind_of_frame():
    assert LINE.routers[1].root() == LINE.routers[2].root() == LINE.routers[0].root()
    assert {ftype for ftype, _ in LINE_CORPUS} >= {2, 3, 4, 5, 6, 7, 9}


def _bodies_for(ftype: int) -> list[bytes]:
    seeds = [body for t, body in CAPTURED + LINE_CORPUS if t == ftype]
    return seeds + (BLOOM_BODIES if ftype == TYPE_BLOOM else [])


typed_bodies = st.sampled_from(ROUTING_TYPES).flatmap(
    lambda ftype: st.tuples(st.just(ftype), noise_or_mutation(_bodies_for(ftype), 400))
)


@FUZZ
@given(typed_bodies)
def test_decode_body_fails_only_with_decode_error_and_reencodes_stably(case):
    ftype, body = case
    try:
        decoded = decode_body(ftype, body)
    except DecodeError:
        return
    again = decode_body(ftype, decoded.encode())
    assert again == decoded
    assert again.encode() == decoded.encode()


@pytest.mark.parametrize("ftype,body", CAPTURED + LINE_CORPUS[::4],
                         ids=lambda v: str(v) if isinstance(v, int) else f"{len(v)}B")
def test_valid_bodies_reencode_byte_for_byte(ftype, body):
    assert decode_body(ftype, body).encode() == body
    assert split_frame(encode_frame(ftype, body)) == (ftype, body)


@settings(FUZZ, max_examples=50)
@given(st.randoms(use_true_random=False))
def test_bloom_words_round_trip(rng):
    words = [rng.choice((0, WORD_MASK, rng.getrandbits(64))) for _ in range(BLOOM_WORDS)]
    bloom = BloomFilter.from_words(words)
    assert BloomFilter.decode(bloom.encode()) == bloom
    assert bloom.words() == words


@FUZZ
@given(noise_or_mutation(CAPTURED_FRAMES))
def test_split_frame_fails_only_with_decode_error(frame):
    try:
        ftype, body = split_frame(frame)
    except DecodeError:
        return
    assert split_frame(encode_frame(ftype, body)) == (ftype, body)


link_ends = st.sampled_from(sorted(LINE.received))


def _frames_for_end(end: tuple[int, int]) -> st.SearchStrategy[tuple[int, tuple[int, bytes]]]:
    seen = [(ftype, body) for ftype, body in LINE.received[end] if ftype in FRAME_DECODERS]
    mutated = st.sampled_from(seen).flatmap(
        lambda frame: st.tuples(st.just(frame[0]), noise_or_mutation([frame[1]], 64)))
    any_type = st.tuples(st.integers(min_value=0, max_value=255), st.binary(max_size=64))
    return st.tuples(st.just(end), st.one_of(mutated, typed_bodies, any_type))


@FUZZ
@given(link_ends.flatmap(_frames_for_end))
def test_router_on_a_live_link_raises_only_decode_error(case):
    (node, link_id), (ftype, body) = case
    router = _build_line().routers[node]
    try:
        actions = router.handle_frame(link_id, ftype, body, LINE.now)
    except DecodeError:
        return
    for action in actions:
        if isinstance(action, (SendFrame, SendTraffic)):
            decode_body(*split_frame(action.frame))
    router.tick(LINE.now + 1)


@pytest.mark.parametrize("ftype", ROUTING_TYPES)
def test_frame_claiming_two_gigabytes_is_refused_without_allocating(ftype):
    frame = encode_uvarint(1 << 31) + bytes((ftype,)) + bytes(8)
    assert peak_allocation(lambda: pytest.raises(DecodeError, split_frame, frame)) < 64 * 1024


POOL = [_identity(n) for n in range(3, 7)] + [_identity(n) for n in range(3)]


@st.composite
def signed_announces(draw: st.DrawFn) -> tuple[int, bytes]:
    """A correctly signed Announce with arbitrary tree fields: it passes the
    signature check, so it reaches the merge rule and parent selection."""
    node, parent = draw(st.sampled_from(POOL)), draw(st.sampled_from(POOL))
    seq = draw(st.integers(min_value=0, max_value=(1 << 64) - 1))
    nonce = draw(st.integers(min_value=0, max_value=(1 << 64) - 1))
    port = 0 if node is parent else draw(st.integers(min_value=1, max_value=1 << 20))
    signed = sig_bytes(node.public_key, parent.public_key, seq, nonce, port)
    ann = Announce(node.public_key, parent.public_key, seq, nonce, port,
                   parent.sign(signed), node.sign(signed))
    return TYPE_ANNOUNCE, ann.encode()


random_blooms = st.randoms(use_true_random=False).map(
    lambda rng: (TYPE_BLOOM, BloomFilter(rng.getrandbits(BLOOM_BITS) & rng.getrandbits(BLOOM_BITS)).encode())
)


@settings(FUZZ, max_examples=60)
@given(link_ends,
       st.lists(st.one_of(signed_announces(), random_blooms, typed_bodies), min_size=1, max_size=5))
def test_router_survives_sequences_of_well_signed_frames(end, frames):
    node, link_id = end
    router = _build_line().routers[node]
    now = LINE.now
    for ftype, body in frames:
        now += 0.5
        try:
            router.handle_frame(link_id, ftype, body, now)
        except DecodeError:
            continue
        router.tick(now)
    router.send(LINE.routers[(node + 2) % 3].key, b"after", now)
    for _ in range(3):
        now += 1
        router.tick(now)
    assert router.root() <= router.key  # a worse root is left within two ticks


def test_lookup_for_the_all_zero_key_raises_only_decode_error():
    router = _build_line().routers[1]
    lookup = PathLookup(LINE.routers[0].key, bytes(32), [1])
    try:
        router.handle_frame(2, TYPE_PATH_LOOKUP, lookup.encode(), LINE.now)
    except DecodeError:
        pass
