"""Measure GossipSub on a running testnet: publish M messages, report delivery.

Every node of the testnet gets a GossipSub driver (all in this one process,
each talking only to its own node's HTTP bridge), a random set of gossip
peers, and a subscription to one topic. After the meshes form, M messages are
published from random nodes; the run ends when every subscriber has every
message or the timeout passes.

    axl-testnet -n 20 --shape random --degree 3      # in another terminal
    python examples/gossipsub/gossip_run.py --messages 100
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import secrets
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TextIO

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import DEFAULT_TESTNET_FILE, load_testnet, run_main  # noqa: E402  (first: see common.py)

from axl.client import AsyncClient  # noqa: E402
from gossip_driver import GossipNode, overlay_peers  # noqa: E402
from gossip_metrics import Report, summarize  # noqa: E402
from gossip_protocol import Params  # noqa: E402
from gossip_sim import peer_graph  # noqa: E402

TOPIC = "bench"  # plus a random suffix per run, so leftovers of an earlier run are ignored
POLL_SECONDS = 0.1
PROGRESS_SECONDS = 5.0  # how often a long wait reports how far it got
SETTLE_SECONDS = 1.0  # let late duplicates arrive so that redundancy counts them


async def run(urls: list[str], messages: int, degree: int = 0, interval: float = 0.2,
              warmup: float = 3.0, timeout: float = 60.0, seed: int = 1,
              params: Params | None = None, progress: TextIO | None = None) -> Report:
    """Drive one GossipNode per bridge URL and return the delivery figures.

    ``degree`` 0 makes each node's direct overlay peers its gossip peers (one
    overlay hop per gossip hop); a positive ``degree`` draws that many random
    gossip peers per node instead, wherever they sit in the overlay.
    ``progress`` gets a line per phase and every few seconds of a long one.
    """
    rng = random.Random(seed)
    params = params or Params()
    async with AsyncExitStack() as stack:
        bridges = [await stack.enter_async_context(AsyncClient(url)) for url in urls]
        nodes = [GossipNode(bridge, params, random.Random(seed * 1000 + i)) for i, bridge in enumerate(bridges)]
        ids = [await bridge.peer_id() for bridge in bridges]
        if degree > 0:
            graph = peer_graph(len(nodes), degree, rng)
            peer_lists = [[ids[j] for j in sorted(neighbours)] for neighbours in graph]
        else:
            peer_lists = [await overlay_peers(bridge) for bridge in bridges]
        try:
            for node, peers in zip(nodes, peer_lists):
                await node.start(peers)
            topic = f"{TOPIC}-{secrets.token_hex(4)}"
            for node in nodes:
                node.subscribe(topic)
            _say(progress, f"{len(nodes)} drivers started; letting the meshes form for {warmup:g} s")
            await asyncio.sleep(warmup)
            _say(progress, f"publishing {messages} messages, one every {interval:g} s "
                           f"(about {messages * interval:.0f} s)")
            published: dict[str, str] = {}
            for number in range(messages):
                origin = rng.randrange(len(nodes))
                published[nodes[origin].publish(topic, f"message {number}".encode())] = ids[origin]
                if (number + 1) % max(1, messages // 10) == 0:
                    _say(progress, f"  published {number + 1}/{messages}")
                await asyncio.sleep(interval)
            await _wait_all_delivered(nodes, published, timeout, progress)
        finally:
            for node in nodes:
                await node.stop()
        copies = sum(node.gossip.copies_received for node in nodes)
        deliveries = {node.peer_id: node.deliveries for node in nodes}
        return summarize(published, set(ids), deliveries, copies)


def _say(progress: TextIO | None, line: str) -> None:
    if progress is not None:
        print(line, file=progress, flush=True)


async def _wait_all_delivered(nodes: list[GossipNode], published: dict[str, str], timeout: float,
                              progress: TextIO | None = None) -> None:
    expected = {node.peer_id: {m for m, origin in published.items() if origin != node.peer_id} for node in nodes}
    wanted = sum(len(ids) for ids in expected.values())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    next_report = loop.time()
    while loop.time() < deadline:
        have = sum(len(expected[node.peer_id] & {d.message.msg_id for d in node.deliveries}) for node in nodes)
        if have == wanted:
            await asyncio.sleep(SETTLE_SECONDS)
            return
        if loop.time() >= next_report:
            _say(progress, f"waiting for delivery: {have}/{wanted} ({deadline - loop.time():.0f} s left at most)")
            next_report = loop.time() + PROGRESS_SECONDS
        await asyncio.sleep(POLL_SECONDS)


def main() -> None:
    parser = argparse.ArgumentParser(description="GossipSub delivery figures on a running testnet.")
    parser.add_argument("--testnet", default=DEFAULT_TESTNET_FILE)
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--degree", type=int, default=0,
                        help="random gossip peers per node; 0 = the node's direct overlay peers [0]")
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between publishes [0.2]")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    urls = [node["bridge"] for node in load_testnet(args.testnet)]
    if args.degree >= len(urls):
        parser.error(f"--degree {args.degree}: at most {len(urls) - 1} gossip peers among {len(urls)} nodes")
    report = run_main(run(urls, args.messages, args.degree, args.interval, timeout=args.timeout, seed=args.seed,
                          progress=sys.stderr))
    peers = f"{args.degree} random gossip peers each" if args.degree else "overlay peers as gossip peers"
    print(f"{len(urls)} nodes, {peers}, one message every {args.interval:g}s, {Params()}")
    print("\n".join(report.lines()))


if __name__ == "__main__":
    main()
