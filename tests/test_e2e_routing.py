"""Real processes: a line of four nodes converges, and re-roots when the root dies."""

import pytest

from nodes import Cluster, wait_until


def tree_view(node):
    topo = node.get_json("/topology")
    return {entry["public_key"]: entry["parent"] for entry in topo["tree"]}, topo


def root_of(tree: dict[str, str], key: str) -> str:
    seen = set()
    while tree.get(key) and key not in seen:
        seen.add(key)
        key = tree[key]
    return key


@pytest.fixture
def line4(tmp_path):
    cluster = Cluster(tmp_path)
    a = cluster.add("a")
    b = cluster.add("b", peers=[a])
    c = cluster.add("c", peers=[b])
    cluster.add("d", peers=[c])
    cluster.start_all()
    yield cluster
    cluster.stop_all()


def converged(nodes) -> bool:
    lowest = min(node.peer_id for node in nodes)
    for node in nodes:
        tree, _ = tree_view(node)
        if root_of(tree, node.peer_id) != lowest:
            return False
    return True


def test_line_of_four_converges_with_consistent_coords(line4):
    nodes = line4.nodes
    wait_until(lambda: converged(nodes), 20, what="one root everywhere")
    lowest = min(node.peer_id for node in nodes)
    for node in nodes:
        tree, topo = tree_view(node)
        assert tree[lowest] == "", "the root's parent is empty"
        assert node.peer_id in tree
        for peer in topo["peers"]:
            assert peer["up"] and peer["root"] == lowest
            assert peer["port"] >= 1
    # a peer's coordinates hold one port per hop between it and the root
    for node in nodes:
        tree, topo = tree_view(node)
        for peer in topo["peers"]:
            depth, key = 0, peer["public_key"]
            while tree[key]:
                depth, key = depth + 1, tree[key]
            assert len(peer["coords"]) == depth
            assert all(port >= 1 for port in peer["coords"])


def test_killing_the_root_reroots_the_rest(line4):
    nodes = line4.nodes
    wait_until(lambda: converged(nodes), 20, what="initial convergence")
    root = min(nodes, key=lambda node: node.peer_id)
    if root is nodes[0] or root is nodes[-1]:
        survivors = [n for n in nodes if n is not root]
    else:
        # killing a middle node splits the line; keep the larger part
        index = nodes.index(root)
        left, right = nodes[:index], nodes[index + 1:]
        survivors = left if len(left) >= len(right) else right
    root.kill()
    wait_until(lambda: converged(survivors), 20, what="re-rooting after the root died")
    new_root = min(node.peer_id for node in survivors)
    for node in survivors:
        tree, _ = tree_view(node)
        assert root.peer_id not in tree, "no stale entry for the dead root"
        assert tree[new_root] == ""
