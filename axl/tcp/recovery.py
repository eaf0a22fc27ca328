"""Loss recovery for one TCP connection: the retransmission timer's RTT
estimate (RFC 6298) and NewReno congestion control (RFC 5681, RFC 6582).

Both are plain state the connection consults and updates; neither sends a
segment or reads a clock. The connection decides what to transmit; these
say how long to wait for an acknowledgement and how much may be in flight.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from axl.tcp.connection import TcpConfig

MAX_BACKOFF = 16
_INFINITE_SSTHRESH = 1 << 62


def initial_window(mss: int) -> int:
    """RFC 6928 initial congestion window."""
    return min(10 * mss, max(2 * mss, 14600))


@dataclass
class PathStats:
    """What the connections to one remote address saw of the path, summed
    over them all (the stack shares one per address): the latest smoothed
    RTT, segments sent again, and retransmission timeouts, for /metrics;
    and the least RTT sampled, the path's own delay without the queues and
    the receiver's delayed ACKs that the smoothed one carries (what a
    message stream sizes its window by)."""

    srtt: float | None = None
    min_rtt: float | None = None
    retransmits: int = 0
    timeouts: int = 0

    def took_sample(self, srtt: float | None, rtt: float | None) -> None:
        """A connection's estimator now says `srtt`, and its latest sample was `rtt`."""
        self.srtt = srtt
        if rtt is not None and (self.min_rtt is None or rtt < self.min_rtt):
            self.min_rtt = rtt


class RttEstimator:
    """Smoothed RTT and its variance, the base RTO and its exponential backoff.

    One segment at a time is timed (Karn's rule: a retransmission cancels
    the measurement, so an ambiguous acknowledgement never becomes a sample).
    """

    def __init__(self, config: TcpConfig) -> None:
        self.min_rto = config.min_rto
        self.max_rto = config.max_rto
        self.initial_rto = config.initial_rto
        self.base = config.initial_rto
        self.backoff = 0
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.timed_seq: int | None = None
        self.timed_at = 0.0
        # Whether srtt rests on the handshake's sample alone.
        self.provisional = False

    def rto(self, cap: float) -> float:
        """The current retransmission timeout, backoff included, at most `cap`."""
        return min(cap, self.base * (1 << self.backoff))

    def time(self, seq: int, now: float) -> None:
        """Time the segment ending at `seq`, unless one is timed already."""
        if self.timed_seq is None:
            self.timed_seq, self.timed_at = seq, now

    def cancel(self) -> None:
        self.timed_seq = None

    def acknowledged(self, ack: int, now: float) -> float | None:
        """New data was acknowledged up to `ack`: take the sample if it covers
        the timed segment, and forget the backoff. Returns the sample taken."""
        self.backoff = 0
        if self.timed_seq is None or ack < self.timed_seq:
            return None
        rtt = now - self.timed_at
        self.sample(rtt)
        self.timed_seq = None
        return rtt

    def sample(self, rtt: float) -> None:
        """RFC 6298 section 2, the variance term floored at min_rto (TcpConfig).

        The handshake's sample is provisional: a new overlay connection's SYN
        often waits for the path lookup and the session handshake under it
        (about a second on loopback), and averaged in at 1/8 that wait kept
        the RTO at seconds for dozens of round trips, so one loss early in
        a transfer cost seconds. The first sample of data replaces it when
        smaller, as if it were the first."""
        if self.srtt is None or (self.provisional and rtt < self.srtt):
            self.srtt = rtt
            self.rttvar = rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self.provisional = False
        self.base = min(self.max_rto, self.srtt + max(self.min_rto, 4 * self.rttvar))

    def established(self) -> None:
        """The handshake finished: no backoff, and no handshake-inflated base
        without a sample; a sample it gave is provisional (`sample`)."""
        self.backoff = 0
        if self.srtt is None:
            self.base = self.initial_rto
        else:
            self.provisional = True

    def back_off(self) -> None:
        """A retransmission timeout fired: double the wait, drop the measurement."""
        self.backoff = min(self.backoff + 1, MAX_BACKOFF)
        self.timed_seq = None


