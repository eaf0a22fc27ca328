"""Routing at scale in the simulator: `python -m axl.sim.bench`.

Every node is the daemon's own Router, so these figures show what the
ironwood protocol as implemented here does with a thousand or more nodes:
how fast the tree forms, how much state each node holds, whether lookups
find their target, how far greedy routing strays from shortest paths, how
the network heals when a tenth of it leaves, and what the control traffic
costs. Time is virtual (the simulator's clock); wall time is what the run
cost on this machine.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from axl.bench.report import percentile
from axl.routing.frames import TYPE_PATH_BROKEN, TYPE_SIGREQ
from axl.routing.router import ROUTER_REFRESH
from axl.sim.network import Network

# Types 2-8: tree upkeep (SigReq, SigRes, Announce, Bloom) and the pathfinder
# (Lookup, Notify, Broken). Traffic (9) is payload, not overhead.
CONTROL_TYPES = range(TYPE_SIGREQ, TYPE_PATH_BROKEN + 1)
TREE_TYPES = range(TYPE_SIGREQ, TYPE_SIGREQ + 4)

SHAPES: dict[str, Callable[[Network], None]] = {
    "random-4": lambda net: net.random_graph(4),
    "random-8": lambda net: net.random_graph(8),
    "internet": lambda net: net.internet(),
}


@dataclass(frozen=True)
class BenchConfig:
    nodes: int
    shape: str
    seed: int = 1
    pairs: int = 200
    leave_share: float = 0.1
    # Long enough for every node's 240 s self-refresh to fall inside the window.
    steady_window: float = ROUTER_REFRESH + 10
    phase_limit: float = 600.0
    lookup_wait: float = 5.0


@dataclass
class BenchResult:
    """One run's figures; times in seconds, rates per node per second."""

    nodes: int
    shape: str
    links: int
    depth_max: int
    converge_s: float | None
    quiet_s: float | None
    infos_max: int
    infos_mean: float
    entries_max: int
    entries_mean: float
    lookups: int
    lookup_success: float
    stretch_median: float
    stretch_p95: float
    left: int
    root_left: bool
    reconverge_s: float | None
    lookup_success_after_leave: float
    startup_frames: float
    startup_bytes: float
    steady_frames: float
    steady_bytes: float
    wall_s: float


class ControlMeter:
    """Control frames and bytes received network-wide since the last mark."""

    def __init__(self, net: Network):
        self.net = net
        self.frames, self.bytes = self._totals()

    def _totals(self) -> tuple[int, int]:
        frames = sum(self.net.frame_totals[t] for t in CONTROL_TYPES)
        size = sum(self.net.byte_totals[t] for t in CONTROL_TYPES)
        return frames, size

    def tree_frames(self) -> int:
        return sum(self.net.frame_totals[t] for t in TREE_TYPES)

    def take(self) -> tuple[int, int]:
        """(frames, bytes) since the previous take, and start a new interval."""
        frames, size = self._totals()
        delta = (frames - self.frames, size - self.bytes)
        self.frames, self.bytes = frames, size
        return delta


def run_until_converged(net: Network, limit: float) -> float | None:
    """Virtual seconds (1 s resolution) until one root per component with consistent coords."""
    start = net.now
    while net.now - start < limit:
        net.run(1)
        if net.converged():
            return net.now - start
    return None


def run_until_quiet(net: Network, meter: ControlMeter, limit: float) -> float | None:
    """Run until a whole second passes without a single tree frame (blooms included)."""
    start = net.now
    while net.now - start < limit:
        before = meter.tree_frames()
        net.run(1)
        if meter.tree_frames() == before and net.converged():
            return net.now - start
    return None


def sample_pairs(net: Network, count: int, seed: int) -> list[tuple[int, int]]:
    """Distinct-node pairs drawn from the same component (others cannot reach each other)."""
    rng = random.Random(seed)
    groups = [group for group in net.components() if len(group) > 1]
    weights = [len(group) for group in groups]
    pairs = []
    for _ in range(count):
        group = rng.choices(groups, weights)[0]
        src, dst = rng.sample(group, 2)
        pairs.append((src, dst))
    return pairs


def measure_lookups(net: Network, pairs: list[tuple[int, int]], tag: str,
                    wait: float) -> tuple[float, list[float]]:
    """First-try delivery rate (lookup, notify, then the buffered datagram) and path stretch.

    Stretch is measured on a second datagram per delivered pair, sent over
    the path the lookup found: hops taken over the shortest hop count.
    """
    for src, dst in pairs:
        net.send(src, dst, f"{tag}/1/{src}/{dst}".encode())
    net.run(wait)
    delivered = [(s, d) for s, d in pairs if f"{tag}/1/{s}/{d}".encode() in net.received(d, s)]
    for src, dst in delivered:
        net.send(src, dst, f"{tag}/2/{src}/{dst}".encode())
    net.run(wait)
    distances: dict[int, dict[int, int]] = {}
    stretches = []
    for src, dst in delivered:
        payload = f"{tag}/2/{src}/{dst}".encode()
        if payload in net.received(dst, src):
            if src not in distances:
                distances[src] = net.hop_distances(src)
            stretches.append(net.traffic_hops[payload] / distances[src][dst])
    return len(delivered) / len(pairs) if pairs else 1.0, stretches


