"""The admin socket (AdminListen) of real axl-node processes, spoken to as
yggdrasilctl speaks to it: this node's own figures, NodeInfo both ways
with and without NodeInfoPrivacy, the remote debug commands, and peers
added and removed at run time. tests/interop compares the answers with a
yggdrasil router's, through the real yggdrasilctl."""

from __future__ import annotations

import json
import os
import socket
import stat
import time
from pathlib import Path

import pytest

from axl.budgets import ADMIN_REQUEST_TIMEOUT, MAX_RUNTIME_PEERS
from axl.build import build_fields
from axl.harness import free_port
from axl.link.manager import NODE_LOG_LINES, NODE_LOG_WINDOW
from nodes import Cluster, admin_call, metric_samples, wait_until


@pytest.fixture(scope="module")
def trio(tmp_path_factory):
    """a (UNIX admin socket, named alpha) <- b (TCP admin socket, NodeInfoPrivacy); c alone."""
    base = tmp_path_factory.mktemp("admin")
    cluster = Cluster(base)
    a = cluster.add("a", extra={"AdminListen": f"unix://{base}/a-admin.sock", "NodeInfo": {"name": "alpha"}})
    b = cluster.add("b", peers=[a], extra={"AdminListen": f"tcp://127.0.0.1:{free_port()}",
                                           "NodeInfo": {"name": "beta", "site": [1, 2.5]},
                                           "NodeInfoPrivacy": True})
    c = cluster.add("c")
    try:
        cluster.start_all()
        wait_until(lambda: a.send(b.peer_id, b"hello")[0] == 200, 30, what="a reaches b")
        yield a, b, c
    finally:
        cluster.stop_all()


def endpoint(node) -> str:
    return json.loads(node.config_path.read_text())["AdminListen"]


def ask(node, request: str, **arguments: str) -> dict:
    answer = admin_call(endpoint(node), request, **arguments)
    assert answer["status"] == "success", answer
    return answer["response"]


def test_get_self_describes_the_node(trio):
    a, _, _ = trio
    topology = a.get_json("/topology")
    me = ask(a, "getSelf")
    assert list(me) == ["build_name", "build_version", "key", "address", "routing_entries", "subnet"]
    assert (me["build_name"], me["build_version"]) == ("axl-py", build_fields()["buildversion"])
    assert me["key"] == a.peer_id and me["address"] == topology["our_ipv6"]
    assert me["subnet"] == "3" + ":".join(topology["our_ipv6"].split(":")[:4])[1:] + "::/64"
    assert me["routing_entries"] >= 2


def test_get_peers_shows_each_side_of_the_peering(trio):
    a, b, _ = trio
    [at_a] = ask(a, "getPeers")["peers"]
    [at_b] = ask(b, "getPeers")["peers"]
    assert (at_a["key"], at_a["inbound"], at_a["up"]) == (b.peer_id, True, True)
    assert (at_b["key"], at_b["inbound"], at_b["remote"]) == (a.peer_id, False, a.listen_uri)
    for entry in (at_a, at_b):
        assert list(entry)[:9] == ["remote", "up", "inbound", "address", "key", "port", "priority", "cost",
                                   "bytes_recvd"]
        assert entry["port"] >= 1 and entry["cost"] >= 1 and entry["bytes_recvd"] > 0 and entry["bytes_sent"] > 0
        assert 0 < entry["uptime"] < 600 and isinstance(entry["latency"], int) and entry["latency"] > 0


def test_peer_rates_are_the_last_seconds_bytes(trio):
    a, b, _ = trio

    def rate_sent() -> int:
        [at_b] = ask(b, "getPeers")["peers"]
        return at_b.get("rate_sent", 0)

    def push() -> int:
        assert b.send(a.peer_id, bytes(200_000))[0] == 200
        return rate_sent()

    assert wait_until(lambda: push() > 100_000, 20, what="a rate over the last second")
    assert a.recv(5)[0] == 200
    wait_until(lambda: rate_sent() < 10_000, 20, what="the rate falling once the traffic stops")


def test_tree_paths_and_sessions_after_a_message(trio):
    a, b, _ = trio
    tree = {entry["key"]: entry for entry in ask(a, "getTree")["tree"]}
    root = min(tree)
    assert set(tree) >= {a.peer_id, b.peer_id} and tree[root]["parent"] == root
    assert tree[max(a.peer_id, b.peer_id)]["parent"] == root
    [path] = [p for p in ask(a, "getPaths")["paths"] if p["key"] == b.peer_id]
    assert len(path["path"]) == (0 if root == b.peer_id else 1) and path["sequence"] > 0
    [session] = [s for s in ask(a, "getSessions")["sessions"] if s["key"] == b.peer_id]
    assert session["bytes_sent"] > 5 and session["bytes_recvd"] > 0 and session["uptime"] > 0
    assert list(session) == ["address", "key", "bytes_recvd", "bytes_sent", "uptime"]


