"""The reference Go programs as test processes: yggdrasil-go routers (with
their admin socket, read through the real yggdrasilctl) and Gensyn's Go AXL
node. Both run from AXL_GO_BIN_DIR, on loopback only, each in a folder of
its own with its config and log; our nodes come from tests/nodes.py.

Keys are chosen by the test (a seed), so that which node roots the tree,
the numerically lowest key, is part of the scenario."""

from __future__ import annotations

import functools
import json
import os
import random
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from axl.harness import free_port, stop_process
from axl.identity import NodeIdentity
from nodes import BridgeHttp, Cluster, NodeProcess, wait_until

REPO = Path(__file__).resolve().parents[2]
DEFAULT_BIN_DIR = REPO.parent / "shared" / "go-peers" / "bin"
PROGRAMS = ("yggdrasil", "yggdrasilctl", "axl-node")

STARTED: list["GoProcess"] = []


def go_bin_dir() -> Path | None:
    """AXL_GO_BIN_DIR, else ../shared/go-peers/bin beside the repository; None without all three programs."""
    configured = os.environ.get("AXL_GO_BIN_DIR")
    folder = Path(configured) if configured else DEFAULT_BIN_DIR
    if all(os.access(folder / name, os.X_OK) for name in PROGRAMS):
        return folder
    return None


@functools.cache
def yggdrasil_version(bin_dir: Path) -> tuple[int, ...]:
    """The version the Go router in `bin_dir` reports (`yggdrasil -version`),
    e.g. (0, 5, 14): the tests compare against what that version does."""
    result = subprocess.run([str(bin_dir / "yggdrasil"), "-version"], capture_output=True, text=True, timeout=15)
    found = re.search(r"Build version: v?(\d+(?:\.\d+)*)", result.stdout)
    if found is None:
        raise RuntimeError(f"yggdrasil -version said nothing of its version: {result.stdout or result.stderr!r}")
    return tuple(int(part) for part in found.group(1).split("."))


def identity(rng: random.Random, root: bool = False) -> NodeIdentity:
    """A key that roots the tree (first byte below 0x08) or one that never does (0x80 and up)."""
    while True:
        candidate = NodeIdentity.from_seed(rng.randbytes(32))
        first = candidate.public_key[0]
        if (first < 0x08) if root else (first >= 0x80):
            return candidate


def yggdrasilctl(bin_dir: Path, endpoint: str, *command: str, plain: bool = False) -> dict | str:
    """The real yggdrasilctl against an admin socket, a Go router's or ours:
    its output parsed (`-json`), or as printed (`plain`)."""
    argv = [str(bin_dir / "yggdrasilctl"), "-endpoint", endpoint, *([] if plain else ["-json"]), *command]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=15)
    if result.returncode != 0:
        raise RuntimeError(f"yggdrasilctl {' '.join(command)}: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout if plain else json.loads(result.stdout)


@dataclass
class GoProcess:
    name: str
    folder: Path
    key: NodeIdentity
    process: subprocess.Popen | None = None
    netns: str = ""
    """The network namespace (of the test's own) to run in; the host's when empty."""

    @property
    def peer_id(self) -> str:
        return self.key.peer_id

    @property
    def log_path(self) -> Path:
        return self.folder / f"{self.name}.log"

    def spawn(self, argv: list[str]) -> None:
        if self.netns:
            argv = ["ip", "netns", "exec", self.netns, *argv]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, cwd=self.folder,
                                            start_new_session=True)
        STARTED.append(self)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""


@dataclass
class GoRouter(GoProcess):
    """A yggdrasil-go daemon (0.5.12 or newer): no TUN, no multicast, an admin socket."""

    bin_dir: Path = Path()
    listen: list[str] = field(default_factory=list)
    peers: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    @property
    def admin(self) -> str:
        return f"unix://{self.folder / (self.name + '-admin.sock')}"

    def config(self) -> dict:
        return {
            "PrivateKey": (self.key.seed + self.key.public_key).hex(),
            "Peers": self.peers, "InterfacePeers": {}, "Listen": self.listen,
            "AdminListen": self.admin, "MulticastInterfaces": [], "AllowedPublicKeys": [],
            "IfName": "none", "IfMTU": 65535, "NodeInfoPrivacy": False, "NodeInfo": {},
            **self.extra,
        }

    def start(self, timeout: float = 15.0) -> "GoRouter":
        path = self.folder / f"{self.name}.json"
        path.write_text(json.dumps(self.config()))
        self.spawn([str(self.bin_dir / "yggdrasil"), "-useconffile", str(path), "-logto", str(self.log_path)])
        wait_until(lambda: self._self_ready(), timeout, what=f"{self.name}'s admin socket")
        return self

    def _self_ready(self) -> bool:
        if not self.alive():
            raise RuntimeError(f"{self.name} exited: {self.log()}")
        try:
            return self.ctl("getSelf")["key"] == self.peer_id
        except RuntimeError:
            return False

    def ctl(self, *command: str, plain: bool = False) -> dict | str:
        """The real yggdrasilctl against this router (`-json` unless `plain`)."""
        return yggdrasilctl(self.bin_dir, self.admin, *command, plain=plain)

    def up_peer_keys(self) -> set[str]:
        return {peer["key"] for peer in self.ctl("getPeers")["peers"] if peer.get("up", True)}


