"""Real axl-node processes: peerings come up, go down and come back."""

import asyncio
import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp
import pytest

from axl.daemon import stop_signals
from nodes import Cluster, NodeProcess, free_port, polls_waiting, up_peers, wait_until

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def configs_cluster(tmp_path):
    """The three nodes of configs/, unchanged but for the key and inbox paths and
    their ports: free ones instead of 9001, 9002, 9012 and 9022, which `make run3`
    (the README's own nodes, perhaps running in another terminal) uses."""
    listen_port = free_port()
    hub_uri = f"tls://127.0.0.1:{listen_port}"
    nodes = []
    for index in (1, 2, 3):
        config = json.loads((REPO / "configs" / f"node{index}.json").read_text())
        key = tmp_path / f"node{index}.pem"
        subprocess.run([sys.executable, "-m", "axl.cli", "genkey", str(key)], check=True,
                       capture_output=True)
        config["PrivateKeyPath"] = str(key)
        config["inbox_path"] = str(tmp_path / f"node{index}.inbox.sqlite3")
        config["api_port"] = free_port()
        config["Listen"] = [hub_uri] if config["Listen"] else []
        config["Peers"] = [hub_uri] * len(config["Peers"])
        path = tmp_path / f"node{index}.json"
        path.write_text(json.dumps(config))
        nodes.append(NodeProcess(f"node{index}", path, config["api_port"], listen_port if index == 1 else None,
                                 tmp_path / f"node{index}.log"))
    yield nodes
    for node in nodes:
        node.stop()


def test_configs_peer_go_down_and_come_back(configs_cluster):
    hub, second, third = configs_cluster
    for node in configs_cluster:
        node.start()
    started = time.monotonic()
    wait_until(lambda: up_peers(hub) == {second.peer_id, third.peer_id}, 15, what="both peerings up")
    up_time = time.monotonic() - started
    topo = second.get_json("/topology")
    assert topo["our_public_key"] == second.peer_id
    assert topo["our_ipv6"].startswith("2")
    (outbound,) = topo["peers"]
    assert outbound == {**outbound, "uri": hub.listen_uri, "up": True, "inbound": False,
                        "public_key": hub.peer_id}
    assert outbound["port"] >= 1
    inbound_ports = sorted(p["port"] for p in hub.get_json("/topology")["peers"])
    assert inbound_ports == [1, 2]

    hub.stop()
    wait_until(lambda: not any(p["up"] for p in second.get_json("/topology")["peers"]), 10,
               what="peering seen down")
    down = second.get_json("/topology")["peers"]
    assert down[0]["uri"] == hub.listen_uri and down[0]["up"] is False

    hub.start()
    restarted = time.monotonic()
    wait_until(lambda: up_peers(second) == {hub.peer_id}, 30, what="peering back up")
    wait_until(lambda: up_peers(third) == {hub.peer_id}, 30, what="third peering back up")
    print(f"peering up in {up_time:.2f}s, back after restart in {time.monotonic() - restarted:.2f}s")


@contextmanager
def hangup_disposition(handler: signal.Handlers) -> Iterator[None]:
    """What SIGHUP does in a node started inside: a child inherits its parent's
    disposition, and `nohup` starts the whole test run ignoring the signal."""
    previous = signal.signal(signal.SIGHUP, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stop_signal_stops_cleanly_within_two_seconds(tmp_path, sig):
    cluster = Cluster(tmp_path)
    node = cluster.add("solo")
    with hangup_disposition(signal.SIG_DFL):
        node.start()
    started = time.monotonic()
    assert node.stop(sig) == 0
    assert time.monotonic() - started < 2.5
    log = node.log_path.read_text()
    assert node.peer_id in log and "bridge listening" in log and "Traceback" not in log
    assert f"stopping on {sig.name}" in log and "stopped" in log


def test_a_hangup_signal_stays_ignored_under_nohup(tmp_path):
    node = Cluster(tmp_path).add("solo")
    with hangup_disposition(signal.SIG_IGN):
        node.start()
    node.process.send_signal(signal.SIGHUP)
    assert node.stop(signal.SIGTERM) == 0
    log = node.log_path.read_text()
    assert "stopping on SIGTERM" in log and "SIGHUP" not in log


def test_stop_signals_follow_the_inherited_hangup_disposition():
    with hangup_disposition(signal.SIG_IGN):
        assert signal.SIGHUP not in stop_signals()
    with hangup_disposition(signal.SIG_DFL):
        assert signal.SIGHUP in stop_signals()


def test_the_signal_tests_pass_under_nohup(tmp_path):
    """`nohup make test` starts the suite ignoring SIGHUP: these tests must not assume otherwise."""
    nohup = shutil.which("nohup")
    if nohup is None:
        pytest.skip("nohup is not installed")
    run = subprocess.run([nohup, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          __file__, "-k", "stop_signal or hangup"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "4 passed" in run.stdout


async def test_sigterm_ends_open_long_polls_and_websockets(tmp_path):
    """A client holding a long poll and a /ws connection does not hold the node
    up: the poll answers 204, the WebSocket is closed 1001, the exit is clean."""
    node = Cluster(tmp_path).add("solo")
    node.start()
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(node.url + "/ws")
        reader, writer = await asyncio.open_connection("127.0.0.1", node.api_port)
        writer.write(b"GET /recv?wait=30 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        await writer.drain()
        await asyncio.to_thread(wait_until, lambda: polls_waiting(node) == 1, 10, what="the long poll waiting")
        started = time.monotonic()
        assert await asyncio.to_thread(node.stop) == 0
        assert time.monotonic() - started < 2.5
        status_line = await asyncio.wait_for(reader.readline(), 5)
        assert status_line.split()[1] == b"204"
        writer.close()
        closing = await asyncio.wait_for(ws.receive(), 5)
        assert (closing.type, closing.data) == (aiohttp.WSMsgType.CLOSE, 1001)
    log = node.log_path.read_text()
    assert "stopped" in log and "Traceback" not in log


def test_health_and_unimplemented_free_errors(tmp_path):
    cluster = Cluster(tmp_path)
    node = cluster.add("solo")
    node.start()
    try:
        health = node.get_json("/health")
        assert health["status"] == "ok" and health["our_public_key"] == node.peer_id
        status, _, body = node.send("zz", b"x")
        assert status == 400 and b"X-Destination-Peer-Id" in body
        status, _, _ = node.request("GET", "/recv")
        assert status == 204
        status, _, _ = node.request("GET", "/recv?wait=abc")
        assert status == 400
    finally:
        node.stop()
