"""A deterministic discrete-event simulator that runs the daemon's Router.

Every node is a real `Router` with a fixed-seed identity and a seeded nonce
generator; links are in-memory FIFO pipes with a fixed latency (and optional
loss for queued frames, types 6-9); a virtual clock pops events off a heap,
including each node's 1-second maintenance tick, staggered so that nodes do
not all tick in the same instant. Same seed, same run.

This is the routing layer's own test bench: `send` hands a payload to the
router as is, so its measures (stretch, hops) can follow it. Full nodes
(sessions, overlay TCP, messages, link handshakes) run in
`axl.sim.stack.StackNetwork`, which drives the daemon's NodeCore.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import logging
import random
from collections import Counter, deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Callable

from axl.identity import NodeIdentity
from axl.routing.actions import Action, DeliverTraffic, PathFound, SendFrame, SendTraffic
from axl.routing.bloom import BloomFilter
from axl.routing.frames import TYPE_BLOOM, TYPE_TRAFFIC, Traffic, split_frame
from axl.routing.router import Router
from axl.wire import DecodeError

log = logging.getLogger(__name__)

DEFAULT_START = 1_700_000_000.0
DEFAULT_LATENCY = 0.01

# Called as tap(sender, receiver, frame type, body) for every frame a link delivers.
FrameTap = Callable[[int, int, int, bytes], None]


def sim_identity(seed: int, index: int) -> NodeIdentity:
    """Node `index`'s identity in a network built with `seed`."""
    return NodeIdentity.from_seed(hashlib.sha256(f"axl-sim/{seed}/{index}".encode()).digest())


@dataclass
class SimLink:
    """One bidirectional link; each end knows it by its own link id."""

    a: int
    b: int
    id_a: int
    id_b: int
    latency: float
    loss: float
    up: bool = True

    def other(self, node: int) -> int:
        return self.b if node == self.a else self.a

    def id_at(self, node: int) -> int:
        return self.id_a if node == self.a else self.id_b


@dataclass
class SimNode:
    index: int
    identity: NodeIdentity
    router: Router | None
    inbox: list[tuple[bytes, bytes]] = field(default_factory=list)
    found: list[bytes] = field(default_factory=list)
    links: list[SimLink] = field(default_factory=list)

    @property
    def alive(self) -> bool:
        return self.router is not None

    @property
    def key(self) -> bytes:
        return self.identity.public_key


class LastBlooms(Mapping[tuple[int, int], BloomFilter]):
    """The last bloom body seen per (sender, receiver), decoded only when read.

    Decoding every bloom a large network exchanges would double the cost of
    the router's own decoding, while the measures read only a few of them.
    """

    def __init__(self) -> None:
        self.bodies: dict[tuple[int, int], bytes] = {}

    def __getitem__(self, direction: tuple[int, int]) -> BloomFilter:
        return BloomFilter.decode(self.bodies[direction])

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(self.bodies)

    def __len__(self) -> int:
        return len(self.bodies)


