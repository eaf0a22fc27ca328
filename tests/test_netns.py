"""Three "hosts" in network namespaces, each with its own addresses, joined by veth links.

Nodes peer across the hosts over real (virtual) interfaces instead of
loopback; cutting one host's interface with `ip link set down` must leave
traffic flowing over the remaining path. Needs root and iproute2; skipped
with the reason otherwise. Only namespaces created here carry traffic.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from axl.harness import stop_process
from axl.identity import NodeIdentity

PREFIX = f"axl{os.getpid() % 100000}"
HOSTS = ("h1", "h2", "h3")
# (host a, host b, subnet third octet): a gets .1, b gets .2
WIRES = [("h1", "h2", 12), ("h1", "h3", 13), ("h2", "h3", 23)]
LISTEN_PORT = 9001
API_PORT = 9002


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def namespaces_unavailable() -> str | None:
    if shutil.which("ip") is None:
        return "iproute2 (`ip`) is not installed"
    probe = f"{PREFIX}probe"
    result = ip("netns", "add", probe, check=False)
    if result.returncode != 0:
        return f"cannot create network namespaces here: {result.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    return None


pytestmark = pytest.mark.skipif(bool(namespaces_unavailable()), reason=namespaces_unavailable() or "")


def ns(host: str) -> str:
    return PREFIX + host


def address(host: str, subnet: int) -> str:
    a, b, _ = next(w for w in WIRES if w[2] == subnet)
    return f"10.77.{subnet}.{1 if host == a else 2}"


def veth(host: str, subnet: int) -> str:
    return f"v{subnet}{host[1]}"


@dataclass
class HostNode:
    host: str
    key: NodeIdentity
    config: Path
    log: Path
    process: subprocess.Popen | None = None
    api_port: int = API_PORT

    def http(self, method: str, path: str, body: bytes = b"", headers: dict | None = None,
             timeout: float = 30.0) -> tuple[int, dict, bytes]:
        """One request to this host's bridge, made from inside its namespace."""
        script = (
            "import json, sys, urllib.request, urllib.error\n"
            "req = urllib.request.Request(sys.argv[1], data=sys.stdin.buffer.read() or None,"
            " method=sys.argv[2], headers=json.loads(sys.argv[3]))\n"
            "try:\n"
            f"    r = urllib.request.urlopen(req, timeout={timeout})\n"
            "except urllib.error.HTTPError as e:\n"
            "    r = e\n"
            "sys.stdout.buffer.write(json.dumps([r.status, dict(r.headers)]).encode() + b'\\n' + r.read())\n"
        )
        done = subprocess.run(
            ["ip", "netns", "exec", ns(self.host), sys.executable, "-c", script,
             f"http://127.0.0.1:{self.api_port}{path}", method, json.dumps(headers or {})],
            input=body, capture_output=True, timeout=timeout + 15,
        )
        if done.returncode != 0:
            return 0, {}, done.stderr
        head, _, payload = done.stdout.partition(b"\n")
        status, response_headers = json.loads(head)
        return status, response_headers, payload

    def topology(self) -> dict:
        status, _, body = self.http("GET", "/topology", timeout=5)
        return json.loads(body) if status == 200 else {"peers": [], "tree": []}

    def up_peers(self) -> set[str]:
        return {p["public_key"] for p in self.topology()["peers"] if p["up"]}


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def stop_nodes(nodes) -> None:
    for node in nodes:
        if node.process is not None:
            stop_process(node.process)


