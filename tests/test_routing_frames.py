"""Frame bodies against frames.json, tree.json (synthetic chain) and bloom.json."""

from __future__ import annotations

import pytest

from axl.identity import NodeIdentity, bloom_transform
from axl.routing.bloom import BloomFilter, bit_positions
from axl.routing.frames import (
    Announce,
    PathBroken,
    PathLookup,
    PathNotify,
    SigReq,
    SigRes,
    Traffic,
    decode_body,
    notify_info_bytes,
    sig_bytes,
    split_frame,
    traffic_frame,
)
from axl.routing.router import tree_distance
from axl.wire import DecodeError, encode_frame
from vectors import load

FRAMES = load("frames")
KEYS = {name: bytes.fromhex(entry["public_key"]) for name, entry in FRAMES["keys"].items()}
SEEDS = {bytes.fromhex(e["public_key"]): bytes.fromhex(e["seed"]) for e in FRAMES["keys"].values()}


def _signer(key: bytes) -> NodeIdentity:
    return NodeIdentity.from_seed(SEEDS[key])


def _expected(decoded: dict):
    """The dataclass the vector's `decoded` fields describe."""
    h = bytes.fromhex
    kind = decoded["name"]
    if kind == "SigReq":
        return SigReq(decoded["seq"], decoded["nonce"])
    if kind == "SigRes":
        return SigRes(decoded["seq"], decoded["nonce"], decoded["port"], h(decoded["psig"]))
    if kind == "Announce":
        return Announce(h(decoded["key"]), h(decoded["parent"]), decoded["seq"], decoded["nonce"],
                        decoded["port"], h(decoded["psig"]), h(decoded["sig"]))
    if kind == "PathLookup":
        return PathLookup(h(decoded["source"]), h(decoded["dest"]), decoded["from"])
    if kind == "PathNotify":
        return PathNotify(decoded["path"], decoded["watermark"], h(decoded["source"]), h(decoded["dest"]),
                          decoded["info_seq"], decoded["info_path"], h(decoded["info_sig"]))
    if kind == "PathBroken":
        return PathBroken(decoded["path"], decoded["watermark"], h(decoded["source"]), h(decoded["dest"]))
    if kind == "Traffic":
        return Traffic(decoded["path"], decoded["from"], h(decoded["source"]), h(decoded["dest"]),
                       decoded["watermark"], h(decoded["payload"]))
    raise AssertionError(kind)


ROUTING_FRAMES = [f for f in FRAMES["frames"] if 2 <= f["decoded"]["type"] <= 9]


@pytest.mark.parametrize("vector", ROUTING_FRAMES, ids=[f["note"][:50] for f in ROUTING_FRAMES])
def test_frame_decodes_and_reencodes(vector):
    frame = bytes.fromhex(vector["frame_hex"])
    ftype, body = split_frame(frame)
    assert ftype == vector["decoded"]["type"]
    decoded = decode_body(ftype, body)
    if ftype == 5:
        words = decoded.words()
        nonzero = {str(j): f"{w:016x}" for j, w in enumerate(words) if w}
        assert nonzero == vector["decoded"]["words_nonzero"]
        assert bin(decoded.bits).count("1") == vector["decoded"]["bits_set"]
    else:
        assert decoded == _expected(vector["decoded"])
    assert encode_frame(ftype, decoded.encode()) == frame


TRAFFIC_FRAMES = [f for f in ROUTING_FRAMES if f["decoded"]["type"] == 9]


@pytest.mark.parametrize("vector", TRAFFIC_FRAMES, ids=[f["note"][:50] for f in TRAFFIC_FRAMES])
def test_traffic_encodes_with_a_lowered_watermark(vector):
    """A forwarder writes its own watermark; only that varint may change."""
    traffic = decode_body(*split_frame(bytes.fromhex(vector["frame_hex"])))
    for watermark in (0, 1, 300, traffic.watermark):
        lowered = Traffic(traffic.path, traffic.from_path, traffic.source, traffic.dest, watermark,
                          traffic.payload)
        assert traffic.encode(watermark) == lowered.encode()
        assert Traffic.decode(traffic.encode(watermark)).watermark == watermark


@pytest.mark.parametrize("vector", TRAFFIC_FRAMES, ids=[f["note"][:50] for f in TRAFFIC_FRAMES])
def test_a_decoded_traffic_payload_is_a_read_only_view_of_the_frame_body(vector):
    _, body = split_frame(bytes.fromhex(vector["frame_hex"]))
    payload = Traffic.decode(body).payload
    assert isinstance(payload, memoryview) and payload.readonly and payload.obj is body
    assert body.endswith(payload)


@pytest.mark.parametrize("vector", TRAFFIC_FRAMES, ids=[f["note"][:50] for f in TRAFFIC_FRAMES])
@pytest.mark.parametrize("payload_size", [None, 100, 65_600])
def test_traffic_frame_in_one_join_is_the_framed_body(vector, payload_size):
    """The forwarding path builds the frame from head and payload directly;
    it must be byte for byte what framing the encoded body gives."""
    frame = bytes.fromhex(vector["frame_hex"])
    traffic = decode_body(*split_frame(frame))
    if payload_size is not None:
        traffic = Traffic(traffic.path, traffic.from_path, traffic.source, traffic.dest,
                          traffic.watermark, memoryview(bytes(range(256)) * 257)[:payload_size])
    else:
        assert traffic_frame(traffic.head(), traffic.payload) == frame
    for watermark in (0, 300, traffic.watermark):
        assert (traffic_frame(traffic.head(watermark), traffic.payload)
                == encode_frame(9, traffic.encode(watermark)))


