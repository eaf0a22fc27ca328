"""Real processes: the kept-open message stream between our nodes, and the
one-connection-per-message path toward a node without it (as a Go node is)."""

import threading

import pytest

from nodes import Cluster, wait_until


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
