"""Router behaviour: SigReq/SigRes, merge rule, gossip, timers, blooms, pathfinder."""

from __future__ import annotations

import random

import pytest

from axl.identity import NodeIdentity, bloom_transform, verify
from axl.routing.actions import DeliverTraffic, PathFound, SendFrame, SendTraffic
from axl.routing.frames import (
    TYPE_ANNOUNCE,
    TYPE_BLOOM,
    TYPE_PATH_BROKEN,
    TYPE_PATH_LOOKUP,
    TYPE_SIGREQ,
    TYPE_SIGRES,
    Announce,
    PathLookup,
    SigReq,
    SigRes,
    sig_bytes,
    split_frame,
)
from axl.routing.router import ROUTER_TIMEOUT, BadSignature, Router
from axl.sim import Network
from vectors import load

NOW = 1_700_000_000.0


def _identity(tag: str) -> NodeIdentity:
    return NodeIdentity.from_seed(bytes(random.Random(tag).getrandbits(8) for _ in range(32)))


def _frames(actions, ftype=None):
    out = []
    for action in actions:
        if isinstance(action, (SendFrame, SendTraffic)):
            got_type, body = split_frame(action.frame)
            if ftype is None or got_type == ftype:
                out.append((action.link_id, got_type, body))
    return out


def test_new_link_gets_sigreq_then_empty_bloom():
    router = Router(_identity("a"), now=NOW, rng=random.Random(1))
    actions = router.add_link(7, _identity("b").public_key, 0, NOW)
    frames = _frames(actions)
    assert [f[1] for f in frames] == [TYPE_SIGREQ, TYPE_BLOOM]
    assert SigReq.decode(frames[0][2]).seq == 2  # own seq 1 (root at start) + 1
    assert frames[1][2] == b"\xff" * 16 + b"\x00" * 16


def test_sigreq_answered_at_once_with_the_key_port():
    a, b, c, d = (_identity(t) for t in "abcd")
    router = Router(a, now=NOW)
    router.add_link(1, b.public_key, 0, NOW)
    router.add_link(2, c.public_key, 0, NOW)
    router.add_link(3, b.public_key, 5, NOW)  # parallel link shares the port
    for link_id, port in ((1, 1), (2, 2), (3, 1)):
        actions = router.handle_frame(link_id, TYPE_SIGREQ, SigReq(9, 1234).encode(), NOW)
        (frame,) = _frames(actions)
        res = SigRes.decode(frame[2])
        assert frame[:2] == (link_id, TYPE_SIGRES)
        assert (res.seq, res.nonce, res.port) == (9, 1234, port)
        peer = b if link_id != 2 else c
        assert verify(a.public_key, res.psig, sig_bytes(peer.public_key, a.public_key, 9, 1234, port))
        assert router.link_port(link_id) == port
    router.remove_link(1, NOW)
    router.remove_link(3, NOW)
    router.add_link(4, d.public_key, 0, NOW)
    assert router.link_port(4) == 1  # freed with the last link to b


def test_bad_sigres_and_bad_announce_close_the_link():
    a, b = _identity("a"), _identity("b")
    router = Router(a, now=NOW, rng=random.Random(2))
    req = SigReq.decode(_frames(router.add_link(1, b.public_key, 0, NOW), TYPE_SIGREQ)[0][2])
    forged = SigRes(req.seq, req.nonce, 1, bytes(64))
    with pytest.raises(BadSignature):
        router.handle_frame(1, TYPE_SIGRES, forged.encode(), NOW)
    signed = sig_bytes(b.public_key, b.public_key, 3, 4, 0)
    good = b.sign(signed)
    bad = Announce(b.public_key, b.public_key, 3, 4, 0, good, bytes(64))
    with pytest.raises(BadSignature):
        router.handle_frame(1, TYPE_ANNOUNCE, bad.encode(), NOW)
    nonroot = Announce(b.public_key, a.public_key, 3, 4, 0, good, good)
    with pytest.raises(BadSignature):
        router.handle_frame(1, TYPE_ANNOUNCE, nonroot.encode(), NOW)