class NewReno:
    """Congestion window, slow-start threshold and fast recovery (RFC 6582),
    with fast recovery undone when it proves spurious.

    Go's TCP (gVisor) answers the first flight of a new connection with a
    run of acknowledgements of the SYN alone, then one covering the whole
    flight: three or more "duplicates" for data that all arrived. Taken at
    their word they halve ssthresh to half the initial window, and on a
    long path the connection then grows one segment per round trip for the
    rest of its life (a 200 ms path: under 0.02 of its rate). When the
    recovery's full acknowledgement comes before our resend could have been
    answered (before it left, or within half the path's least round trip of
    it) nothing was lost, so the window and threshold go back to what they
    were, as an Eifel-style response (RFC 4015) does. The least round trip,
    not the smoothed one: a queue that swells the smoothed one does not
    slow the resend's answer on an emptied path.
    """

    def __init__(self, iss: int, dupack_threshold: int) -> None:
        self.dupack_threshold = dupack_threshold
        self.cwnd = 0
        self.ssthresh = _INFINITE_SSTHRESH
        self.dupacks = 0
        self.in_recovery = False
        self.recover = iss
        # The first unacknowledged segment must be resent now (fast retransmit,
        # a partial acknowledgement in recovery, or after a timeout).
        self.retransmit_head = False
        # The window and threshold before the current fast recovery, and
        # when its first resend left (None: not yet).
        self._before_recovery = (0, _INFINITE_SSTHRESH)
        self._resent_at: float | None = None

    def start(self, mss: int, at_least: int = 0) -> None:
        self.cwnd = max(initial_window(mss), at_least)

    def head_resent(self, now: float) -> None:
        """The first unacknowledged segment was just sent again."""
        if self.in_recovery and self._resent_at is None:
            self._resent_at = now

    def on_new_ack(self, acked: int, snd_una: int, snd_max: int, mss: int,
                   now: float = 0.0, min_rtt: float | None = None) -> None:
        self.dupacks = 0
        if self.in_recovery:
            if snd_una < self.recover:
                self.retransmit_head = True
                self.cwnd = max(mss, self.cwnd - acked + mss)
                return
            # A full acknowledgement (RFC 6582, 3.2 step 3, its first
            # choice): the hole a partial one asked to resend is filled.
            self.in_recovery = False
            self.retransmit_head = False
            if not self._answers_no_resend(now, min_rtt):
                self.cwnd = min(self.ssthresh, max(snd_max - snd_una, mss) + mss)
                return
            # Nothing was lost: this acknowledgement counts as any other.
            self.cwnd, self.ssthresh = self._before_recovery
        if self.cwnd < self.ssthresh:
            self.cwnd += acked
        else:
            self.cwnd += max(1, mss * acked // self.cwnd)

    def limited_transmit(self, mss: int) -> int:
        """Room beyond cwnd for new data on the first two duplicate ACKs
        (Limited Transmit, RFC 3042): each sends one more segment, whose own
        duplicate ACK helps reach the three that start fast recovery. With
        few segments in flight (a message stream's are 64 KiB each) a lost
        one is otherwise followed by too few to be noticed before the RTO;
        and an ACK that also moves the window is not counted as duplicate."""
        if self.in_recovery or not 0 < self.dupacks < self.dupack_threshold:
            return 0
        return self.dupacks * mss

    def on_duplicate_ack(self, snd_una: int, snd_max: int, mss: int) -> None:
        self.dupacks += 1
        if self.in_recovery:
            self.cwnd += mss
        elif self.dupacks == self.dupack_threshold and snd_una >= self.recover:
            self._before_recovery = (self.cwnd, self.ssthresh)
            self._resent_at = None
            flight = snd_max - snd_una
            self.ssthresh = max(flight // 2, 2 * mss)
            self.cwnd = self.ssthresh + 3 * mss
            self.recover = snd_max
            self.in_recovery = True
            self.retransmit_head = True

    def _answers_no_resend(self, now: float, min_rtt: float | None) -> bool:
        """Whether the full acknowledgement came too soon to answer our resend."""
        if self._resent_at is None:
            return True
        return min_rtt is not None and now - self._resent_at < min_rtt / 2

    def on_timeout(self, snd_una: int, snd_max: int, mss: int, handshaking: bool) -> None:
        # A SYN lost while the overlay was still finding the path says nothing
        # about the path's capacity: slow start must not end at 2 segments
        # of the pre-handshake MSS for the whole life of a kept-open
        # connection (RFC 5681 3.1 lowers only the initial window).
        if not handshaking:
            self.ssthresh = max((snd_max - snd_una) // 2, 2 * mss)
        self.cwnd = mss
        self.in_recovery = False
        self.recover = snd_max
        self.dupacks = 0
        self.retransmit_head = not handshaking
