"""examples/convergecast.py: tree reading, message filtering, and real runs on a testnet."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

import convergecast  # noqa: E402
from axl.client import AsyncClient  # noqa: E402
from test_testnet import FAKE_NODE, REAL_NODE, node_command  # noqa: E402

from axl.testnet import Testnet  # noqa: E402

N_NODES = 6


def test_tree_position_finds_parent_children_and_depth():
    topology = {"our_public_key": "b", "tree": [
        {"public_key": "a", "parent": ""}, {"public_key": "b", "parent": "a"},
        {"public_key": "c", "parent": "b"}, {"public_key": "d", "parent": "b"}]}
    assert convergecast.tree_position(topology) == convergecast.TreePosition("b", "a", ["c", "d"], 1)
    root = convergecast.tree_position({**topology, "our_public_key": "a"})
    assert root.parent == "" and root.children == ["b"] and root.depth == 0


def test_only_this_sessions_aggregates_are_accepted():
    body = convergecast.encode("s1", convergecast.Aggregate(3, 2, ["x"]))
    assert convergecast.decode(body, "s1") == convergecast.Aggregate(3, 2, ["x"])
    assert convergecast.decode(body, "s2") is None
    assert convergecast.decode(b"\xff not json", "s1") is None
    assert convergecast.decode(b'{"convergecast": "s1", "sum": "3", "count": 1}', "s1") is None


def test_the_report_counts_one_node_and_many():
    leaf = convergecast.TreePosition("b", "a", [], 1)
    root = convergecast.TreePosition("a", "", ["b"], 0)
    assert convergecast.report(convergecast.NodeResult(leaf, convergecast.Aggregate(1, 1))) == \
        "sent 1 (1 node) to parent a"
    assert convergecast.report(convergecast.NodeResult(root, convergecast.Aggregate(2, 2, ["c"]))) == \
        "total = 2 from 2 nodes\nmissing (no aggregate in time): c"


@pytest.fixture(scope="module", params=[FAKE_NODE, REAL_NODE])
def testnet(request, tmp_path_factory):
    with Testnet(N_NODES, "random", tmp_path_factory.mktemp("convergecast"), degree=2, seed=3,
                 node_command=node_command(request.param)) as running:
        running.wait_converged(timeout=60)
        yield running


async def test_total_equals_number_of_nodes(testnet):
    urls = [node.bridge_url for node in testnet.nodes]
    root = await convergecast.run_all(urls, "count-nodes", 1.0, timeout=20, margin=1.0)
    assert root.aggregate.total == N_NODES
    assert root.aggregate.count == N_NODES
    assert root.aggregate.missing == []


async def test_stale_messages_of_another_session_are_ignored(testnet):
    urls = [node.bridge_url for node in testnet.nodes]
    async with AsyncClient(urls[1]) as bridge:
        await bridge.send(testnet.nodes[0].peer_id, convergecast.encode("old-run", convergecast.Aggregate(100, 50)))
    root = await convergecast.run_all(urls, "new-run", 2.0, timeout=20, margin=1.0)
    assert root.aggregate.total == 2.0 * N_NODES


async def test_a_silent_child_is_reported_by_peer_id(tmp_path):
    with Testnet(3, "line", tmp_path, node_command=node_command(FAKE_NODE)) as testnet:
        testnet.wait_converged(timeout=30)
        positions = [convergecast.tree_position(testnet.topology(i)) for i in range(3)]
        silent = next(p.peer_id for p in positions if p.parent and not p.children)
        speaking = [node.bridge_url for node in testnet.nodes if node.peer_id != silent]
        async with AsyncClient(speaking[0]) as first, AsyncClient(speaking[1]) as second:
            done = await asyncio.gather(convergecast.run_node(first, "partial", 1.0, timeout=2, margin=0.5),
                                        convergecast.run_node(second, "partial", 1.0, timeout=2, margin=0.5))
    root_result = next(result for result in done if result.is_root)
    assert root_result.aggregate.missing == [silent]
    assert root_result.aggregate.count == 2
