"""End-to-end encrypted sessions over multi-hop routes in the simulator."""

from __future__ import annotations

from axl.routing.frames import TYPE_TRAFFIC, Traffic
from axl.sim import Network


class FrameLog:
    """Every frame body the links carried, with who sent it and who received it."""

    def __init__(self) -> None:
        self.frames: list[tuple[int, int, int, bytes]] = []

    def __call__(self, sender: int, receiver: int, ftype: int, body: bytes) -> None:
        self.frames.append((sender, receiver, ftype, body))

    def traffic_receivers(self) -> set[int]:
        return {receiver for _, receiver, ftype, _ in self.frames if ftype == TYPE_TRAFFIC}


def _line_with_sessions(size: int, seed: int) -> tuple[Network, FrameLog]:
    net = Network(size, seed=seed, sessions=True)
    net.line()
    net.run(20)
    assert net.converged()
    log = FrameLog()
    net.tap = log
    return net, log


def test_datagrams_cross_relays_encrypted_and_arrive_intact():
    net, log = _line_with_sessions(6, seed=31)
    messages = [b"secret datagram %d " % i + bytes(range(256)) * 3 for i in range(5)]
    for message in messages:
        net.send(0, 5, message)
        net.run(2)
    assert net.received(5, 0) == messages
    assert {1, 2, 3, 4} <= log.traffic_receivers()  # every relay on the line carried it
    for _, _, _, body in log.frames:
        for message in messages:
            assert message not in body
            assert message[:16] not in body


def test_reply_uses_the_same_session_both_ways():
    net, log = _line_with_sessions(5, seed=32)
    net.send(0, 4, b"ping from the first node")
    net.run(3)
    net.send(4, 0, b"pong from the last node")
    net.run(3)
    assert net.received(4, 0) == [b"ping from the first node"]
    assert net.received(0, 4) == [b"pong from the last node"]
    assert net.nodes[0].sessions.session_keys() == [net.nodes[4].key]
    assert net.nodes[4].sessions.session_keys() == [net.nodes[0].key]
    relay_payloads = [
        Traffic.decode(body).payload
        for _, receiver, ftype, body in log.frames
        if ftype == TYPE_TRAFFIC and receiver not in (0, 4)
    ]
    assert relay_payloads
    assert all(b"ping" not in p and b"pong" not in p for p in relay_payloads)


def test_relays_hold_no_sessions_and_deliver_nothing():
    net, _ = _line_with_sessions(6, seed=33)
    net.send(0, 5, b"only for the far end")
    net.run(3)
    for relay in range(1, 5):
        assert net.nodes[relay].sessions.session_keys() == []
        assert net.nodes[relay].inbox == []


def test_session_heals_after_the_receiver_restarts():
    net, _ = _line_with_sessions(4, seed=34)
    net.send(0, 3, b"before restart")
    net.run(3)
    net.kill(3)
    net.revive(3)
    net.run(10)
    for attempt in range(4):
        net.send(0, 3, b"after restart %d" % attempt)
        net.run(2)
    arrived = net.received(3, 0)
    assert arrived[0] == b"before restart"
    assert arrived[-1] == b"after restart 3"


def test_sessions_run_is_deterministic():
    def run() -> list[bytes]:
        net, log = _line_with_sessions(4, seed=35)
        net.send(0, 3, b"same every time")
        net.run(3)
        return [body for _, _, _, body in log.frames]
    assert run() == run()
