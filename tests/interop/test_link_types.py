"""Every link type against a yggdrasil-go 0.5.12 router, in both directions.

For each scheme the Go router (root) listens on it and one of our nodes
dials it there; and one of our nodes listens on it and the Go router dials
it. A message from the first of ours to the second then crosses both links,
relayed by the router. socks goes through a SOCKS5 proxy the test runs
(tests/linkproxies.py). The router's guard refuses non-loopback Peers in the
host's namespace, and a unix:// URI has no host: the Go router dialing our
unix listener runs inside a network namespace of the test's own
(test_netns_go.py); here our node dials the router's unix listener only."""

from __future__ import annotations

import os
import socket
import tempfile

import pytest

from axl.harness import free_port
from linkproxies import Socks5Proxy
from nodes import wait_until


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def unix_path() -> str:
    return os.path.join(tempfile.mkdtemp(prefix="axl-go-unix-"), "link.sock")


def uris(scheme: str, proxy: Socks5Proxy | None) -> tuple[str, str, str, str]:
    """(router's Listen, our dialer's Peers, our listener's Listen, router's Peers)."""
    router_port, our_port = (free_udp_port(), free_udp_port()) if scheme == "quic" else (free_port(), free_port())
    if scheme == "socks":
        return (f"tcp://127.0.0.1:{router_port}", f"socks://127.0.0.1:{proxy.port}/127.0.0.1:{router_port}",
                f"tcp://127.0.0.1:{our_port}", f"socks://127.0.0.1:{proxy.port}/127.0.0.1:{our_port}")
    if scheme == "unix":
        path = unix_path()
        return f"unix://{path}", f"unix://{path}", f"tls://127.0.0.1:{our_port}", f"tls://127.0.0.1:{our_port}"
    router_listen = f"{scheme}://127.0.0.1:{router_port}"
    our_listen = f"{scheme}://127.0.0.1:{our_port}"
    path = "/ygg" if scheme == "ws" else ""
    return router_listen, router_listen + path, our_listen, our_listen + path


@pytest.mark.parametrize("scheme", ["tls", "tcp", "quic", "ws", "unix", "socks"])
def test_links_of_every_type_with_a_go_router_both_ways(mixed, scheme):
    proxy = Socks5Proxy().start() if scheme == "socks" else None
    try:
        router_listen, dial_router, our_listen, router_dials = uris(scheme, proxy)
        listener = mixed.ours("listener", listen=[our_listen])
        listener.start()
        router = mixed.router("go-root", root=True, listen=[router_listen], peers=[router_dials]).start()
        dialer = mixed.ours("dialer", listen=[], peers=[dial_router])
        dialer.start()
        wait_until(lambda: router.up_peer_keys() == {dialer.peer_id, listener.peer_id}, 30,
                   what=f"both {scheme} links up at the router")
        remotes = {peer["key"]: peer["remote"] for peer in router.ctl("getPeers")["peers"]}
        inbound_scheme = {"socks": "tcp"}.get(scheme, scheme)
        assert remotes[dialer.peer_id].startswith(f"{inbound_scheme}://"), remotes
        assert remotes[listener.peer_id].startswith(router_dials.split(":")[0] + "://"), remotes
        for sender, receiver in ((dialer, listener), (listener, dialer)):
            payload = os.urandom(300_000)
            status, _, text = sender.send(receiver.peer_id, payload, timeout=40)
            assert status == 200, f"{scheme}: {status} {text[:200]!r}"
            status, _, body = receiver.recv(wait=30)
            assert status == 200 and body == payload
    finally:
        if proxy is not None:
            proxy.stop()
    if scheme == "socks":
        assert len(proxy.requests) >= 2, "both links went through the proxy"

