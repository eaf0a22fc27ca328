"""examples/gossipsub: the sans-IO router in memory, the simulator's figures, real runs."""

from __future__ import annotations

import io
import random
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
sys.path.insert(0, str(EXAMPLES / "gossipsub"))

import gossip_run  # noqa: E402
from gossip_metrics import percentile  # noqa: E402
from gossip_protocol import (  # noqa: E402
    RPC,
    GossipSub,
    MalformedRPC,
    Message,
    MessageCache,
    Params,
    decode_rpcs,
    encode_rpc,
)
from gossip_sim import SimConfig, Simulation, peer_graph  # noqa: E402
from test_testnet import FAKE_NODE, REAL_NODE, node_command  # noqa: E402

from axl.testnet import Testnet  # noqa: E402
from nodes import Cluster, wait_until  # noqa: E402

TOPIC = "t"


def names(n: int) -> list[str]:
    return [f"{i:064x}" for i in range(n)]


def rpcs_to(router: GossipSub) -> dict[str, RPC]:
    return {peer: decode_rpcs(payload)[0] for peer, payload in router.take_outgoing()}


def test_rpc_round_trip_and_batching():
    rpc = RPC(subscriptions=[("a", True), ("b", False)],
              messages=[Message("a", b"\x00data", "o" * 64, 3, 1.5, 2)],
              ihave={"a": ["x:1"]}, iwant=["y:2"], graft=["a"], prune=["b"], choke=["a"], unchoke=["b"])
    assert decode_rpcs(encode_rpc(rpc)) == [rpc]
    assert decode_rpcs(encode_rpc(rpc) + encode_rpc(RPC(iwant=["z:1"]))) == [rpc, RPC(iwant=["z:1"])]


@pytest.mark.parametrize("payload", [
    b"", b"\xc1", b"hello", msgpack.packb({"other": 1}), msgpack.packb({"gossipsub": 1, "msg": [{"t": 1}]}),
    msgpack.packb({"gossipsub": 1, "sub": [["a"]]}), msgpack.packb({"gossipsub": 1, "iwant": "x"}),
    encode_rpc(RPC(graft=["a"]))[:-1],
])
def test_malformed_payloads_are_refused_without_side_effects(payload):
    router = GossipSub("me", rng=random.Random(1))
    with pytest.raises(MalformedRPC):
        router.receive("peer", payload, 0.0)
    assert router.peers == set() and router.take_outgoing() == []


def test_subscribe_announces_and_grafts_up_to_d():
    router = GossipSub("me", Params(d=2, d_low=1, d_high=3), random.Random(1))
    for peer in ["a", "b", "c"]:
        router.add_peer(peer)
        router.receive(peer, encode_rpc(RPC(subscriptions=[(TOPIC, True)])), 0.0)
    router.subscribe(TOPIC, 0.0)
    sent = rpcs_to(router)
    assert all(rpc.subscriptions == [(TOPIC, True)] for rpc in sent.values()) and len(sent) == 3
    assert sum(rpc.graft == [TOPIC] for rpc in sent.values()) == 2
    assert len(router.mesh[TOPIC]) == 2


def test_heartbeat_prunes_a_mesh_above_d_high_and_respects_backoff():
    params = Params(d=2, d_low=1, d_high=3, prune_backoff=5.0)
    router = GossipSub("me", params, random.Random(2))
    router.subscribe(TOPIC, 0.0)
    peers = [f"p{i}" for i in range(5)]
    for peer in peers:
        router.receive(peer, encode_rpc(RPC(subscriptions=[(TOPIC, True)], graft=[TOPIC])), 0.0)
    assert router.mesh[TOPIC] == set(peers)
    router.take_outgoing()
    router.heartbeat(1.0)
    pruned = [peer for peer, rpc in rpcs_to(router).items() if rpc.prune == [TOPIC]]
    assert len(pruned) == 3 and len(router.mesh[TOPIC]) == 2
    router.receive(pruned[0], encode_rpc(RPC(graft=[TOPIC])), 2.0)
    assert rpcs_to(router)[pruned[0]].prune == [TOPIC]
    assert pruned[0] not in router.mesh[TOPIC]