@pytest.mark.parametrize("vector", ROUTING_FRAMES, ids=[f["note"][:50] for f in ROUTING_FRAMES])
def test_signatures_recompute_from_seeds(vector):
    ftype, body = split_frame(bytes.fromhex(vector["frame_hex"]))
    frame = decode_body(ftype, body)
    if isinstance(frame, SigRes):
        # The responder signs for the requester: find the pair by trying the known keys.
        matches = [
            (node, parent) for node in SEEDS for parent in SEEDS
            if _signer(parent).sign(sig_bytes(node, parent, frame.seq, frame.nonce, frame.port)) == frame.psig
        ]
        assert len(matches) == 1
    elif isinstance(frame, Announce):
        signed = frame.signed_bytes()
        assert _signer(frame.key).sign(signed) == frame.sig
        assert _signer(frame.parent).sign(signed) == frame.psig
        assert frame.check()
    elif isinstance(frame, PathNotify):
        signed = notify_info_bytes(frame.info_seq, frame.info_path)
        assert _signer(frame.source).sign(signed) == frame.info_sig
        assert frame.check()


def test_bad_announce_signature_and_bloom_rejected():
    bad = [f for f in FRAMES["bad_frames"] if f.get("go_result") == "closed"]
    assert bad
    announce = next(f for f in ROUTING_FRAMES if f["decoded"]["type"] == 4)
    _, body = split_frame(bytes.fromhex(announce["frame_hex"]))
    flipped = body[:-1] + bytes((body[-1] ^ 1,))
    assert not Announce.decode(flipped).check()
    with pytest.raises(DecodeError):
        Announce.decode(body + b"\x00")
    invalid = load("bloom")["invalid"][0]
    ftype, bloom_body = split_frame(bytes.fromhex(invalid["frame_hex"]))
    with pytest.raises(DecodeError):
        decode_body(ftype, bloom_body)


@pytest.mark.parametrize("body", [
    b"",                      # SigReq with nothing
    b"\x01",                  # SigReq missing nonce
    b"\x01\x02\x03",          # trailing byte
])
def test_sigreq_exact_consumption(body):
    with pytest.raises(DecodeError):
        SigReq.decode(body)


def test_truncated_bodies_rejected():
    for vector in ROUTING_FRAMES:
        ftype, body = split_frame(bytes.fromhex(vector["frame_hex"]))
        if ftype == 9:
            continue
        with pytest.raises(DecodeError):
            decode_body(ftype, body[:-1])
    with pytest.raises(DecodeError):
        decode_body(10, b"")


def test_zero_port_cannot_be_encoded():
    with pytest.raises(ValueError):
        PathLookup(bytes(32), bytes(32), [1, 0]).encode()


TREE = load("tree")
TREE_KEYS = {name: bytes.fromhex(e["public_key"]) for name, e in TREE["keys"].items()}
TREE_SEEDS = {name: bytes.fromhex(e["seed"]) for name, e in TREE["keys"].items()}


def test_synthetic_chain_signatures_and_frames():
    chain = TREE["synthetic_chain"]
    for info in chain["infos"]:
        key, parent = TREE_KEYS[info["key"]], TREE_KEYS[info["parent"]]
        signed = sig_bytes(key, parent, info["seq"], info["nonce"], info["port"])
        assert signed.hex() == info["sig_bytes"]
        psig = NodeIdentity.from_seed(TREE_SEEDS[info["parent"]]).sign(signed)
        sig = NodeIdentity.from_seed(TREE_SEEDS[info["key"]]).sign(signed)
        assert psig.hex() == info["psig"] and sig.hex() == info["sig"]
        ann = Announce(key, parent, info["seq"], info["nonce"], info["port"], psig, sig)
        assert encode_frame(4, ann.encode()).hex() == info["announce_frame_hex"]
        assert ann.check()


def test_synthetic_chain_distances():
    coords = TREE["synthetic_chain"]["expected_coords"]
    for pair, expected in TREE["synthetic_chain"]["expected_distances"].items():
        a, b = pair.split("-")
        assert tree_distance(coords[a], coords[b]) == expected


BLOOM = load("bloom")


@pytest.mark.parametrize("entry", BLOOM["filters"], ids=[f["label"] for f in BLOOM["filters"]])
def test_bloom_vectors(entry):
    bloom = BloomFilter()
    for key_entry in entry["keys"]:
        key = bytes.fromhex(key_entry["public_key"])
        xform = bloom_transform(key)
        assert xform.hex() == key_entry["transformed_key"]
        assert bit_positions(xform) == key_entry["bit_positions"]
        bloom.add(xform)
        assert bloom.contains(xform)
    assert [f"{w:016x}" for w in bloom.words()] == entry["words"]
    wire = bloom.encode()
    assert wire.hex() == entry["wire_hex"] and len(wire) == entry["wire_len"]
    assert BloomFilter.decode(wire) == bloom


def test_bloom_flags1_encoding():
    vector = BLOOM["encoding_only_vector"]
    bloom = BloomFilter.from_words([int(w, 16) for w in vector["words"]])
    assert bloom.encode().hex() == vector["wire_hex"]
    assert BloomFilter.decode(bytes.fromhex(vector["wire_hex"])) == bloom


def test_bloom_union_and_equality():
    a, b = BloomFilter(), BloomFilter()
    a.add(b"x" * 32)
    b.add(b"y" * 32)
    both = a.union(b)
    assert both.contains(b"x" * 32) and both.contains(b"y" * 32)
    assert both != a and a.copy() == a