def test_nodeinfo_both_ways_with_and_without_privacy(trio):
    a, b, _ = trio
    assert ask(a, "getNodeInfo", key=b.peer_id) == {b.peer_id: {"name": "beta", "site": [1, 2.5]}}
    assert ask(b, "getNodeInfo", key=a.peer_id) == {a.peer_id: {"name": "alpha", **build_fields()}}
    assert ask(a, "getNodeInfo", key=a.peer_id.upper()) == {a.peer_id: {"name": "alpha", **build_fields()}}


def test_topology_names_peers_by_their_nodeinfo(trio):
    a, b, _ = trio
    wait_until(lambda: [p.get("name") for p in a.get_json("/topology")["peers"]] == ["beta"], 20,
               what="a knows b's name")
    wait_until(lambda: [p.get("name") for p in b.get_json("/topology")["peers"]] == ["alpha"], 20,
               what="b knows a's name")
    peerings = a.get_json("/dashboard/api/peers")["peerings"]
    assert [p["name"] for p in peerings] == ["beta"]


def test_remote_debug_commands(trio):
    a, b, _ = trio
    address = b.get_json("/topology")["our_ipv6"]
    remote_self = ask(a, "debug_remoteGetSelf", key=b.peer_id)
    assert remote_self[address]["key"] == b.peer_id and remote_self[address]["routing_entries"].isdigit()
    assert ask(a, "debug_remoteGetPeers", key=b.peer_id) == {address: {"keys": [a.peer_id]}}
    assert set(ask(a, "debug_remoteGetTree", key=b.peer_id)[address]["keys"]) >= {a.peer_id, b.peer_id}


def test_peers_added_and_removed_at_run_time(trio, caplog):
    a, _, c = trio
    config_before = a.config_path.read_bytes()
    started = time.monotonic()
    assert ask(a, "addPeer", uri=c.listen_uri) == {}
    wait_until(lambda: c.peer_id in {p["key"] for p in ask(a, "getPeers")["peers"] if p["up"]}, 10,
               interval=0.05, what="the added peering up")
    print(f"addPeer to peering up: {time.monotonic() - started:.2f} s")
    duplicate = admin_call(endpoint(a), "addPeer", uri=c.listen_uri)
    assert duplicate["status"] == "error" and "already configured" in duplicate["error"]

    sorted_by = {order: ask(a, "getPeers", sort=order)["peers"] for order in ("cost", "uptime", "COST")}
    assert [(p["cost"], p["key"]) for p in sorted_by["cost"]] == sorted((p["cost"], p["key"]) for p in sorted_by["cost"])
    assert [p["key"] for p in sorted_by["COST"]] == [p["key"] for p in sorted_by["cost"]]
    uptimes = [p.get("uptime", 0) for p in sorted_by["uptime"]]
    assert uptimes == sorted(uptimes) and uptimes[0] < uptimes[-1], "the newest peering first"

    assert ask(a, "removePeer", uri=c.listen_uri) == {}
    wait_until(lambda: not c.get_json("/topology")["peers"], 10, what="c sees the peering gone")
    assert c.listen_uri not in {p.get("remote") for p in ask(a, "getPeers")["peers"]}, "no dialer is left"
    gone = admin_call(endpoint(a), "removePeer", uri=c.listen_uri)
    assert gone["status"] == "error" and "not configured" in gone["error"]
    assert a.config_path.read_bytes() == config_before
    log = a.log_path.read_text()
    assert f"peer added at run time: {c.listen_uri}" in log and f"peer removed at run time: {c.listen_uri}" in log


@pytest.mark.parametrize("request_name, arguments, error", [
    ("fetchEverything", {}, "Unknown action 'fetcheverything', try 'list' for help"),
    ("getNodeInfo", {}, "No remote public key supplied"),
    ("getNodeInfo", {"key": "zz"}, "Failed to decode public key: encoding/hex: invalid byte: U+007A 'z'"),
    ("debug_remoteGetSelf", {"key": "00"}, "invalid public key length"),
    ("addPeer", {"uri": "gopher://x:1"}, "unknown scheme"),
])
def test_errors_are_answered_with_their_reason(trio, request_name, arguments, error):
    a, _, _ = trio
    answer = admin_call(endpoint(a), request_name, **arguments)
    assert answer["status"] == "error" and error in answer["error"] and answer["response"] is None