@pytest.fixture
def hosts(tmp_path: Path):
    for host in HOSTS:
        ip("netns", "add", ns(host))
        ip("-n", ns(host), "link", "set", "lo", "up")
    nodes: dict[str, HostNode] = {}
    try:
        for a, b, subnet in WIRES:
            ip("link", "add", veth(a, subnet), "netns", ns(a), "type", "veth",
               "peer", "name", veth(b, subnet), "netns", ns(b))
            for host in (a, b):
                ip("-n", ns(host), "addr", "add", f"{address(host, subnet)}/24", "dev", veth(host, subnet))
                ip("-n", ns(host), "link", "set", veth(host, subnet), "up")
        dials = {"h1": [], "h2": [("h1", 12)], "h3": [("h1", 13), ("h2", 23)]}
        for host in HOSTS:
            key = NodeIdentity.generate()
            key_path = tmp_path / f"{host}.pem"
            key_path.write_bytes(key.pem())
            config = {
                "PrivateKeyPath": str(key_path),
                "inbox_path": str(tmp_path / f"{host}.inbox.sqlite3"),
                "Listen": [f"tls://0.0.0.0:{LISTEN_PORT}"],
                "Peers": [f"tls://{address(peer, subnet)}:{LISTEN_PORT}" for peer, subnet in dials[host]],
                "api_port": API_PORT,
                "lookup_timeout_secs": 5,
                "send_timeout_secs": 20,
            }
            node = HostNode(host, key, tmp_path / f"{host}.json", tmp_path / f"{host}.log")
            node.config.write_text(json.dumps(config))
            node.process = subprocess.Popen(
                ["ip", "netns", "exec", ns(host), sys.executable, "-m", "axl.cli", "--config", str(node.config)],
                stdout=open(node.log, "ab"), stderr=subprocess.STDOUT,
            )
            nodes[host] = node
        yield nodes
    finally:
        stop_nodes(nodes.values())
        for host in HOSTS:
            ip("netns", "del", ns(host), check=False)


def test_traffic_reroutes_when_a_host_link_goes_down(hosts) -> None:
    h2, h3 = hosts["h2"], hosts["h3"]
    peer_ids = {host: node.key.peer_id for host, node in hosts.items()}
    wait_for(lambda: h3.up_peers() == {peer_ids["h1"], peer_ids["h2"]}, 30, "h3 peered with h1 and h2")
    wait_for(lambda: h2.up_peers() == {peer_ids["h1"], peer_ids["h3"]}, 30, "h2 peered with h1 and h3")
    peer_uris = {p["uri"] for p in h3.topology()["peers"]}
    assert any("10.77.13.1" in uri for uri in peer_uris) and any("10.77.23.1" in uri for uri in peer_uris)

    wait_for(lambda: h3.http("POST", "/send", b"direct", {"X-Destination-Peer-Id": peer_ids["h2"]})[0] == 200,
             30, "a message from h3 to h2 over their own wire")
    assert h2.http("GET", "/recv?wait=5")[2] == b"direct"

    ip("-n", ns("h3"), "link", "set", veth("h3", 23), "down")
    wait_for(lambda: peer_ids["h2"] not in h3.up_peers(), 30, "h3 to notice its wire to h2 is down")

    sent = []
    answers: dict[bytes, list[int]] = {}

    def send(payload: bytes) -> bool:
        status = h3.http("POST", "/send", payload, {"X-Destination-Peer-Id": peer_ids["h2"]})[0]
        answers.setdefault(payload, []).append(status)
        return status == 200

    for seq in range(5):
        payload = f"rerouted {seq}".encode()
        wait_for(lambda: send(payload), 60, f"message {seq} from h3 to h2 through h1")
        sent.append(payload)
    received = []
    while (answer := h2.http("GET", "/recv?wait=2"))[0] == 200:
        assert answer[1]["X-From-Peer-Id"] == peer_ids["h3"]
        received.append(answer[2])
    # A 504 means "not acknowledged in time": that try may still arrive, so
    # resending after it may deliver twice. Nothing else may.
    maybe_twice = {payload for payload, statuses in answers.items() if 504 in statuses[:-1]}
    assert list(dict.fromkeys(received)) == sent, answers
    assert all(received.count(payload) == 1 for payload in sent if payload not in maybe_twice), answers
    assert peer_ids["h2"] not in h3.up_peers()
