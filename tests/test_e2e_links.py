"""Two real axl-node processes peer over every link type and exchange /send.

Each case gives the listener's Listen URI and the dialer's Peers URI; socks
cases go through a SOCKS5 proxy and wss through a TLS terminator, both run
by the test on loopback (tests/linkproxies.py)."""

from __future__ import annotations

import os
import socket
import tempfile

import pytest

from axl.identity import NodeIdentity
from axl.link.tls import server_context
from linkproxies import Socks5Proxy, TlsTerminator
from nodes import Cluster, free_port, up_peers, wait_until


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def proxies():
    started = []
    yield started
    for proxy in started:
        proxy.stop()


def _uris(scheme: str, proxies: list) -> tuple[str, str]:
    """(Listen URI of the first node, Peers URI of the second)."""
    port = free_port()
    if scheme == "quic":
        port = _free_udp_port()
        return f"quic://127.0.0.1:{port}", f"quic://127.0.0.1:{port}"
    if scheme == "unix":
        path = os.path.join(tempfile.mkdtemp(prefix="axl-unix-"), "link.sock")
        return f"unix://{path}", f"unix://{path}"
    if scheme == "ws":
        return f"ws://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/some/path"
    if scheme == "wss":
        context = server_context(NodeIdentity.generate())
        front = TlsTerminator(ssl_context=context, backend_port=port).start()
        proxies.append(front)
        return f"ws://127.0.0.1:{port}", f"wss://localhost:{front.port}/ygg"
    if scheme == "socks":
        proxy = Socks5Proxy(credentials=(b"user", b"pass")).start()
        proxies.append(proxy)
        return f"tcp://127.0.0.1:{port}", f"socks://user:pass@127.0.0.1:{proxy.port}/127.0.0.1:{port}"
    if scheme == "sockstls":
        proxy = Socks5Proxy().start()
        proxies.append(proxy)
        return (f"tls://127.0.0.1:{port}",
                f"sockstls://localhost:{proxy.port}/localhost:{port}?sni=node.example")
    raise AssertionError(scheme)


@pytest.mark.parametrize("scheme", ["quic", "ws", "wss", "unix", "socks", "sockstls"])
def test_two_nodes_peer_and_send(tmp_path, proxies, scheme):
    listen_uri, peer_uri = _uris(scheme, proxies)
    cluster = Cluster(tmp_path)
    a = cluster.add("a", listen=False, extra={"Listen": [listen_uri]})
    b = cluster.add("b", listen=False, extra={"Peers": [peer_uri]})
    try:
        cluster.start_all()
        wait_until(lambda: up_peers(b) == {a.peer_id} and up_peers(a) == {b.peer_id}, 20,
                   what=f"{scheme} peering up")
        (outbound,) = b.get_json("/topology")["peers"]
        assert outbound["scheme"] == scheme and outbound["uri"].startswith(scheme + "://")
        (inbound,) = a.get_json("/topology")["peers"]
        assert inbound["inbound"] and inbound["scheme"] == listen_uri.split(":")[0]

        payload = os.urandom(200_000)
        status, _, _ = b.send(a.peer_id, payload)
        assert status == 200
        status, headers, body = a.recv(wait=15)
        assert status == 200 and body == payload
        assert headers["X-From-Peer-Id"][:8] == b.peer_id[:8]
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.stop_all()
    if scheme == "socks":
        assert proxies[0].greetings[0] == bytes.fromhex("05020002")
    if scheme == "sockstls":
        assert proxies[0].greetings[0] == bytes.fromhex("050100")
        assert proxies[0].requests[0][3] == 3
    if scheme == "unix":
        assert not os.path.exists(listen_uri[len("unix://"):]), "listener left its socket file"
