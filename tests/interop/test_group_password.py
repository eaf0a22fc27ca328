"""GroupPassword (yggdrasil 0.5.14) against a real 0.5.14 router: a closed
overlay of the nodes that share the password, inside a network whose
peerings and forwarding stay open to everyone.

The network: go (a 0.5.14 router, the root, GroupPassword "agents"), and
three of ours peered to it: a and c ("agents"), b ("other")."""

from __future__ import annotations

import pytest

from goprocs import listen_uris, yggdrasil_version
from nodes import wait_until


@pytest.fixture(scope="module")
def network(mixed_module):
    if yggdrasil_version(mixed_module.bin_dir) < (0, 5, 14):
        pytest.skip("GroupPassword is yggdrasil 0.5.14's")
    go = mixed_module.router("go", root=True, extra={"GroupPassword": "agents"}).start()
    ours = {name: mixed_module.ours(name, listen=[], peers=listen_uris(go),
                                    extra={"GroupPassword": password, "NodeInfo": {"name": name}})
            for name, password in (("a", "agents"), ("b", "other"), ("c", "agents"))}
    mixed_module.cluster.start_all()
    keys = {node.peer_id for node in ours.values()}
    wait_until(lambda: go.up_peer_keys() == keys, 30, what="the three peerings up")
    return go, ours


def peerings_up(go, ours) -> None:
    assert go.up_peer_keys() == {node.peer_id for node in ours.values()}
    for node in ours.values():
        assert node.up_peer_keys() == {go.peer_id}, f"{node.name}'s peering"


def node_info_name(go, key: str) -> str | None:
    """The name in a node's NodeInfo as the router's getNodeInfo answers, or
    None while the router cannot reach it (yggdrasilctl's own timeout)."""
    try:
        return go.ctl("getNodeInfo", f"key={key}")[key]["name"]
    except RuntimeError:
        return None


def test_the_same_password_reaches_through_the_router(network):
    go, ours = network
    a, c = ours["a"], ours["c"]
    # right after the peerings come up the router may not have a's path yet
    wait_until(lambda: node_info_name(go, a.peer_id) == "a", 45, what="the router's getNodeInfo of a")
    status, _, text = a.send(c.peer_id, b"within the group", timeout=40)
    assert status == 200, text
    status, headers, body = c.recv(wait=20)
    assert (status, body) == (200, b"within the group")
    assert headers["X-From-Peer-Id"] == a.peer_id


def test_another_password_gets_nothing_through(network):
    go, ours = network
    a, b = ours["a"], ours["b"]
    with pytest.raises(RuntimeError, match="timeout|timed out"):
        go.ctl("getNodeInfo", f"key={b.peer_id}")
    status, _, text = a.send(b.peer_id, b"outside the group", timeout=40)
    assert status == 502, text
    assert b"GroupPassword" in text and b.peer_id.encode() in text, text
    assert b.recv(wait=3)[0] == 204
    status, _, text = b.send(a.peer_id, b"from outside", timeout=40)
    assert status == 502 and b"GroupPassword" in text, text
    assert a.recv(wait=3)[0] == 204
    peerings_up(go, ours)
