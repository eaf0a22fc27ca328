"""Full nodes in the simulator: the daemon's NodeCore and LinkConnection over
virtual links, application messages end to end on a virtual clock."""

from __future__ import annotations

import random

import pytest

from axl.node.messages import MessageSettings
from axl.sim.__main__ import main
from axl.sim.stack import StackNetwork


def test_messages_command_delivers_every_message_over_lossy_links(capsys):
    status = main(["messages", "--nodes", "40", "--degree", "3", "--loss", "0.01",
                   "--messages", "60", "--seed", "5"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == "delivered 60/60 acknowledged 60 lost 0 duplicated 0"
    assert lines[-2].startswith("virtual time ")
    assert status == 0


def test_messages_command_refuses_bad_arguments(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["messages", "--nodes", "1", "--messages", "5"])
    assert exit_info.value.code == 2
    assert "need --nodes >= 2" in capsys.readouterr().err


def _line(size: int, **link) -> StackNetwork:
    net = StackNetwork(size, seed=11, settings=MessageSettings(send_timeout=30.0))
    for index in range(size - 1):
        net.connect(index, index + 1, **link)
    net.run(8)
    assert net.linked()
    return net


def test_overlay_tcp_recovers_traffic_frames_the_relays_drop():
    net = _line(4)
    net.send(0, 3, (0).to_bytes(8, "big") + b"opens the session", 0)
    net.run(3)
    for node in net.nodes:
        for end in node.ends:
            end.drop = 0.1
    payload = (1).to_bytes(8, "big") + random.Random(3).randbytes(200_000)
    net.send(0, 3, payload, 1)
    net.run(30)
    assert net.dropped > 0
    assert net.tally.acknowledged == {0, 1}
    assert net.inbox[3][-1] == (net.nodes[0].key, payload)


def test_request_gets_its_reply_through_relays():
    net = _line(3)
    net.answer = lambda index, sender, payload: b"reply from %d" % index
    net.request(0, 2, (7).to_bytes(8, "big") + b"question", 7, timeout=10.0)
    net.run(5)
    assert net.tally.replies == {7: b"reply from 2"}


def test_bandwidth_delays_a_large_message_by_its_size():
    slow, fast = _line(2, bandwidth=100_000), _line(2)
    payload = (2).to_bytes(8, "big") + bytes(300_000)
    arrival = []
    for net in (slow, fast):
        start = net.now
        net.send(0, 1, payload, 2)
        net.run_until(start + 60, done=lambda net=net: bool(net.tally.acknowledged))
        arrival.append(net.now - start)
    assert arrival[0] >= 3.0 > arrival[1]


def test_same_seed_same_run():
    def run() -> tuple:
        net = StackNetwork(12, seed=4)
        net.random_graph(3, drop=0.05)
        net.run(8)
        for number in range(10):
            net.send(number, 11 - number, number.to_bytes(8, "big") + b"x", number)
        net.run(20)
        return net.tally.line(), net.dropped, sorted(net.tally.acknowledged)
    assert run() == run()


def test_a_line_forms_in_round_trips_not_a_hop_per_tick():
    """Tree frames are acted on as they arrive (Router.settle), not at the
    next 1 s tick, and a lookup that reached no peer goes again as soon as the
    bloom filters change. A key used to spread a hop per tick, so along a line
    of 30 a send one second in failed unreachable and forming took over 15 s."""
    def line() -> StackNetwork:
        net = StackNetwork(30, seed=11)
        for index in range(29):
            net.connect(index, index + 1)
        return net

    formed = line().run_until_formed(300)
    assert formed is not None and formed < 15
    early = line()
    early.run(1)
    early.send(0, 29, (1).to_bytes(8, "big") + b"to the far end", 1)
    early.run(30)
    assert early.tally.acknowledged == {1} and not early.tally.failed


def test_a_message_sent_as_a_long_peering_comes_up_arrives_within_seven_round_trips():
    """Two nodes 100 ms apart each way: the message sent the moment the link
    is up waits for the tree (SigReq, SigRes, Announce, Bloom), the lookup and
    the session handshake, each a round trip or so, not for 1 s ticks (3.9 s)."""
    net = StackNetwork(2, seed=11)
    net.connect(0, 1, latency=0.1)
    net.run_until(net.now + 5, done=net.linked)
    up = net.now
    net.send(1, 0, (1).to_bytes(8, "big") + b"hello", 1)
    net.run_until(up + 10, done=lambda: net.tally.delivered[1] > 0)
    assert net.tally.delivered[1] == 1 and net.now - up <= 1.5


def test_a_message_stream_starts_a_long_transfer_with_a_large_window():
    """4 MiB after a few small messages, 100 ms each way at 12.5 MB/s: the
    stream's connection starts with TcpConfig.fast_start_window (1 MiB), not
    two 64 KiB segments, so the message is acknowledged in about one round
    trip more than the line needs (0.34 s), not after four of slow start
    (2.1 s)."""
    net = StackNetwork(2, seed=11, settings=MessageSettings(send_timeout=60.0))
    net.connect(0, 1, latency=0.1, bandwidth=12.5e6)
    net.run(10)
    for number in range(3):
        net.send(0, 1, number.to_bytes(8, "big") + bytes(1000), number)
        net.run(1)
    payload = (9).to_bytes(8, "big") + random.Random(3).randbytes((4 << 20) - 8)
    start = net.now
    net.send(0, 1, payload, 9)
    net.run_until(start + 30, done=lambda: 9 in net.tally.acknowledged)
    assert net.inbox[1][-1] == (net.nodes[0].key, payload)
    assert net.now - start <= 1.5


def test_a_stream_keeps_a_long_paths_worth_of_small_messages_in_flight():
    """3,000 messages of 1 KiB at once, 100 ms each way at 12.5 MB/s (the
    path holds about 2,400 a round trip): the stream's window is the 4096 its
    receiver says it takes, so they are all acknowledged in about three
    round trips (0.6 s), not one window of 256 per round trip (2.5 s); each
    arrives once, in order."""
    net = StackNetwork(2, seed=11, settings=MessageSettings(send_timeout=60.0))
    net.connect(0, 1, latency=0.1, bandwidth=12.5e6)
    net.run(10)
    net.send(0, 1, (0).to_bytes(8, "big"), 0)  # the stream connects
    net.run(2)
    count = 3000
    start = net.now
    for number in range(1, count + 1):
        net.send(0, 1, number.to_bytes(8, "big") + bytes(1016), number)
    net.run_until(start + 30, done=lambda: len(net.tally.acknowledged) == count + 1)
    assert len(net.tally.acknowledged) == count + 1 and not net.tally.failed
    arrived = [int.from_bytes(payload[:8], "big") for _, payload in net.inbox[1]]
    assert arrived == list(range(count + 1)) and net.tally.duplicated == 0
    assert net.now - start <= 1.2