def run_bench(config: BenchConfig) -> BenchResult:
    """Build, converge, idle, look up, lose a tenth of the nodes, heal, look up again."""
    wall_start = time.perf_counter()
    net = Network(config.nodes, seed=config.seed)
    SHAPES[config.shape](net)
    meter = ControlMeter(net)

    converge_s = run_until_converged(net, config.phase_limit)
    quiet_s = None
    if converge_s is not None:
        rest = run_until_quiet(net, meter, config.phase_limit)
        quiet_s = converge_s + rest if rest is not None else None
    startup_window = net.now - net.start
    startup_frames, startup_bytes = meter.take()

    net.run(config.steady_window)
    steady_frames, steady_bytes = meter.take()

    alive = net.alive()
    depth_max = max(len(net.nodes[i].router.coords()) for i in alive)
    success, stretches = measure_lookups(
        net, sample_pairs(net, config.pairs, config.seed), "a", config.lookup_wait,
    )
    infos = [net.nodes[i].router.info_count() for i in alive]
    entries = [net.state_size(i) for i in alive]

    root = min(alive, key=lambda i: net.nodes[i].key)
    leaving = net.rng.sample(alive, int(len(alive) * config.leave_share))
    for index in leaving:
        net.kill(index)
    reconverge_s = run_until_converged(net, config.phase_limit)
    run_until_quiet(net, meter, config.phase_limit)
    success_after, _ = measure_lookups(
        net, sample_pairs(net, config.pairs, config.seed + 1), "b", config.lookup_wait,
    )

    per_node = float(config.nodes)
    return BenchResult(
        nodes=config.nodes,
        shape=config.shape,
        links=net.link_count(),
        depth_max=depth_max,
        converge_s=converge_s,
        quiet_s=quiet_s,
        infos_max=max(infos),
        infos_mean=statistics.fmean(infos),
        entries_max=max(entries),
        entries_mean=statistics.fmean(entries),
        lookups=len(stretches),
        lookup_success=success,
        stretch_median=statistics.median(stretches) if stretches else math.nan,
        stretch_p95=percentile(stretches, 0.95),
        left=len(leaving),
        root_left=root in leaving,
        reconverge_s=reconverge_s,
        lookup_success_after_leave=success_after,
        startup_frames=startup_frames / per_node / startup_window,
        startup_bytes=startup_bytes / per_node / startup_window,
        steady_frames=steady_frames / per_node / config.steady_window if config.steady_window else 0.0,
        steady_bytes=steady_bytes / per_node / config.steady_window if config.steady_window else 0.0,
        wall_s=time.perf_counter() - wall_start,
    )


COLUMNS = (
    ("nodes", 6), ("shape", 9), ("links", 6), ("depth", 5), ("conv s", 6), ("quiet s", 7),
    ("infos max/mean", 14), ("entries max/mean", 16), ("lookups ok", 10), ("stretch med/p95", 15),
    ("reconv s", 9), ("ok after", 8), ("ctl startup fr/B", 16), ("ctl steady fr/B", 15),
    ("wall s", 7),
)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def format_row(r: BenchResult) -> str:
    reconverge = _seconds(r.reconverge_s) + ("*" if r.root_left else "")
    cells = (
        str(r.nodes), r.shape, str(r.links), str(r.depth_max), _seconds(r.converge_s),
        _seconds(r.quiet_s), f"{r.infos_max}/{r.infos_mean:.1f}",
        f"{r.entries_max}/{r.entries_mean:.1f}", f"{100 * r.lookup_success:.1f}%",
        f"{r.stretch_median:.2f}/{r.stretch_p95:.2f}", reconverge,
        f"{100 * r.lookup_success_after_leave:.1f}%",
        f"{r.startup_frames:.1f}/{r.startup_bytes:.0f}", f"{r.steady_frames:.2f}/{r.steady_bytes:.0f}",
        f"{r.wall_s:.0f}",
    )
    return " | ".join(cell.rjust(width) for cell, (_, width) in zip(cells, COLUMNS))


def format_header() -> str:
    names = " | ".join(name.rjust(width) for name, width in COLUMNS)
    return names + "\n" + "-+-".join("-" * width for _, width in COLUMNS)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m axl.sim.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,5000", help="comma-separated node counts")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated, of: " + ", ".join(SHAPES))
    parser.add_argument("--pairs", type=int, default=200, help="sampled pairs for lookups and stretch")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steady", type=float, default=BenchConfig.steady_window,
                        help="virtual seconds of idle network to measure steady control traffic over")
    parser.add_argument("--quick", action="store_true", help="small run: 200 nodes, 50 pairs, 60 s idle")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.pairs, args.steady = "200", 50, 60.0
    unknown = set(args.shapes.split(",")) - set(SHAPES)
    if unknown:
        parser.error(f"unknown shapes: {', '.join(sorted(unknown))}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    shapes = args.shapes.split(",")
    print(format_header(), flush=True)
    results = []
    for size in sizes:
        for shape in shapes:
            config = BenchConfig(size, shape, seed=args.seed, pairs=args.pairs, steady_window=args.steady)
            results.append(run_bench(config))
            print(format_row(results[-1]), flush=True)
    print("times are virtual seconds (1 s resolution) except wall s; * = the root was among those who left")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({
                "command": "python -m axl.sim.bench " + " ".join(sys.argv[1:] if argv is None else argv),
                "python": platform.python_version(),
                "machine": platform.machine(),
                "results": [asdict(r) for r in results],
            }, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
