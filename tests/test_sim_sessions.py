"""End-to-end encrypted sessions over multi-hop routes, with full nodes in the simulator."""

from __future__ import annotations

from axl.routing.frames import TYPE_TRAFFIC, Traffic
from axl.sim import StackNetwork


class FrameLog:
    """Every frame body the links carried, with who sent it and who received it."""

    def __init__(self) -> None:
        self.frames: list[tuple[int, int, int, bytes]] = []

    def __call__(self, sender: int, receiver: int, ftype: int, body: bytes) -> None:
        self.frames.append((sender, receiver, ftype, body))

    def traffic_receivers(self) -> set[int]:
        return {receiver for _, receiver, ftype, _ in self.frames if ftype == TYPE_TRAFFIC}


def _line(size: int, seed: int) -> tuple[StackNetwork, FrameLog]:
    net = StackNetwork(size, seed=seed)
    for index in range(size - 1):
        net.connect(index, index + 1)
    net.run(8)
    assert net.linked()
    log = FrameLog()
    net.tap = log
    return net, log


def _message(number: int, text: bytes) -> bytes:
    return number.to_bytes(8, "big") + text


def test_messages_cross_relays_encrypted_and_arrive_intact():
    net, log = _line(6, seed=31)
    messages = [_message(i, b"secret message %d " % i + bytes(range(256)) * 3) for i in range(5)]
    for number, message in enumerate(messages):
        net.send(0, 5, message, number)
        net.run(2)
    assert [payload for _, payload in net.inbox[5]] == messages
    assert net.tally.acknowledged == set(range(5))
    assert {1, 2, 3, 4} <= log.traffic_receivers()  # every relay on the line carried it
    for _, _, _, body in log.frames:
        for message in messages:
            assert message[8:24] not in body


def test_reply_uses_the_same_session_both_ways():
    net, log = _line(5, seed=32)
    net.send(0, 4, _message(1, b"ping from the first node"), 1)
    net.run(3)
    net.send(4, 0, _message(2, b"pong from the last node"), 2)
    net.run(3)
    assert net.tally.acknowledged == {1, 2}
    assert net.nodes[0].core.sessions.session_keys() == [net.nodes[4].key]
    assert net.nodes[4].core.sessions.session_keys() == [net.nodes[0].key]
    relay_payloads = [
        Traffic.decode(body).payload
        for _, receiver, ftype, body in log.frames
        if ftype == TYPE_TRAFFIC and receiver not in (0, 4)
    ]
    assert relay_payloads
    assert all(b"ping" not in p and b"pong" not in p for p in relay_payloads)


def test_relays_hold_no_sessions_and_deliver_nothing():
    net, _ = _line(6, seed=33)
    net.send(0, 5, _message(1, b"only for the far end"), 1)
    net.run(3)
    assert net.tally.acknowledged == {1}
    for relay in range(1, 5):
        assert net.nodes[relay].core.sessions.session_keys() == []
        assert net.inbox[relay] == []


def test_session_heals_after_the_receiver_restarts():
    net, _ = _line(4, seed=34)
    net.send(0, 3, _message(0, b"before restart"), 0)
    net.run(3)
    net.kill(3)
    net.revive(3)
    net.run(10)
    net.send(0, 3, _message(1, b"after restart"), 1)
    net.run(20)
    assert net.tally.acknowledged == {0, 1}
    assert [payload[8:] for _, payload in net.inbox[3]] == [b"before restart", b"after restart"]


def test_sessions_run_is_deterministic():
    def run() -> list[bytes]:
        net, log = _line(4, seed=35)
        net.send(0, 3, _message(0, b"same every time"), 0)
        net.run(3)
        return [body for _, _, _, body in log.frames]
    assert run() == run()
