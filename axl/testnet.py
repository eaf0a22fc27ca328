"""Local testnet: N real axl-node processes on loopback, wired in a chosen shape.

Developers and the example programs need a small network that behaves like
the real one (real processes, real TLS peerings, real HTTP bridges) without
any machine but this one. The launcher writes one key and one config per
node, starts the daemons, waits until their spanning trees agree, and
publishes each node's bridge URL and peer id in a JSON file that scripts read.

Usable three ways: ``axl-testnet`` / ``python -m axl.testnet`` on the command
line, ``with Testnet(...)`` in synchronous code, ``async with Testnet(...)``
in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from axl.harness import (
    LOOPBACK,
    NoFreePort,
    default_node_command,
    free_port,
    port_bindable,
    spawn_node,
    stop_process,
)
from axl.config import ConfigError, load_config
from axl.identity import NodeIdentity

log = logging.getLogger("axl.testnet")

SHAPES = ("line", "star", "ring", "random")
TESTNET_LINKS = ("tls", "tcp", "quic", "ws", "unix")
# Link types that need a TCP port of their own besides the tls one.
TCP_LINKS = ("tcp", "ws")
POLL_INTERVAL_SECONDS = 0.2
# How long `--run` waits for its listening nodes before starting the others anyway.
LISTENERS_START_TIMEOUT_SECONDS = 15.0
# What a node logs once its listeners and its bridge are up (axl.bridge.server).
READY_LINE = "bridge listening on"
HTTP_TIMEOUT_SECONDS = 2.0
LOCK_NAME = "testnet.lock"


class TestnetError(RuntimeError):
    """The testnet could not be started or did not converge; the text says why."""

    __test__ = False  # not a pytest test class despite the name


def shape_edges(n: int, shape: str, degree: int = 3, seed: int = 0) -> list[tuple[int, int]]:
    """Undirected peerings (i, j) with i < j; node j dials node i.

    ``random`` builds a random spanning tree first (so the graph is always
    connected) and then adds random edges until every node has ``degree``
    peers or no more pairs are possible.
    """
    if n < 1:
        raise ValueError("a testnet needs at least one node")
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; choose one of {', '.join(SHAPES)}")
    if shape == "line":
        return [(i - 1, i) for i in range(1, n)]
    if shape == "star":
        return [(0, i) for i in range(1, n)]
    if shape == "ring":
        edges = [(i - 1, i) for i in range(1, n)]
        if n > 2:
            edges.append((0, n - 1))
        return edges
    return _random_edges(n, degree, random.Random(seed))


def _random_edges(n: int, degree: int, rng: random.Random) -> list[tuple[int, int]]:
    edges: set[tuple[int, int]] = set()
    order = list(range(n))
    rng.shuffle(order)
    for position in range(1, n):
        a, b = order[position], order[rng.randrange(position)]
        edges.add((min(a, b), max(a, b)))
    degrees = [0] * n
    for a, b in edges:
        degrees[a] += 1
        degrees[b] += 1
    candidates = [(a, b) for a in range(n) for b in range(a + 1, n) if (a, b) not in edges]
    rng.shuffle(candidates)
    for a, b in candidates:
        if degrees[a] < degree and degrees[b] < degree:
            edges.add((a, b))
            degrees[a] += 1
            degrees[b] += 1
    return sorted(edges)


class FolderLock:
    """An exclusive lock on a testnet folder, held while its nodes run.

    flock rather than a pid file: the kernel drops the lock when the owner
    dies, so a crashed testnet never leaves a stale claim behind.
    """

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK_NAME
        self._handle: Any = None
        self._made_folder = False

    def acquire(self) -> None:
        """Take the lock or raise TestnetError naming the testnet that holds it."""
        self._made_folder = not self.path.parent.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = handle.read().strip() or "unknown"
            handle.close()
            raise TestnetError(
                f"a testnet (pid {owner}) is already running in {self.path.parent}; "
                "stop it first (Ctrl-C in its terminal) or use another --dir"
            ) from None
        handle.truncate(0)
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._handle = handle

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def abandon(self) -> None:
        """Release, and take back the lock file (and the folder, if acquire
        made it): a testnet refused before it started leaves nothing behind."""
        self.release()
        self.path.unlink(missing_ok=True)
        if self._made_folder:
            with contextlib.suppress(OSError):
                self.path.parent.rmdir()


@dataclass
class TestnetNode:
    """One node of the testnet: where to reach it and how it was started."""

    __test__ = False

    index: int
    identity: NodeIdentity
    api_port: int
    listen_port: int
    dial: list[int]
    config_path: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    link_ports: dict[str, int] = field(default_factory=dict)

    @property
    def peer_id(self) -> str:
        return self.identity.peer_id

    @property
    def bridge_url(self) -> str:
        return f"http://{LOOPBACK}:{self.api_port}"

    @property
    def listen_uri(self) -> str:
        return f"tls://{LOOPBACK}:{self.listen_port}"

    def uri(self, scheme: str) -> str:
        """Where to reach this node over one link type: quic shares the tls
        port number (UDP), tcp and ws have their own, unix a socket file."""
        if scheme == "unix":
            return f"unix://{self.config_path.resolve().with_suffix('.sock')}"
        port = self.listen_port if scheme in ("tls", "quic") else self.link_ports[scheme]
        return f"{scheme}://{LOOPBACK}:{port}"

    @property
    def listen_uris(self) -> list[str]:
        return [self.listen_uri] + [self.uri(s) for s in sorted(self.link_ports) if s != "tls"]

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def describe(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "peer_id": self.peer_id,
            "bridge": self.bridge_url,
            "listen": self.listen_uri,
            "config": str(self.config_path),
            "log": str(self.log_path),
            "pid": self.process.pid if self.process else None,
        }


@dataclass
class TreeView:
    """What one node's /topology says about the spanning tree."""

    public_key: str
    parents: dict[str, str]
    peers_up: set[str]

    @property
    def roots(self) -> set[str]:
        return {key for key, parent in self.parents.items() if parent == ""}


