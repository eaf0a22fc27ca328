"""The /recv handoff: a message leaves the queue only for a client that gets it.

A long poll whose client has gone (curl's --max-time, a cancelled aiohttp
request, a closed socket) must not take a message, and a message whose
response cannot be written goes back to the front of the queue. A message
written leaves the inbox only once its client is proven to have it
(axl.bridge.handoff): a client that hangs up without reading leaves it there,
on the front door and on the full application (aiohttp) alike.
"""

from __future__ import annotations

import asyncio
import http.client
import shutil
import socket
import subprocess
import threading
import time
from collections import Counter

import aiohttp
import pytest

from axl.bridge.front import write_answer
from axl.bridge.handoff import Handoff
from axl.node.inbox import Inbox
from fuzzing import peak_allocation
from nodes import Cluster, drain, lone_node, metric_samples, polls_waiting, wait_until

SENDER = b"\x01" * 32


def put(inbox: Inbox, payload: bytes) -> bool:
    """Offer a message to an in-memory inbox, which settles at once: was it taken?"""
    stored: list[bool] = []
    inbox.put(SENDER, payload, stored.append)
    return stored == [True]


# -- the queue ----------------------------------------------------------------


def test_each_message_keeps_its_id_when_given_back() -> None:
    inbox = Inbox(max_messages=10, max_bytes=1000)
    for payload in (b"m1", b"m2", b"m3"):
        assert put(inbox, payload)
    first, second = inbox.get_nowait(), inbox.get_nowait()
    assert (first.payload, second.payload) == (b"m1", b"m2")
    assert first.id < second.id
    inbox.give_back([first, second])
    again = [inbox.get_nowait() for _ in range(3)]
    assert [m.payload for m in again] == [b"m1", b"m2", b"m3"]
    assert [m.id for m in again[:2]] == [first.id, second.id]
    assert inbox.queued_bytes == 0 and len(inbox) == 0


def test_a_taken_message_counts_against_the_bounds_until_delivered() -> None:
    """The bounds are on what the inbox holds: a message with a client that
    has not yet got it is still held (it may come back), so it takes room;
    given back, it fits again whatever arrived meanwhile."""
    inbox = Inbox(max_messages=2, max_bytes=1000, room_wait=0)
    assert put(inbox, b"a") and put(inbox, b"b")
    taken = inbox.get_nowait()
    assert not put(inbox, b"refused")
    inbox.give_back([taken])
    assert len(inbox) == 2 and inbox.queued_bytes == 2 and inbox.held == 2
    first = inbox.get_nowait()
    inbox.delivered([first])
    assert inbox.held == 1 and inbox.held_bytes == 1
    assert put(inbox, b"c")
    assert [inbox.get_nowait().payload for _ in range(2)] == [b"b", b"c"]


async def test_a_waiter_wakes_for_a_message_given_back() -> None:
    inbox = Inbox(max_messages=2, max_bytes=1000)
    put(inbox, b"x")
    taken = inbox.get_nowait()
    waiter = asyncio.ensure_future(inbox.get(5))
    await asyncio.sleep(0)
    inbox.give_back([taken])
    assert (await asyncio.wait_for(waiter, 5)).payload == b"x"


async def test_waiting_polls_are_handed_messages_in_the_order_they_came() -> None:
    inbox = Inbox(max_messages=10, max_bytes=1000)
    first = asyncio.ensure_future(inbox.get(5))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(inbox.get(5))
    await asyncio.sleep(0)
    assert inbox.waiting_polls == 2
    assert put(inbox, b"m1") and put(inbox, b"m2")
    assert len(inbox) == 0 and inbox.queued_bytes == 0
    assert (await first).payload == b"m1"
    assert (await second).payload == b"m2"
    assert inbox.waiting_polls == 0


async def test_a_poll_whose_client_left_or_whose_time_ran_out_takes_nothing() -> None:
    inbox = Inbox(max_messages=10, max_bytes=1000)
    client_closed = asyncio.get_running_loop().create_future()
    leaving = asyncio.ensure_future(inbox.get(30, until=client_closed))
    expiring = asyncio.ensure_future(inbox.get(0.05))
    await asyncio.sleep(0)
    client_closed.set_result(None)
    assert await asyncio.wait_for(leaving, 1) is None
    assert await asyncio.wait_for(expiring, 1) is None
    assert put(inbox, b"kept")
    assert len(inbox) == 1
    assert await inbox.get(1, until=client_closed) is None
    assert len(inbox) == 1


