"""The guarded bridge on real axl-node processes: a bearer token on every
route (the front door's, the full application's, /ws, the dashboard and
/metrics), the bridge on a UNIX socket (curl --unix-socket and axl.client),
peers added and removed at run time through /peers, and the page guard
(a foreign Host or Origin refused, with or without a token)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import subprocess

import aiohttp
import pytest

from axl.client import AsyncClient, BridgeError, Client
from nodes import Cluster, drain, lone_node, wait_until

TOKEN = "s3cret-token"
ONE_LINE = "this bridge needs 'Authorization: Bearer <token>' (bridge_token or AXL_BRIDGE_TOKEN)"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """a: bridge_token in its config; b: the token from AXL_BRIDGE_TOKEN, on a UNIX socket, peered to a."""
    base = tmp_path_factory.mktemp("guard")
    cluster = Cluster(base)
    a = cluster.add("a", extra={"bridge_token": TOKEN})
    b = cluster.add("b", peers=[a], extra={"bridge_addr": f"unix://{base}/b-bridge.sock"})
    a.token = b.token = TOKEN
    b.env = {**os.environ, "AXL_BRIDGE_TOKEN": TOKEN}
    try:
        cluster.start_all()
        wait_until(lambda: a.send(b.peer_id, b"warm-up")[0] == 200, 30, what="a reaches b")
        assert b.recv(10)[0] == 200
        yield a, b
    finally:
        cluster.stop_all()


def raw_status(node, method: str, path: str, headers: dict | None = None, body: bytes | None = None):
    """A request without the token the harness adds."""
    token, node.token = node.token, ""
    try:
        return node.request(method, path, body, headers)
    finally:
        node.token = token


@pytest.mark.parametrize("method, path", [
    ("GET", "/topology"), ("GET", "/health"), ("GET", "/recv"), ("GET", "/metrics"), ("POST", "/send"),
    ("GET", "/peers"), ("GET", "/dashboard/api/snapshot"), ("GET", "/dashboard/"),
    ("POST", "/mcp/" + "0" * 64 + "/svc"), ("GET", "/a2a/" + "0" * 64), ("GET", "/nowhere"),
])
def test_every_route_needs_the_token(guarded, method, path):
    a, _ = guarded
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        status, answer_headers, body = raw_status(a, method, path, headers, b"x" if method == "POST" else None)
        assert status == 401, (path, headers, status)
        assert body.decode().startswith(ONE_LINE) and body.count(b"\n") == 1
        assert answer_headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("path", ["/topology", "/peers"])  # the front door's route, the full application's
def test_a_wrong_token_is_told_apart_from_a_missing_one(guarded, path):
    a, _ = guarded
    missing = raw_status(a, "GET", path)[2].decode()
    wrong = raw_status(a, "GET", path, {"Authorization": "Bearer stale-token"})[2].decode()
    assert missing == f"{ONE_LINE}; the request had none\n"
    assert wrong == f"{ONE_LINE}; the Authorization header sent does not match\n"


def test_the_token_opens_every_route(guarded):
    a, b = guarded
    for scheme in ("bearer", "BEARER", "Bearer "):
        assert raw_status(a, "GET", "/topology", {"Authorization": f"{scheme} {TOKEN}"})[0] == 200, scheme
        assert raw_status(a, "GET", "/peers", {"Authorization": f"{scheme} {TOKEN}"})[0] == 200, scheme
    assert raw_status(a, "GET", "/peers", {"Authorization": f"Bearer{TOKEN}"})[0] == 401
    assert a.get_json("/topology")["our_public_key"] == a.peer_id
    assert a.request("GET", "/metrics")[0] == 200 and a.request("GET", "/dashboard/api/snapshot")[0] == 200
    assert a.send(a.peer_id, b"to myself")[0] == 200 and a.recv(5)[2] == b"to myself"
    assert [p["public_key"] for p in a.get_json("/peers")["peers"]] == [b.peer_id]


def test_a_chunked_send_without_the_token_is_refused_by_the_full_application(guarded):
    a, _ = guarded
    status, _, body = raw_status(a, "POST", "/send", {"Transfer-Encoding": "chunked",
                                                      "X-Destination-Peer-Id": a.peer_id}, b"x")
    assert status == 401 and body.decode().startswith(ONE_LINE)


async def test_the_websocket_needs_the_token(guarded):
    a, _ = guarded
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await session.ws_connect(a.url + "/ws")
        assert refused.value.status == 401
    async with AsyncClient(a.url, token=TOKEN) as client, client.stream() as stream:
        assert (await stream.send(a.peer_id, b"over ws")).number == 1
    assert a.recv(5)[2] == b"over ws"


def test_the_dashboard_signs_a_browser_in_with_a_cookie(guarded):
    a, _ = guarded
    assert raw_status(a, "GET", "/dashboard/?token=wrong")[0] == 401
    with socket.create_connection(("127.0.0.1", a.api_port), timeout=10) as sock:
        sock.sendall(f"GET /dashboard/?token={TOKEN} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head = answer.split(b"\r\n\r\n")[0].decode()
    assert head.startswith("HTTP/1.1 303") and "Location: /dashboard/\r\n" in head
    cookie = next(line.split(": ", 1)[1] for line in head.split("\r\n") if line.startswith("Set-Cookie"))
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
    value = cookie.split(";")[0]
    assert raw_status(a, "GET", "/dashboard/api/peers", {"Cookie": value})[0] == 200
    assert raw_status(a, "GET", "/dashboard/", {"Cookie": value})[0] == 200
    assert raw_status(a, "GET", "/topology", {"Cookie": value})[0] == 401, "the cookie opens the dashboard only"


def test_the_unix_socket_bridge_serves_curl(guarded):
    _, b = guarded
    path = b.url[len("unix://"):]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    curl = ["curl", "-s", "--unix-socket", path, "-H", f"Authorization: Bearer {TOKEN}"]
    topology = subprocess.run([*curl, "http://localhost/topology"], capture_output=True, timeout=10, check=True)
    assert json.loads(topology.stdout)["our_public_key"] == b.peer_id
    sent = subprocess.run([*curl, "-i", "-X", "POST", "-H", f"X-Destination-Peer-Id: {b.peer_id}",
                           "--data-binary", "via curl", "http://localhost/send"], capture_output=True, timeout=30)
    assert sent.stdout.startswith(b"HTTP/1.1 200")
    received = subprocess.run([*curl, "-i", "http://localhost/recv?wait=5"], capture_output=True, timeout=30)
    assert received.stdout.endswith(b"\r\n\r\nvia curl")
    refused = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--unix-socket", path,
                              "http://localhost/topology"], capture_output=True, timeout=10)
    assert refused.stdout == b"401"


def test_the_clients_reach_a_unix_socket_bridge(guarded):
    a, b = guarded
    with Client(b.url, token=TOKEN) as client:
        assert client.peer_id() == b.peer_id
        client.send(a.peer_id, "from b's client")
        with client.stream() as stream:
            assert stream.send(a.peer_id, b"streamed").number == 1
    assert a.recv(5)[2] == b"from b's client" and a.recv(5)[2] == b"streamed"

    async def async_side() -> str:
        async with AsyncClient(b.url, token=TOKEN) as client:
            return (await client.topology())["our_public_key"]
    assert asyncio.run(async_side()) == b.peer_id
    with Client(b.url, token="wrong") as client, pytest.raises(BridgeError) as refused:
        client.topology()
    assert refused.value.status == 401 and ONE_LINE in refused.value.text


def test_peers_added_and_removed_over_the_bridge(tmp_path):
    cluster = Cluster(tmp_path)
    a = cluster.add("a")
    c = cluster.add("c")
    cluster.start_all()
    try:
        config_before = a.config_path.read_bytes()
        with Client(a.url) as client:
            assert client.peers() == []
            assert client.add_peer(c.listen_uri + "?priority=2") == c.listen_uri + "?priority=2"
            wait_until(lambda: [p["public_key"] for p in client.peers() if p["up"]] == [c.peer_id], 10,
                       interval=0.05, what="the peering up")
            for uri, status in ((c.listen_uri, 409), ("gopher://x:1", 400)):
                with pytest.raises(BridgeError) as refused:
                    client.add_peer(uri)
                assert refused.value.status == status
            assert client.remove_peer(c.listen_uri) == c.listen_uri
            assert client.peers() == []
            wait_until(lambda: c.get_json("/peers")["peers"] == [], 10, what="c sees the peering gone")
            with pytest.raises(BridgeError) as missing:
                client.remove_peer(c.listen_uri)
            assert missing.value.status == 404 and "not configured" in missing.value.text
        for body in (b"not json", b'{"url": "tls://x:1"}', b'["tls://x:1"]'):
            status, _, text = a.request("POST", "/peers", body, {"Content-Type": "application/json"})
            assert status == 400 and b'{"uri"' in text
        assert a.config_path.read_bytes() == config_before
    finally:
        cluster.stop_all()


# -- the page guard: what a web page could make the operator's browser send ---------------

EVIL = "http://evil.example"
FOREIGN_HOST = "refused: Host 'evil.example' is not a loopback name"
FOREIGN_ORIGIN = "is not this bridge's own; web pages of other sites may not use the bridge"


@pytest.fixture(scope="module")
def open_bridge(tmp_path_factory):
    """A node with no bridge token, as by default."""
    with lone_node(tmp_path_factory.mktemp("pages")) as node:
        yield node


def raw_exchange(node, request: bytes) -> bytes:
    """One request as written, on its own connection, and all of the answer."""
    with socket.create_connection(("127.0.0.1", node.api_port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_a_web_pages_simple_request_cannot_add_a_peer(open_bridge):
    node = open_bridge
    body = b'{"uri": "tls://127.0.0.1:1"}'
    page = {"Origin": EVIL, "Host": "evil.example", "Content-Type": "text/plain"}
    for headers, status, line in (
            (page, 403, FOREIGN_HOST),
            ({"Host": "evil.example", "Content-Type": "application/json"}, 403, FOREIGN_HOST),
            ({"Origin": EVIL, "Content-Type": "application/json"}, 403, f"refused: Origin '{EVIL}' {FOREIGN_ORIGIN}"),
            ({"Origin": "null", "Content-Type": "application/json"}, 403, FOREIGN_ORIGIN),
            ({"Content-Type": "text/plain"}, 415, "/peers takes a JSON body: send 'Content-Type: application/json' "
                                                 "(got 'text/plain')"),
            ({"Content-Type": "application/x-www-form-urlencoded"}, 415, "/peers takes a JSON body")):
        for method in ("POST", "DELETE"):
            got, _, text = node.request(method, "/peers", body, headers)
            assert got == status and line in text.decode() and text.count(b"\n") == 1, (headers, got, text)
    assert node.get_json("/peers")["peers"] == []
    own = f"127.0.0.1:{node.api_port}"
    json_type = {"Content-Type": "application/json; charset=utf-8"}
    assert node.request("POST", "/peers", body, {"Origin": f"http://{own}", **json_type})[0] == 200
    assert node.request("DELETE", "/peers", body, {"Host": f"localhost:{node.api_port}", **json_type})[0] == 200


@pytest.mark.parametrize("path", ["/topology", "/health", "/metrics", "/recv", "/dashboard/", "/peers",
                                  "/a2a/" + "0" * 64])
def test_a_foreign_host_or_origin_is_refused_on_every_route(open_bridge, path):
    node = open_bridge
    for headers, line in (({"Host": "evil.example"}, FOREIGN_HOST),
                          ({"Host": f"evil.example:{node.api_port}"}, "refused: Host 'evil.example:"),
                          ({"Origin": EVIL}, FOREIGN_ORIGIN),
                          ({"Origin": f"http://localhost:{node.api_port}"}, FOREIGN_ORIGIN)):
        status, _, text = node.request("GET", path, None, headers)
        assert status == 403 and line in text.decode() and text.count(b"\n") == 1, (path, headers, status)


def test_a_send_takes_any_body_and_loopback_names(open_bridge):
    node = open_bridge
    port = node.api_port
    for host in (f"127.0.0.1:{port}", "127.0.0.1", f"127.1.2.3:{port}", f"LOCALHOST:{port}", "localhost",
                 f"[::1]:{port}", "[::1]"):
        for content_type in ("text/plain", "application/x-www-form-urlencoded", "image/png"):
            status, _, text = node.request("POST", "/send", b"any body", {
                "X-Destination-Peer-Id": node.peer_id, "Host": host, "Content-Type": content_type})
            assert status == 200, (host, content_type, text)
    assert len(drain(node)) == 21
    status, _, text = node.request("POST", "/send", b"x", {"X-Destination-Peer-Id": node.peer_id, "Origin": EVIL})
    assert status == 403 and FOREIGN_ORIGIN in text.decode()
    own = {"Origin": f"http://127.0.0.1:{port}", "X-Destination-Peer-Id": node.peer_id}
    assert node.request("POST", "/send", b"from the dashboard's origin", own)[0] == 200
    assert drain(node) == [b"from the dashboard's origin"]


def test_a_request_without_host_is_served(open_bridge):
    """HTTP/1.0 needs no Host; no browser sends a request without one."""
    for request in (b"GET /health HTTP/1.0\r\n\r\n", b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n",
                    b"GET /peers HTTP/1.0\r\n\r\n"):
        assert raw_exchange(open_bridge, request).startswith((b"HTTP/1.1 200", b"HTTP/1.0 200")), request
    refused = raw_exchange(open_bridge, b"GET /health HTTP/1.0\r\nOrigin: http://evil.example\r\n\r\n")
    assert refused.split(b"\r\n")[0].endswith(b"403 Forbidden")


async def test_the_websocket_refuses_a_foreign_origin(open_bridge):
    node = open_bridge
    async with aiohttp.ClientSession() as session:
        for origin in (EVIL, "null"):
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await session.ws_connect(node.url + "/ws", origin=origin)
            assert refused.value.status == 403
        async with session.ws_connect(node.url + "/ws", origin=f"http://127.0.0.1:{node.api_port}") as ws:
            assert not ws.closed
        async with session.ws_connect(node.url + "/ws") as ws:
            assert not ws.closed


def test_the_page_guard_names_the_bridges_own_origin():
    from axl.bridge.guard import PageGuard
    loopback, wide = PageGuard(loopback=True), PageGuard(loopback=False)
    assert loopback.refusal("GET", "/topology", "192.0.2.7:9002", "", None).status == 403
    assert wide.refusal("GET", "/topology", "192.0.2.7:9002", "", None) is None
    assert wide.refusal("POST", "/peers", "192.0.2.7:9002", "http://192.0.2.7:9002", "application/json") is None
    assert wide.refusal("POST", "/peers", "192.0.2.7:9002", EVIL, "application/json").status == 403
    assert loopback.refusal("GET", "/topology", "[::1", "", None).status == 403
    assert loopback.refusal("GET", "/topology", "::1", "", None) is None
    assert loopback.refusal("GET", "/peers", "", "", "text/plain") is None, "a GET carries no body"
    assert loopback.refusal("POST", "/mcp/ab/svc", "", "", "text/plain").status == 415
    assert loopback.refusal("POST", "/mcp/ab/svc", "", "", None) is None
    assert loopback.refusal("POST", "/send", "", "", "text/plain") is None