def test_graft_for_an_unsubscribed_topic_is_answered_with_prune():
    router = GossipSub("me", rng=random.Random(3))
    router.receive("a", encode_rpc(RPC(graft=["nope"])), 0.0)
    assert rpcs_to(router)["a"].prune == ["nope"]


def test_messages_are_delivered_once_and_duplicates_choke_the_sender():
    router = GossipSub("me", Params(d=3, d_low=1, d_high=4), random.Random(4))
    for peer in ["a", "b", "c"]:
        router.receive(peer, encode_rpc(RPC(subscriptions=[(TOPIC, True)], graft=[TOPIC])), 0.0)
    router.subscribe(TOPIC, 0.0)
    router.take_outgoing()
    message = Message(TOPIC, b"hi", "z" * 64, 1, 0.0, 1)
    router.receive("a", encode_rpc(RPC(messages=[message])), 0.1)
    forwarded = rpcs_to(router)
    assert set(forwarded) == {"b", "c"} and forwarded["b"].messages[0].hops == 2
    router.receive("b", encode_rpc(RPC(messages=[message])), 0.2)
    assert rpcs_to(router) == {"b": RPC(choke=[TOPIC])}
    assert [d.message.data for d in router.take_deliveries()] == [b"hi"]
    assert router.copies_received == 2
    router.receive("a", encode_rpc(RPC(messages=[Message(TOPIC, b"2", "z" * 64, 2, 0.3, 1)])), 0.3)
    out = rpcs_to(router)
    assert out["b"].ihave == {TOPIC: ["z" * 64 + ":2"]} and not out["b"].messages
    assert out["c"].messages[0].data == b"2"


def test_ihave_is_pulled_after_the_timeout_and_unchokes_the_announcer():
    params = Params(d=2, d_low=1, d_high=3, iwant_timeout=0.5)
    router = GossipSub("me", params, random.Random(5))
    router.subscribe(TOPIC, 0.0)
    router.receive("a", encode_rpc(RPC(subscriptions=[(TOPIC, True)], graft=[TOPIC])), 0.0)
    router.receive("a", encode_rpc(RPC(choke=[TOPIC])), 0.0)
    router.take_outgoing()
    router.receive("a", encode_rpc(RPC(ihave={TOPIC: ["m:1"]})), 1.0)
    assert router.next_deadline() == pytest.approx(0.5)
    router.handle_timer(1.2)
    assert not rpcs_to(router).get("a", RPC()).iwant
    router.handle_timer(1.5)
    assert rpcs_to(router)["a"] == RPC(iwant=["m:1"], unchoke=[TOPIC])


def test_iwant_is_served_from_the_cache_until_it_expires():
    router = GossipSub("me", Params(mcache_len=2, mcache_gossip=1), random.Random(6))
    router.subscribe(TOPIC, 0.0)
    msg_id = router.publish(TOPIC, b"x", 0.0)
    router.receive("a", encode_rpc(RPC(iwant=[msg_id])), 0.1)
    assert rpcs_to(router)["a"].messages[0].data == b"x"
    router.heartbeat(1.0)
    router.heartbeat(2.0)
    router.receive("a", encode_rpc(RPC(iwant=[msg_id])), 2.1)
    assert rpcs_to(router) == {}


def test_message_cache_gossips_only_recent_windows():
    cache = MessageCache(windows=3, gossip_windows=2)
    cache.put(Message(TOPIC, b"1", "o", 1, 0.0))
    cache.shift()
    cache.put(Message("other", b"2", "o", 2, 0.0))
    cache.shift()
    assert cache.gossip_ids(TOPIC) == []
    assert cache.get("o:1") is not None
    cache.shift()
    assert cache.get("o:1") is None


