"""GroupPassword among our own nodes: a and c ("agents") talk through r,
which has none and forwards for them all the same; r and a cannot open a
session with each other, their sends fail with a 502 that names the
GroupPassword, and the peerings stay up."""

from __future__ import annotations

import pytest

from nodes import Cluster, wait_until


@pytest.fixture(scope="module")
def trio(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("group"))
    r = cluster.add("r", extra={"lookup_timeout_secs": 5})
    group = {"GroupPassword": "agents", "lookup_timeout_secs": 5}
    a = cluster.add("a", listen=False, peers=[r], extra=group)
    c = cluster.add("c", listen=False, peers=[r], extra=group)
    try:
        cluster.start_all()
        wait_until(lambda: r.up_peer_keys() == {a.peer_id, c.peer_id}, 30, what="both peerings up")
        yield r, a, c
    finally:
        cluster.stop_all()


def test_the_same_password_talks_through_a_node_without_one(trio):
    r, a, c = trio
    assert a.send(c.peer_id, b"within the group", timeout=30)[0] == 200
    assert c.recv(wait=10)[::2] == (200, b"within the group")
    assert c.send(a.peer_id, b"and back", timeout=30)[0] == 200
    assert a.recv(wait=10)[::2] == (200, b"and back")


@pytest.mark.parametrize("sender,receiver", [(1, 0), (0, 1)], ids=["grouped->open", "open->grouped"])
def test_no_session_across_passwords_and_a_502_that_says_why(trio, sender, receiver):
    nodes = trio
    source, dest = nodes[sender], nodes[receiver]
    status, _, text = source.send(dest.peer_id, b"across", timeout=30)
    assert status == 502, text
    assert text.decode().startswith(f"{dest.peer_id} answered the path lookup but not the session handshake: "
                                    f"its GroupPassword differs from this node's"), text
    assert dest.recv(wait=2)[0] == 204
    r, a, c = trio
    assert r.up_peer_keys() == {a.peer_id, c.peer_id} and a.up_peer_keys() == {r.peer_id}
    assert "does not verify" in dest.log_path.read_text()
