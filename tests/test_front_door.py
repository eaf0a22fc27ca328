"""The bridge's front door: plain core requests served by it, the rest by the full application.

The head parser is tested alone; the rest drives a real node over raw
sockets, so that the order of answers on one connection, the moment a
connection is handed over, and what each side counts can be seen.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import threading

import pytest

from axl.bridge.front import HandedTransport
from axl.bridge.gathering import GATHER_LIMIT
from axl.bridge.http1 import Answer, HttpDate, parse_head, render_head
from nodes import drain, lone_node, metric_samples

KEY = "ab" * 32


# -- request heads ------------------------------------------------------------


def test_a_plain_send_head_is_read() -> None:
    head = parse_head(b"POST /send HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Destination-Peer-Id: " + KEY.encode()
                      + b"\r\nContent-Length:  12 ")
    assert head is not None
    assert (head.method, head.path, head.query) == ("POST", "/send", "")
    assert head.content_length == 12 and head.keep_alive
    assert head.destination == KEY


def test_connection_close_and_the_query_are_kept() -> None:
    head = parse_head(b"GET /recv?wait=2 HTTP/1.1\r\nConnection: Close")
    assert head is not None and head.query == "wait=2" and not head.keep_alive


@pytest.mark.parametrize("head", [
    b"GET /health HTTP/1.0",                                        # HTTP/1.0
    b"POST /send HTTP/1.1\r\nTransfer-Encoding: chunked",            # chunked body
    b"POST /send HTTP/1.1\r\nExpect: 100-continue",                  # 100-continue
    b"GET /ws HTTP/1.1\r\nUpgrade: websocket",                       # a WebSocket upgrade without its key
    b"GET /ws HTTP/1.1\r\nUpgrade: h2c\r\nConnection: Upgrade",        # another upgrade
    b"POST /send HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1",  # two lengths
    b"POST /send HTTP/1.1\r\nContent-Length: -1",                    # not a length
    b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n  folded",                  # obsolete line folding
    b"GET /health HTTP/1.1\r\nBad Name: x",                          # not a header name
    b"GET http://x/health HTTP/1.1",                                 # absolute form
    b"get /health HTTP/1.1",                                         # not a method
])
def test_other_heads_are_left_to_the_full_application(head: bytes) -> None:
    assert parse_head(head) is None


WS_KEY = b"dGhlIHNhbXBsZSBub25jZQ=="
WS_HEAD = (b"GET /ws?recv=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: WebSocket\r\nConnection: keep-alive, Upgrade"
           b"\r\nSec-WebSocket-Key: " + WS_KEY + b"\r\nSec-WebSocket-Version: 13")


def test_a_websocket_upgrade_head_is_read_with_its_key() -> None:
    head = parse_head(WS_HEAD)
    assert head is not None and (head.path, head.query) == ("/ws", "recv=1")
    assert head.websocket_key == WS_KEY.decode()
    plain = parse_head(b"GET /health HTTP/1.1")
    assert plain is not None and plain.websocket_key == ""


@pytest.mark.parametrize("change", [
    (b"Sec-WebSocket-Version: 13", b"Sec-WebSocket-Version: 8"),
    (b"Connection: keep-alive, Upgrade", b"Connection: keep-alive"),
    (b"Upgrade: WebSocket", b"Upgrade: websocket2"),
    (WS_KEY, b"c2hvcnQ="),
    (WS_KEY, WS_KEY + b"\r\nSec-WebSocket-Key: " + WS_KEY),
])
def test_a_websocket_upgrade_rfc_6455_would_refuse_goes_to_the_full_application(change) -> None:
    assert parse_head(WS_HEAD.replace(*change)) is None


def test_an_answer_head_carries_its_length_and_the_close() -> None:
    date_lines = HttpDate().now()
    head = render_head(Answer(404, b"nope\n", "text/plain"), keep_alive=False, date_lines=date_lines)
    assert head.startswith(b"HTTP/1.1 404 Not Found\r\n")
    assert b"\r\nContent-Length: 5\r\n" in head and b"\r\nConnection: close\r\n" in head
    assert b"\r\nDate: " in head and head.endswith(b" GMT\r\nServer: axl-node\r\n\r\n")
    no_content = render_head(Answer(204), keep_alive=True, date_lines=date_lines)
    assert no_content.startswith(b"HTTP/1.1 204 No Content\r\n") and b"Content-Length" not in no_content
    assert b"Connection" not in no_content


def test_repeated_heads_are_read_the_same_and_different_ones_apart() -> None:
    """Short heads are remembered: a repeat gives the same reading, and a
    head that differs in one byte (here its length) is read for itself."""
    first = parse_head(b"POST /send HTTP/1.1\r\nContent-Length: 10\r\nX-Destination-Peer-Id: ab")
    again = parse_head(b"POST /send HTTP/1.1\r\nContent-Length: 10\r\nX-Destination-Peer-Id: ab")
    other = parse_head(b"POST /send HTTP/1.1\r\nContent-Length: 11\r\nX-Destination-Peer-Id: ab")
    assert first == again and first.content_length == 10 and first.destination == "ab"
    assert other.content_length == 11
    long_head = b"GET /health HTTP/1.1\r\nX-Filler: " + b"a" * 2000
    assert parse_head(long_head).path == "/health"


# -- a real node ----------------------------------------------------------------


class Responses:
    """HTTP/1.1 answers read off one socket, in order."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        sock.settimeout(10)

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError("the bridge closed the connection")
        self.buffer += chunk

    def next(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {name.lower(): value.strip() for name, _, value in
                   (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(self.buffer) < length:
            self._fill()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(lines[0].split()[1]), headers, body

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except OSError:
            return True


def send_request(dest: str, payload: bytes, extra: bytes = b"") -> bytes:
    return (b"POST /send HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Destination-Peer-Id: " + dest.encode()
            + b"\r\nContent-Length: %d\r\n" % len(payload) + extra + b"\r\n" + payload)


# -- the full application's writes, gathered per turn of the loop ----------------


class _Connection:
    """What a HandedTransport asks of its BridgeConnection: whether it is ending, and finish()."""

    ending = False

    def finish(self) -> None:
        self.ending = True


async def _handed() -> tuple[HandedTransport, asyncio.Transport, socket.socket]:
    """A HandedTransport over a real transport of one end of a socket pair, and the other end."""
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    transport, _ = await asyncio.get_running_loop().create_connection(asyncio.Protocol, sock=ours)
    return HandedTransport(transport, _Connection()), transport, theirs


def _read_now(sock: socket.socket) -> bytes:
    try:
        return sock.recv(1 << 20)
    except BlockingIOError:
        return b""


async def test_small_writes_go_out_together_at_the_end_of_the_turn() -> None:
    shown, transport, theirs = await _handed()
    for frame in (b"one ", b"two ", b"three"):
        shown.write(frame)
    shown.writelines([bytearray(b" four")])
    assert _read_now(theirs) == b""  # gathered, not written yet
    assert shown.get_write_buffer_size() == len(b"one two three four")
    await asyncio.sleep(0)
    assert _read_now(theirs) == b"one two three four"
    assert shown.get_write_buffer_size() == 0
    transport.close()
    theirs.close()


async def test_a_large_write_goes_at_once_after_what_was_gathered() -> None:
    shown, transport, theirs = await _handed()
    shown.write(b"head")
    big = bytes(range(256)) * (GATHER_LIMIT // 256)
    shown.write(big)
    received = _read_now(theirs)
    assert received.startswith(b"head" + big[:100])
    transport.close()
    theirs.close()


async def test_what_is_asked_of_the_transport_writes_what_was_gathered_first() -> None:
    shown, transport, theirs = await _handed()
    shown.write(b"last answer")
    shown.write_eof()  # not HandedTransport's own: through to the transport, after the gathered bytes
    await asyncio.sleep(0.01)
    assert _read_now(theirs) == b"last answer"
    assert theirs.recv(1) == b""  # then the end
    transport.close()
    theirs.close()


async def test_bytes_gathered_for_a_connection_that_ended_meanwhile_are_dropped_quietly() -> None:
    loop = asyncio.get_running_loop()
    errors: list[dict] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    shown, transport, theirs = await _handed()
    shown.write(b"too late")
    transport.close()
    await asyncio.sleep(0.01)
    assert errors == []
    assert _read_now(theirs) == b""
    theirs.close()


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with lone_node(tmp_path_factory.mktemp("front")) as node:
        yield node


def test_pipelined_requests_are_answered_in_order(node) -> None:
    requests = [send_request(node.peer_id, f"p{i}".encode()) for i in range(5)]
    requests.append(b"GET /recv?wait=5 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    requests.append(send_request("zz", b"bad destination"))
    requests.append(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    with socket.create_connection(("127.0.0.1", node.api_port)) as sock:
        sock.sendall(b"".join(requests))
        answers = Responses(sock)
        sends = [answers.next() for _ in range(5)]
        assert [(status, headers["x-sent-bytes"]) for status, headers, _ in sends] == [(200, "2")] * 5
        status, headers, body = answers.next()
        assert (status, body, headers["x-from-peer-id"]) == (200, b"p0", node.peer_id)
        assert answers.next()[0] == 400
        assert answers.next()[0] == 200
    assert [node.recv(5)[2] for _ in range(4)] == [b"p1", b"p2", b"p3", b"p4"]


def test_a_large_body_read_ahead_behind_a_waiting_answer_is_read_on(node) -> None:
    """Reading pauses once 1 MiB waits behind an answer in progress (a long
    poll here); the body of the request after it must be read on, not left
    to time out."""
    drain(node)
    payload = bytes(range(256)) * (8 << 10)  # 2 MiB
    with socket.create_connection(("127.0.0.1", node.api_port)) as sock:
        sock.sendall(b"GET /recv?wait=2 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        sending = threading.Thread(target=sock.sendall, args=(send_request(node.peer_id, payload),))
        sending.start()
        answers = Responses(sock)
        assert answers.next()[0] == 204
        assert answers.next()[0] == 200
        sending.join(10)
    assert node.recv(5)[2] == payload


def test_a_connection_goes_on_with_the_full_application_after_its_first_other_request(node) -> None:
    with socket.create_connection(("127.0.0.1", node.api_port)) as sock:
        answers = Responses(sock)
        sock.sendall(send_request(node.peer_id, b"before"))
        assert answers.next()[0] == 200
        sock.sendall(b"GET /dashboard/api/peers HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                     + send_request(node.peer_id, b"after")
                     + b"GET /recv?wait=5 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        status, headers, _ = answers.next()
        assert status == 200 and headers["content-type"].startswith("application/json")
        status, headers, _ = answers.next()
        assert status == 200 and "aiohttp" in headers["server"]  # the full application's answer
        assert answers.next()[2] == b"before"
    assert node.recv(5)[2] == b"after"
    counted = metric_samples(node.request("GET", "/metrics")[2].decode())
    served = {labels: value for (name, labels), value in counted.items()
              if name == "axl_http_requests_total"}
    assert served[(("code", "200"), ("route", "/send"))] >= 2
    assert served[(("code", "200"), ("route", "/dashboard/api/peers"))] >= 1


def test_connection_close_is_honoured(node) -> None:
    with socket.create_connection(("127.0.0.1", node.api_port)) as sock:
        sock.sendall(b"GET /topology HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        answers = Responses(sock)
        status, headers, _ = answers.next()
        assert status == 200 and headers["connection"] == "close"
        assert answers.closed()


def served_by(request: bytes, node) -> tuple[int, str]:
    with socket.create_connection(("127.0.0.1", node.api_port)) as sock:
        sock.sendall(request)
        status, headers, _ = Responses(sock).next()
        return status, headers["server"]


def test_http_1_0_and_long_heads_are_answered_by_the_full_application(node) -> None:
    status, server = served_by(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", node)
    assert (status, server) == (200, "axl-node")
    status, server = served_by(b"GET /health HTTP/1.0\r\n\r\n", node)
    assert status == 200 and "aiohttp" in server
    status, server = served_by(b"GET /health HTTP/1.1\r\nX-Filler: " + b"f" * (20 << 10) + b"\r\n\r\n", node)
    assert "aiohttp" in server


# -- ordinary clients, each reusing one connection --------------------------------


def exchange_with_requests(node) -> list[tuple[int, bytes]]:
    import requests
    with requests.Session() as session:
        results = []
        for i in range(3):
            sent = session.post(f"{node.url}/send", data=f"r{i}".encode(),
                                headers={"X-Destination-Peer-Id": node.peer_id}, timeout=10)
            got = session.get(f"{node.url}/recv", params={"wait": "5"}, timeout=10)
            results += [(sent.status_code, sent.content), (got.status_code, got.content)]
        empty = session.get(f"{node.url}/recv", timeout=10)
        return results + [(empty.status_code, empty.content)]


def exchange_with_http_client(node) -> list[tuple[int, bytes]]:
    import http.client
    connection = http.client.HTTPConnection("127.0.0.1", node.api_port, timeout=10)
    results = []
    try:
        for i in range(3):
            for method, path, body in (("POST", "/send", f"h{i}".encode()), ("GET", "/recv?wait=5", None)):
                connection.request(method, path, body=body, headers={"X-Destination-Peer-Id": node.peer_id})
                response = connection.getresponse()
                results.append((response.status, response.read()))
        connection.request("GET", "/recv")
        response = connection.getresponse()
        results.append((response.status, response.read()))
    finally:
        connection.close()
    return results


def expected(prefix: str) -> list[tuple[int, bytes]]:
    pairs = [[(200, b""), (200, f"{prefix}{i}".encode())] for i in range(3)]
    return [pair for two in pairs for pair in two] + [(204, b"")]


@pytest.mark.parametrize("client, prefix", [(exchange_with_requests, "r"), (exchange_with_http_client, "h")])
def test_keep_alive_clients_read_every_answer(node, client, prefix) -> None:
    assert client(node) == expected(prefix)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_reuses_its_connection_across_answers(node) -> None:
    """curl, given several URLs, sends them on one connection when the answers'
    framing lets it (the 204 included), and says so on stderr."""
    send = ["-X", "POST", "-H", f"X-Destination-Peer-Id: {node.peer_id}", "--data-binary", "c0",
            f"{node.url}/send", "--next"]
    result = subprocess.run(["curl", "-sS", "-v", *send, f"{node.url}/recv?wait=5", "--next",
                             f"{node.url}/recv", "--next", f"{node.url}/health", "-w", "%{http_code}\\n"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("c0") and result.stdout.rstrip().endswith("200")
    assert result.stderr.count("Re-using existing connection") >= 2
