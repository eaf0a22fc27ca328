"""LAN discovery between nodes in network namespaces the test creates.

Three "hosts" hang off one bridge in a fourth namespace; every node runs
MulticastInterfaces on its bridge port only. The two with the same password
find each other by beacons and exchange /send; the third, with another
password, hears them but must not link. Needs root and iproute2 (skipped
otherwise); no beacon ever leaves these namespaces.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from axl.identity import NodeIdentity
from test_netns import API_PORT, HostNode, ip, namespaces_unavailable, ns, stop_nodes, wait_for

pytestmark = pytest.mark.skipif(bool(namespaces_unavailable()), reason=namespaces_unavailable() or "")

HOSTS = {"m1": "pw", "m2": "pw", "m3": "other"}
SWITCH = "msw"


def _start(host: str, password: str, tmp_path: Path) -> HostNode:
    key = NodeIdentity.generate()
    key_path = tmp_path / f"{host}.pem"
    key_path.write_bytes(key.pem())
    config = {
        "PrivateKeyPath": str(key_path), "inbox_path": str(tmp_path / f"{host}.inbox.sqlite3"),
        "Listen": [], "Peers": [], "api_port": API_PORT,
        "MulticastInterfaces": [{"Regex": "^mc", "Beacon": True, "Listen": True,
                                 "Port": 0, "Priority": 0, "Password": password}],
    }
    node = HostNode(host, key, tmp_path / f"{host}.json", tmp_path / f"{host}.log")
    node.config.write_text(json.dumps(config))
    node.process = subprocess.Popen(
        ["ip", "netns", "exec", ns(host), sys.executable, "-m", "axl.cli", "--config", str(node.config)],
        stdout=open(node.log, "ab"), stderr=subprocess.STDOUT)
    return node


@pytest.fixture
def lan(tmp_path: Path):
    names = [*HOSTS, SWITCH]
    for name in names:
        ip("netns", "add", ns(name))
        ip("-n", ns(name), "link", "set", "lo", "up")
    nodes: dict[str, HostNode] = {}
    try:
        ip("-n", ns(SWITCH), "link", "add", "br0", "type", "bridge")
        ip("-n", ns(SWITCH), "link", "set", "br0", "up")
        for host in HOSTS:
            ip("link", "add", "mc0", "netns", ns(host), "type", "veth",
               "peer", "name", f"p{host}", "netns", ns(SWITCH))
            ip("-n", ns(SWITCH), "link", "set", f"p{host}", "master", "br0", "up")
            subprocess.run(["ip", "netns", "exec", ns(host), "sysctl", "-qw",
                            "net.ipv6.conf.mc0.accept_dad=0"], check=True)
            ip("-n", ns(host), "link", "set", "mc0", "up")
        for host, password in HOSTS.items():
            nodes[host] = _start(host, password, tmp_path)
        yield nodes
    finally:
        stop_nodes(nodes.values())
        for name in names:
            ip("netns", "del", ns(name), check=False)


def test_nodes_find_each_other_by_beacons(lan, tmp_path: Path) -> None:
    m1, m2, m3 = lan["m1"], lan["m2"], lan["m3"]
    ids = {host: node.key.peer_id for host, node in lan.items()}
    try:
        wait_for(lambda: ids["m2"] in m1.up_peers() and ids["m1"] in m2.up_peers(), 30,
                 "m1 and m2 linked by multicast discovery")
        peers = m1.topology()["peers"]
        assert all(p["scheme"] == "tls" and "%mc0" in p["uri"] for p in peers if p["up"]), [p["uri"] for p in peers]
        wait_for(lambda: m1.http("POST", "/send", b"found you",
                                 {"X-Destination-Peer-Id": ids["m2"]})[0] == 200,
                 30, "a message from m1 to m2")
        status, headers, body = m2.http("GET", "/recv?wait=5")
        assert (status, body) == (200, b"found you")
        assert headers["X-From-Peer-Id"] == ids["m1"]
        # m3 hears both beacons all along but its password differs.
        assert m3.up_peers() == set()
        assert ids["m3"] not in m1.up_peers() | m2.up_peers()
    except BaseException:
        for node in lan.values():
            print(f"--- {node.host}\n{node.log.read_text()[-3000:]}")
        raise
