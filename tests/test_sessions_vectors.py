"""The session layer against packets captured from, and accepted by, Go nodes."""

import random

import nacl.bindings as sodium

from axl.identity import NodeIdentity
from axl.sessions import DeliverPlaintext, KeyPair, SendPacket, SessionManager
from axl.sessions.crypto import curve_private_key, curve_public_key, shared_key
from axl.sessions.handshake import TYPE_ACK, Handshake, open_handshake, seal_handshake
from axl.wire import decode_uvarint
from vectors import load

CRYPTO = load("crypto")
KEYS = CRYPTO["keys"]


def identity(name: str) -> NodeIdentity:
    return NodeIdentity.from_seed(bytes.fromhex(KEYS[name]["seed"]))


def public(name: str) -> bytes:
    return bytes.fromhex(KEYS[name]["public_key"])


def scripted_keys(*privates: str | None):
    """Key pairs in the order the manager asks for them; None = seeded random."""
    rng = random.Random(7)
    queue = list(privates)

    def factory() -> KeyPair:
        private = queue.pop(0) if queue else None
        if private is None:
            return KeyPair.from_private(rng.randbytes(32))
        return KeyPair.from_private(bytes.fromhex(private))
    return factory


def traffic_payload(frame_hex: str, source: bytes, dest: bytes) -> bytes:
    """The encrypted-layer packet inside a captured ironwood Traffic frame."""
    frame = bytes.fromhex(frame_hex)
    offset = frame.index(source + dest) + 64
    _, offset = decode_uvarint(frame, offset)
    return frame[offset:]


def test_conversions():
    for entry in CRYPTO["conversions"]:
        seed, ed_public = bytes.fromhex(entry["seed"]), bytes.fromhex(entry["ed25519_public"])
        assert curve_public_key(ed_public).hex() == entry["x25519_public"]
        assert curve_private_key(seed, ed_public).hex() == entry["x25519_private"]


def test_box_shared():
    for entry in CRYPTO["box_shared"]:
        a, b = entry["a"], entry["b"]
        a_private = curve_private_key(bytes.fromhex(KEYS[a]["seed"]), public(a))
        b_public = curve_public_key(public(b))
        assert shared_key(b_public, a_private).hex() == entry["box_beforenm"]
        assert sodium.crypto_scalarmult(a_private, b_public).hex() == entry["x25519_raw"]


def test_daemon_session_end_to_end():
    vec = CRYPTO["session_daemon"]
    inputs = vec["init"]["inputs"]
    new1 = vec["traffic_to_go"]["inputs"]["new1_private"]
    factory = scripted_keys(inputs["current_private"], inputs["next_private"],
                            inputs["ephemeral_private"], None, new1, None)
    manager = SessionManager(identity("probe"), key_pairs=factory)
    daemon = public("daemon_a")

    [init] = manager.send(daemon, bytes.fromhex("0201"), now=inputs["seq"])
    assert init == SendPacket(daemon, bytes.fromhex(vec["init"]["expected"]["packet_hex"]))
    assert manager.session_keys() == []

    ack = bytes.fromhex(vec["ack_from_go"]["packet_hex"])
    actions = manager.receive(daemon, ack, now=inputs["seq"] + 1)
    assert [type(a) for a in actions] == [SendPacket, SendPacket]
    assert actions[0].packet[0] == TYPE_ACK and len(actions[0].packet) == 193
    assert actions[1] == SendPacket(daemon, bytes.fromhex(vec["traffic_to_go"]["expected_packet_hex"]))
    assert manager.session_keys() == [daemon]

    [reply] = vec["replies_from_go"]
    packet = traffic_payload(reply["frame"], daemon, public("probe"))
    assert manager.receive(daemon, packet, now=inputs["seq"] + 2) == [
        DeliverPlaintext(daemon, bytes.fromhex(reply["message"]))]
    # The reply came from Go's next key: we ratcheted, so its replay is now stale.
    assert manager.receive(daemon, packet, now=inputs["seq"] + 3) == []


def test_go_ack_fields():
    decoded = CRYPTO["session_daemon"]["ack_from_go"]["decoded"]
    ack = bytes.fromhex(CRYPTO["session_daemon"]["ack_from_go"]["packet_hex"])
    probe = identity("probe")
    fields = open_handshake(ack, public("daemon_a"),
                            curve_private_key(probe.seed, probe.public_key))
    assert fields == Handshake(current=bytes.fromhex(decoded["current"]),
                               next=bytes.fromhex(decoded["next"]),
                               key_seq=decoded["key_seq"], seq=decoded["seq"])
    assert open_handshake(ack, public("daemon_b"),
                          curve_private_key(probe.seed, probe.public_key)) is None


def test_axl_session_init_and_ack():
    vec = CRYPTO["session_axl"]
    inputs = vec["init_inputs"]
    factory = scripted_keys(inputs["current_private"], inputs["next_private"],
                            inputs["ephemeral_private"])
    manager = SessionManager(identity("probe"), key_pairs=factory)
    [init] = manager.send(public("axl"), b"\x01", now=inputs["seq"])
    assert init.packet.hex() == vec["init_packet_hex"]

    ack = vec["ack_from_axl"]
    probe = identity("probe")
    probe_private = curve_private_key(probe.seed, probe.public_key)
    assert shared_key(bytes.fromhex(ack["ephemeral_pub"]), probe_private).hex() == ack["shared_key"]


def test_ack_built_by_python():
    vec = CRYPTO["session_daemon"]["ack_built_by_python"]
    inputs = vec["inputs"]
    fields = Handshake(
        current=KeyPair.from_private(bytes.fromhex(inputs["current_private"])).public,
        next=KeyPair.from_private(bytes.fromhex(inputs["next_private"])).public,
        key_seq=inputs["key_seq"], seq=inputs["seq"])
    ephemeral = KeyPair.from_private(bytes.fromhex(inputs["ephemeral_private"]))
    packet = seal_handshake(TYPE_ACK, fields, identity("daemon_a"), public("probe"), ephemeral)
    assert packet.hex() == vec["expected_packet_hex"]
    probe = identity("probe")
    assert open_handshake(packet, public("daemon_a"),
                          curve_private_key(probe.seed, probe.public_key)) == fields
