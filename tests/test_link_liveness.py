"""ironwood's peerMonitor rules (ironwood network/peers.go), driven with explicit times."""

from __future__ import annotations

from axl.link.framing import FrameType
from axl.link.liveness import LivenessAction, LivenessMonitor


def test_idle_link_is_silent() -> None:
    monitor = LivenessMonitor()
    assert monitor.next_deadline() is None
    assert monitor.poll(1000.0) is None


def test_keepalive_one_second_after_unanswered_receive() -> None:
    monitor = LivenessMonitor()
    monitor.on_received(FrameType.SIGREQ, 10.0)
    assert monitor.next_deadline() == 11.0
    assert monitor.poll(10.99) is None
    assert monitor.poll(11.0) is LivenessAction.SEND_KEEPALIVE
    monitor.on_sent(FrameType.KEEPALIVE, 11.0)
    assert monitor.next_deadline() is None
    assert monitor.poll(20.0) is None


def test_any_send_cancels_the_keepalive() -> None:
    monitor = LivenessMonitor()
    monitor.on_received(FrameType.ANNOUNCE, 0.0)
    monitor.on_sent(FrameType.SIGRES, 0.5)
    assert monitor.keepalive_at is None
    monitor.on_received(FrameType.BLOOM, 1.0)
    monitor.on_sent(FrameType.KEEPALIVE, 1.2)
    assert monitor.keepalive_at is None


def test_quiet_frames_do_not_ask_for_answers() -> None:
    monitor = LivenessMonitor()
    monitor.on_received(FrameType.KEEPALIVE, 0.0)
    monitor.on_received(FrameType.DUMMY, 0.0)
    monitor.on_sent(FrameType.KEEPALIVE, 0.0)
    monitor.on_sent(FrameType.DUMMY, 0.0)
    assert monitor.next_deadline() is None


def test_pending_keepalive_timer_is_not_pushed_back() -> None:
    monitor = LivenessMonitor()
    monitor.on_received(FrameType.SIGREQ, 0.0)
    monitor.on_received(FrameType.TRAFFIC, 0.9)
    assert monitor.keepalive_at == 1.0


def test_read_deadline_armed_once_by_first_unanswered_send() -> None:
    monitor = LivenessMonitor()
    monitor.on_sent(FrameType.SIGREQ, 5.0)
    monitor.on_sent(FrameType.ANNOUNCE, 7.0)
    assert monitor.deadline_at == 8.0
    assert monitor.poll(7.99) is None
    assert monitor.poll(8.0) is LivenessAction.TIMEOUT


def test_any_receive_clears_the_deadline_even_a_keepalive() -> None:
    for answer in (FrameType.KEEPALIVE, FrameType.DUMMY, FrameType.SIGRES):
        monitor = LivenessMonitor()
        monitor.on_sent(FrameType.SIGREQ, 0.0)
        monitor.on_received(answer, 2.0)
        assert monitor.deadline_at is None
        assert monitor.poll(10.0) in (None, LivenessAction.SEND_KEEPALIVE)


def test_timeout_wins_when_both_are_due() -> None:
    monitor = LivenessMonitor(keepalive_delay=1.0, peer_timeout=3.0)
    monitor.on_sent(FrameType.TRAFFIC, 0.0)
    monitor.deadline_at = 1.0
    monitor.keepalive_at = 1.0
    assert monitor.poll(1.0) is LivenessAction.TIMEOUT


def test_constants_are_parameters() -> None:
    monitor = LivenessMonitor(keepalive_delay=0.1, peer_timeout=0.3)
    monitor.on_received(FrameType.SIGREQ, 0.0)
    monitor.on_sent(FrameType.SIGRES, 0.0)
    assert monitor.next_deadline() == 0.3
