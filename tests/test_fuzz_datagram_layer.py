"""Property tests for the layers above sessions: the core's datagram
dispatch and the IPv6 packet device must take any plaintext or packet a peer
or the local stack produces without raising."""

from __future__ import annotations

import hashlib

import pytest

from hypothesis import given
from hypothesis import strategies as st

from axl.datagrams import (
    DatagramLayer, DebugReplyReceived, DeliverIPv6, NodeInfoReceived, SendMessage, debug_request,
    nodeinfo_reply_body, nodeinfo_request,
)
from axl.datagrams.layer import CORE_MTU
from axl.identity import ADDRESS_PREFIX, NodeIdentity, address_for_key
from axl.packets import DeliverPacket, IPv6Device, Lookup, SendIPv6
from axl.packets.ipv6 import build_packet
from fuzzing import FUZZ, noise_or_mutation

T0 = 1000.0


def _identity(n: int) -> NodeIdentity:
    return NodeIdentity.from_seed(hashlib.sha256(f"fuzz-core/{n}".encode()).digest())


ME, PEER = _identity(1), _identity(2)
MANY_KEYS = [hashlib.sha256(bytes([n])).digest() for n in range(40)] * 60


def _core(asked: bytes) -> DatagramLayer:
    """A core that asked `asked` for everything, so that its replies are read too."""
    core = DatagramLayer(ME, nodeinfo_reply_body({"name": "fuzz", "list": [1, 2, 3]}, {}), peer_keys=lambda: MANY_KEYS,
                tree_keys=lambda: MANY_KEYS[:5], routing_entries=lambda: 7)
    core.request_nodeinfo(asked, T0)
    for subtype in (1, 3, 5):
        core.request_debug(asked, subtype, T0)
    return core


CORE_SEEDS = [nodeinfo_request(), b"\x02\x02" + b'{"name":"x"}', b"\x01\x60" + bytes(39)] + [
    debug_request(subtype) for subtype in range(1, 7)
]


@FUZZ
@given(st.binary(min_size=0, max_size=40), noise_or_mutation(CORE_SEEDS, 200))
def test_core_handles_any_plaintext(source, plaintext):
    for action in _core(source).handle(source, plaintext, T0):
        if isinstance(action, SendMessage):
            assert action.dest_key == source and len(action.message) <= CORE_MTU
        elif isinstance(action, DeliverIPv6):
            assert action.source_key == source and plaintext[0] == 1
        else:
            assert isinstance(action, (NodeInfoReceived, DebugReplyReceived))
            assert action.key == source


def _device() -> IPv6Device:
    return IPv6Device(ME, max_entries=4)


def _packets() -> list[bytes]:
    inside = ME.subnet + bytes(range(8))
    return [
        build_packet(ME.address, PEER.address, 6, b"payload"),
        build_packet(ME.address, PEER.subnet + bytes(8), 17, bytes(30)),
        build_packet(PEER.address, ME.address, 6, bytes(1300)),
        build_packet(PEER.subnet + bytes(8), inside, 58, b"ping"),
    ]


PACKETS = _packets()
keys = st.one_of(st.sampled_from([PEER.public_key, ME.public_key]),
                 st.binary(min_size=32, max_size=32))


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(("write", "read", "found", "tick")), keys,
                          noise_or_mutation(PACKETS, 120)), max_size=10))
def test_device_takes_any_sequence_of_packets_and_events(steps):
    device = _device()
    now = T0
    for op, key, packet in steps:
        now += 7
        if op == "write":
            actions = device.write(packet, now)
        elif op == "read":
            actions = device.read(key, packet, now)
        elif op == "found":
            actions = device.path_found(key, now)
        else:
            device.tick(now)
            continue
        for action in actions:
            assert isinstance(action, (SendIPv6, Lookup, DeliverPacket))
            if isinstance(action, DeliverPacket):
                assert action.packet == packet and len(packet) <= device.mtu
                assert packet[24:40] == ME.address or packet[24:32] == ME.subnet
            elif isinstance(action, SendIPv6):
                assert action.packet[8:24] == ME.address or action.packet[8:16] == ME.subnet
            else:
                assert len(action.partial_key) == 32



@pytest.mark.parametrize("key,ones", [
    (bytes(32), 0), (bytes(31) + b"\x01", 255), (bytes(20) + b"\xff" * 12, 160),
])
def test_keys_with_many_leading_zero_bits_map_like_go(key, ones):
    """Go v0.5 counts the ones in a byte (256 wraps to 0) and zero-pads the address."""
    expected = bytes((ADDRESS_PREFIX, ones)) + bytes(14)
    assert address_for_key(key) == expected
    device = _device()
    device.path_found(key, T0)
    packet = build_packet(ME.address, expected, 6, b"")
    assert device.write(packet, T0) == [SendIPv6(key, packet)]
