"""Mixed networks of our nodes, yggdrasil-go routers and Go AXL nodes: Go
relays our traffic and we relay Go's, with the tree rooted at a Go node or
at one of ours; a relay killed mid-transfer reroutes and loses nothing that
was acknowledged; and a Go router's yggdrasilctl sees our nodes as it sees
its own."""

from __future__ import annotations

import os
import threading
import time

import pytest

from goprocs import listen_uris
from nodes import wait_until

# getPeers fields yggdrasil's admin API leaves out when they are 0.
OMITTED_WHEN_ZERO = {"rate_recvd", "rate_sent"}


def deliver(sender, receiver, size: int) -> None:
    """`size` random bytes from `sender` to `receiver` (either kind of node), checked byte-exact."""
    payload = os.urandom(size)
    status, _, text = sender.send(receiver.peer_id, payload, timeout=40)
    assert status == 200, f"{sender.name} -> {receiver.name}, {size} B: {status} {text[:200]!r}"
    status, _, body = receiver.recv(wait=30)
    assert status == 200 and body == payload, f"{size} B arrived as {len(body)} B"


def exchange(sender, receiver, sizes: list[int]) -> float:
    """Deliver each size; returns the seconds they took after a first small
    message (the path lookup and session handshake are not timed)."""
    deliver(sender, receiver, 1)
    start = time.monotonic()
    for size in sizes:
        deliver(sender, receiver, size)
    return time.monotonic() - start


def quietly(call, *args) -> None:
    """`call(*args)`, whatever it raises: for requests whose answer does not matter."""
    try:
        call(*args)
    except OSError:
        pass


def tree_parents(node) -> dict[str, str]:
    return {entry["public_key"]: entry["parent"] for entry in node.get_json("/topology")["tree"]}


def parent(node) -> str | None:
    """The node's parent in the spanning tree, as it reports it ("" at the root)."""
    return tree_parents(node).get(node.peer_id)


def test_a_go_router_at_the_root_relays_between_two_of_ours(mixed, figures):
    router = mixed.router("go-root", root=True).start()
    a = mixed.ours("a", peers=listen_uris(router))
    b = mixed.ours("b", peers=listen_uris(router))
    mixed.cluster.start_all()
    wait_until(lambda: router.up_peer_keys() == {a.peer_id, b.peer_id}, 20, what="both peerings up")
    wait_until(lambda: parent(a) == parent(b) == router.peer_id, 20, what="both under the Go root")
    sizes = [1, 1000, 65_536, 1 << 20, 4 << 20]
    forward = exchange(a, b, sizes)
    exchange(b, a, sizes)
    figures.append(f"ours -> Go router -> ours: {sum(sizes) / 2**20:.1f} MiB in {forward:.2f} s "
                   f"({sum(sizes) / 2**20 / forward:.1f} MiB/s, send to arrival)")


def test_our_node_at_the_root_relays_between_two_go_axl_nodes(mixed, figures):
    relay = mixed.ours("ours-root", root=True)
    relay.start()
    left = mixed.go_axl("go-left", listen=[], peers=listen_uris(relay)).start()
    right = mixed.go_axl("go-right", listen=[], peers=listen_uris(relay)).start()
    wait_until(lambda: {p["public_key"] for p in relay.get_json("/topology")["peers"] if p["up"]}
               == {left.peer_id, right.peer_id}, 20, what="both Go AXL peerings up")
    wait_until(lambda: tree_parents(relay).get(left.peer_id) == relay.peer_id
               and tree_parents(relay).get(right.peer_id) == relay.peer_id, 20, what="Go nodes under our root")
    sizes = [0, 1, 1000, 65_536, 1 << 20, 4 << 20]
    forward = exchange(left, right, sizes)
    exchange(right, left, sizes)
    figures.append(f"Go AXL -> our relay -> Go AXL: {sum(sizes) / 2**20:.1f} MiB in {forward:.2f} s "
                   f"({sum(sizes) / 2**20 / forward:.1f} MiB/s, send to arrival)")