def parse_topology(document: dict[str, Any]) -> TreeView:
    """Reduce a /topology answer to what convergence checks need."""
    parents = {entry["public_key"]: entry.get("parent", "") for entry in document.get("tree", [])}
    peers_up = {peer["public_key"] for peer in document.get("peers", []) if peer.get("up")}
    return TreeView(document["our_public_key"], parents, peers_up)


def convergence_problems(views: list[TreeView], degrees: list[int]) -> list[str]:
    """Why the trees do not yet agree; an empty list means converged.

    Converged means: every node is peered with all its configured neighbours,
    every node sees exactly one root and it is the same root everywhere,
    every node knows its own entry, and each node's parent lists that node as
    its child (what convergecast-style applications rely on).
    """
    problems: list[str] = []
    roots: set[str] = set()
    by_key = {view.public_key: view for view in views}
    for index, view in enumerate(views):
        if len(view.peers_up) < degrees[index]:
            problems.append(f"node {index}: {len(view.peers_up)}/{degrees[index]} peerings up")
        if len(view.roots) != 1:
            problems.append(f"node {index}: sees {len(view.roots)} roots")
        roots |= view.roots
        parent = view.parents.get(view.public_key)
        if parent is None:
            problems.append(f"node {index}: its own tree entry is missing")
        elif parent and by_key.get(parent) and by_key[parent].parents.get(view.public_key) != parent:
            problems.append(f"node {index}: its parent does not list it as a child")
    if len(roots) > 1:
        problems.append(f"nodes disagree on the root ({len(roots)} different roots)")
    return problems


def fetch_json(url: str, timeout: float = HTTP_TIMEOUT_SECONDS) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


