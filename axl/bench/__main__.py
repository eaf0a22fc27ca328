"""`python -m axl.bench` (`make bench`): daemon benchmarks on loopback."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
from pathlib import Path

from axl.bench.report import render
from axl.bench.scenarios import Sizes, run_loop

LOOP_KINDS = ("uvloop", "asyncio")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m axl.bench",
        description="Start real nodes on loopback and measure throughput, rates, latency, "
                    "memory and start-up, each next to a baseline from the same run.")
    parser.add_argument("--quick", action="store_true", help="small sizes: a short smoke run")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--loop", choices=LOOP_KINDS, action="append",
                        help="event loop of the nodes (repeatable; default both)")
    return parser


async def run_all(loops: list[str], sizes: Sizes) -> dict[str, dict[str, float]]:
    """Loop kinds one after another, never overlapping, so they do not share cores."""
    return {loop: await run_loop(loop, sizes) for loop in loops}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    loops = args.loop or list(LOOP_KINDS)
    sizes = Sizes.choose(args.quick)
    results = asyncio.run(run_all(loops, sizes))
    title = (f"axl-py daemon bench ({'quick' if args.quick else 'full'}; "
             f"{sizes.bulk_count} x {sizes.bulk_message >> 20} MiB bulk, "
             f"{sizes.small_count} x 1 KiB small; {os.cpu_count()} cores, "
             f"Python {platform.python_version()})")
    print(render(results, title))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "quick": args.quick,
            "sizes": vars(sizes),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "loops": results,
        }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
