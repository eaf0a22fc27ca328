"""`axl-node`: run a node from a config file, or generate a key.

Accepts the Go node's single-dash flags (`-config`, `-listen`) as well as the
usual double-dash ones, so scripts written for either work unchanged.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Coroutine
from pathlib import Path

from axl import BUILD, __version__
from axl.config import ConfigError, NodeConfig, load_config
from axl.identity import NodeIdentity

EXIT_FAILURE = 1
EXIT_CONFIG = 2

USAGE = """\
axl-node [-h] [--version] [--config FILE] [--listen URI] [--log-level LEVEL]
       axl-node genkey PATH"""

USAGE_EPILOG = """\
examples:
  axl-node --config node-config.json
  axl-node --config node-config.json --listen tls://0.0.0.0:9001 --log-level debug
  axl-node genkey private.pem

The HTTP bridge listens on bridge_addr:api_port (127.0.0.1:9002 by default;
bridge_addr may be unix:///path for a UNIX socket):
GET /topology, POST /send, GET /recv, /mcp/{peer}/{service}, /a2a/{peer},
GET/POST/DELETE /peers (peers at run time), GET /metrics (Prometheus) and
/dashboard/ (a live page in the browser).

The admin socket (AdminListen in the config) speaks yggdrasil's admin
protocol: yggdrasilctl -endpoint unix:///path/to/admin.sock getPeers

Messages waiting for /recv are kept in axl-inbox.sqlite3 beside the key
file (PrivateKeyPath), so they survive a restart or a crash; the config's
inbox_path names another file, "" keeps them in memory. Two nodes need two
files (docs/operations.md, "The durable inbox").

environment:
  AXL_BRIDGE_TOKEN=TOKEN   every bridge request needs "Authorization: Bearer TOKEN"
                           (overrides bridge_token in the config)
  AXL_EVENT_LOOP=asyncio   use the standard asyncio loop instead of uvloop
"""


def _normalise_go_flags(argv: list[str]) -> list[str]:
    """Turn Go-style `-config x` / `-listen=x` into `--config x` / `--listen=x`."""
    long_names = ("config", "listen", "log-level")
    out = []
    for arg in argv:
        name = arg[1:].split("=", 1)[0]
        if arg.startswith("-") and not arg.startswith("--") and name in long_names:
            arg = "-" + arg
        out.append(arg)
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="axl-node",
        usage=USAGE,
        description="AXL node: a peer-to-peer overlay daemon (Yggdrasil v0.5 compatible) "
                    "with an HTTP bridge for applications.",
        epilog=USAGE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=version_line())
    parser.add_argument("--config", metavar="FILE",
                        help="node config file (JSON); without it every setting takes its default")
    parser.add_argument("--listen", metavar="URI", action="append", default=[],
                        help="extra listen URI, e.g. tls://0.0.0.0:9001 (prepended to Listen; repeatable)")
    parser.add_argument("--log-level", default="info",
                        choices=["debug", "info", "warning", "error"], help="log verbosity (default info)")
    return parser


def version_line() -> str:
    """What `--version` prints and the first log line says, for bug reports."""
    return f"axl-node {__version__} (Python {sys.version.split()[0]}; {BUILD.describe()})"


def build_genkey_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="axl-node genkey",
        description="Write a new ed25519 private key (PKCS#8 PEM, as openssl genpkey writes it).",
    )
    parser.add_argument("path", help="where to write the key; an existing file is not overwritten")
    return parser


def genkey(argv: list[str]) -> int:
    args = build_genkey_parser().parse_args(argv)
    path = Path(args.path)
    identity = NodeIdentity.generate()
    try:
        with open(path, "xb") as handle:
            handle.write(identity.pem())
        path.chmod(0o600)
    except FileExistsError:
        print(f"axl-node: {path} already exists; not overwriting it", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"axl-node: cannot write {path}: {exc.strerror}", file=sys.stderr)
        return 1
    print(identity.peer_id)
    return 0


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(_normalise_go_flags(argv))
    configure_logging(args.log_level)
    from axl.daemon import build_dispatcher, run_daemon
    from axl.dependencies import UnsupportedDependency, check_private_surfaces
    from axl.node import Node, validate_config
    from axl.node.store import NotThisNodesInbox, StoreError, open_inbox

    try:
        config = load_config(args.config) if args.config else None
        if config is None:
            config = NodeConfig()
        config.listen = list(args.listen) + config.listen
        token_origin = config.take_token_from(os.environ)
        validate_config(config)
        identity, key_origin = config.load_identity()
    except ConfigError as exc:
        print(f"axl-node: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    logging.getLogger("axl.node").info("%s", version_line())
    try:
        check_private_surfaces(quic_links=has_quic_links(config))
    except UnsupportedDependency as exc:
        print(f"axl-node: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        inbox_store = open_inbox(config, identity)
    except (ConfigError, StoreError) as exc:
        print(f"axl-node: {exc}", file=sys.stderr)
        return EXIT_CONFIG if isinstance(exc, (ConfigError, NotThisNodesInbox)) else EXIT_FAILURE
    if token_origin:
        logging.getLogger("axl.bridge").info("bridge requests need the token (from %s)", token_origin)
    dispatcher = build_dispatcher(config)
    node = Node(config, identity, key_origin=key_origin, inbound_handler=dispatcher, inbox_store=inbox_store)
    try:
        return _run_event_loop(run_daemon(node, dispatcher))
    except ConfigError as exc:
        print(f"axl-node: {exc}", file=sys.stderr)
        return EXIT_CONFIG


def has_quic_links(config: NodeConfig) -> bool:
    """Whether a configured peer or listener is quic:// (the URIs are valid by now)."""
    from axl.link.uri import parse_listen_uri, parse_peer_uri

    return (any(parse_peer_uri(uri).scheme == "quic" for uri in config.peers)
            or any(parse_listen_uri(uri).scheme == "quic" for uri in config.listen))


def _run_event_loop(main_coroutine: Coroutine[None, None, int]) -> int:
    """uvloop when installed, unless AXL_EVENT_LOOP=asyncio asks for the standard loop."""
    if os.environ.get("AXL_EVENT_LOOP", "").lower() != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.run(main_coroutine)
    return asyncio.run(main_coroutine)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["genkey"]:
        return genkey(argv[1:])
    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