def test_merge_rule_oracle_and_echo():
    tree = load("tree")
    keys = {name: bytes.fromhex(e["public_key"]) for name, e in tree["keys"].items()}
    router = Router(_identity("observer"), now=NOW)
    router.add_link(1, keys["daemon_a"], 0, NOW)
    tree_b = keys["tree_b"]
    for step in tree["merge_rule_oracle"]:
        _, body = split_frame(bytes.fromhex(step["sent_frame_hex"]))
        sent = Announce.decode(body)
        echoes = [Announce.decode(f[2]) for f in _frames(router.handle_frame(1, TYPE_ANNOUNCE, body, NOW))]
        decision = step["expected_decision"]
        if decision.startswith("accept"):
            assert router.infos[tree_b] == sent, step["step"]
            assert echoes == []
        else:
            assert router.infos[tree_b] != sent or "identical" in decision
            expected = [(keys[e["parent"]], e["seq"], e["nonce"]) for e in step["go_echo"]]
            assert [(e.parent, e.seq, e.nonce) for e in echoes] == expected, step["step"]


def test_two_routers_converge_on_the_lower_key():
    net = Network(2, seed=3)
    net.connect(0, 1)
    net.run(5)
    low, high = sorted(net.nodes, key=lambda n: n.key)
    assert low.router.root() == high.router.root() == low.key
    assert low.router.coords() == []
    assert high.router.coords() == [1]
    assert net.converged()
    entries = {e.key: e for e in low.router.tree_entries()}
    assert entries[low.key].is_root and entries[high.key].parent == low.key
    view = high.router.peer_view(high.links[0].id_at(high.index))
    assert (view.key, view.root, view.coords) == (low.key, low.key, [])


def test_infos_expire_after_the_timeout_without_updates():
    net = Network(2, seed=4)
    net.connect(0, 1)
    net.run(5)
    assert net.nodes[0].router.info_count() == 2
    net.cut(0, 1)
    net.run(ROUTER_TIMEOUT - 10)
    assert net.nodes[0].router.info_count() == 2  # kept after the link is gone
    net.run(15)
    assert net.nodes[0].router.info_count() == 1
    assert net.nodes[0].router.root() == net.nodes[0].key


def test_own_info_is_resigned_before_others_expire_it():
    net = Network(3, seed=5)
    net.line()
    net.run(5)
    seqs = {n.index: n.router.infos[n.key].seq for n in net.nodes}
    net.run(4 * ROUTER_TIMEOUT)
    for node in net.nodes:
        own = node.router.infos[node.key]
        assert own.seq >= seqs[node.index] + 4  # a re-sign at least every 4 minutes
        for link in node.links:
            peer = net.nodes[link.other(node.index)]
            assert peer.router.infos[node.key] == own  # never expired, always current
    assert net.converged()


def test_restarted_node_takes_back_its_newer_info_and_resigns():
    net = Network(2, seed=6)
    net.connect(0, 1)
    net.run(3 * 60)
    root, child = sorted(net.nodes, key=lambda n: n.key)
    old = child.router.infos[child.key]
    assert old.seq > 1
    net.kill(child.index)
    net.revive(child.index)
    assert child.router.infos[child.key].seq == 1
    net.run(5)
    fresh = child.router.infos[child.key]
    assert fresh.seq > old.seq
    assert root.router.infos[child.key] == fresh
    assert net.converged()


def test_blooms_toward_parent_hold_self_and_subtree():
    net = Network(6, seed=7)
    net.line()
    net.run(20)
    assert net.converged()
    for node in net.nodes:
        info = node.router.infos[node.key]
        if info.parent == node.key:
            continue
        parent = net.by_key[info.parent]
        up = net.last_bloom[(node.index, parent)]
        assert up.contains(bloom_transform(node.key))
        down = net.last_bloom[(parent, node.index)]
        assert down.contains(bloom_transform(info.parent))
        assert node.router.is_on_tree(info.parent)
        assert net.nodes[parent].router.is_on_tree(node.key)


