"""The bookkeeping of a budget held per peer and per node (axl.budgets.PeerBudget)."""

from __future__ import annotations

from axl.budgets import PeerBudget

A, B, C = b"a" * 32, b"b" * 32, b"c" * 32


def budget() -> PeerBudget:
    return PeerBudget("things", items_per_peer=2, items_per_node=3, bytes_per_peer=100, bytes_per_node=150)


def test_each_peer_gets_its_items_until_the_node_has_its_own() -> None:
    things = budget()
    assert things.take(A, 10) and things.take(A, 10)
    assert not things.take(A, 10)  # A's two
    assert things.take(B, 10)
    assert not things.take(C, 10)  # the node's three
    assert dict(things.refused) == {("items", "peer"): 1, ("items", "node"): 1}
    things.give(A, 10)
    assert things.take(C, 10) and things.held_by(C) == 1


def test_bytes_count_per_peer_and_per_node_but_one_item_always_fits() -> None:
    things = budget()
    assert things.take(A, 500)  # A held nothing: any size fits
    assert not things.take(A, 1)  # A is over its 100 bytes
    assert things.take(B, 60) and not things.take(B, 50)  # B would pass 100
    assert things.refused == {("bytes", "peer"): 2}
    things.give(A, 500)
    assert things.take(A, 80) and not things.take(B, 20)  # the node would pass 150
    assert things.refused[("bytes", "node")] == 1


def test_what_is_given_back_leaves_no_entry_and_usage_shows_the_fullest_peer() -> None:
    things = budget()
    things.take(A, 30)
    things.take(A, 20)
    things.take(B, 5)
    rows = {(use.budget, use.scope): (use.limit, use.in_use) for use in things.usage()}
    assert rows == {("things", "peer"): (2, 2), ("things", "node"): (3, 3),
                    ("things_bytes", "peer"): (100, 50), ("things_bytes", "node"): (150, 55)}
    for peer, size in ((A, 30), (A, 20), (B, 5)):
        things.give(peer, size)
    assert (things.items, things.bytes, things.held_by(A), things.held_by(B)) == (0, 0, 0, 0)
