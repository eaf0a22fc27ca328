"""A body over max_message_size gets a 413 that ordinary clients can read.

Clients that write their whole body before reading (urllib, http.client,
requests) used to see a broken pipe or a reset, because the bridge closed
the connection while they were still writing.
"""

from __future__ import annotations

import asyncio
import http.client
import importlib.util
import shutil
import socket
import subprocess
import urllib.error
import urllib.request

import aiohttp
import pytest

from nodes import Cluster

SMALL_LIMIT = 64 << 10
DEFAULT_LIMIT = 16 << 20
# Well over what socket buffers hold, so a client is still writing when a
# bridge that does not read the body answers and closes.
OVER_SMALL = 8 << 20


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("oversized"))
    small = cluster.add("small", extra={"max_message_size": SMALL_LIMIT})
    default = cluster.add("default")
    cluster.start_all()
    try:
        yield small, default
    finally:
        cluster.stop_all()


def headers_for(node) -> dict[str, str]:
    return {"X-Destination-Peer-Id": node.peer_id}


def urllib_status(node, body: bytes) -> int:
    request = urllib.request.Request(f"{node.url}/send", data=body, headers=headers_for(node))
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


def test_urllib_reads_413_at_the_default_limit(nodes) -> None:
    _, default = nodes
    assert urllib_status(default, b"x" * (DEFAULT_LIMIT + 1)) == 413
    assert urllib_status(default, b"fits") == 200


def test_urllib_reads_413_over_a_small_limit(nodes) -> None:
    small, _ = nodes
    assert urllib_status(small, b"x" * (SMALL_LIMIT + 1)) == 413
    assert urllib_status(small, b"x" * OVER_SMALL) == 413


def test_a_413_says_what_to_do(nodes) -> None:
    """Split, or raise the limit on both nodes: the body says so, on every way in
    (a body read whole, an early refusal of its declared length, Expect: 100-continue)."""
    small, _ = nodes
    advice = "; split the message, or raise max_message_size on both nodes\n"
    status, _, body = small.send(small.peer_id, b"x" * (SMALL_LIMIT + 1))
    assert (status, body.decode()) == (413, f"payload of {SMALL_LIMIT + 1} bytes exceeds max_message_size "
                                            f"{SMALL_LIMIT}{advice}")
    with socket.create_connection(("127.0.0.1", small.api_port), timeout=10) as sock:
        sock.sendall(f"POST /send HTTP/1.1\r\nHost: x\r\nX-Destination-Peer-Id: {small.peer_id}\r\n"
                     f"Content-Length: {SMALL_LIMIT + 1}\r\nExpect: 100-continue\r\n\r\n".encode())
        early = http.client.HTTPResponse(sock)
        early.begin()
        assert (early.status, early.read().decode()) == (
            413, f"payload of {SMALL_LIMIT + 1} bytes exceeds max_message_size {SMALL_LIMIT}{advice}")


def test_http_client_reads_413(nodes) -> None:
    small, _ = nodes
    connection = http.client.HTTPConnection("127.0.0.1", small.api_port, timeout=30)
    try:
        connection.request("POST", "/send", body=b"x" * OVER_SMALL, headers=headers_for(small))
        assert connection.getresponse().status == 413
    finally:
        connection.close()


def test_chunked_body_over_the_limit_gets_413(nodes) -> None:
    small, _ = nodes
    connection = http.client.HTTPConnection("127.0.0.1", small.api_port, timeout=30)
    chunks = (b"y" * 65536 for _ in range(OVER_SMALL // 65536))
    try:
        connection.request("POST", "/send", body=chunks, headers=headers_for(small), encode_chunked=True)
        assert connection.getresponse().status == 413
    finally:
        connection.close()


def chunked_status(node, body: bytes) -> bytes:
    """Status line for a chunked /send whose whole body leaves in one write with its headers."""
    with socket.create_connection(("127.0.0.1", node.api_port), timeout=30) as sock:
        sock.sendall(f"POST /send HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Destination-Peer-Id: {node.peer_id}\r\n"
                     f"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n{len(body):x}\r\n".encode()
                     + body + b"\r\n0\r\n\r\n")
        return sock.recv(4096).split(b"\r\n", 1)[0]


def test_a_chunked_body_that_arrived_whole_is_held_to_the_limit(nodes) -> None:
    small, _ = nodes
    assert chunked_status(small, b"c" * (SMALL_LIMIT + 1)).startswith(b"HTTP/1.1 413 ")
    assert chunked_status(small, b"c" * SMALL_LIMIT).startswith(b"HTTP/1.1 200 ")
    assert small.recv(5)[2] == b"c" * SMALL_LIMIT


def test_expect_continue_gets_413_before_any_body(nodes) -> None:
    small, _ = nodes
    with socket.create_connection(("127.0.0.1", small.api_port), timeout=10) as sock:
        sock.sendall(f"POST /send HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Destination-Peer-Id: {small.peer_id}\r\n"
                     f"Content-Length: {SMALL_LIMIT + 1}\r\nExpect: 100-continue\r\n\r\n".encode())
        head = sock.recv(4096)
    assert head.startswith(b"HTTP/1.1 413")


def test_expect_continue_within_the_limit_is_told_to_go_on(nodes) -> None:
    small, _ = nodes
    body = b"z" * 100
    with socket.create_connection(("127.0.0.1", small.api_port), timeout=30) as sock:
        sock.sendall(f"POST /send HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Destination-Peer-Id: {small.peer_id}\r\n"
                     f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n".encode())
        assert sock.recv(4096).startswith(b"HTTP/1.1 100")
        sock.sendall(body)
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    assert small.recv(5)[2] == body


@pytest.mark.skipif(importlib.util.find_spec("requests") is None, reason="requests is not installed")
def test_requests_reads_413(nodes) -> None:
    import requests

    small, _ = nodes
    response = requests.post(f"{small.url}/send", data=b"x" * OVER_SMALL,
                             headers=headers_for(small), timeout=30)
    assert response.status_code == 413


def test_aiohttp_reads_413(nodes) -> None:
    small, _ = nodes

    async def post() -> int:
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{small.url}/send", data=b"x" * OVER_SMALL,
                                    headers=headers_for(small)) as response:
                return response.status

    assert asyncio.run(asyncio.wait_for(post(), 30)) == 413


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
@pytest.mark.parametrize("expect", ["default", "off", "on"])
def test_curl_reads_413(nodes, tmp_path, expect: str) -> None:
    small, _ = nodes
    body = tmp_path / "body"
    body.write_bytes(b"x" * OVER_SMALL)
    extra = {"default": [], "off": ["-H", "Expect:"], "on": ["-H", "Expect: 100-continue"]}[expect]
    result = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "30",
         "-H", f"X-Destination-Peer-Id: {small.peer_id}", *extra,
         "--data-binary", f"@{body}", f"{small.url}/send"],
        capture_output=True, timeout=40)
    assert result.stdout == b"413"


def test_mcp_route_reads_413_too(nodes) -> None:
    small, _ = nodes
    request = urllib.request.Request(f"{small.url}/mcp/{small.peer_id}/svc",
                                     data=b"[" + b" " * OVER_SMALL + b"]",
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 413
