"""Convergecast: sum a value from every node up the overlay's spanning tree.

Each node reads its parent and children from its own node's /topology tree,
waits for each child's aggregate, adds its own value and sends the result to
its parent. The root (the node without a parent) prints the total. With the
default value of 1 per node, the total is the number of nodes.

Messages are JSON: {"convergecast": SESSION, "sum": S, "count": C,
"missing": [peer ids]}. A --session id keeps runs apart: aggregates of any
other session found in the queue are ignored. A child that does not report
in time is listed by peer id; its parent gives up a little earlier than the
grandparent (one --margin per level of depth), so that the root still
receives everything the others collected.

    python examples/convergecast.py --all --session demo        # whole testnet
    python examples/convergecast.py --node 3 --session demo     # one node
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

from common import add_bridge_arguments, chosen_bridge, load_testnet, run_main  # first: see common.py

from axl.client import AsyncClient

log = logging.getLogger("convergecast")

MAX_RECV_WAIT_SECONDS = 5.0


@dataclass
class TreePosition:
    """Where a node sits in the spanning tree, as its own node reports it."""

    peer_id: str
    parent: str
    children: list[str]
    depth: int


@dataclass
class Aggregate:
    total: float = 0.0
    count: int = 0
    missing: list[str] = field(default_factory=list)

    def merge(self, other: "Aggregate") -> None:
        self.total += other.total
        self.count += other.count
        self.missing.extend(other.missing)


@dataclass
class NodeResult:
    position: TreePosition
    aggregate: Aggregate

    @property
    def is_root(self) -> bool:
        return self.position.parent == ""


def tree_position(topology: dict) -> TreePosition:
    """Parent, children and depth of this node from /topology's tree entries."""
    own = topology["our_public_key"]
    parents = {entry["public_key"]: entry.get("parent", "") for entry in topology.get("tree", [])}
    children = sorted(key for key, parent in parents.items() if parent == own and key != own)
    depth, cursor = 0, parents.get(own, "")
    while cursor and depth < len(parents):
        depth += 1
        cursor = parents.get(cursor, "")
    return TreePosition(own, parents.get(own, ""), children, depth)


def encode(session: str, aggregate: Aggregate) -> bytes:
    return json.dumps({"convergecast": session, "sum": aggregate.total, "count": aggregate.count,
                       "missing": aggregate.missing}).encode()


def decode(body: bytes, session: str) -> Aggregate | None:
    """The aggregate in ``body`` if it belongs to ``session``; None for anything else."""
    try:
        document = json.loads(body)
    except ValueError:
        return None
    if not isinstance(document, dict) or document.get("convergecast") != session:
        return None
    total, count, missing = document.get("sum"), document.get("count"), document.get("missing", [])
    if not (isinstance(total, (int, float)) and isinstance(count, int) and isinstance(missing, list)):
        return None
    return Aggregate(total, count, [str(peer) for peer in missing])


async def collect(bridge: AsyncClient, session: str, children: list[str], deadline: float) -> Aggregate:
    """Aggregates from ``children`` until all reported or ``deadline`` (monotonic) passed."""
    result = Aggregate()
    waiting = set(children)
    while waiting:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        received = await bridge.recv(wait=min(left, MAX_RECV_WAIT_SECONDS))
        if received is None:
            continue
        aggregate = decode(received.body, session)
        if aggregate is None:
            log.info("ignored a message from %s (not this session's aggregate)", received.sender[:16])
            continue
        if received.sender not in waiting:
            log.warning("aggregate from %s, which is not a child still awaited; counted anyway", received.sender[:16])
        waiting.discard(received.sender)
        result.merge(aggregate)
    result.missing.extend(sorted(waiting))
    return result


async def run_node(bridge: AsyncClient, session: str, value: float = 1.0, timeout: float = 30.0,
                   margin: float = 1.0) -> NodeResult:
    """One node's part: wait for the children, add ``value``, pass the sum to the parent."""
    started = time.monotonic()
    position = tree_position(await bridge.topology())
    deadline = started + max(margin, timeout - position.depth * margin)
    aggregate = await collect(bridge, session, position.children, deadline)
    aggregate.merge(Aggregate(value, 1))
    if position.parent:
        await bridge.send(position.parent, encode(session, aggregate))
    return NodeResult(position, aggregate)


def report(result: NodeResult) -> str:
    """The root's total, or what another node sent up; then the nodes that never reported."""
    aggregate = result.aggregate
    nodes = f"{aggregate.count} node{'' if aggregate.count == 1 else 's'}"
    if result.is_root:
        lines = [f"total = {aggregate.total:g} from {nodes}"]
    else:
        lines = [f"sent {aggregate.total:g} ({nodes}) to parent {result.position.parent}"]
    if result.aggregate.missing:
        lines.append("missing (no aggregate in time): " + ", ".join(result.aggregate.missing))
    return "\n".join(lines)


async def run_all(urls: list[str], session: str, value: float, timeout: float, margin: float) -> NodeResult:
    """Every node's part at once (one process, one bridge each); returns the root's result."""
    async with AsyncExitStack() as stack:
        bridges = [await stack.enter_async_context(AsyncClient(url)) for url in urls]
        results = await asyncio.gather(*(run_node(b, session, value, timeout, margin) for b in bridges))
    roots = [result for result in results if result.is_root]
    if len(roots) != 1:
        raise ValueError(f"expected one root, found {len(roots)}: is the testnet converged?")
    return roots[0]


def main() -> None:
    parser = argparse.ArgumentParser(description="Sum a value over all nodes along the spanning tree.")
    add_bridge_arguments(parser)
    parser.add_argument("--all", action="store_true", help="run every node of the --testnet file")
    parser.add_argument("--session", default="default", help="run id; other runs' messages are ignored")
    parser.add_argument("--value", type=float, default=1.0, help="this node's value [1]")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds the root waits [30]")
    parser.add_argument("--margin", type=float, default=1.0, help="seconds less per level of depth [1]")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    if args.all:
        urls = [node["bridge"] for node in load_testnet(args.testnet)]
        print(report(run_main(run_all(urls, args.session, args.value, args.timeout, args.margin))))
        return
    print(report(run_main(_run_one(chosen_bridge(args), args))))


async def _run_one(url: str, args: argparse.Namespace) -> NodeResult:
    async with AsyncClient(url) as bridge:
        return await run_node(bridge, args.session, args.value, args.timeout, args.margin)


if __name__ == "__main__":
    main()
