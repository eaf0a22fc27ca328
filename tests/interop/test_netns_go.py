"""What a yggdrasil-go router may do only inside network namespaces the test
creates: LAN discovery by multicast beacons, and dialing a unix:// listener
(in the host's namespace its guard accepts only loopback host URIs).

LAN: three hosts hang off one bridge in a fourth namespace; a Go router and
one of our nodes share a password and must find each other by beacons, in
both directions; another of ours with another password hears both and must
link with neither. Unix: a Go router dials our node's unix:// listener and
relays between it and a second node of ours. Needs root and iproute2
(skipped otherwise); no beacon leaves these namespaces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from axl.identity import NodeIdentity
from goprocs import GoRouter, go_bin_dir
from test_netns import API_PORT, HostNode, ip, namespaces_unavailable, ns, stop_nodes, wait_for



def guard_blind() -> str | None:
    """Why the go-peers guard would refuse here what it allows in a test's own
    namespace: it knows such a namespace by its inode, the process's
    /proc/self/ns/net being one of /run/netns/*, and takes any other for the
    host's."""
    probe = ns("guardprobe")
    ip("netns", "add", probe)
    check = ("import glob, os, sys; own = os.stat('/proc/self/ns/net').st_ino; "
             "sys.exit(0 if any(os.stat(p).st_ino == own for p in glob.glob('/run/netns/*')) else 1)")
    try:
        done = subprocess.run(["ip", "netns", "exec", probe, sys.executable, "-c", check],
                              capture_output=True, text=True)
    finally:
        ip("netns", "del", probe, check=False)
    if done.returncode != 0:
        return ("the go-peers guard cannot tell a test's namespace from the host's here "
                "(a namespace's /proc/self/ns/net is not one of /run/netns/*), so it refuses "
                "Go multicast and unix peers")
    return None


SKIP_REASON = namespaces_unavailable() or guard_blind()
pytestmark = pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON or "")

SWITCH = "gsw"
INTERFACE = "mc0"


def start_ours(host: str, folder: Path, config: dict, name: str = "") -> HostNode:
    """One of our nodes in `host`'s namespace; `name` (default: the host) names its files."""
    name = name or host
    key = NodeIdentity.generate()
    key_path = folder / f"{name}.pem"
    key_path.write_bytes(key.pem())
    config = {"PrivateKeyPath": str(key_path), "inbox_path": str(folder / f"{name}.inbox.sqlite3"),
              "Listen": [], "Peers": [], "api_port": API_PORT, **config}
    node = HostNode(host, key, folder / f"{name}.json", folder / f"{name}.log", api_port=config["api_port"])
    node.config.write_text(json.dumps(config))
    node.process = subprocess.Popen(
        ["ip", "netns", "exec", ns(host), sys.executable, "-m", "axl.cli", "--config", str(node.config)],
        stdout=open(node.log, "ab"), stderr=subprocess.STDOUT)
    return node


def multicast_rule(password: str) -> list[dict]:
    return [{"Regex": f"^{INTERFACE}$", "Beacon": True, "Listen": True, "Port": 0, "Priority": 0,
             "Password": password}]


def router_in(host: str, folder: Path, **fields) -> GoRouter:
    router = GoRouter(f"go-{host}", folder, NodeIdentity.generate(), netns=ns(host), bin_dir=go_bin_dir(),
                      extra=fields)
    return router.start()


@pytest.fixture
def namespaces():
    made: list[str] = []

    def make(*hosts: str) -> None:
        for host in hosts:
            ip("netns", "add", ns(host))
            made.append(ns(host))
            ip("-n", ns(host), "link", "set", "lo", "up")

    yield make
    for name in made:
        ip("netns", "del", name, check=False)


def test_a_go_router_and_our_node_find_each_other_by_beacons(namespaces, tmp_path):
    hosts = {"gm1": "pw", "gm2": "pw", "gm3": "other"}
    namespaces(*hosts, SWITCH)
    ip("-n", ns(SWITCH), "link", "add", "br0", "type", "bridge")
    ip("-n", ns(SWITCH), "link", "set", "br0", "up")
    for host in hosts:
        ip("link", "add", INTERFACE, "netns", ns(host), "type", "veth", "peer", "name", f"p{host}",
           "netns", ns(SWITCH))
        ip("-n", ns(SWITCH), "link", "set", f"p{host}", "master", "br0", "up")
        subprocess.run(["ip", "netns", "exec", ns(host), "sysctl", "-qw",
                        f"net.ipv6.conf.{INTERFACE}.accept_dad=0"], check=True)
        ip("-n", ns(host), "link", "set", INTERFACE, "up")
    ours = [start_ours(host, tmp_path, {"MulticastInterfaces": multicast_rule(hosts[host])})
            for host in ("gm2", "gm3")]
    router = None
    try:
        router = router_in("gm1", tmp_path, MulticastInterfaces=multicast_rule("pw"))
        mine, stranger = ours
        wait_for(lambda: mine.key.peer_id in router.up_peer_keys() and router.peer_id in mine.up_peers(), 40,
                 "the Go router and our node linked by beacons")
        links = [p for p in mine.topology()["peers"] if p["up"]]
        assert all(p["scheme"] == "tls" and f"%{INTERFACE}" in p["uri"] for p in links), links
        assert stranger.up_peers() == set()
        assert stranger.key.peer_id not in router.up_peer_keys() | mine.up_peers()
    except BaseException:
        for node in ours:
            print(f"--- {node.host}\n{node.log.read_text()[-3000:]}")
        if router is not None:
            print(router.log())
        raise
    finally:
        stop_nodes(ours)
        if router is not None:
            router.stop()


def test_a_go_router_dials_our_unix_listener_and_relays_over_it(namespaces, tmp_path):
    namespaces("gu1")
    socket_path = tmp_path / "ours.sock"
    listener = start_ours("gu1", tmp_path, {"Listen": [f"unix://{socket_path}"]})
    router = dialer = None
    try:
        wait_for(lambda: socket_path.exists(), 20, "our unix listener")
        router = router_in("gu1", tmp_path, Listen=["tls://127.0.0.1:9101"], Peers=[f"unix://{socket_path}"])
        dialer = start_ours("gu1", tmp_path, {"Peers": ["tls://127.0.0.1:9101"], "api_port": API_PORT + 10},
                            name="dialer")
        wait_for(lambda: router.up_peer_keys() == {listener.key.peer_id, dialer.key.peer_id}, 30,
                 "the router linked to both of ours")
        remotes = {peer["key"]: peer["remote"] for peer in router.ctl("getPeers")["peers"]}
        assert remotes[listener.key.peer_id] == f"unix://{socket_path}", remotes
        payload = os.urandom(100_000)
        status, _, text = dialer.http("POST", "/send", payload, {"X-Destination-Peer-Id": listener.key.peer_id})
        assert status == 200, text
        status, _, body = listener.http("GET", "/recv?wait=10")
        assert status == 200 and body == payload
    except BaseException:
        for node in (listener, dialer):
            if node is not None:
                print(f"--- {node.host}\n{node.log.read_text()[-3000:]}")
        if router is not None:
            print(router.log())
        raise
    finally:
        stop_nodes([node for node in (listener, dialer) if node is not None])
        if router is not None:
            router.stop()
