"""Real processes: /send and /recv across relays, with every status code docs/operations.md names."""

import hashlib
import os
import socket
import threading
import time

import pytest

from nodes import Cluster, polls_waiting, wait_until


def lowest_root_everywhere(nodes) -> bool:
    lowest = min(n.peer_id for n in nodes)
    for node in nodes:
        topo = node.get_json("/topology")
        if any(peer["up"] and peer["root"] != lowest for peer in topo["peers"]):
            return False
    return True


@pytest.fixture(scope="module")
def line4(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("line4"))
    a = cluster.add("a")
    b = cluster.add("b", peers=[a])
    c = cluster.add("c", peers=[b])
    cluster.add("d", peers=[c], extra={"recv_queue_max_messages": 8})
    cluster.start_all()
    wait_until(lambda: lowest_root_everywhere(cluster.nodes), 20, what="convergence")
    yield cluster
    cluster.stop_all()


def drain(node):
    while node.recv(0)[0] == 200:
        pass


def test_payload_sizes_arrive_bit_identical_and_in_order(line4):
    a, _, _, d = line4.nodes
    drain(d)
    max_size = 16 * 1024 * 1024
    payloads = [b"", os.urandom(1024), os.urandom(1 << 20), os.urandom(max_size)]
    for payload in payloads:
        status, headers, _ = a.send(d.peer_id, payload, timeout=120)
        assert status == 200, headers
        assert headers["X-Sent-Bytes"] == str(len(payload))
    for payload in payloads:
        status, headers, body = d.recv(10)
        assert status == 200
        assert headers["X-From-Peer-Id"] == a.peer_id
        assert hashlib.sha256(body).digest() == hashlib.sha256(payload).digest()
    assert d.recv(0)[0] == 204


def test_one_byte_over_the_limit_is_413(line4):
    """Refused from the Content-Length alone: a client that asks first is answered before it sends the body.

    (Without `Expect`, the body is read and discarded first; see test_oversized_bodies.py.)
    """
    a, _, _, d = line4.nodes
    with socket.create_connection(("127.0.0.1", a.api_port), timeout=10) as sock:
        sock.sendall(f"POST /send HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Destination-Peer-Id: {d.peer_id}\r\n"
                     f"Content-Length: {16 * 1024 * 1024 + 1}\r\nExpect: 100-continue\r\n\r\n".encode())
        response = sock.recv(4096)
    assert response.startswith(b"HTTP/1.1 413") and b"max_message_size" in response


def test_unknown_peer_is_502_within_ten_seconds(line4):
    a = line4.nodes[0]
    started = time.monotonic()
    status, _, body = a.send("ab" * 32, b"anyone there?", timeout=30)
    assert status == 502, body
    assert time.monotonic() - started < 12
    assert b"offline" in body and b"refused" not in body  # nobody refused: nobody answered


def test_send_to_self(line4):
    a = line4.nodes[0]
    drain(a)
    assert a.send(a.peer_id, b"note to self")[0] == 200
    status, headers, body = a.recv(5)
    assert (status, body, headers["X-From-Peer-Id"]) == (200, b"note to self", a.peer_id)


def test_full_queue_refuses_with_503_and_keeps_what_it_acknowledged(line4):
    a, _, _, d = line4.nodes
    drain(d)
    statuses = [a.send(d.peer_id, f"m{i}".encode())[0] for i in range(12)]
    assert statuses[:8] == [200] * 8
    assert statuses[8:] == [503] * 4
    received = [d.recv(2)[2] for _ in range(8)]
    assert received == [f"m{i}".encode() for i in range(8)]
    assert a.send(d.peer_id, b"after drain")[0] == 200
    assert d.recv(5)[2] == b"after drain"


def test_long_poll_returns_when_a_message_arrives(line4):
    a, _, _, d = line4.nodes
    drain(d)
    result = {}

    def poll():
        result["response"] = d.recv(15)

    thread = threading.Thread(target=poll)
    thread.start()
    wait_until(lambda: polls_waiting(d) == 1, 10, what="the long poll waiting on d")
    assert a.send(d.peer_id, b"wake up")[0] == 200
    thread.join(20)
    assert result["response"][0] == 200 and result["response"][2] == b"wake up"
