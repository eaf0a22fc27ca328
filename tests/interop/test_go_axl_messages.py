"""Messages between our node and Gensyn's Go AXL node, both ways: every size
from 0 B to 16 MiB, random bodies, each acknowledged within its deadline
and byte-exact; then many small messages both ways at once.

Our node dials the Go node's TLS listener. A /send from ours is answered
200 only once the Go node has read the whole message (it closes after
EOF); a /send from Go is answered once written, so its arrival is checked
at our /recv."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from conftest import network_for
from goprocs import listen_uris
from nodes import wait_until

MAX = 16 * 1024 * 1024
DEADLINE = 30.0


def sizes(count: int, seed: int) -> list[int]:
    """`count` sizes from 1 B to 16 MiB: both ends, the rest spread evenly in log scale."""
    rng = random.Random(seed)
    middle = [int(2 ** rng.uniform(0, 24)) for _ in range(count - 2)]
    return [1, MAX] + middle


@pytest.fixture(scope="module")
def pair(request, tmp_path_factory):
    for network in network_for(request, tmp_path_factory.mktemp("go-axl")):
        go = network.go_axl("go", root=True).start()
        ours = network.ours("ours", peers=listen_uris(go))
        ours.start()
        wait_until(lambda: go.up_peer_keys() == {ours.peer_id}, 20, what="peering with Go AXL")
        yield ours, go


def every_size(seed: int, transfer) -> tuple[int, float]:
    """`transfer(payload)` for 0 B and 40 sizes up to 16 MiB, random bodies,
    each within DEADLINE; returns the bytes moved and the seconds taken,
    after a first byte that is not counted (it waits for the path lookup and
    the session handshake)."""
    transfer(os.urandom(1))
    total, elapsed = 0, 0.0
    for size in [0, *sizes(40, seed)]:
        payload = os.urandom(size)
        start = time.monotonic()
        transfer(payload)
        took = time.monotonic() - start
        assert took < DEADLINE, f"{size} B took {took:.1f} s"
        total += size
        elapsed += took
    return total, elapsed


def test_every_size_from_ours_to_go_is_acknowledged_and_exact(pair, figures):
    ours, go = pair

    def transfer(payload: bytes) -> None:
        status, headers, text = ours.send(go.peer_id, payload, timeout=DEADLINE + 5)
        assert status == 200, f"{len(payload)} B: {status} {text[:200]!r}"
        assert headers["X-Sent-Bytes"] == str(len(payload))

    def arrived(payload: bytes) -> None:
        status, headers, body = go.recv(wait=10)
        assert status == 200 and body == payload, f"{len(payload)} B arrived as {len(body)} B"
        assert headers["X-From-Peer-Id"][:28] == ours.peer_id[:28]

    total, elapsed = every_size(1, lambda payload: (transfer(payload), arrived(payload)))
    figures.append(f"ours -> Go AXL: 41 messages, {total / 2**20:.1f} MiB in {elapsed:.1f} s "
                   f"(send to arrival): {total / 2**20 / elapsed:.1f} MiB/s")


def test_every_size_from_go_to_ours_arrives_exact(pair, figures):
    ours, go = pair

    def transfer(payload: bytes) -> None:
        status, _, text = go.send(ours.peer_id, payload, timeout=DEADLINE + 5)
        assert status == 200, f"{len(payload)} B: {status} {text[:200]!r}"
        status, headers, body = ours.recv(wait=DEADLINE)
        assert status == 200 and body == payload, f"{len(payload)} B arrived as {len(body)} B"
        assert headers["X-From-Peer-Id"] == go.peer_id, "the full key the session proved"

    total, elapsed = every_size(2, transfer)
    figures.append(f"Go AXL -> ours: 41 messages, {total / 2**20:.1f} MiB in {elapsed:.1f} s "
                   f"(send to arrival): {total / 2**20 / elapsed:.1f} MiB/s")


def test_many_small_messages_both_ways_at_once(pair, figures):
    ours, go = pair
    senders, per_sender = 4, 100
    failures: list[str] = []
    got: dict[str, list[bytes]] = {"ours": [], "go": []}

    def send(node, dest: str, tag: str, index: int) -> None:
        for n in range(per_sender):
            payload = f"{tag}-{index}-{n}-".encode() + os.urandom(1000)
            status, _, text = node.send(dest, payload, timeout=DEADLINE)
            if status != 200:
                failures.append(f"{tag} {index}/{n}: {status} {text[:100]!r}")

    def drain(node, name: str, expected: int) -> None:
        deadline = time.monotonic() + 120
        while len(got[name]) < expected and time.monotonic() < deadline:
            status, _, body = node.recv(wait=1)
            if status == 200:
                got[name].append(body)

    expected = senders * per_sender
    threads = [threading.Thread(target=send, args=(ours, go.peer_id, "to-go", i)) for i in range(senders)]
    threads += [threading.Thread(target=send, args=(go, ours.peer_id, "to-ours", i)) for i in range(senders)]
    threads += [threading.Thread(target=drain, args=(ours, "ours", expected)),
                threading.Thread(target=drain, args=(go, "go", expected))]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - start
    assert not failures, failures[:5]
    for name, tag in (("go", b"to-go"), ("ours", b"to-ours")):
        assert len(got[name]) == expected and len(set(got[name])) == expected
        assert all(body.startswith(tag) for body in got[name])
    figures.append(f"1 KiB both ways at once ({senders} senders each way): {2 * expected} messages "
                   f"in {elapsed:.1f} s, {2 * expected / elapsed:.0f} msg/s")


@pytest.mark.parametrize("kind", ["go", "ours"])
def test_the_same_sizes_between_two_nodes_of_one_kind(mixed, kind, figures):
    """The baselines printed beside the figures above: Go AXL to Go AXL, and
    ours to ours, with the sizes and bodies of the first test."""
    make = mixed.go_axl if kind == "go" else mixed.ours
    receiver = make(f"{kind}-receiver", root=True).start()
    sender = make(f"{kind}-sender", listen=[], peers=listen_uris(receiver)).start()
    wait_until(lambda: receiver.up_peer_keys() == {sender.peer_id}, 20, what=f"{kind} peering")

    def transfer(payload: bytes) -> None:
        status, _, text = sender.send(receiver.peer_id, payload, timeout=DEADLINE + 5)
        assert status == 200, f"{len(payload)} B: {status} {text[:200]!r}"
        status, _, body = receiver.recv(wait=DEADLINE)
        assert status == 200 and body == payload, f"{len(payload)} B arrived as {len(body)} B"

    total, elapsed = every_size(1, transfer)
    names = {"go": "Go AXL -> Go AXL", "ours": "ours -> ours"}
    figures.append(f"{names[kind]}: 41 messages, {total / 2**20:.1f} MiB in {elapsed:.1f} s "
                   f"(send to arrival): {total / 2**20 / elapsed:.1f} MiB/s")
