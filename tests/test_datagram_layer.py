import json

import pytest

from axl.datagrams import (
    IPV6_HEAD, DatagramLayer, DebugReplyReceived, DeliverIPv6, NodeInfoReceived, NodeInfoTooLarge, SendMessage,
    debug_request, nodeinfo_reply_body, nodeinfo_request,
)
from axl.datagrams.layer import MAX_PENDING_QUERIES, QUERY_TIMEOUT
from axl.identity import NodeIdentity
from vectors import load

SOURCE = bytes(range(32))
IDENT = NodeIdentity.from_seed(bytes([5]) * 32)


def make_core(nodeinfo=None, peers=(), tree=(), entries=0):
    return DatagramLayer(IDENT, nodeinfo_reply_body(nodeinfo if nodeinfo is not None else {"name": "n"}, {}),
                peer_keys=lambda: list(peers), tree_keys=lambda: list(tree),
                routing_entries=lambda: entries)


def test_deliver_ipv6():
    core = make_core()
    assert IPV6_HEAD == b"\x01"
    assert core.handle(SOURCE, b"\x01\x60abc", 0) == [DeliverIPv6(SOURCE, b"\x60abc")]


def test_nodeinfo_reply_matches_go_daemon():
    [reply] = load("crypto")["session_daemon"]["replies_from_go"]
    core = make_core({"name": "vector-daemon-a"})
    assert core.handle(SOURCE, nodeinfo_request(), 0) == [
        SendMessage(SOURCE, bytes.fromhex(reply["message"]))]


def test_nodeinfo_request_trailing_bytes_ignored():
    core = make_core({"b": 1, "a": "<&>"})
    [action] = core.handle(SOURCE, nodeinfo_request() + b"junk", 0)
    assert action.message == b'\x02\x02{"a":"\\u003c\\u0026\\u003e","b":1}'


def test_nodeinfo_request_answered_with_the_remote_bytes_as_sent():
    core = make_core()
    for body in (b'{"x":"y"}', b"[1]", b"\xff{"):
        assert core.request_nodeinfo(SOURCE, 0) == [SendMessage(SOURCE, nodeinfo_request())]
        assert core.handle(SOURCE, b"\x02\x02" + body, 1) == [NodeInfoReceived(SOURCE, body)]


def test_replies_nobody_asked_for_are_dropped():
    core = make_core()
    assert core.handle(SOURCE, b'\x02\x02{"x":"y"}', 0) == []
    core.request_nodeinfo(SOURCE, 0)
    assert core.handle(bytes(32), b'\x02\x02{"x":"y"}', 0) == [], "another key's reply"
    assert core.handle(SOURCE, debug_request(2) + b"data", 0) == [], "another kind of reply"
    assert core.handle(SOURCE, b'\x02\x02{}', 0) == [NodeInfoReceived(SOURCE, b"{}")]
    assert core.handle(SOURCE, b'\x02\x02{}', 0) == [], "one reply per request"


def test_a_request_is_forgotten_after_a_minute():
    core = make_core()
    core.request_nodeinfo(SOURCE, 0)
    assert core.handle(SOURCE, b"\x02\x02{}", QUERY_TIMEOUT) == []
    core.request_debug(SOURCE, 1, 0)
    core.expire(QUERY_TIMEOUT)
    assert core._pending == {}


def test_pending_requests_are_bounded():
    core = make_core()
    keys = [i.to_bytes(32, "big") for i in range(MAX_PENDING_QUERIES + 1)]
    for key in keys:
        core.request_nodeinfo(key, 0)
    assert len(core._pending) == MAX_PENDING_QUERIES
    assert core.handle(keys[0], b"\x02\x02{}", 1) == [], "the oldest went first"
    assert core.handle(keys[-1], b"\x02\x02{}", 1) == [NodeInfoReceived(keys[-1], b"{}")]


def test_nodeinfo_too_large_rejected():
    with pytest.raises(NodeInfoTooLarge):
        make_core({"x": "y" * 16384})
    with pytest.raises(NodeInfoTooLarge):
        DatagramLayer(IDENT, b"x" * 16385, peer_keys=list, tree_keys=list, routing_entries=int)


def test_nodeinfo_body_adds_the_build_fields_over_the_configured_ones():
    build = {"buildname": "axl-py", "buildversion": "9"}
    assert nodeinfo_reply_body({"name": "n", "buildname": "mine"}, build) == \
        b'{"buildname":"axl-py","buildversion":"9","name":"n"}'
    assert nodeinfo_reply_body({"name": "n"}, {}) == b'{"name":"n"}'


def test_get_self_reply():
    core = make_core(entries=7)
    [action] = core.handle(SOURCE, debug_request(1) + b"ignored", 0)
    assert action.dest_key == SOURCE
    assert action.message[:3] == b"\x02\xff\x02"
    body = action.message[3:]
    assert body == ('{"key":"%s","routing_entries":"7"}' % IDENT.public_key.hex()).encode()
    assert json.loads(body)["routing_entries"] == "7"


def test_get_peers_and_tree_replies_are_raw_keys():
    peers = [bytes([i]) * 32 for i in range(3)]
    tree = [bytes([9]) * 32]
    core = make_core(peers=peers, tree=tree)
    assert core.handle(SOURCE, debug_request(3), 0) == [
        SendMessage(SOURCE, b"\x02\xff\x04" + b"".join(peers))]
    assert core.handle(SOURCE, debug_request(5), 0) == [
        SendMessage(SOURCE, b"\x02\xff\x06" + tree[0])]


def test_key_list_truncated_to_core_mtu():
    keys = [i.to_bytes(32, "big") for i in range(3000)]
    core = make_core(tree=keys)
    [action] = core.handle(SOURCE, debug_request(5), 0)
    payload = action.message[3:]
    assert len(payload) == 2047 * 32
    assert len(payload) + 2 <= 65535 < len(payload) + 32 + 2


def test_debug_responses_reported():
    core = make_core()
    for subtype in (1, 3, 5):
        assert core.request_debug(SOURCE, subtype, 0) == [SendMessage(SOURCE, debug_request(subtype))]
        assert core.handle(SOURCE, debug_request(subtype + 1) + b"data", 0) == [
            DebugReplyReceived(SOURCE, subtype + 1, b"data")]
    with pytest.raises(ValueError):
        core.request_debug(SOURCE, 2, 0)


@pytest.mark.parametrize("plaintext", [
    b"", b"\x00", b"\x00\x01", b"\x03abc", b"\x02", b"\x02\x00", b"\x02\x03", b"\x02\xff",
    b"\x02\xff\x00", b"\x02\xff\x07", b"\x02\xfe\x01",
])
def test_everything_else_ignored(plaintext):
    assert make_core().handle(SOURCE, plaintext, 0) == []

