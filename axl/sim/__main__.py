"""`python -m axl.sim messages ...`: application messages through full simulated nodes.

Builds a random network of NodeCores joined by virtual links, lets it form
(one root, bloom filters settled: `StackNetwork.run_until_formed`), sends M
messages between random pairs (sessions, overlay TCP, AXL framing and the
FIN acknowledgement, all of it the daemon's code), and reports what became of them. The last line is
`delivered X/M acknowledged A lost L duplicated D`; lost counts acknowledged
messages that never arrived. The exit status is 1 if any was lost or
duplicated.
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import time

from axl.sim.stack import StackNetwork

# The network forms in about 20-40 virtual seconds at 1,000 nodes; past this
# the run goes on anyway and says so.
FORMING_LIMIT = 300.0
SEND_SPREAD = 0.01
SLACK = 120.0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m axl.sim")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("messages", help="send application messages through full nodes")
    run.add_argument("--nodes", type=int, required=True)
    run.add_argument("--degree", type=int, default=4)
    run.add_argument("--loss", type=float, default=0.0,
                     help="share of writes each link loses on the wire (its TCP retransmits them)")
    run.add_argument("--drop", type=float, default=0.0,
                     help="share of traffic frames (types 6-9) each link drops, as ironwood's queues do")
    run.add_argument("--messages", type=int, required=True)
    run.add_argument("--seed", type=int, default=1)
    run.add_argument("--size", type=int, default=1024, help="payload bytes per message")
    run.add_argument("--latency", type=float, default=0.01, help="seconds per link")
    run.add_argument("--bandwidth", type=float, default=None, help="bytes per second per link direction")
    args = parser.parse_args(argv)
    if (args.nodes < 2 or args.messages < 1 or args.size < 8
            or not (0 <= args.loss < 1 and 0 <= args.drop < 1)):
        parser.error("need --nodes >= 2, --messages >= 1, --size >= 8, and --loss, --drop in [0, 1)")
    return args


def run_messages(args: argparse.Namespace) -> tuple[StackNetwork, float | None, float]:
    """The network after the run, the virtual seconds it took to form (None if
    it had not within FORMING_LIMIT), and those from the first send to the last outcome."""
    net = StackNetwork(args.nodes, seed=args.seed)
    net.random_graph(args.degree, latency=args.latency, bandwidth=args.bandwidth,
                    loss=args.loss, drop=args.drop)
    formed = net.run_until_formed(FORMING_LIMIT)
    pick = random.Random(args.seed + 1)
    first = net.now
    for number in range(args.messages):
        src, dst = pick.sample(range(args.nodes), 2)
        payload = number.to_bytes(8, "big") + pick.randbytes(args.size - 8)
        net.at(first + number * SEND_SPREAD,
               lambda src=src, dst=dst, payload=payload, number=number: net.send(src, dst, payload, number))
    tally = net.tally
    net.run_until(first + args.messages * SEND_SPREAD + SLACK,
                  done=lambda: tally.sent == args.messages
                  and len(tally.acknowledged) + sum(tally.failed.values()) == args.messages)
    return net, formed, net.now - first


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    wall = time.perf_counter()
    net, formed, elapsed = run_messages(args)
    wall = time.perf_counter() - wall
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tally = net.tally
    links = sum(len(node.ends) for node in net.nodes) // 2
    print(f"nodes {args.nodes} links {links} loss {args.loss:g} drop {args.drop:g} messages {args.messages} "
          f"of {args.size} bytes, seed {args.seed}")
    if formed is None:
        print(f"the network had not formed after {FORMING_LIMIT:.0f} virtual seconds; sending anyway")
    else:
        print(f"formed after {formed:.0f} virtual seconds (one root, bloom filters settled)")
    if tally.failed:
        print("failed: " + ", ".join(f"{kind} {count}" for kind, count in sorted(tally.failed.items())))
    print(f"wall {wall:.1f} s, peak RSS {rss_kib / 1024:.0f} MiB ({rss_kib / args.nodes:.0f} KiB per node)")
    print(f"virtual time {elapsed:.2f} s from the first send to the last outcome")
    print(tally.line())
    return 1 if tally.lost or tally.duplicated else 0


if __name__ == "__main__":
    sys.exit(main())
