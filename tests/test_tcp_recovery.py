"""RTT estimation and NewReno on their own: numbers in, numbers out."""

from __future__ import annotations

import pytest

from axl.tcp.connection import TcpConfig
from axl.tcp.recovery import NewReno, RttEstimator, initial_window

MSS = 1000


def test_first_sample_sets_srtt_and_half_variance_then_rto_follows_rfc6298():
    config = TcpConfig()
    rtt = RttEstimator(config)
    rtt.time(100, now=1.0)
    rtt.acknowledged(100, now=1.5)
    assert rtt.srtt == pytest.approx(0.5) and rtt.rttvar == pytest.approx(0.25)
    assert rtt.base == pytest.approx(min(config.max_rto, max(config.min_rto, 0.5 + 4 * 0.25)))


def test_an_acknowledgement_short_of_the_timed_segment_takes_no_sample():
    rtt = RttEstimator(TcpConfig())
    rtt.time(200, now=0.0)
    rtt.acknowledged(150, now=3.0)
    assert rtt.srtt is None and rtt.timed_seq == 200


def test_backoff_doubles_until_acknowledged_and_drops_the_measurement():
    rtt = RttEstimator(TcpConfig())
    base = rtt.rto(cap=1000.0)
    rtt.time(10, now=0.0)
    rtt.back_off()
    rtt.back_off()
    assert rtt.rto(cap=1000.0) == pytest.approx(base * 4)
    assert rtt.timed_seq is None  # Karn: a retransmitted segment is never a sample
    assert rtt.rto(cap=base) == base
    rtt.acknowledged(10, now=5.0)
    assert rtt.backoff == 0 and rtt.srtt is None


def test_slow_start_then_congestion_avoidance():
    cc = NewReno(iss=0, dupack_threshold=3)
    cc.start(MSS)
    assert cc.cwnd == initial_window(MSS) == 10 * MSS
    cc.on_new_ack(MSS, snd_una=MSS, snd_max=20 * MSS, mss=MSS)
    assert cc.cwnd == 11 * MSS
    cc.ssthresh = cc.cwnd
    cc.on_new_ack(MSS, snd_una=2 * MSS, snd_max=20 * MSS, mss=MSS)
    assert cc.cwnd == 11 * MSS + MSS * MSS // (11 * MSS)


def test_three_duplicates_enter_fast_recovery_and_a_full_ack_leaves_it():
    cc = NewReno(iss=0, dupack_threshold=3)
    cc.start(MSS)
    for _ in range(2):
        cc.on_duplicate_ack(snd_una=0, snd_max=10 * MSS, mss=MSS)
    assert not cc.in_recovery and not cc.retransmit_head
    cc.on_duplicate_ack(snd_una=0, snd_max=10 * MSS, mss=MSS)
    assert cc.in_recovery and cc.retransmit_head
    assert cc.ssthresh == 5 * MSS and cc.cwnd == 8 * MSS and cc.recover == 10 * MSS
    cc.retransmit_head = False
    cc.head_resent(now=1.0)
    cc.on_new_ack(2 * MSS, snd_una=2 * MSS, snd_max=10 * MSS, mss=MSS, now=1.5, min_rtt=0.5)  # partial: resend the next hole
    assert cc.in_recovery and cc.retransmit_head
    cc.on_new_ack(8 * MSS, snd_una=10 * MSS, snd_max=10 * MSS, mss=MSS, now=1.6, min_rtt=0.5)
    assert not cc.in_recovery and cc.cwnd == 2 * MSS and cc.ssthresh == 5 * MSS
    assert not cc.retransmit_head, "taken in before the resend left: nothing is left to resend"


def _recovering(cc: NewReno) -> None:
    cc.start(MSS)
    cc.on_new_ack(4 * MSS, snd_una=4 * MSS, snd_max=14 * MSS, mss=MSS)
    for _ in range(3):
        cc.on_duplicate_ack(snd_una=4 * MSS, snd_max=14 * MSS, mss=MSS)
    assert cc.in_recovery and cc.ssthresh == 5 * MSS


def test_a_full_ack_before_any_resend_undoes_the_recovery():
    """Duplicates that were reordering, not loss (gVisor acknowledging a
    first flight): the whole flight is acknowledged before our resend left,
    so the window and slow start carry on as before."""
    cc = NewReno(iss=0, dupack_threshold=3)
    _recovering(cc)
    cc.on_new_ack(10 * MSS, snd_una=14 * MSS, snd_max=14 * MSS, mss=MSS, now=2.0, min_rtt=0.2)
    assert not cc.in_recovery and not cc.retransmit_head
    assert cc.cwnd == 24 * MSS and cc.ssthresh > 1 << 30, "as before the duplicates, plus what was acknowledged"


def test_a_full_ack_sooner_than_half_a_round_trip_after_the_resend_undoes_it():
    cc = NewReno(iss=0, dupack_threshold=3)
    _recovering(cc)
    cc.head_resent(now=2.0)
    cc.on_new_ack(10 * MSS, snd_una=14 * MSS, snd_max=14 * MSS, mss=MSS, now=2.05, min_rtt=0.2)
    assert cc.cwnd == 24 * MSS and cc.ssthresh > 1 << 30


def test_a_full_ack_a_round_trip_after_the_resend_keeps_the_halved_window():
    cc = NewReno(iss=0, dupack_threshold=3)
    _recovering(cc)
    cc.head_resent(now=2.0)
    cc.head_resent(now=2.1)  # a partial acknowledgement's resend: the first one counts
    cc.on_new_ack(10 * MSS, snd_una=14 * MSS, snd_max=14 * MSS, mss=MSS, now=2.2, min_rtt=0.2)
    assert cc.cwnd == 2 * MSS and cc.ssthresh == 5 * MSS


def test_timeout_collapses_the_window_to_one_segment():
    cc = NewReno(iss=0, dupack_threshold=3)
    cc.start(MSS)
    cc.on_timeout(snd_una=0, snd_max=8 * MSS, mss=MSS, handshaking=False)
    assert cc.cwnd == MSS and cc.ssthresh == 4 * MSS and cc.retransmit_head


def test_a_lost_syn_leaves_slow_start_unbounded():
    cc = NewReno(iss=0, dupack_threshold=3)
    cc.on_timeout(snd_una=0, snd_max=1, mss=MSS, handshaking=True)
    cc.start(64 * MSS)
    assert cc.ssthresh > 1 << 30
    cc.on_new_ack(64 * MSS, snd_una=64 * MSS, snd_max=640 * MSS, mss=64 * MSS)
    assert cc.cwnd == initial_window(64 * MSS) + 64 * MSS


def test_the_first_two_duplicates_each_allow_one_more_segment():
    cc = NewReno(iss=0, dupack_threshold=3)
    cc.start(MSS)
    assert cc.limited_transmit(MSS) == 0
    cc.on_duplicate_ack(snd_una=0, snd_max=4 * MSS, mss=MSS)
    assert cc.limited_transmit(MSS) == MSS
    cc.on_duplicate_ack(snd_una=0, snd_max=5 * MSS, mss=MSS)
    assert cc.limited_transmit(MSS) == 2 * MSS
    cc.on_duplicate_ack(snd_una=0, snd_max=6 * MSS, mss=MSS)
    assert cc.in_recovery and cc.limited_transmit(MSS) == 0
