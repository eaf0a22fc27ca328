"""GossipSub in memory: many routers, links with latency, a virtual clock.

Runs the very GossipSub class the HTTP driver uses, so its figures say how
the protocol behaves before any node is started, and in a second:

    python examples/gossipsub/gossip_sim.py --nodes 20 --messages 200
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import common  # noqa: E402, F401  (first: a missing module ends in one line, see common.py)
from gossip_metrics import Report, summarize  # noqa: E402
from gossip_protocol import Delivery, GossipSub, MalformedRPC, Params  # noqa: E402

TOPIC = "demo"


def peer_graph(n: int, degree: int, rng: random.Random) -> list[set[int]]:
    """Connected random graph: a random spanning tree plus edges up to ``degree`` each."""
    neighbours: list[set[int]] = [set() for _ in range(n)]
    order = list(range(n))
    rng.shuffle(order)
    for position in range(1, n):
        a, b = order[position], order[rng.randrange(position)]
        neighbours[a].add(b)
        neighbours[b].add(a)
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n) if b not in neighbours[a]]
    rng.shuffle(pairs)
    for a, b in pairs:
        if len(neighbours[a]) < degree and len(neighbours[b]) < degree:
            neighbours[a].add(b)
            neighbours[b].add(a)
    return neighbours


@dataclass(order=True)
class Arrival:
    time: float
    sequence: int
    destination: int = field(compare=False)
    source: int = field(compare=False)
    payload: bytes = field(compare=False)


@dataclass
class SimConfig:
    nodes: int = 20
    degree: int = 6
    messages: int = 200
    interval: float = 0.02
    warmup: float = 3.0
    drain: float = 5.0
    latency_min: float = 0.001
    latency_max: float = 0.010
    seed: int = 1
    params: Params = field(default_factory=Params)


class Simulation:
    """Routers wired by FIFO links with a fixed random latency per direction."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.names = [f"{index:064x}" for index in range(config.nodes)]
        self.routers = [GossipSub(name, config.params, random.Random(config.seed * 1000 + i))
                        for i, name in enumerate(self.names)]
        self.latency: dict[tuple[int, int], float] = {}
        self.last_arrival: dict[tuple[int, int], float] = {}
        self.queue: list[Arrival] = []
        self.sequence = 0
        self.now = 0.0
        self.deliveries: dict[str, list[Delivery]] = {name: [] for name in self.names}
        self.index = {name: i for i, name in enumerate(self.names)}

    def link_latency(self, source: int, destination: int) -> float:
        key = (source, destination)
        if key not in self.latency:
            self.latency[key] = self.rng.uniform(self.config.latency_min, self.config.latency_max)
        return self.latency[key]

    def flush(self, source: int) -> None:
        router = self.routers[source]
        self.deliveries[router.peer_id].extend(router.take_deliveries())
        for peer, payload in router.take_outgoing():
            destination = self.index[peer]
            key = (source, destination)
            arrival = max(self.now + self.link_latency(source, destination), self.last_arrival.get(key, 0.0))
            self.last_arrival[key] = arrival
            self.sequence += 1
            heapq.heappush(self.queue, Arrival(arrival, self.sequence, destination, source, payload))

    def run_until(self, end: float) -> None:
        """Process arrivals and timers in time order up to virtual time ``end``."""
        while True:
            timer_node, timer_at = self._next_timer()
            arrival_at = self.queue[0].time if self.queue else None
            candidates = [t for t in (timer_at, arrival_at) if t is not None and t <= end]
            if not candidates:
                self.now = end
                return
            if arrival_at is not None and arrival_at == min(candidates):
                arrival = heapq.heappop(self.queue)
                self.now = arrival.time
                try:
                    self.routers[arrival.destination].receive(self.names[arrival.source], arrival.payload, self.now)
                except MalformedRPC as error:
                    raise AssertionError(f"simulated router sent a malformed RPC: {error}") from error
                self.flush(arrival.destination)
            else:
                self.now = timer_at
                self.routers[timer_node].handle_timer(self.now)
                self.flush(timer_node)

    def _next_timer(self) -> tuple[int, float | None]:
        best_node, best_at = -1, None
        for i, router in enumerate(self.routers):
            at = router.next_deadline()
            if at is not None and (best_at is None or at < best_at):
                best_node, best_at = i, at
        return best_node, best_at

    def run(self) -> Report:
        """Wire the peer graph, subscribe everyone, warm up, publish, drain, report."""
        graph = peer_graph(self.config.nodes, self.config.degree, self.rng)
        for i, neighbours in enumerate(graph):
            for j in sorted(neighbours):
                self.routers[i].add_peer(self.names[j])
            self.flush(i)
        for i, router in enumerate(self.routers):
            router.subscribe(TOPIC, self.now)
            self.flush(i)
        self.run_until(self.config.warmup)
        published: dict[str, str] = {}
        for number in range(self.config.messages):
            self.run_until(self.config.warmup + number * self.config.interval)
            origin = self.rng.randrange(self.config.nodes)
            msg_id = self.routers[origin].publish(TOPIC, f"message {number}".encode(), self.now)
            published[msg_id] = self.names[origin]
            self.flush(origin)
        self.run_until(self.now + self.config.drain)
        copies = sum(router.copies_received for router in self.routers)
        return summarize(published, set(self.names), self.deliveries, copies)


def main() -> None:
    parser = argparse.ArgumentParser(description="GossipSub on an in-memory network with a virtual clock.")
    parser.add_argument("--nodes", type=int, default=20, help="nodes in the simulation [20]")
    parser.add_argument("--degree", type=int, default=6, help="peers per node [6]")
    parser.add_argument("--messages", type=int, default=200, help="messages published [200]")
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between publishes [0.02]")
    parser.add_argument("--seed", type=int, default=1, help="random seed of the graph and the publishers [1]")
    parser.add_argument("--no-choke", action="store_true", help="plain GossipSub: push to every mesh peer")
    args = parser.parse_args()
    if not 0 < args.degree < args.nodes:
        parser.error(f"--degree {args.degree}: between 1 and {args.nodes - 1} with {args.nodes} nodes")
    config = SimConfig(nodes=args.nodes, degree=args.degree, messages=args.messages,
                       interval=args.interval, seed=args.seed, params=Params(choke=not args.no_choke))
    report = Simulation(config).run()
    print(f"{args.nodes} nodes, {args.degree} peers each, {config.params}")
    print("\n".join(report.lines()))


if __name__ == "__main__":
    main()
