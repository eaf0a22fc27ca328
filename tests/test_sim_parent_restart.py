"""A root that restarts while its children hold tree info signed by its old self.

Ports are handed out afresh by every incarnation, so a child whose info still
carries the port the old parent gave it claims coordinates that now belong to
a sibling, and greedy routing delivers its traffic to the wrong node.
"""

from __future__ import annotations

import random

import pytest

from axl.routing.actions import Action, SendFrame, SendTraffic
from axl.routing.frames import split_frame
from axl.routing.router import Router
from axl.sim import Network
from axl.sim.network import DEFAULT_START, sim_identity

SIZE = 5
# One tick to adopt the new SigRes, gossip to reach the parent by the next.
HEAL_SECONDS = 2


def _star() -> tuple[Network, int, list[int]]:
    """A star around the lowest key (the root), converged."""
    net = Network(SIZE, seed=31)
    hub = min(range(SIZE), key=lambda i: net.nodes[i].key)
    children = [i for i in range(SIZE) if i != hub]
    for child in children:
        net.connect(hub, child)
    net.run(10)
    assert net.converged()
    return net, hub, children


def _restart(net: Network, hub: int, order: list[int], *, gap: float = 0.0) -> None:
    """Kill the hub and bring it back at once with its links in `order` (so new
    ports), `gap` seconds apart."""
    net.kill(hub)
    for child in order:
        net.cut(hub, child)
    net.revive(hub)
    for child in order:
        net.connect(hub, child)
        net.run(gap)


def _parent_agrees(net: Network, hub: int) -> bool:
    """The hub's coordinates for each peer are the port it assigned it."""
    router = net.nodes[hub].router
    return all(
        router.peer_view(link.id_at(hub)).coords == [router.link_port(link.id_at(hub))]
        for link in net.nodes[hub].links
    )


def _assert_heals(net: Network, hub: int) -> None:
    net.run(HEAL_SECONDS)
    assert net.converged()
    assert _parent_agrees(net, hub)


@pytest.mark.parametrize("gap", [0.0, 0.003, 0.02, 0.3])
def test_children_adopt_the_restarted_parents_new_ports(gap: float) -> None:
    net, hub, children = _star()
    _restart(net, hub, children[::-1], gap=gap)
    _assert_heals(net, hub)


def test_children_relinking_after_the_parents_first_ticks() -> None:
    net, hub, children = _star()
    net.kill(hub)
    for child in children:
        net.cut(hub, child)
    net.revive(hub)
    net.run(0.9)
    for child in children[::-1]:
        net.connect(hub, child)
        net.run(0.4)
    _assert_heals(net, hub)


def test_restart_while_a_child_awaits_its_sigres() -> None:
    net, hub, children = _star()
    _restart(net, hub, children[::-1])
    net.run(0.005)  # the children's SigReqs are in flight
    _restart(net, hub, children[1:] + children[:1])
    _assert_heals(net, hub)


def test_three_restarts_within_ten_seconds() -> None:
    net, hub, children = _star()
    for turn in range(3):
        _restart(net, hub, children[turn:] + children[:turn], gap=0.05)
        net.run(3)
    _assert_heals(net, hub)
    net.run(5)  # blooms, for the lookups
    for child in children:
        net.send(hub, child, b"to %d" % child)
        net.send(child, hub, b"from %d" % child)
    net.run(3)
    for child in children:
        assert net.received(child, hub) == [b"to %d" % child]
        assert net.received(hub, child) == [b"from %d" % child]


class _Wires:
    """Bare routers joined by numbered links, frames delivered at once (the
    simulator cannot keep one end of a link up while the other restarts)."""

    def __init__(self, routers: dict[str, Router]):
        self.routers = routers
        self.ends: dict[tuple[str, int], tuple[str, int]] = {}

    def link(self, a: str, b: str, link_id: int, now: float) -> None:
        self.ends[(a, link_id)] = (b, link_id)
        self.ends[(b, link_id)] = (a, link_id)
        for here, there in ((a, b), (b, a)):
            key = self.routers[there].key
            self.deliver(here, self.routers[here].add_link(link_id, key, 0, now), now)

    def drop(self, name: str, link_id: int, now: float) -> None:
        """Only `name` sees the link go: the far end may be a process that died."""
        self.ends.pop((name, link_id), None)
        self.deliver(name, self.routers[name].remove_link(link_id, now), now)

    def tick(self, now: float) -> None:
        for name, router in self.routers.items():
            self.deliver(name, router.tick(now), now)

    def deliver(self, sender: str, actions: list[Action], now: float) -> None:
        queue = [(sender, action) for action in actions]
        while queue:
            here, action = queue.pop(0)
            far = self.ends.get((here, getattr(action, "link_id", -1)))
            if far is None or not isinstance(action, (SendFrame, SendTraffic)):
                continue
            ftype, body = split_frame(action.frame)
            there, link_id = far
            replies = self.routers[there].handle_frame(link_id, ftype, body, now)
            queue += [(there, reply) for reply in replies]


def test_a_child_whose_old_link_outlives_the_parents_restart_takes_the_new_port() -> None:
    """The child sees the restarted parent's link come up before it notices
    the old one is dead, so its state for the parent key (request, stored
    response) lives on; the new parent's answer must still win."""
    identities = sorted((sim_identity(32, i) for i in range(3)), key=lambda ident: ident.public_key)
    names = ("hub", "first", "second")
    now = DEFAULT_START
    wires = _Wires({name: Router(ident, now=now, rng=random.Random(name))
                    for name, ident in zip(names, identities)})
    wires.link("hub", "first", 1, now)
    wires.link("hub", "second", 2, now)
    for _ in range(5):
        now += 1
        wires.tick(now)
    first = wires.routers["first"]
    assert first.infos[first.key].port == 1
    wires.routers["hub"] = Router(identities[0], now=now, rng=random.Random("again"))
    wires.ends.clear()
    wires.link("hub", "second", 3, now)  # port 1 goes to the sibling this time
    wires.link("hub", "first", 4, now)
    wires.drop("first", 1, now)
    wires.drop("second", 2, now)
    for _ in range(3):
        now += 1
        wires.tick(now)
    hub = wires.routers["hub"]
    for link_id, name in ((3, "second"), (4, "first")):
        child = wires.routers[name]
        assert child.infos[child.key].port == hub.link_port(link_id)
        assert hub.peer_view(link_id).coords == [hub.link_port(link_id)]
