import json

import pytest

from axl.core import (
    IPV6_HEAD, Core, DebugReplyReceived, DeliverIPv6, NodeInfoReceived, SendMessage, debug_request,
    go_json, nodeinfo_request,
)
from axl.identity import NodeIdentity
from vectors import load

SOURCE = bytes(range(32))
IDENT = NodeIdentity.from_seed(bytes([5]) * 32)


def make_core(nodeinfo=None, peers=(), tree=(), entries=0):
    return Core(IDENT, nodeinfo if nodeinfo is not None else {"name": "n"},
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


def test_nodeinfo_response_parsed_or_raw():
    core = make_core()
    assert core.handle(SOURCE, b'\x02\x02{"x":"y"}', 0) == [NodeInfoReceived(SOURCE, {"x": "y"})]
    assert core.handle(SOURCE, b"\x02\x02[1]", 0) == [NodeInfoReceived(SOURCE, b"[1]")]
    assert core.handle(SOURCE, b"\x02\x02\xff{", 0) == [NodeInfoReceived(SOURCE, b"\xff{")]


def test_nodeinfo_too_large_rejected():
    with pytest.raises(ValueError):
        make_core({"x": "y" * 16384})


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
    for subtype in (2, 4, 6):
        assert core.handle(SOURCE, debug_request(subtype) + b"data", 0) == [
            DebugReplyReceived(SOURCE, subtype, b"data")]


@pytest.mark.parametrize("plaintext", [
    b"", b"\x00", b"\x00\x01", b"\x03abc", b"\x02", b"\x02\x00", b"\x02\x03", b"\x02\xff",
    b"\x02\xff\x00", b"\x02\xff\x07", b"\x02\xfe\x01",
])
def test_everything_else_ignored(plaintext):
    assert make_core().handle(SOURCE, plaintext, 0) == []


def test_go_json_matches_go_conventions():
    assert go_json({"z": 1, "a": [True, None]}) == b'{"a":[true,null],"z":1}'
    assert go_json({"k": "é\u2028"}) == '{"k":"é\\u2028"}'.encode()