class Testnet:
    """N axl-node processes on loopback; start, inspect, kill, restart, stop.

    ``base_port`` 0 lets the OS choose free ports (what tests want); a fixed
    base gives bridge ports ``base_port + i`` and listen ports
    ``base_port + n + i`` (what people typing commands want).
    """

    __test__ = False

    def __init__(
        self,
        n: int,
        shape: str = "line",
        base_dir: str | Path = ".axl-testnet",
        *,
        degree: int = 3,
        seed: int = 0,
        base_port: int = 0,
        log_level: str = "info",
        node_command: list[str] | None = None,
        extra_config: dict[str, Any] | None = None,
        json_path: str | Path | None = None,
        links: list[str] | None = None,
    ) -> None:
        self.shape = shape
        self.edges = shape_edges(n, shape, degree, seed)
        self.links = check_links(links or ["tls"])
        self.base_dir = Path(base_dir)
        self.log_level = log_level
        self.node_command = node_command or default_node_command()
        self.extra_config = dict(extra_config or {})
        self.json_path = Path(json_path) if json_path else self.base_dir / "testnet.json"
        self.fixed_ports = bool(base_port)
        self.nodes = self._plan_nodes(n, base_port)
        self._lock = FolderLock(self.base_dir)

    def _plan_nodes(self, n: int, base_port: int) -> list[TestnetNode]:
        nodes = []
        for index in range(n):
            api_port = base_port + index if base_port else free_port()
            listen_port = base_port + n + index if base_port else free_port()
            dial = [a for a, b in self.edges if b == index]
            schemes = {self.edge_scheme(k) for k, (a, _) in enumerate(self.edges) if a == index}
            ports = {scheme: (base_port + (2 + TCP_LINKS.index(scheme)) * n + index if base_port
                              else free_port())
                     for scheme in schemes if scheme in TCP_LINKS}
            nodes.append(
                TestnetNode(
                    index=index,
                    identity=NodeIdentity.generate(),
                    api_port=api_port,
                    listen_port=listen_port,
                    dial=dial,
                    link_ports={**ports, **{s: 0 for s in schemes - set(ports)}},
                    config_path=self.base_dir / f"node-{index}.json",
                    log_path=self.base_dir / f"node-{index}.log",
                )
            )
        return nodes

    def edge_scheme(self, edge: int) -> str:
        """LINKS cycles over the edges: edge k uses links[k % len(links)]."""
        return self.links[edge % len(self.links)]

    @property
    def degrees(self) -> list[int]:
        counts = [0] * len(self.nodes)
        for a, b in self.edges:
            counts[a] += 1
            counts[b] += 1
        return counts

    def write_configs(self) -> None:
        """Keys (PEM, owner-only), one JSON config per node, and empty logs.

        Each node has its own durable inbox (beside the keys, the default
        would be one file for all); an earlier testnet's inboxes go, since
        their nodes' keys are gone."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        for node in self.nodes:
            node.log_path.write_bytes(b"")
            key_path = self.base_dir / f"node-{node.index}.pem"
            key_path.write_bytes(node.identity.pem())
            os.chmod(key_path, 0o600)
            inbox_path = self.base_dir / f"node-{node.index}.inbox.sqlite3"
            tails = ("-wal", "-shm", ".lock")
            for leftover in (inbox_path, *(inbox_path.with_name(inbox_path.name + tail) for tail in tails)):
                leftover.unlink(missing_ok=True)
            shutil.rmtree(inbox_path.with_name(inbox_path.name + ".payloads"), ignore_errors=True)
            config = {
                "PrivateKeyPath": str(key_path.resolve()),
                "inbox_path": str(inbox_path.resolve()),
                "Peers": [self.nodes[a].uri(self.edge_scheme(k))
                          for k, (a, b) in enumerate(self.edges) if b == node.index],
                "Listen": node.listen_uris,
                "api_port": node.api_port,
                "bridge_addr": LOOPBACK,
                **self.extra_config,
            }
            node.config_path.write_text(json.dumps(config, indent=2) + "\n")

    def start_node(self, index: int) -> None:
        node = self.nodes[index]
        if node.running:
            return
        node.process = spawn_node(node.config_path, node.log_path, command=self.node_command,
                                  args=["--log-level", self.log_level])

    def start(self) -> None:
        """Claim the folder, write configs and start every node (does not wait for convergence).

        Raises TestnetError, before touching any file, when another live
        testnet owns the folder or a fixed port is taken.
        """
        self._lock.acquire()
        try:
            self._check_ports()
        except TestnetError:
            self._lock.abandon()
            raise
        self.write_configs()
        for index in range(len(self.nodes)):
            self.start_node(index)
        self.write_json()

    def _check_ports(self) -> None:
        """Fixed ports must be free; chosen ones were checked when they were picked."""
        if not self.fixed_ports:
            return
        for node in self.nodes:
            for port in (node.api_port, node.listen_port, *node.link_ports.values()):
                if not port_bindable(port, reuse_address=True):
                    raise TestnetError(
                        f"port {port} on {LOOPBACK} is in use (another testnet or program?); "
                        "stop it or pick other ports with --base-port"
                    )

    def kill(self, index: int, hard: bool = False) -> None:
        """Stop one node: SIGTERM (clean shutdown) or SIGKILL with ``hard``."""
        node = self.nodes[index]
        if node.process is None:
            return
        stop_process(node.process, signal.SIGKILL if hard else signal.SIGTERM)
        node.process = None

    def restart(self, index: int) -> None:
        """Stop node ``index`` if running and start it again with the same key and ports."""
        self.kill(index)
        self.start_node(index)
        self.write_json()

    def stop(self) -> None:
        """Stop all nodes; SIGTERM to all first so they shut down in parallel."""
        for node in self.nodes:
            if node.running:
                node.process.send_signal(signal.SIGTERM)
        for node in self.nodes:
            self.kill(node.index)
        self._lock.release()

    def exited_nodes(self) -> list[int]:
        """Nodes whose process ended without kill() or stop() asking it to."""
        return [node.index for node in self.nodes if node.process is not None and node.process.poll() is not None]

    def health(self, index: int) -> bool:
        try:
            with urllib.request.urlopen(self.nodes[index].bridge_url + "/health", timeout=HTTP_TIMEOUT_SECONDS) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def topology(self, index: int) -> dict[str, Any]:
        return fetch_json(self.nodes[index].bridge_url + "/topology")

    def convergence_problems(self) -> list[str]:
        """One snapshot of every running node's /topology, checked for agreement."""
        running = [node for node in self.nodes if node.running]
        views, degrees = [], []
        for node in running:
            try:
                views.append(parse_topology(self.topology(node.index)))
            except (OSError, urllib.error.URLError, ValueError, KeyError) as error:
                return [f"node {node.index}: /topology not ready ({error})"]
            degrees.append(self._running_degree(node.index))
        return convergence_problems(views, degrees)

    def _running_degree(self, index: int) -> int:
        neighbours = {b if a == index else a for a, b in self.edges if index in (a, b)}
        return sum(1 for j in neighbours if self.nodes[j].running)

    def wait_converged(self, timeout: float = 30.0) -> str:
        """Block until all running nodes agree on one tree; returns the root's peer id.

        Raises TestnetError naming what is still wrong when ``timeout`` passes
        or when a node process has exited.
        """
        deadline = time.monotonic() + timeout
        problems = ["no answer yet"]
        while time.monotonic() < deadline:
            dead = self.exited_nodes()
            if dead:
                raise TestnetError(f"node(s) {dead} exited; see {self.nodes[dead[0]].log_path}")
            problems = self.convergence_problems()
            if not problems:
                return self.root()
            time.sleep(POLL_INTERVAL_SECONDS)
        raise TestnetError(f"tree did not converge within {timeout:.0f}s: " + "; ".join(problems[:5]))

    def root(self) -> str:
        running = next(node for node in self.nodes if node.running)
        roots = parse_topology(self.topology(running.index)).roots
        return next(iter(roots))

    def describe(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "edges": self.edges,
            "nodes": [node.describe() for node in self.nodes],
        }

    def write_json(self) -> None:
        """The file scripts read to find bridges and peer ids."""
        self.json_path.parent.mkdir(parents=True, exist_ok=True)
        self.json_path.write_text(json.dumps(self.describe(), indent=2) + "\n")

    def __enter__(self) -> "Testnet":
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> "Testnet":
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.to_thread(self.stop)

    async def wait_converged_async(self, timeout: float = 30.0) -> str:
        return await asyncio.to_thread(self.wait_converged, timeout)


