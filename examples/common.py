"""Command-line plumbing shared by the examples: which node to talk to, and clean failures.

The bridge client itself is ``axl.client`` (installed with the node). This
file only turns ``--bridge URL`` / ``--testnet FILE --node I`` into a URL and
makes every expected failure (no testnet, a node index it lacks, a node that
stopped, a Python without the project's packages) end in one line that says
what to do, instead of a traceback. Each example imports it before any other
package, so that a missing one is reported by the hook below.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any
from types import TracebackType
from urllib.parse import urlsplit


def _missing_module_in_one_line(kind: type[BaseException], error: BaseException,
                                traceback: TracebackType | None) -> None:
    """Run by a Python outside the project's virtualenv, an example would end
    in `ModuleNotFoundError: No module named 'axl'`; say instead which
    interpreter lacks what, and the command that has it."""
    if not isinstance(error, ModuleNotFoundError):
        sys.__excepthook__(kind, error, traceback)
        return
    print(f"{Path(sys.argv[0]).name}: {sys.executable} has no module {error.name!r}: run "
          f"`.venv/bin/python {sys.argv[0]}` (after `make install`), or `. .venv/bin/activate` first",
          file=sys.stderr)


sys.excepthook = _missing_module_in_one_line

from axl.client import DEFAULT_URL, BridgeError, BridgeUnreachable  # noqa: E402  (after the hook)

DEFAULT_TESTNET_FILE = ".axl-testnet/testnet.json"
START_HINT = "start one with `make testnet` (or axl-testnet) in another terminal"


def fail(message: str) -> None:
    """End the program with one line on stderr and exit status 1."""
    print(f"{Path(sys.argv[0]).name}: {message}", file=sys.stderr)
    sys.exit(1)


def load_testnet(path: str | Path = DEFAULT_TESTNET_FILE) -> list[dict[str, Any]]:
    """The node list written by ``axl-testnet`` (index, bridge, peer_id, ...)."""
    try:
        return json.loads(Path(path).read_text())["nodes"]
    except FileNotFoundError:
        fail(f"no testnet at {path}: {START_HINT}")
    except (OSError, ValueError, KeyError, TypeError) as error:
        fail(f"cannot read the testnet file {path} ({error}); restart the testnet to rewrite it")
    raise AssertionError("unreachable")


def testnet_node(path: str | Path, index: int) -> dict[str, Any]:
    """Node ``index`` of the testnet file, or one line naming the indexes it has."""
    nodes = load_testnet(path)
    if not 0 <= index < len(nodes):
        fail(f"the testnet in {path} has {len(nodes)} nodes (0-{len(nodes) - 1}); there is no node {index}")
    return nodes[index]


def add_bridge_arguments(parser: argparse.ArgumentParser) -> None:
    """--bridge URL, or --testnet FILE with --node I (default node 0)."""
    parser.add_argument("--bridge", help=f"node bridge URL (e.g. {DEFAULT_URL})")
    parser.add_argument("--testnet", default=DEFAULT_TESTNET_FILE,
                        help=f"node list written by axl-testnet [{DEFAULT_TESTNET_FILE}]")
    parser.add_argument("--node", type=int, default=0, help="which testnet node to use [0]")


def chosen_bridge(args: argparse.Namespace) -> str:
    if args.bridge:
        return args.bridge
    return testnet_node(args.testnet, args.node)["bridge"]


def run_main(main: Coroutine[Any, Any, Any]) -> Any:
    """asyncio.run for an example's main: expected failures end in one line, not a traceback."""
    try:
        return asyncio.run(main)
    except KeyboardInterrupt:
        sys.exit(130)
    except BridgeUnreachable as error:
        where = urlsplit(error.url)
        fail(f"no node answers at {where.scheme}://{where.netloc}: is it still running? "
             f"If the testnet stopped, {START_HINT}")
    except (BridgeError, TimeoutError, OSError, ValueError) as error:
        fail(str(error))