@pytest.mark.parametrize("killed", ["go-router", "ours"])
def test_a_relay_killed_mid_transfer_reroutes_and_loses_nothing_acknowledged(mixed, killed, figures):
    """a and b (ours) are joined by two relays, one Go router and one of
    ours. The relay that roots the tree carries the traffic; it is killed
    while messages flow, and the rest go over the other relay."""
    if killed == "go-router":
        carrying = mixed.router("go-relay", root=True).start()
        spare = mixed.ours("ours-relay")
        spare.start()
    else:
        carrying = mixed.ours("ours-relay", root=True)
        carrying.start()
        spare = mixed.router("go-relay").start()
    relays = listen_uris(carrying) + listen_uris(spare)
    a = mixed.ours("a", listen=[], peers=relays)
    b = mixed.ours("b", listen=[], peers=relays)
    a.start()
    b.start()
    wait_until(lambda: parent(a) == parent(b) == carrying.peer_id, 30, what="both under the carrying relay")

    acknowledged: list[bytes] = []
    failed: list[int] = []
    stop = threading.Event()

    def flood() -> None:
        n = 0
        while not stop.is_set():
            payload = b"%06d:" % n + os.urandom(32 * 1024)
            status, _, _ = a.send(b.peer_id, payload, timeout=70)
            (acknowledged.append(payload) if status == 200 else failed.append(status))
            n += 1

    sender = threading.Thread(target=flood)
    sender.start()
    try:
        wait_until(lambda: len(acknowledged) >= 50, 30, what="traffic over the carrying relay")
        killed_at = len(acknowledged)
        carrying.kill()
        wait_until(lambda: len(acknowledged) >= killed_at + 50, 60, what="traffic after the reroute")
    finally:
        stop.set()
        sender.join()
    received = []
    while (reply := b.recv(wait=2))[0] == 200:
        received.append(reply[2])
    assert set(acknowledged) <= set(received), f"{len(set(acknowledged) - set(received))} acknowledged messages lost"
    assert len(received) == len(set(received)), "a message was delivered twice"
    figures.append(f"relay ({killed}) killed mid-transfer: {len(acknowledged)} acknowledged, "
                   f"{len(failed)} refused ({sorted(set(failed))}), 0 lost")


def test_a_go_routers_yggdrasilctl_sees_our_node_as_it_sees_its_own(mixed):
    """getSelf, getPeers, getTree, getPaths and getSessions on a Go router
    whose peers are one of our nodes and one Go AXL node, each of which has
    sent it traffic: the entries for ours carry the same fields, filled."""
    router = mixed.router("go-root", root=True).start()
    ours = mixed.ours("ours", listen=[], peers=listen_uris(router))
    ours.start()
    go = mixed.go_axl("go", listen=[], peers=listen_uris(router)).start()
    wait_until(lambda: router.up_peer_keys() == {ours.peer_id, go.peer_id}, 20, what="both peerings up")
    # The router has no TCP stack: each /send waits out its deadline, but its
    # SYN opens a session and makes the router look the sender up.
    openers = [threading.Thread(target=quietly, args=(node.send, router.peer_id, b"session"), daemon=True)
               for node in (ours, go)]
    for opener in openers:
        opener.start()

    assert router.ctl("getSelf")["key"] == router.peer_id

    def entries(command: str, key_field: str, table: str) -> dict[str, dict]:
        return {entry[key_field]: entry for entry in router.ctl(command)[table]}

    for command, key_field, table in (("getPeers", "key", "peers"), ("getTree", "key", "tree"),
                                      ("getPaths", "key", "paths"), ("getSessions", "key", "sessions")):
        wait_until(lambda: {ours.peer_id, go.peer_id} <= set(entries(command, key_field, table)), 20,
                   what=f"{command} listing both")
        found = entries(command, key_field, table)
        mine, theirs = found[ours.peer_id], found[go.peer_id]
        # yggdrasil leaves a zero rate out of getPeers (omitempty): whether a
        # peer sent anything in the last second is timing, not a difference.
        assert set(mine) - OMITTED_WHEN_ZERO == set(theirs) - OMITTED_WHEN_ZERO, \
            f"{command}: fields differ: {set(mine) ^ set(theirs)}"
        for name, value in mine.items():
            if name in OMITTED_WHEN_ZERO:
                continue
            assert (value in (None, "", 0, [])) == (theirs[name] in (None, "", 0, [])) or name in {
                "inbound", "priority", "cost", "latency"}, f"{command}.{name}: ours {value!r}, Go's {theirs[name]!r}"
    tree = entries("getTree", "key", "tree")
    assert tree[ours.peer_id]["parent"] == tree[go.peer_id]["parent"] == router.peer_id