def test_list_names_yggdrasils_commands(trio):
    a, _, _ = trio
    names = [entry["command"] for entry in ask(a, "list")["list"]]
    assert names == ["addpeer", "debug_remotegetpeers", "debug_remotegetself", "debug_remotegettree",
                     "getmulticastinterfaces", "getnodeinfo", "getpaths", "getpeers", "getself",
                     "getsessions", "gettree", "gettun", "list", "removepeer"]
    fields = {entry["command"]: entry.get("fields") for entry in ask(a, "list")["list"]}
    assert fields["getpeers"] == ["sort"], "yggdrasil 0.5.13's getPeers argument"


def test_unix_socket_is_group_only_and_removed_on_stop(tmp_path):
    cluster = Cluster(tmp_path)
    path = tmp_path / "admin.sock"
    path.write_bytes(b"")
    node = cluster.add("n", extra={"AdminListen": f"unix://{path}"})
    with pytest.raises(RuntimeError, match="exists and is not a socket"):
        node.start()
    path.unlink()
    node.start()
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o660
        assert ask(node, "getSelf")["key"] == node.peer_id
    finally:
        node.stop()
    assert not Path(path).exists()


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process `pid` (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_trickled_request_is_closed_at_its_deadline(trio):
    """A client that keeps sending a request a few bytes at a time, never
    finishing it, is cut off ADMIN_REQUEST_TIMEOUT after it began, though
    it is never idle; the node says so in one line and goes on answering."""
    _, b, _ = trio
    host, _, port = endpoint(b)[len("tcp://"):].rpartition(":")
    cpu_before = cpu_seconds(b.process.pid)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b'{"request": "getSelf", "arguments": {"note": "')
        began = time.monotonic()
        sent = 0
        closed = False
        while time.monotonic() - began < ADMIN_REQUEST_TIMEOUT + 10:
            try:
                sock.sendall(b"x" * 20)
                sent += 20
                sock.settimeout(0.02)
                if sock.recv(1) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
        held = time.monotonic() - began
    print(f"trickled {sent} bytes over {held:.1f} s; node CPU {cpu_seconds(b.process.pid) - cpu_before:.2f} s")
    assert closed, f"the connection was still open after {held:.1f} s"
    assert ADMIN_REQUEST_TIMEOUT - 1 <= held <= ADMIN_REQUEST_TIMEOUT + 5
    wait_until(lambda: "admin socket: closed a connection whose request was not whole within 10s"
               in b.log_path.read_text(), 5, what="the log line")
    assert ask(b, "getSelf")["key"] == b.peer_id


def test_peers_added_at_run_time_have_a_budget(tmp_path):
    """Beyond MAX_RUNTIME_PEERS, POST /peers answers 503 and addPeer an
    error, each saying why, until one is removed; /metrics shows the budget,
    and the dialers failing all the while write few log lines."""
    cluster = Cluster(tmp_path)
    node = cluster.add("n", listen=False, extra={"AdminListen": f"unix://{tmp_path}/n-admin.sock"})
    node.start()
    try:
        started = time.monotonic()
        # Nothing listens on port 9 of these loopback addresses: every dial is refused at once.
        uris = [f"tls://127.77.{index // 200}.{index % 200 + 1}:9" for index in range(MAX_RUNTIME_PEERS + 1)]
        json_type = {"Content-Type": "application/json"}
        for uri in uris[:-2]:
            assert node.request("POST", "/peers", json.dumps({"uri": uri}).encode(), json_type)[0] == 200
        assert ask(node, "addPeer", uri=uris[-2]) == {}
        status, _, text = node.request("POST", "/peers", json.dumps({"uri": uris[-1]}).encode(), json_type)
        budget_line = f"this node already has {MAX_RUNTIME_PEERS} peers added at run time, its budget; remove one first"
        assert (status, text.decode()) == (503, budget_line + "\n")
        refused = admin_call(endpoint(node), "addPeer", uri=uris[-1])
        assert refused["status"] == "error" and refused["error"] == budget_line
        metrics = metric_samples(node.request("GET", "/metrics")[2].decode())
        labels = (("budget", "runtime_peers"), ("scope", "node"))
        assert metrics[("axl_budget_limit", labels)] == MAX_RUNTIME_PEERS
        assert metrics[("axl_budget_in_use", labels)] == MAX_RUNTIME_PEERS
        assert metrics[("axl_budget_refused_total", labels)] == 2
        assert ask(node, "removePeer", uri=uris[0]) == {}
        assert ask(node, "addPeer", uri=uris[-1]) == {}

        wait_until(lambda: "more dial failure(s) not logged" in node.log_path.read_text(), 2 * NODE_LOG_WINDOW,
                   what="the summary of the dial failures not logged")
        windows = (time.monotonic() - started) / NODE_LOG_WINDOW + 1
        dial_lines = [line for line in node.log_path.read_text().splitlines() if "dial tls://127.77." in line]
        assert len(dial_lines) <= NODE_LOG_LINES * windows, len(dial_lines)
        assert all("(retrying in " in line for line in dial_lines)
    finally:
        node.stop()