def test_seen_set_expires():
    router = GossipSub("me", Params(seen_ttl=10.0), random.Random(7))
    router.subscribe(TOPIC, 0.0)
    message = Message(TOPIC, b"x", "o", 1, 0.0, 1)
    router.receive("a", encode_rpc(RPC(messages=[message])), 0.0)
    router.heartbeat(5.0)
    assert "o:1" in router.seen
    router.heartbeat(11.0)
    assert "o:1" not in router.seen


def test_publish_without_subscribing_uses_fanout():
    router = GossipSub("me", Params(d=2), random.Random(8))
    for peer in ["a", "b", "c", "d"]:
        router.receive(peer, encode_rpc(RPC(subscriptions=[(TOPIC, True)])), 0.0)
    router.take_outgoing()
    router.publish(TOPIC, b"x", 0.0)
    assert sum(bool(rpc.messages) for rpc in rpcs_to(router).values()) == 2


def test_peer_graph_is_connected_and_seeded():
    graph = peer_graph(25, 4, random.Random(1))
    assert graph == peer_graph(25, 4, random.Random(1))
    seen, stack = {0}, [0]
    while stack:
        for other in graph[stack.pop()] - seen:
            seen.add(other)
            stack.append(other)
    assert len(seen) == 25


def test_percentile_is_nearest_rank():
    assert percentile([5, 1, 3, 2, 4], 0.95) == 5 and percentile([1, 2, 3, 4], 0.5) == 2 and percentile([], 0.9) == 0


def test_twenty_nodes_in_memory_reach_everyone_with_few_duplicates():
    report = Simulation(SimConfig(nodes=20, messages=150, seed=1)).run()
    assert report.delivery_ratio == 1.0
    assert report.redundancy <= 1.1
    assert report.p95_hops >= report.mean_hops >= 1


def test_without_choking_every_mesh_link_carries_duplicates():
    report = Simulation(SimConfig(nodes=20, messages=50, seed=1, params=Params(choke=False))).run()
    assert report.delivery_ratio == 1.0
    assert report.redundancy > 2.0


@pytest.mark.parametrize("kind", [FAKE_NODE, REAL_NODE])
async def test_gossipsub_over_a_testnet_delivers_everything(tmp_path, kind):
    async with Testnet(5, "random", tmp_path, degree=2, seed=2, node_command=node_command(kind)) as testnet:
        await testnet.wait_converged_async(timeout=60)
        urls = [node.bridge_url for node in testnet.nodes]
        progress = io.StringIO()
        report = await gossip_run.run(urls, messages=20, degree=3, interval=0.1, warmup=2.0, timeout=30,
                                      progress=progress)
    assert report.delivery_ratio == 1.0
    assert report.messages == 20
    lines = progress.getvalue().splitlines()
    assert lines[:2] == ["5 drivers started; letting the meshes form for 2 s",
                         "publishing 20 messages, one every 0.1 s (about 2 s)"]
    assert [line for line in lines if "published" in line][-1] == "  published 20/20"


def test_a_chat_says_who_hears_it_or_why_nobody_does(tmp_path):
    """The first chat has no gossip peer on its topic and says what to do; a chat
    started on its neighbour hears of it (its greeting waited in that node's queue)."""
    cluster = Cluster(tmp_path)
    a = cluster.add("a")
    b = cluster.add("b", peers=[a])
    driver = [sys.executable, str(EXAMPLES / "gossipsub" / "gossip_driver.py"), "--topic", "chat", "--bridge"]
    cluster.start_all()
    first = None
    try:
        wait_until(lambda: b.up_peer_keys() == {a.peer_id}, 20, what="b peered with a")
        first = subprocess.Popen([*driver, a.url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert first.stdout.readline().startswith(f"{a.peer_id} on topic 'chat'")
        assert first.stdout.readline() == (
            "no gossip peer on 'chat' yet (of 1): messages go only to chats on this node's overlay neighbours; "
            f"start a chat on one of them, or start another with --peer {a.peer_id}\n")
        second = subprocess.run([*driver, b.url], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                timeout=60)
    finally:
        if first is not None:
            first.communicate("", timeout=30)
        cluster.stop_all()
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[1] == f"1 gossip peer(s) on 'chat': {a.peer_id[:16]}"