class Network:
    """N routers, the links between them, and a virtual clock."""

    def __init__(self, size: int, *, seed: int = 0, start: float = DEFAULT_START):
        self.seed = seed
        self.start = start
        self.now = start
        self.rng = random.Random(seed)
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._link_ids = itertools.count(1)
        self._ends: dict[int, tuple[SimLink, int]] = {}
        self.decode_errors: list[tuple[int, str]] = []
        self.traffic_hops: Counter[bytes] = Counter()
        self.frames_received: Counter[tuple[int, int]] = Counter()
        self.bytes_received: Counter[tuple[int, int]] = Counter()
        self.frame_totals: Counter[int] = Counter()
        self.byte_totals: Counter[int] = Counter()
        self.last_bloom = LastBlooms()
        self.tap: FrameTap | None = None
        self.nodes = [SimNode(i, sim_identity(seed, i), None) for i in range(size)]
        self.by_key = {node.key: node.index for node in self.nodes}
        for node in self.nodes:
            self._start_router(node)
            offset = (node.index + 0.5) / size
            self._schedule(offset, lambda node=node: self._tick(node))

    # ------------------------------------------------------------------ topology

    def connect(self, a: int, b: int, *, latency: float = DEFAULT_LATENCY, loss: float = 0.0) -> SimLink:
        link = SimLink(a, b, next(self._link_ids), next(self._link_ids), latency, loss)
        self._ends[link.id_a] = (link, a)
        self._ends[link.id_b] = (link, b)
        self.nodes[a].links.append(link)
        self.nodes[b].links.append(link)
        link.up = self.nodes[a].alive and self.nodes[b].alive
        if link.up:
            self._link_up(link)
        return link

    def cut(self, a: int, b: int) -> None:
        """Take down every link between a and b for good."""
        for link in list(self.nodes[a].links):
            if link.other(a) == b:
                self._link_down(link)
                self.nodes[a].links.remove(link)
                self.nodes[b].links.remove(link)

    def kill(self, index: int) -> None:
        """Stop a node: its links drop (and come back on revive), its state is lost."""
        for link in self.nodes[index].links:
            self._link_down(link)
        self.nodes[index].router = None

    def revive(self, index: int) -> None:
        """Restart a node with a fresh router (seq back to 1), as a daemon restart would."""
        node = self.nodes[index]
        self._start_router(node)
        for link in node.links:
            if self.nodes[link.other(index)].alive:
                link.up = True
                self._link_up(link)

    def line(self, **kw) -> None:
        for i in range(len(self.nodes) - 1):
            self.connect(i, i + 1, **kw)

    def ring(self, **kw) -> None:
        self.line(**kw)
        self.connect(len(self.nodes) - 1, 0, **kw)

    def star(self, hub: int = 0, **kw) -> None:
        for i in range(len(self.nodes)):
            if i != hub:
                self.connect(hub, i, **kw)

    def random_graph(self, degree: int, **kw) -> None:
        for a, b in random_edges(len(self.nodes), degree, self.rng):
            self.connect(a, b, **kw)

    def internet(self, *, core_share: float = 0.02, core_degree: int = 6,
                 multihome: float = 0.25, **kw) -> None:
        """A meshed core with stub trees grown by preferential attachment.

        The first few per cent of nodes form a random core of `core_degree`;
        every later node attaches to an existing node picked with odds
        proportional to its degree (so hubs emerge), and a share `multihome`
        of them takes a second, independent upstream.
        """
        size = len(self.nodes)
        core = max(4, min(size, int(size * core_share)))
        edges: set[tuple[int, int]] = set()
        for pos in range(1, core):
            edges.add(_edge(pos, self.rng.randrange(pos)))
        while len(edges) < min(core * core_degree // 2, core * (core - 1) // 2):
            a, b = self.rng.sample(range(core), 2)
            edges.add(_edge(a, b))
        ends = [end for edge in edges for end in edge]
        for node in range(core, size):
            uplinks = 2 if self.rng.random() < multihome else 1
            chosen = {ends[self.rng.randrange(len(ends))] for _ in range(uplinks)}
            for upstream in sorted(chosen):
                edges.add(_edge(node, upstream))
                ends += (node, upstream)
        for a, b in sorted(edges):
            self.connect(a, b, **kw)

    def link_count(self) -> int:
        return sum(len(node.links) for node in self.nodes) // 2

    # ------------------------------------------------------------------ running

    def run(self, seconds: float) -> None:
        self.run_until(self.now + seconds)

    def run_until(self, when: float) -> None:
        while self._heap and self._heap[0][0] <= when:
            at, _, callback = heapq.heappop(self._heap)
            self.now = at
            callback()
        self.now = when

    def send(self, src: int, dst: int, payload: bytes) -> None:
        """Routed as is: the destination's inbox gets exactly `payload`."""
        node = self.nodes[src]
        if node.router is not None:
            self._apply(node, node.router.send(self.nodes[dst].key, payload, self.now))

    def lookup(self, src: int, partial_key: bytes) -> None:
        node = self.nodes[src]
        if node.router is not None:
            self._apply(node, node.router.lookup(partial_key, self.now))

    def received(self, dst: int, src: int) -> list[bytes]:
        key = self.nodes[src].key
        return [payload for source, payload in self.nodes[dst].inbox if source == key]

    # ------------------------------------------------------------------ measures

    def alive(self) -> list[int]:
        return [node.index for node in self.nodes if node.alive]

    def components(self) -> list[list[int]]:
        seen: set[int] = set()
        groups = []
        for start in self.alive():
            if start not in seen:
                group = sorted(self.hop_distances(start))
                seen.update(group)
                groups.append(group)
        return groups

    def hop_distances(self, start: int) -> dict[int, int]:
        """Shortest hop counts over up links (BFS)."""
        dist = {start: 0}
        queue = deque([start])
        while queue:
            here = queue.popleft()
            for link in self.nodes[here].links:
                there = link.other(here)
                if link.up and there not in dist:
                    dist[there] = dist[here] + 1
                    queue.append(there)
        return dist

    def one_root_per_component(self) -> bool:
        for group in self.components():
            lowest = min(self.nodes[i].key for i in group)
            if any(self.nodes[i].router.root() != lowest for i in group):
                return False
        return True

    def coords_consistent(self) -> bool:
        """Every non-root's coords = its parent's coords + the port its parent gave it."""
        for index in self.alive():
            router = self.nodes[index].router
            info = router.infos[router.key]
            if info.parent == router.key:
                if router.coords():
                    return False
                continue
            parent = self.nodes[self.by_key[info.parent]]
            link = self._link_between(parent.index, index)
            if parent.router is None or link is None:
                return False
            port = parent.router.link_port(link.id_at(parent.index))
            if info.port != port or router.coords() != parent.router.coords() + [port]:
                return False
        return True

    def converged(self) -> bool:
        return self.one_root_per_component() and self.coords_consistent()

    def state_size(self, index: int) -> int:
        router = self.nodes[index].router
        return router.info_count() + len(router.known_paths()) + router.rumor_count()

    def stretch(self, src: int, dst: int, payload: bytes) -> float:
        """Hops the payload travelled over the shortest hop count."""
        return self.traffic_hops[payload] / self.hop_distances(src)[dst]

    # ------------------------------------------------------------------ internals

    def _start_router(self, node: SimNode) -> None:
        rng = random.Random(f"{self.seed}/{node.index}/{self.now}")
        node.router = Router(node.identity, now=self.now, rng=rng)

    def _schedule(self, delay: float, callback: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (self.now + delay, next(self._seq), callback))

    def _tick(self, node: SimNode) -> None:
        if node.router is not None:
            self._apply(node, node.router.tick(self.now))
        self._schedule(1.0, lambda: self._tick(node))

    def _link_between(self, a: int, b: int) -> SimLink | None:
        for link in self.nodes[a].links:
            if link.up and link.other(a) == b:
                return link
        return None

    def _link_up(self, link: SimLink) -> None:
        link.up = True
        for here in (link.a, link.b):
            node = self.nodes[here]
            other = self.nodes[link.other(here)]
            self._apply(node, node.router.add_link(link.id_at(here), other.key, 0, self.now))

    def _link_down(self, link: SimLink) -> None:
        if not link.up:
            return
        link.up = False
        for here in (link.a, link.b):
            node = self.nodes[here]
            if node.router is not None:
                self._apply(node, node.router.remove_link(link.id_at(here), self.now))

    def _apply(self, node: SimNode, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, SendFrame):
                self._transmit(action.link_id, action.frame, lossy=False)
            elif isinstance(action, SendTraffic):
                self._transmit(action.link_id, action.frame, lossy=True)
            elif isinstance(action, DeliverTraffic):
                node.inbox.append((action.source_key, action.payload))
            elif isinstance(action, PathFound):
                node.found.append(action.key)

    def _transmit(self, link_id: int, frame: bytes, *, lossy: bool) -> None:
        link, sender = self._ends[link_id]
        if not link.up or (lossy and link.loss and self.rng.random() < link.loss):
            return
        receiver = link.other(sender)
        self._schedule(link.latency, lambda: self._arrive(link, receiver, frame))

    def _observe(self, sender: int, receiver: int, frame: bytes, ftype: int, body: bytes) -> None:
        """Bookkeeping for the measures: frames and bytes, traffic hops, the last bloom per direction."""
        self.frames_received[(receiver, ftype)] += 1
        self.bytes_received[(receiver, ftype)] += len(frame)
        self.frame_totals[ftype] += 1
        self.byte_totals[ftype] += len(frame)
        if ftype == TYPE_TRAFFIC:
            self.traffic_hops[Traffic.decode(body).payload] += 1
        elif ftype == TYPE_BLOOM:
            self.last_bloom.bodies[(sender, receiver)] = body
        if self.tap is not None:
            self.tap(sender, receiver, ftype, body)

    def _arrive(self, link: SimLink, receiver: int, frame: bytes) -> None:
        node = self.nodes[receiver]
        if not link.up or node.router is None:
            return
        ftype, body = split_frame(frame)
        self._observe(link.other(receiver), receiver, frame, ftype, body)
        try:
            actions = node.router.handle_frame(link.id_at(receiver), ftype, body, self.now)
        except DecodeError as exc:
            log.warning("node %d closes link %d: %s", receiver, link.id_at(receiver), exc)
            self.decode_errors.append((receiver, str(exc)))
            self._link_down(link)
            return
        self._apply(node, actions)


def random_edges(size: int, degree: int, rng: random.Random) -> list[tuple[int, int]]:
    """Connected: a random spanning tree, then random extra edges up to about `degree` each."""
    order = list(range(size))
    rng.shuffle(order)
    edges: set[tuple[int, int]] = set()
    for pos in range(1, len(order)):
        edges.add(_edge(order[pos], order[rng.randrange(pos)]))
    target = size * degree // 2
    while len(edges) < target:
        a, b = rng.sample(range(size), 2)
        edges.add(_edge(a, b))
    return sorted(edges)


def _edge(a: int, b: int) -> tuple[int, int]:
    return (a, b) if a < b else (b, a)
