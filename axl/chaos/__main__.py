"""`python -m axl.chaos chaos|crash|soak|fuzz-api`: see the package's docstring."""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import tempfile
from pathlib import Path

import axl.chaos
from axl.chaos.crash import run_crash
from axl.chaos.fuzzapi import run_fuzz_api
from axl.chaos.hostile import run_hostile
from axl.chaos.mesh import run_chaos
from axl.chaos.soak import run_soak
from axl.testnet import stop_on_signals


def _work_dir(given: str | None) -> Path:
    return Path(given) if given else Path(tempfile.mkdtemp(prefix="axl-chaos-"))


_UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "": 1}


def _byte_size(text: str) -> int:
    """A size in bytes: 1024, 1KiB, 16MiB."""
    for unit, factor in _UNITS.items():
        number = text.removesuffix(unit)
        if number != text or not unit:
            try:
                return int(number) * factor
            except ValueError:
                break
    raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 1024, 64KiB or 16MiB")


def main(argv: list[str] | None = None) -> int:
    """Run one command; Ctrl-C or SIGTERM stops its nodes and exits 130."""
    stop_on_signals()
    try:
        return _run(argv)
    except KeyboardInterrupt:
        print("interrupted: the nodes were stopped", file=sys.stderr)
        return 130


def _run(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m axl.chaos", description=axl.chaos.__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    chaos = sub.add_parser("chaos", help="kill relays and cut links under load; check zero loss")
    chaos.add_argument("--duration", type=float, default=300.0)
    chaos.add_argument("--seed", type=int, default=1)
    crash = sub.add_parser("crash", help="SIGKILL the receiving node under a flood; check exactly once")
    crash.add_argument("--messages", type=int, default=10_000)
    crash.add_argument("--senders", type=int, default=4)
    crash.add_argument("--kills", type=int, default=3)
    crash.add_argument("--no-streams", action="store_true",
                       help="message_streams false: one connection per message, as Go nodes send")
    crash.add_argument("--seed", type=int, default=1)
    crash.add_argument("--size", type=_byte_size, default=None,
                       help="every message of this size, e.g. 16MiB [up to 1 KiB each]")
    crash.add_argument("--sync", choices=("normal", "full"), default="normal", help="the receiver's inbox_sync")
    crash.add_argument("--ws", action="store_true",
                       help="send and read over /ws (many messages in flight) instead of /send and /recv")
    soak = sub.add_parser("soak", help="steady traffic on 5 nodes; RSS and fds each interval")
    soak.add_argument("--duration", type=float, default=600.0)
    soak.add_argument("--interval", type=float, default=60.0)
    fuzz = sub.add_parser("fuzz-api", help="schemathesis against a live bridge")
    fuzz.add_argument("--max-examples", type=int, default=200)
    fuzz.add_argument("--max-time", type=float, default=None)
    fuzz.add_argument("--seed", type=int, default=1)
    hostile = sub.add_parser("hostile", help="three attacks on a node's budgets; RSS growth and /health")
    hostile.add_argument("--node-command", default=None,
                         help="how to start the attacked node [this interpreter: python -m axl.cli]")
    for command in (chaos, crash, soak, fuzz, hostile):
        command.add_argument("--dir", default=None, help="keys, configs and logs [a new temp dir]")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    base = _work_dir(args.dir)
    print(f"working in {base}", flush=True)
    if args.command == "chaos":
        report = run_chaos(base, args.duration, args.seed)
        print(report.text())
        return 0 if report.ok() else 1
    if args.command == "crash":
        report = run_crash(base, args.messages, args.senders, args.kills, not args.no_streams, args.seed,
                           size=args.size, sync=args.sync, over_ws=args.ws)
        print(report.text())
        return 0 if report.ok() else 1
    if args.command == "soak":
        flat, _, notes = run_soak(base, args.duration, args.interval)
        print("\n".join(notes))
        print("resources flat" if flat else "resources GROWING")
        return 0 if flat else 1
    if args.command == "hostile":
        node_command = shlex.split(args.node_command) if args.node_command else None
        reports = run_hostile(base, node_command)
        return 0 if all(report.held for report in reports) else 1
    code, output = run_fuzz_api(base, args.max_examples, args.max_time, args.seed)
    print(output)
    return code


if __name__ == "__main__":
    sys.exit(main())
