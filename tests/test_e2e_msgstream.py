"""Real processes: the kept-open message stream between our nodes, and the
one-connection-per-message path toward a node without it (as a Go node is)."""

import threading

import pytest

from nodes import Cluster, metric_samples, wait_until


@pytest.fixture(scope="module")
def trio(tmp_path_factory):
    """s1 - hub - s2 with streams; g (streams off: the Go node's protocol) on the hub."""
    cluster = Cluster(tmp_path_factory.mktemp("msgstream"))
    hub = cluster.add("hub")
    cluster.add("s1", peers=[hub])
    cluster.add("s2", peers=[hub], extra={"recv_queue_max_messages": 8})
    cluster.add("g", peers=[hub], extra={"message_streams": False, "recv_queue_max_messages": 8})
    cluster.start_all()
    wait_until(lambda: len(hub.get_json("/topology")["peers"]) == 3
               and all(p["up"] for p in hub.get_json("/topology")["peers"]), 20, what="peerings")
    yield {node.name: node for node in cluster.nodes}
    cluster.stop_all()


def drain(node):
    while node.recv(0)[0] == 200:
        pass


def log_lines(node, text: str) -> int:
    return sum(text in line for line in node.log_path.read_text().splitlines())


def send_all(source, dest, payloads: list[bytes]) -> list[int]:
    return [source.send(dest.peer_id, payload)[0] for payload in payloads]


def test_concurrent_senders_share_one_stream_and_keep_their_order(trio):
    s1, hub = trio["s1"], trio["hub"]
    drain(hub)
    opened = f"message stream to {hub.peer_id[:16]} open"
    before = log_lines(s1, opened)
    statuses: list[int] = []
    received: list[bytes] = []

    def sender(thread: int) -> None:
        statuses.extend(send_all(s1, hub, [f"{thread}:{i}".encode() for i in range(6)]))

    def receiver() -> None:
        while len(received) < 24:
            status, _, body = hub.recv(10)
            assert status == 200
            received.append(body)

    drainer = threading.Thread(target=receiver)
    drainer.start()
    threads = [threading.Thread(target=sender, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    drainer.join(60)
    assert statuses == [200] * 24
    assert sorted(received) == sorted(f"{t}:{i}".encode() for t in range(4) for i in range(6))
    for thread in range(4):
        mine = [int(body.split(b":")[1]) for body in received if body.startswith(f"{thread}:".encode())]
        assert mine == list(range(6))
    assert log_lines(s1, opened) - before == 1


def test_full_queue_on_the_stream_is_503_and_keeps_what_it_acknowledged(trio):
    s1, s2 = trio["s1"], trio["s2"]
    drain(s2)
    statuses = send_all(s1, s2, [f"q{i}".encode() for i in range(11)])
    assert statuses == [200] * 8 + [503] * 3
    assert [s2.recv(2)[2] for _ in range(8)] == [f"q{i}".encode() for i in range(8)]
    assert s2.recv(0)[0] == 204
    assert s1.send(s2.peer_id, b"after drain")[0] == 200
    assert s2.recv(5)[2] == b"after drain"


def waiting_for_room(node) -> int:
    _, _, body = node.request("GET", "/metrics", timeout=10)
    return int(metric_samples(body.decode())[("axl_inbox_waiting_for_room", ())])


def test_a_reader_a_little_behind_slows_its_sender_instead_of_having_it_refused(trio):
    """Each message beyond the full queue waits, unanswered, until the reader
    takes one: all 200, in order, none refused."""
    s1, s2 = trio["s1"], trio["s2"]
    drain(s2)
    received: list[bytes] = []

    def reader() -> None:
        for _ in range(3):
            wait_until(lambda: waiting_for_room(s2) == 1, 20, interval=0.02,
                       what="a message waiting for room on s2")
            received.append(s2.recv(2)[2])

    thread = threading.Thread(target=reader)
    thread.start()
    statuses = send_all(s1, s2, [f"w{i}".encode() for i in range(11)])
    thread.join(60)
    assert statuses == [200] * 11
    received += [s2.recv(2)[2] for _ in range(8)]
    assert received == [f"w{i}".encode() for i in range(11)]
    assert s2.recv(0)[0] == 204


def test_a_node_without_streams_is_reached_one_connection_per_message(trio):
    s1, g = trio["s1"], trio["g"]
    drain(g)
    statuses = send_all(s1, g, [f"g{i}".encode() for i in range(10)])
    assert statuses == [200] * 8 + [503] * 2
    assert [g.recv(2)[2] for _ in range(8)] == [f"g{i}".encode() for i in range(8)]
    assert log_lines(s1, f"{g.peer_id[:16]} has no message stream port") == 1
    assert log_lines(s1, f"message stream to {g.peer_id[:16]} open") == 0


def test_a_node_without_streams_sends_one_connection_per_message(trio):
    s1, g = trio["s1"], trio["g"]
    drain(s1)
    assert send_all(g, s1, [b"from g 1", b"from g 2"]) == [200, 200]
    status, headers, body = s1.recv(5)
    assert (status, body, headers["X-From-Peer-Id"]) == (200, b"from g 1", g.peer_id)
    assert s1.recv(5)[2] == b"from g 2"
    assert log_lines(g, "message stream") == 0


def post_in_pieces(node, dest: str, body: bytes, pieces: int, pause: float, stop_after: int | None = None):
    """POST /send with the body written in `pieces` parts `pause` s apart;
    returns the answer's status line, or None when `stop_after` parts were
    written and the client left."""
    import socket
    import time

    head = (f"POST /send HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Destination-Peer-Id: {dest}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    step = -(-len(body) // pieces)
    with socket.create_connection(("127.0.0.1", node.api_port), timeout=60) as sock:
        sock.sendall(head)
        for index, start in enumerate(range(0, len(body), step)):
            if stop_after is not None and index == stop_after:
                return None
            sock.sendall(body[start:start + step])
            time.sleep(pause)
        return sock.makefile("rb").readline()


def test_a_large_body_goes_out_while_it_arrives_and_is_delivered_whole(trio):
    """From 1 MiB on, a /send to a destination with an open stream leaves as
    its body arrives; the receiver still gets it whole, and only once it is."""
    s1, hub = trio["s1"], trio["hub"]
    drain(hub)
    assert s1.send(hub.peer_id, b"stream up")[0] == 200
    assert hub.recv(5)[2] == b"stream up"
    body = bytes(range(256)) * (6 * 1024)  # 1.5 MiB
    assert post_in_pieces(s1, hub.peer_id, body, pieces=6, pause=0.1).startswith(b"HTTP/1.1 200 ")
    status, _, got = hub.recv(10)
    assert status == 200 and got == body
    assert hub.recv(0)[0] == 204


def test_a_client_that_leaves_mid_body_sends_nothing_and_the_stream_goes_on(trio):
    s1, hub = trio["s1"], trio["hub"]
    drain(hub)
    assert s1.send(hub.peer_id, b"stream up")[0] == 200
    assert hub.recv(5)[2] == b"stream up"
    opened = f"message stream to {hub.peer_id[:16]} open"
    before = log_lines(s1, opened)
    assert post_in_pieces(s1, hub.peer_id, bytes(2 << 20), pieces=8, pause=0.05, stop_after=3) is None
    assert s1.send(hub.peer_id, b"after the abandoned one")[0] == 200
    assert hub.recv(10)[2] == b"after the abandoned one"
    assert hub.recv(1)[0] == 204
    # the part already sent was cut off by restarting the stream
    wait_until(lambda: log_lines(s1, opened) == before + 1, 10, what="the stream reopened")