@dataclass
class GoAxl(GoProcess, BridgeHttp):
    """Gensyn's Go AXL node: HTTP bridge, gVisor TCP on tcp_port inside the overlay."""

    bin_dir: Path = Path()
    listen: list[str] = field(default_factory=list)
    peers: list[str] = field(default_factory=list)
    api_port: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def start(self, timeout: float = 15.0) -> "GoAxl":
        key_path = self.folder / f"{self.name}.pem"
        key_path.write_bytes(self.key.pem())
        self.api_port = self.api_port or free_port()
        config = {"PrivateKeyPath": str(key_path), "Peers": self.peers, "Listen": self.listen,
                  "api_port": self.api_port, "tcp_port": 7000, **self.extra}
        path = self.folder / f"{self.name}.json"
        path.write_text(json.dumps(config))
        self.spawn([str(self.bin_dir / "axl-node"), "-config", str(path)])
        wait_until(self._bridge_ready, timeout, what=f"{self.name}'s bridge")
        return self

    def _bridge_ready(self) -> bool:
        if not self.alive():
            raise RuntimeError(f"{self.name} exited: {self.log()}")
        return self.get_json("/topology")["our_public_key"] == self.peer_id

    def recv(self, wait: float = 10.0) -> tuple[int, dict, bytes]:
        """Go's /recv has no long poll: poll it until a message comes or `wait` passes."""
        deadline = time.monotonic() + wait
        while True:
            status, headers, body = self.request("GET", "/recv", timeout=10)
            if status != 204 or time.monotonic() >= deadline:
                return status, headers, body
            time.sleep(0.01)


@dataclass
class MixedNetwork:
    """Our nodes (a Cluster), Go routers and Go AXL nodes in one temp folder."""

    base: Path
    bin_dir: Path
    seed: int = 1
    cluster: Cluster = field(init=False)
    go: list[GoProcess] = field(default_factory=list)
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.cluster = Cluster(self.base)
        self.rng = random.Random(self.seed)

    def router(self, name: str, *, root: bool = False, listen: list[str] | None = None,
               peers: list[str] = (), extra: dict | None = None) -> GoRouter:
        return self._go(GoRouter, name, root, listen, peers, extra)

    def go_axl(self, name: str, *, root: bool = False, listen: list[str] | None = None,
               peers: list[str] = (), extra: dict | None = None) -> GoAxl:
        return self._go(GoAxl, name, root, listen, peers, extra)

    def _go(self, kind, name, root, listen, peers, extra):
        listen = [f"tls://127.0.0.1:{free_port()}"] if listen is None else listen
        process = kind(name, self.base, identity(self.rng, root), bin_dir=self.bin_dir,
                       listen=list(listen), peers=list(peers), extra=extra or {})
        self.go.append(process)
        return process

    def ours(self, name: str, *, root: bool = False, listen: list[str] | None = None,
             peers: list[str] = (), extra: dict | None = None) -> NodeProcess:
        key = identity(self.rng, root)
        listen = [f"tls://127.0.0.1:{free_port()}"] if listen is None else listen
        node = self.cluster.add(name, listen=False, extra={"Listen": listen, "Peers": list(peers), **(extra or {})})
        Path(json.loads(node.config_path.read_text())["PrivateKeyPath"]).write_bytes(key.pem())
        return node

    def stop(self) -> None:
        self.cluster.stop_all()
        for process in self.go:
            process.stop()

    def logs(self) -> str:
        return self.cluster.logs() + "".join(f"\n--- {p.name}\n{p.log()}" for p in self.go)


def listen_uris(node: NodeProcess | GoRouter | GoAxl) -> list[str]:
    """Where a node of either kind accepts peerings, from its config."""
    if isinstance(node, NodeProcess):
        return json.loads(node.config_path.read_text())["Listen"]
    return list(node.listen)


def stop_leftovers() -> None:
    for process in STARTED:
        process.stop()
