"""Real processes: relays carry only ciphertext, and traffic reroutes around a dead relay."""

import os
import socket
import threading

from nodes import Cluster, free_port, wait_until


class RecordingProxy:
    """A TCP proxy that keeps a copy of every byte it forwards, both ways."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.captured = bytearray()
        self.lock = threading.Lock()
        self.server = socket.create_server(("127.0.0.1", self.port))
        self.server.settimeout(0.2)
        self.running = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while self.running:
            try:
                client, _ = self.server.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                with self.lock:
                    self.captured += chunk
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.running = False
        self.server.close()


def test_relay_forwards_no_plaintext(tmp_path):
    cluster = Cluster(tmp_path)
    a = cluster.add("a", extra={})
    a_config = a.config_path.read_text().replace("tls://", "tcp://")
    a.config_path.write_text(a_config)
    proxy = RecordingProxy(a.listen_port)
    b = cluster.add("b")
    b.config_path.write_text(b.config_path.read_text().replace(
        '"Peers": []', f'"Peers": ["tcp://127.0.0.1:{proxy.port}"]'))
    c = cluster.add("c", peers=[b])
    try:
        cluster.start_all()
        wait_until(lambda: a.get_json("/topology")["peers"]
                   and c.get_json("/topology")["peers"][0]["up"], 15, what="peerings")
        marker = b"PLAINTEXT-MARKER-" + os.urandom(8).hex().encode()
        status, _, body = wait_until(lambda: (r := c.send(a.peer_id, marker * 4))[0] == 200 and r,
                                     30, interval=1, what="delivery through the relay")
        assert a.recv(5)[2] == marker * 4
        with proxy.lock:
            captured = bytes(proxy.captured)
        assert len(captured) > 1000, "the relay link carried the traffic"
        assert marker not in captured
    finally:
        cluster.stop_all()
        proxy.close()


def tree_edges(nodes: list) -> set[frozenset[str]] | None:
    """The spanning tree, one {child, parent} pair per non-root node, or None
    while the nodes disagree. Each node knows only its own and its peers'
    ancestors, so the whole tree is the union of every node's view."""
    parents: dict[str, str] = {}
    for node in nodes:
        for entry in node.get_json("/topology")["tree"]:
            if parents.setdefault(entry["public_key"], entry["parent"]) != entry["parent"]:
                return None
    if len(parents) != len(nodes) or list(parents.values()).count("") != 1:
        return None
    return {frozenset((child, parent)) for child, parent in parents.items() if parent}


def relay_on_the_path(ring: list) -> tuple:
    """(sender, relay, receiver), ring neighbours in that order, whose two links are both tree edges.

    The tree of a ring drops one link. Where sender-relay-receiver lies on the
    tree, the relay is at tree distance 1 from the receiver and the sender's
    other neighbour at 2 or more, so greedy routing must send through the relay:
    killing it then really kills the path in use. (Fixed positions in the ring
    missed it whenever the dropped link was relay-receiver.)
    """
    size = len(ring)
    edges = wait_until(lambda: tree_edges(ring), 20, what="a converged tree")
    for i in range(size):
        sender, relay, receiver = ring[i], ring[(i + 1) % size], ring[(i + 2) % size]
        if {frozenset((sender.peer_id, relay.peer_id)), frozenset((relay.peer_id, receiver.peer_id))} <= edges:
            return sender, relay, receiver
    raise AssertionError(f"no two consecutive ring links in the tree {edges}")


def test_ring_of_five_survives_losing_the_relay_in_use(tmp_path):
    """200 numbered messages; the relay in use dies midway: nothing acknowledged is lost."""
    cluster = Cluster(tmp_path)
    nodes = [cluster.add(f"n{i}") for i in range(5)]
    for i, node in enumerate(nodes):
        cluster.set_peers(node, [nodes[(i + 1) % 5]])
    acknowledged, failed = [], []
    try:
        cluster.start_all()
        wait_until(lambda: all(sum(p["up"] for p in n.get_json("/topology")["peers"]) == 2
                               for n in nodes), 20, what="ring up")
        sender, relay, receiver = relay_on_the_path(nodes)
        for i in range(200):
            if i == 60:
                relay.kill()
            payload = f"msg-{i:04d}".encode()
            status = sender.send(receiver.peer_id, payload, timeout=90)[0]
            (acknowledged if status == 200 else failed).append((payload, status))
        received = []
        while (response := receiver.recv(2))[0] == 200:
            received.append(response[2])
        acked = [payload for payload, _ in acknowledged]
        assert all(status >= 500 for _, status in failed)
        assert len(received) == len(set(received)), "no duplicates"
        assert set(acked) <= set(received), "every acknowledged message arrived"
        assert received == sorted(received), "in order"
        assert len(acked) >= 150, f"only {len(acked)} of 200 acknowledged: {failed[:5]}"
    finally:
        cluster.stop_all()