async def test_a_poll_cancelled_after_its_message_was_handed_over_gives_it_back() -> None:
    inbox = Inbox(max_messages=10, max_bytes=1000)
    poll = asyncio.ensure_future(inbox.get(5))
    await asyncio.sleep(0)
    assert put(inbox, b"m1")
    poll.cancel()
    with pytest.raises(asyncio.CancelledError):
        await poll
    assert inbox.get_nowait().payload == b"m1"


# -- the handoff rule ----------------------------------------------------------


def test_the_next_bytes_from_the_client_prove_every_answer_before_them() -> None:
    handoff = Handoff()
    handoff.written("m1")
    handoff.written("m2")
    assert handoff.pending
    assert handoff.client_sent() == ["m1", "m2"]
    assert not handoff.pending and handoff.broken() == []


def test_a_fin_proves_the_answers_only_once_the_client_host_acknowledged_every_byte() -> None:
    handoff = Handoff()
    handoff.written("m1")
    handoff.finished()
    assert handoff.unacknowledged(4096) == [] and handoff.pending
    assert handoff.unacknowledged(0) == ["m1"]
    assert not handoff.pending


def test_a_reset_or_an_unproven_end_gives_every_answer_back() -> None:
    handoff = Handoff()
    handoff.written("m1")
    handoff.finished()
    assert handoff.unacknowledged(10) == []
    handoff.written("m2")
    assert handoff.broken() == ["m1", "m2"]
    assert not handoff.pending


def test_an_answer_that_could_not_be_written_is_withdrawn_once() -> None:
    handoff = Handoff()
    handoff.written("m1")
    assert handoff.withdraw("m1")
    assert not handoff.withdraw("m1")
    handoff.written("m2")
    assert handoff.broken() == ["m2"] and not handoff.withdraw("m2")


# -- writing the answer ---------------------------------------------------------


def test_a_large_answer_is_copied_once_on_the_standard_loop() -> None:
    """A 16 MiB /recv answer on the standard asyncio loop: what the socket
    does not take at once is buffered, one copy; not joined to its head and
    sliced first (three copies on the event loop, as `writelines` did)."""
    body = bytes(16 << 20)

    async def write() -> int:
        ours, theirs = socket.socketpair()
        transport, _ = await asyncio.get_running_loop().connect_accepted_socket(asyncio.Protocol, ours)
        try:
            return peak_allocation(lambda: write_answer(transport, b"HTTP/1.1 200 OK\r\n\r\n", body))
        finally:
            transport.abort()
            theirs.close()

    loop = asyncio.SelectorEventLoop()
    try:
        peak = loop.run_until_complete(write())
    finally:
        loop.close()
    assert peak < 1.5 * len(body)


# -- real nodes -----------------------------------------------------------------


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with lone_node(tmp_path_factory.mktemp("handoff")) as node:
        yield node


@pytest.fixture
def empty(node):
    """The node, with its queue drained before and after the test."""
    drain(node)
    yield node
    drain(node)


def send_all(node, payloads: list[bytes]) -> None:
    for payload in payloads:
        assert node.send(node.peer_id, payload)[0] == 200