def test_lookup_notify_and_traffic_across_a_line_of_four():
    net = Network(4, seed=8)
    net.line()
    net.run(20)
    net.send(0, 3, b"first")
    net.run(2)
    assert net.received(3, 0) == [b"first"]
    assert net.nodes[0].found == [net.nodes[3].key]
    assert net.nodes[0].router.known_paths()[net.nodes[3].key] == net.nodes[3].router.coords()
    net.send(3, 0, b"back")
    net.send(0, 3, b"second")
    net.run(2)
    assert net.received(0, 3) == [b"back"]
    assert net.received(3, 0) == [b"first", b"second"]
    assert net.traffic_hops[b"second"] == 3


def test_lookup_by_partial_key_finds_the_owner():
    net = Network(4, seed=9)
    net.line()
    net.run(20)
    target = net.nodes[2].key
    net.lookup(0, bloom_transform(target))
    net.run(2)
    assert net.nodes[0].found == [target]


def test_lookups_are_throttled_per_destination():
    net = Network(3, seed=10)
    net.line()
    net.run(20)
    before = net.frames_received[(1, TYPE_PATH_LOOKUP)]
    unknown = _identity("nobody").public_key
    for payload in (b"1", b"2", b"3"):
        net.send(0, 0, payload)  # to self: keep the network busy but irrelevant
        net.nodes[0].router.send(unknown, payload, net.now)
    sent = _frames(net.nodes[0].router.send(unknown, b"4", net.now), TYPE_PATH_LOOKUP)
    assert sent == []
    assert net.frames_received[(1, TYPE_PATH_LOOKUP)] == before


def test_lookups_under_way_are_capped_and_the_refusals_counted(monkeypatch):
    monkeypatch.setattr("axl.routing.pathfinder.MAX_RUMORS", 3)
    net = Network(2, seed=10)
    net.line()
    net.run(10)
    router = net.nodes[0].router
    for n in range(5):
        router.send(_identity(f"nobody {n}").public_key, b"x", net.now)
    assert router.rumor_count() == 3
    assert router.rumors_refused == 2


def test_path_broken_after_a_node_leaves_then_relookup():
    net = Network(4, seed=11)
    net.line()
    net.run(20)
    net.send(0, 3, b"a")
    net.run(3)
    assert net.received(3, 0) == [b"a"]
    lookups_before = net.frames_received[(1, TYPE_PATH_LOOKUP)]
    net.kill(3)
    net.send(0, 3, b"b")  # before the next tick: blooms still point at 3
    net.run(0.1)
    assert net.frames_received[(0, TYPE_PATH_BROKEN)] == 1
    assert net.frames_received[(1, TYPE_PATH_LOOKUP)] == lookups_before + 1  # re-lookup at once
    net.revive(3)
    net.run(20)
    net.send(0, 3, b"c")
    net.run(3)
    assert net.received(3, 0) == [b"a", b"c"]  # "b" died with the old node 3


def test_deliver_and_pathfound_actions_are_plain_data():
    net = Network(2, seed=12)
    net.connect(0, 1)
    net.run(10)
    router = net.nodes[0].router
    actions = router.send(net.nodes[1].key, b"x", net.now)
    assert all(isinstance(a, SendTraffic) for a in actions)
    assert all(a.flow == net.nodes[1].key + net.nodes[0].key for a in actions)
    net.send(0, 1, b"y")
    net.run(1)
    assert isinstance(DeliverTraffic(b"k", b"p"), DeliverTraffic) and isinstance(PathFound(b"k"), PathFound)


def test_a_peer_flooding_lookups_is_held_to_its_budget():
    from axl.budgets import LOOKUP_BURST, LOOKUP_RATE

    net = Network(3, seed=12)
    net.line()
    net.run(20)
    relay, flooder = net.nodes[1].router, net.nodes[0]
    link_id = next(lid for lid, link in relay._links.items() if link.key == flooder.key)
    bodies = [PathLookup(flooder.key, _identity(f"x{i}").public_key, flooder.router.coords()).encode()
              for i in range(50)]
    now = net.now
    for i in range(int(LOOKUP_BURST) + 500):
        relay.handle_frame(link_id, TYPE_PATH_LOOKUP, bodies[i % 50], now)
    assert relay.lookups_dropped == 500
    for i in range(int(LOOKUP_RATE) + 10):
        relay.handle_frame(link_id, TYPE_PATH_LOOKUP, bodies[i % 50], now + 1.0)
    assert relay.lookups_dropped == 510, "one second refills LOOKUP_RATE lookups"


