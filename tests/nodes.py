"""Start real `axl-node` processes on loopback for end-to-end tests."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from axl.client.blocking import UnixHTTPConnection
from axl.harness import free_port, spawn_node, stop_process


# Every process started here, so that a test failing before its own clean-up
# cannot leave nodes running after the session (see conftest.py).
STARTED: list["NodeProcess"] = []


def stop_leftovers() -> None:
    for node in STARTED:
        node.stop()


class BridgeHttp:
    """Requests to a node's HTTP bridge at `url` (ours or a Go AXL node),
    with its bearer token when it has one (`token`)."""

    url: str
    token: str = ""

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict | None = None, timeout: float = 30.0) -> tuple[int, dict, bytes]:
        headers = {"Authorization": f"Bearer {self.token}", **(headers or {})} if self.token else headers or {}
        if self.url.startswith("unix://"):
            return unix_request(self.url[len("unix://"):], method, path, body, headers, timeout)
        req = urllib.request.Request(self.url + path, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read()

    def get_json(self, path: str) -> dict:
        status, _, body = self.request("GET", path, timeout=5)
        if status != 200:
            raise ConnectionError(f"{path}: HTTP {status}")
        return json.loads(body)

    def send(self, dest: str, payload: bytes, timeout: float = 60.0) -> tuple[int, dict, bytes]:
        return self.request("POST", "/send", payload, {"X-Destination-Peer-Id": dest}, timeout)

    def up_peer_keys(self) -> set[str]:
        return {peer["public_key"] for peer in self.get_json("/topology")["peers"] if peer["up"]}


def unix_request(socket_path: str, method: str, path: str, body: bytes | None, headers: dict,
                 timeout: float) -> tuple[int, dict, bytes]:
    """One HTTP request to a bridge on a UNIX socket."""
    connection = UnixHTTPConnection(socket_path, timeout)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


@dataclass
class NodeProcess(BridgeHttp):
    name: str
    config_path: Path
    api_port: int
    listen_port: int | None
    log_path: Path
    process: subprocess.Popen | None = None
    peer_id: str = ""
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None
    token: str = ""

    @property
    def url(self) -> str:
        bridge_addr = json.loads(self.config_path.read_text()).get("bridge_addr", "")
        return bridge_addr if bridge_addr.startswith("unix://") else f"http://127.0.0.1:{self.api_port}"

    @property
    def listen_uri(self) -> str:
        return f"tls://127.0.0.1:{self.listen_port}"

    def start(self, timeout: float = 15.0) -> "NodeProcess":
        self.process = spawn_node(self.config_path, self.log_path, args=self.extra_args, env=self.env)
        STARTED.append(self)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log_path.read_text()[-2000:]}")
            try:
                self.peer_id = self.get_json("/topology")["our_public_key"]
                return self
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.1)
        raise RuntimeError(f"{self.name} bridge did not answer: {self.log_path.read_text()[-2000:]}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 5.0) -> int | None:
        return None if self.process is None else stop_process(self.process, sig, timeout)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def recv(self, wait: float = 10.0) -> tuple[int, dict, bytes]:
        return self.request("GET", f"/recv?wait={wait}", timeout=wait + 10)


def drain(node: NodeProcess) -> list[bytes]:
    """Everything in `node`'s receive queue, taken without waiting."""
    got = []
    while (response := node.recv(0))[0] == 200:
        got.append(response[2])
    return got


def wait_until(predicate, timeout: float, interval: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            result = predicate()
            if result:
                return result
        except (OSError, ConnectionError, KeyError, ValueError) as exc:
            last_error = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last_error})")


async def wait_until_async(predicate, timeout: float, interval: float = 0.05, what: str = "condition"):
    """`wait_until` for a test whose nodes run in its own event loop: polls without
    blocking it. The predicate may be a coroutine function."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        result = predicate()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def polls_waiting(node: BridgeHttp) -> int:
    """Long polls (and a /ws receiver's) waiting on `node`'s empty queue: that
    a client's request has reached the node and is waiting there."""
    _, _, body = node.request("GET", "/metrics", timeout=10)
    return int(metric_samples(body.decode())[("axl_recv_polls_waiting", ())])


class Cluster:
    """Nodes wired by listen/peer URIs, with keys and configs in a temp dir."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.nodes: list[NodeProcess] = []

    def add(self, name: str, *, listen: bool = True, peers: list[NodeProcess] = (),
            extra: dict | None = None) -> NodeProcess:
        key_path = self.base / f"{name}.pem"
        subprocess.run([sys.executable, "-m", "axl.cli", "genkey", str(key_path)],
                       check=True, capture_output=True)
        listen_port = free_port() if listen else None
        config = {
            "PrivateKeyPath": str(key_path),
            "Listen": [f"tls://127.0.0.1:{listen_port}"] if listen else [],
            "Peers": [peer.listen_uri for peer in peers],
            "api_port": free_port(),
            # Each node its own inbox: the default (beside the key file) is one per folder.
            "inbox_path": str(self.inbox_path(name)),
            **(extra or {}),
        }
        config_path = self.base / f"{name}.json"
        config_path.write_text(json.dumps(config))
        node = NodeProcess(name, config_path, config["api_port"], listen_port,
                           self.base / f"{name}.log")
        self.nodes.append(node)
        return node

    def inbox_path(self, name: str) -> Path:
        return self.base / f"{name}.inbox.sqlite3"

    def set_peers(self, node: NodeProcess, peers: list[NodeProcess]) -> None:
        config = json.loads(node.config_path.read_text())
        config["Peers"] = [peer.listen_uri for peer in peers]
        node.config_path.write_text(json.dumps(config))

    def start_all(self) -> None:
        for node in self.nodes:
            node.start()

    def stop_all(self) -> None:
        for node in self.nodes:
            node.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {n.name}\n{n.log_path.read_text()[-3000:]}"
                         for n in self.nodes if n.log_path.exists())


@contextmanager
def lone_node(base: Path, name: str = "a") -> Iterator[NodeProcess]:
    """One running node with no peers (it can still send to itself)."""
    cluster = Cluster(base)
    node = cluster.add(name)
    cluster.start_all()
    try:
        yield node
    finally:
        cluster.stop_all()


def metric_samples(text: str) -> dict[tuple[str, tuple], float]:
    """Prometheus text parsed into {(sample name, sorted label pairs): value}."""
    from prometheus_client.parser import text_string_to_metric_families
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def admin_call(endpoint: str, request: str, timeout: float = 15.0, **arguments: str) -> dict:
    """One request to an admin socket (`unix:///path` or `tcp://host:port`),
    sent as yggdrasilctl sends it; the whole answer, parsed."""
    if endpoint.startswith("unix://"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        address: str | tuple[str, int] = endpoint[len("unix://"):]
    else:
        host, _, port = endpoint[len("tcp://"):].rpartition(":")
        sock, address = socket.socket(socket.AF_INET, socket.SOCK_STREAM), (host, int(port))
    with sock:
        sock.settimeout(timeout)
        sock.connect(address)
        sock.sendall(json.dumps({"request": request, "arguments": arguments}).encode() + b"\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return json.loads(answer)


def up_peers(node: NodeProcess) -> set[str]:
    return node.up_peer_keys()


os.environ.setdefault("PYTHONUNBUFFERED", "1")