def abandoned_polls(node, count: int) -> None:
    """Start `count` long polls on raw sockets, wait until the bridge holds them, hang up,
    and wait until it has let them go."""
    socks = [socket.create_connection(("127.0.0.1", node.api_port), timeout=5) for _ in range(count)]
    for sock in socks:
        sock.sendall(b"GET /recv?wait=30 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    wait_until(lambda: polls_waiting(node) == count, 10, what=f"{count} long polls waiting")
    for sock in socks:
        sock.close()
    wait_until(lambda: polls_waiting(node) == 0, 10, what="the abandoned polls let go")


def test_closed_long_polls_take_nothing(empty) -> None:
    abandoned_polls(empty, 4)
    payloads = [f"m{i}".encode() for i in range(8)]
    send_all(empty, payloads)
    assert drain(empty) == payloads


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_max_time_does_not_eat_the_next_message(empty) -> None:
    result = subprocess.run(["curl", "-s", "--max-time", "1", f"{empty.url}/recv?wait=20"],
                            capture_output=True, timeout=20)
    assert result.returncode == 28  # curl: operation timed out
    send_all(empty, [b"m1", b"m2"])
    assert drain(empty) == [b"m1", b"m2"]


def test_cancelled_aiohttp_request_does_not_eat_the_next_message(empty) -> None:
    async def poll_then_cancel() -> None:
        async with aiohttp.ClientSession() as session:
            poll = asyncio.ensure_future(session.get(f"{empty.url}/recv?wait=20"))
            await asyncio.to_thread(wait_until, lambda: polls_waiting(empty) == 1, 10, what="the poll waiting")
            poll.cancel()
            with pytest.raises(asyncio.CancelledError):
                await poll

    asyncio.run(poll_then_cancel())
    wait_until(lambda: polls_waiting(empty) == 0, 10, what="the cancelled poll let go")
    send_all(empty, [b"m1", b"m2"])
    assert drain(empty) == [b"m1", b"m2"]


def read_response(sock: socket.socket) -> bytes | None:
    """The body of one HTTP response on `sock`, or None when it was 204."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-response"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    if head.split(b" ", 2)[1] == b"204":
        return None
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-body"
        body += chunk
    return body


def test_many_pollers_some_leaving_receive_every_message_once(empty) -> None:
    """Pollers that stay and pollers that leave after a moment: each message is received exactly once."""
    count = 40
    received: list[bytes] = []
    lock = threading.Lock()
    sending_done = threading.Event()

    def staying() -> None:
        while time.monotonic() < deadline:
            status, _, body = empty.recv(1)
            if status == 200:
                with lock:
                    received.append(body)
            elif sending_done.is_set():
                return

    def leaving() -> None:
        """Poll, give up after a moment (half-close: the bridge sees the client go),
        and still read whatever the bridge wrote before it noticed."""
        while not sending_done.is_set() and time.monotonic() < deadline:
            with socket.create_connection(("127.0.0.1", empty.api_port), timeout=5) as sock:
                sock.sendall(b"GET /recv?wait=30 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                sock.settimeout(0.15)
                try:
                    sock.recv(1, socket.MSG_PEEK)
                except socket.timeout:
                    sock.shutdown(socket.SHUT_WR)
                sock.settimeout(5)
                body = read_response(sock) if sock.recv(1, socket.MSG_PEEK) else None
                if body is not None:
                    with lock:
                        received.append(body)

    deadline = time.monotonic() + 60
    threads = [threading.Thread(target=staying) for _ in range(3)]
    threads += [threading.Thread(target=leaving) for _ in range(3)]
    for thread in threads:
        thread.start()
    payloads = [f"m{i}".encode() for i in range(count)]
    wait_until(lambda: polls_waiting(empty) >= 3, 10, what="pollers waiting")
    try:
        send_all(empty, payloads)
    finally:
        sending_done.set()
        for thread in threads:
            thread.join(70)
    received += drain(empty)
    assert Counter(received) == Counter(payloads)


# The same /recv on the front door (HTTP/1.1) and on the full application
# (aiohttp), which serves a connection whose requests the front door does
# not (HTTP/1.0 among them).
RECV_REQUESTS = {
    "front door": b"GET /recv HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    "full application": b"GET /recv HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n",
}
CURL_VERSIONS = {"front door": "--http1.1", "full application": "--http1.0"}


def held(node) -> int:
    """Messages `node`'s inbox holds: queued, or written to a client not yet known to have them."""
    _, _, body = node.request("GET", "/metrics", timeout=10)
    return int(metric_samples(body.decode())[("axl_inbox_messages", ())])


def receive_all(node, count: int) -> list[bytes]:
    """`count` messages from `node`, waiting for those its clients gave back."""
    got: list[bytes] = []
    wait_until(lambda: got.extend(drain(node)) or len(got) >= count, 15, what=f"{count} messages receivable")
    return got


def no_traceback(node) -> None:
    log = node.log_path.read_text()
    assert "Traceback" not in log and "ERROR" not in log, log[-3000:]


@pytest.mark.parametrize("server", RECV_REQUESTS)
def test_clients_that_hang_up_without_reading_leave_every_message(empty, server) -> None:
    """20 messages, 20 clients that ask and close without reading (half at
    once, half once the answer is in their socket, which then resets): all
    20 still receivable, and no traceback in the log."""
    payloads = [f"m{i}".encode() for i in range(20)]
    send_all(empty, payloads)
    socks = [socket.create_connection(("127.0.0.1", empty.api_port), timeout=5) for _ in payloads]
    for sock in socks:
        sock.sendall(RECV_REQUESTS[server])
    for sock in socks[:10]:
        sock.close()
    for sock in socks[10:]:
        sock.recv(1, socket.MSG_PEEK)
        sock.close()
    assert Counter(receive_all(empty, 20)) == Counter(payloads)
    no_traceback(empty)


@pytest.mark.parametrize("server", RECV_REQUESTS)
def test_a_large_message_read_in_part_stays_in_the_inbox_across_a_restart(tmp_path, server) -> None:
    payload = bytes(range(256)) * (8 << 12)  # 8 MiB
    with lone_node(tmp_path) as node:
        send_all(node, [payload])
        with socket.create_connection(("127.0.0.1", node.api_port), timeout=10) as sock:
            sock.sendall(RECV_REQUESTS[server])
            read = 0
            while read < 64 << 10:
                chunk = sock.recv(65536)
                assert chunk
                read += len(chunk)
        wait_until(lambda: held(node) == 1 and polls_waiting(node) == 0, 10, what="the message kept")
        no_traceback(node)
        node.stop()
        node.start()
        status, _, body = node.recv(0)
        assert status == 200 and body == payload
        node.stop()
        node.start()
        assert node.recv(0)[0] == 204  # read whole, it left the inbox for good


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
@pytest.mark.parametrize("server", CURL_VERSIONS)
def test_curl_gets_each_message_exactly_once(empty, server) -> None:
    """curl asks, reads the answer whole and closes (a FIN, not a reset):
    the message is its, and is not delivered again."""
    payloads = [f"c{i}".encode() for i in range(5)]
    send_all(empty, payloads)
    logged = len(empty.log_path.read_text())
    got = [subprocess.run(["curl", "-s", "--fail", CURL_VERSIONS[server], f"{empty.url}/recv"],
                          capture_output=True, timeout=20, check=True).stdout for _ in payloads]
    assert got == payloads
    wait_until(lambda: held(empty) == 0, 10, what="every message delivered")
    assert drain(empty) == []
    assert "returned to the queue" not in empty.log_path.read_text()[logged:]


def test_a_kept_alive_connection_gets_each_message_exactly_once(empty) -> None:
    """As a Go client polls: GET /recv again and again on one connection,
    reading each answer whole; the next request proves the one before, and
    the clean close the last."""
    payloads = [f"k{i}".encode() for i in range(5)]
    send_all(empty, payloads)
    connection = http.client.HTTPConnection("127.0.0.1", empty.api_port, timeout=10)
    got = []
    for _ in payloads:
        connection.request("GET", "/recv")
        response = connection.getresponse()
        got.append(response.read())
    assert got == payloads
    connection.request("GET", "/recv")
    assert connection.getresponse().status == 204
    assert held(empty) == 0
    connection.close()
    assert drain(empty) == []


def test_on_a_unix_socket_a_client_that_hangs_up_leaves_the_message_and_a_reader_gets_it_once(tmp_path) -> None:
    """On a UNIX socket a peer that closes with bytes unread resets ours
    (ECONNRESET), and TIOCOUTQ counts what the peer has not read: the same rule."""
    cluster = Cluster(tmp_path)
    node = cluster.add("u", listen=False, extra={"bridge_addr": f"unix://{tmp_path}/bridge.sock"})
    cluster.start_all()
    try:
        payloads = [f"u{i}".encode() for i in range(10)]
        send_all(node, payloads)
        for request in RECV_REQUESTS.values():
            for _ in range(5):
                with socket.socket(socket.AF_UNIX) as sock:
                    sock.settimeout(5)
                    sock.connect(f"{tmp_path}/bridge.sock")
                    sock.sendall(request)
                    sock.recv(1, socket.MSG_PEEK)
        assert Counter(receive_all(node, 10)) == Counter(payloads)
        wait_until(lambda: held(node) == 0, 10, what="every message delivered")
        assert drain(node) == []
        no_traceback(node)
    finally:
        cluster.stop_all()