def test_an_answer_that_would_outgrow_the_frame_limit_is_dropped_not_sent():
    """A maximal lookup for us would need a PathNotify over 131070 bytes: Go drops it, so do we."""
    net = Network(2, seed=13)
    net.line()
    net.run(20)
    target, asker = net.nodes[1], net.nodes[0]
    link_id = next(lid for lid, link in target.router._links.items() if link.key == asker.key)
    fits = PathLookup(asker.key, target.key, [1])
    padding = (131070 - 1 - len(fits.encode())) // 3  # each port 127..16383 takes 2 bytes; 3-byte ports
    huge = PathLookup(asker.key, target.key, [20000] * padding + [1])
    assert len(huge.encode()) + 1 <= 131070
    actions = target.router.handle_frame(link_id, TYPE_PATH_LOOKUP, huge.encode(), net.now)
    assert all(len(split_frame(a.frame)[1]) + 1 <= 131070 for a in actions if hasattr(a, "frame"))
    assert target.router.oversized_dropped >= 1


def _pump(routers: dict[int, Router], link_of: dict[int, int], actions: list, now: float,
           silent: frozenset[int] = frozenset()) -> None:
    """Deliver frames between routers keyed by their index; link ids equal the peer's index."""
    queue = list(actions)
    while queue:
        sender, action = queue.pop(0)
        if sender in silent or not isinstance(action, (SendFrame, SendTraffic)):
            continue
        receiver = action.link_id
        ftype, body = split_frame(action.frame)
        queue += [(receiver, a) for a in routers[receiver].handle_frame(link_of[receiver], ftype, body, now)]


def test_timers_follow_now_while_the_wall_clock_steps_back():
    """Driven as the node drives it: monotonic `now`, Unix time only through wall_clock."""
    wall = [NOW]
    a_id, b_id = _identity("wall-a"), _identity("wall-b")
    routers = {0: Router(a_id, now=0.0, wall_clock=lambda: wall[0]),
               1: Router(b_id, now=0.0, wall_clock=lambda: wall[0])}
    link_of = {0: 1, 1: 0}
    _pump(routers, link_of, [(0, x) for x in routers[0].add_link(1, b_id.public_key, 0, 0.0)]
          + [(1, x) for x in routers[1].add_link(0, a_id.public_key, 0, 0.0)], 0.0)
    for second in range(1, 6):
        for index, router in routers.items():
            _pump(routers, link_of, [(index, x) for x in router.tick(float(second))], float(second))
    a = routers[0]
    assert b_id.public_key in a.infos
    own_seq = a.infos[a.key].seq
    wall[0] = NOW - 3600
    refreshed_at = expired_at = None
    for second in range(6, 320):
        _pump(routers, link_of, [(0, x) for x in a.tick(float(second))], float(second),
              silent=frozenset({1}))
        if refreshed_at is None and a.infos[a.key].seq > own_seq:
            refreshed_at = second
        if expired_at is None and b_id.public_key not in a.infos:
            expired_at = second
    assert refreshed_at is not None and refreshed_at <= 5 + 240 + 2, "own info re-signed every 4 minutes"
    assert expired_at is not None and expired_at <= 5 + ROUTER_TIMEOUT + 2, "a silent peer's info expires"


@pytest.mark.replaces_compiled_method
def test_a_waiting_packets_lookup_is_retried_every_second_for_fifteen() -> None:
    """A lookup that found no filter is tried again each second while its
    packet waits (a session Ack the peer will not ask for again), so it is
    answered soon after the tree settles rather than after a growing gap."""
    router = Router(NodeIdentity.generate(), now=NOW, rng=random.Random(3))
    lookups: list[float] = []
    pathfinder = router._pathfinder
    original = pathfinder._send_lookup

    def counting(dest: bytes) -> None:
        lookups.append(router._now - NOW)
        original(dest)

    pathfinder._send_lookup = counting
    router.send(NodeIdentity.generate().public_key, b"ack", NOW)
    for second in range(1, 31):
        router.tick(NOW + second)
    assert lookups == [float(second) for second in range(16)]
