"""`python -m axl.bench` (`make bench`): daemon benchmarks on loopback."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from axl import BUILD
from axl.bench.report import BEFORE_FILE, EarlierRun, render
from axl.bench.scenarios import BenchFailed, Sizes, run_loop

LOOP_KINDS = ("uvloop", "asyncio")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m axl.bench",
        description="Start real nodes on loopback and measure throughput, rates, latency, "
                    "memory and start-up, each next to a baseline from the same run, the "
                    "figures of an earlier run and the target.")
    parser.add_argument("--quick", action="store_true", help="small sizes: a short smoke run")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--loop", choices=LOOP_KINDS, action="append",
                        help="event loop of the nodes (repeatable; default both)")
    parser.add_argument("--before", metavar="FILE", type=Path, default=BEFORE_FILE,
                        help="an earlier run's --json file, shown as a column "
                             f"(default: {BEFORE_FILE.name} shipped with the bench)")
    parser.add_argument("--no-before", action="store_true", help="show no earlier run")
    return parser


def current_commit() -> str | None:
    """The checkout's commit when the bench runs from a git checkout."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


async def run_all(loops: list[str], sizes: Sizes) -> dict[str, dict[str, float]]:
    """Loop kinds one after another, never overlapping, so they do not share cores."""
    return {loop: await run_loop(loop, sizes) for loop in loops}


def write_json(path: str, args: argparse.Namespace, sizes: Sizes,
               results: dict[str, dict[str, float]]) -> None:
    commit = current_commit()
    today = datetime.date.today().isoformat()
    Path(path).write_text(json.dumps({
        "commit": commit,
        "source": f"python -m axl.bench{' --quick' if args.quick else ''} at "
                  f"{(commit or 'an unknown commit')[:7]}, {os.cpu_count()} cores, "
                  f"Python {platform.python_version()}, {today}",
        "quick": args.quick,
        "sizes": vars(sizes),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "build": BUILD.describe(),
        "loops": results,
    }, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    loops = args.loop or list(LOOP_KINDS)
    earlier = None
    if not args.no_before:
        try:
            earlier = EarlierRun.load(args.before, loops[0])
        except ValueError as exc:
            print(f"axl.bench: {exc}", file=sys.stderr)
            return 2
    sizes = Sizes.choose(args.quick)
    try:
        results = asyncio.run(run_all(loops, sizes))
    except BenchFailed as exc:
        print(f"axl.bench: failed: {exc}", file=sys.stderr)
        return 1
    title = (f"axl-py daemon bench ({'quick' if args.quick else 'full'}; "
             f"{sizes.bulk_count} x {sizes.bulk_message >> 20} MiB bulk, "
             f"{sizes.small_count} x 1 KiB small, /ws {sizes.ws_rounds} x {sizes.ws_count} "
             f"(in turn {sizes.ws_turns} x {sizes.ws_turn_count} to each receiver); "
             f"{os.cpu_count()} cores, "
             f"Python {platform.python_version()}; {BUILD.describe()})")
    print(render(results, title, earlier))
    if args.json:
        write_json(args.json, args, sizes, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
