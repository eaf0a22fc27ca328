"""Child processes for the benchmarks: nodes, and their resident memory.

The bench starts its own nodes rather than reusing a test helper because it
must choose the event loop of each process (AXL_EVENT_LOOP) and time the
start-up itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from axl.harness import LOOPBACK, free_port, spawn_node, stop_process
from axl.identity import NodeIdentity

POLL_INTERVAL = 0.02
START_TIMEOUT = 30.0


def child_env(loop: str) -> dict[str, str]:
    """Environment for a child running on `loop` ("uvloop" or "asyncio")."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["AXL_EVENT_LOOP"] = loop
    return env


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a live process has used, from /proc (0 once it has gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    """VmRSS of a live process, from /proc (0 once it has gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


@dataclass
class BenchNode:
    """One axl-node process with its own key, config and log in `workdir`."""

    name: str
    workdir: Path
    loop: str
    peers: list["BenchNode"] = field(default_factory=list)
    identity: NodeIdentity = field(default_factory=NodeIdentity.generate)
    listen_port: int = field(default_factory=free_port)
    api_port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    started_at: float = 0.0
    # config fields over the defaults (the inbox modes the bench compares)
    settings: dict = field(default_factory=dict)
    # how long start-up and peering may take (longer under valgrind)
    start_timeout: float = START_TIMEOUT

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.api_port}"

    @property
    def peer_id(self) -> str:
        return self.identity.public_key.hex()

    @property
    def listen_uri(self) -> str:
        return f"tls://{LOOPBACK}:{self.listen_port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def config(self, key_path: Path) -> dict:
        """The node's config file."""
        return {
            "PrivateKeyPath": str(key_path),
            "inbox_path": str(self.workdir / f"{self.name}.inbox.sqlite3"),
            "Listen": [self.listen_uri],
            "Peers": [peer.listen_uri for peer in self.peers],
            "api_port": self.api_port,
            **self.settings,
        }

    def launch(self) -> tuple[list[str] | None, list[str]]:
        """The program (None: this project's node) and its arguments besides the config."""
        return None, ["--log-level", "warning"]

    def write_config(self) -> Path:
        key_path = self.workdir / f"{self.name}.pem"
        key_path.write_bytes(self.identity.pem())
        path = self.workdir / f"{self.name}.json"
        path.write_text(json.dumps(self.config(key_path)))
        return path

    def spawn(self) -> None:
        config_path = self.write_config()
        self.started_at = time.monotonic()
        command, args = self.launch()
        self.process = spawn_node(config_path, self.workdir / f"{self.name}.log",
                                  command=command, args=args, env=child_env(self.loop))

    def log_tail(self) -> str:
        path = self.workdir / f"{self.name}.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    async def wait_bridge(self, http: aiohttp.ClientSession) -> float:
        """Seconds from spawn until GET /topology answers."""
        deadline = self.started_at + self.start_timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log_tail()}")
            try:
                async with http.get(self.url + "/topology") as resp:
                    if resp.status == 200:
                        return time.monotonic() - self.started_at
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(POLL_INTERVAL)
        raise RuntimeError(f"{self.name}: bridge did not answer: {self.log_tail()}")

    async def up_peers(self, http: aiohttp.ClientSession) -> set[str]:
        async with http.get(self.url + "/topology") as resp:
            topology = await resp.json()
        return {peer["public_key"] for peer in topology["peers"] if peer["up"]}

    async def wait_peers(self, http: aiohttp.ClientSession, keys: set[str]) -> float:
        """Seconds from spawn until every key in `keys` is an up peer."""
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if keys <= await self.up_peers(http):
                return time.monotonic() - self.started_at
            await asyncio.sleep(POLL_INTERVAL)
        raise RuntimeError(f"{self.name}: peerings did not come up: {self.log_tail()}")

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)


def go_axl_binary() -> Path | None:
    """Go AXL's axl-node in AXL_GO_BIN_DIR (`make wan` and `make bench-go` set it as `make interop` does), if it is there."""
    folder = os.environ.get("AXL_GO_BIN_DIR")
    if not folder:
        return None
    binary = Path(folder) / "axl-node"
    return binary if os.access(binary, os.X_OK) else None


@dataclass
class GoBenchNode(BenchNode):
    """Go AXL's node: the same bridge, its own config and no long poll on /recv."""

    binary: Path = field(default_factory=Path)

    def config(self, key_path: Path) -> dict:
        return {"PrivateKeyPath": str(key_path), "Listen": [self.listen_uri],
                "Peers": [peer.listen_uri for peer in self.peers], "api_port": self.api_port,
                "tcp_port": 7000, **self.settings}

    def launch(self) -> tuple[list[str] | None, list[str]]:
        return [str(self.binary)], []


class RssSampler:
    """Samples the VmRSS of some processes in the background, keeping peaks."""

    def __init__(self, pids: dict[str, int], interval: float = 0.05) -> None:
        self.pids = pids
        self.interval = interval
        self.peaks: dict[str, int] = {name: rss_bytes(pid) for name, pid in pids.items()}
        self._task: asyncio.Task | None = None

    async def __aenter__(self) -> "RssSampler":
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc_info) -> None:
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        self._sample()

    async def _run(self) -> None:
        while True:
            self._sample()
            await asyncio.sleep(self.interval)

    def _sample(self) -> None:
        for name, pid in self.pids.items():
            self.peaks[name] = max(self.peaks[name], rss_bytes(pid))