class PrefixedRun:
    """Existing configs run in the foreground, every log line prefixed with its node's name.

    For ``make run3``: several nodes in one terminal stay readable when each
    line says which node wrote it. The name is the config file's stem. The
    nodes that listen start first, and the others once those are listening,
    so that nobody's first line is a refused dial of a node still starting.
    """

    def __init__(self, configs: list[Path], node_command: list[str] | None = None) -> None:
        self.configs = configs
        self.node_command = node_command or default_node_command()
        self.width = max(len(path.stem) for path in configs)
        self.processes: list[subprocess.Popen[bytes]] = []
        self._print_lock = threading.Lock()

    def start(self) -> None:
        listeners = [path for path in self.configs if _listens(path)]
        started = [self._start_node(path) for path in listeners]
        deadline = time.monotonic() + LISTENERS_START_TIMEOUT_SECONDS
        for process, listening in started:
            while process.poll() is None and time.monotonic() < deadline:
                if listening.wait(POLL_INTERVAL_SECONDS):
                    break
        for path in self.configs:
            if path not in listeners:
                self._start_node(path)

    def _start_node(self, path: Path) -> tuple[subprocess.Popen[bytes], threading.Event]:
        """The node of ``path``, and an event set once its bridge listens (its peerings' listeners
        are bound before it)."""
        process = subprocess.Popen(
            [*self.node_command, "--config", str(path)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(process)
        listening = threading.Event()
        threading.Thread(target=self._copy_lines, args=(path.stem, process, listening), daemon=True).start()
        return process, listening

    def _copy_lines(self, name: str, process: subprocess.Popen[bytes], listening: threading.Event) -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            if READY_LINE in line:
                listening.set()
            with self._print_lock:
                print(f"{name:<{self.width}} | {line}", flush=True)

    def wait(self) -> int:
        """Until a node exits (1) or we are interrupted (0)."""
        while all(process.poll() is None for process in self.processes):
            time.sleep(POLL_INTERVAL_SECONDS)
        return 1

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            stop_process(process)


def _listens(config: Path) -> bool:
    """Whether the config names listen URIs; one the node cannot read counts as not
    (the node says why when it starts)."""
    try:
        return bool(load_config(config).listen)
    except ConfigError:
        return False


def run_configs(paths: list[str]) -> int:
    """``axl-testnet --run CONFIG...``: the nodes of these configs, logs prefixed, until Ctrl-C."""
    configs = [Path(path) for path in paths]
    missing = [str(path) for path in configs if not path.is_file()]
    if missing:
        print(f"axl-testnet: no such config file: {', '.join(missing)}", file=sys.stderr)
        return 2
    runner = PrefixedRun(configs)
    stop_on_signals()
    try:
        runner.start()
        code = runner.wait()
        print("a node exited; stopping the others", file=sys.stderr)
        return code
    except KeyboardInterrupt:
        return 0
    finally:
        runner.stop()


def check_links(links: list[str]) -> list[str]:
    """The link types a testnet can run by itself (socks and wss need a proxy)."""
    unknown = [scheme for scheme in links if scheme not in TESTNET_LINKS]
    if unknown or not links:
        raise ValueError(f"unknown link type {unknown[0] if unknown else ''!r}: "
                         f"LINKS takes a comma-separated list of {', '.join(TESTNET_LINKS)}")
    return links


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="axl-testnet", description="Run N axl-node processes on loopback.")
    parser.add_argument("-n", "--nodes", type=int, default=5, help="number of nodes [5]")
    parser.add_argument("--shape", choices=SHAPES, default="line", help="peering graph [line]")
    parser.add_argument("--degree", type=int, default=3, help="peers per node for --shape random [3]")
    parser.add_argument("--seed", type=int, default=0, help="seed for --shape random [0]")
    parser.add_argument("--dir", default=".axl-testnet", help="keys, configs and logs [.axl-testnet]")
    parser.add_argument("--json", default=None, help="where to write the node list [DIR/testnet.json]")
    parser.add_argument("--base-port", type=int, default=9100,
                        help="bridge ports BASE+i, listen ports BASE+N+i; 0 = any free ports [9100]")
    parser.add_argument("--links", default="tls",
                        help="link types cycled over the edges, e.g. tls,quic,ws [tls]")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for convergence [60]")
    parser.add_argument("--log-level", default="info", help="axl-node log level [info]")
    parser.add_argument("--run", nargs="+", metavar="CONFIG",
                        help="instead: run these existing node configs in the foreground, "
                             "each log line prefixed with the config's name")
    return parser.parse_args(argv)


def stop_on_signals() -> None:
    """SIGINT and SIGTERM raise KeyboardInterrupt in the main thread, so that
    the caller's `finally` stops the nodes it started (a program killed with
    SIGTERM otherwise left them running)."""
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    """SIGINT and SIGTERM take the same clean path, even where the shell started us ignoring SIGINT."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Start the testnet, print where the nodes are, run until Ctrl-C or SIGTERM."""
    args = parse_args(argv)
    if args.run:
        return run_configs(args.run)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        testnet = Testnet(args.nodes, args.shape, args.dir, degree=args.degree, seed=args.seed,
                          base_port=args.base_port, log_level=args.log_level, json_path=args.json,
                          links=args.links.split(","))
    except (ValueError, TestnetError, NoFreePort) as error:
        print(f"axl-testnet: {error}", file=sys.stderr)
        return 2
    stop_on_signals()
    try:
        testnet.start()
        print(f"started {args.nodes} nodes ({args.shape}); waiting for the tree to converge...", flush=True)
        root = testnet.wait_converged(args.timeout)
        for node in testnet.nodes:
            marker = "  (root)" if node.peer_id == root else ""
            print(f"node {node.index}: {node.bridge_url}  {node.peer_id}{marker}")
        print(f"node list written to {testnet.json_path}; Ctrl-C stops all nodes", flush=True)
        while not testnet.exited_nodes():
            time.sleep(0.5)
        print(f"node(s) {testnet.exited_nodes()} exited; stopping the testnet", file=sys.stderr)
        return 1
    except TestnetError as error:
        print(f"axl-testnet: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stopping...", file=sys.stderr)
        return 0
    finally:
        testnet.stop()


if __name__ == "__main__":
    sys.exit(main())
