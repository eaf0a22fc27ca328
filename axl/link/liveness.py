"""Link liveness with ironwood's exact rules (peerMonitor), sans-IO.

Go expects an answer to every non-keepalive frame within 3 s and answers
ours with a keepalive after 1 s of its own silence. An idle link is
therefore silent; a link where one side stops answering is dropped.
"""

from __future__ import annotations

from enum import Enum

from axl.link.framing import FrameType

KEEPALIVE_DELAY = 1.0
PEER_TIMEOUT = 3.0

_QUIET_TYPES = (FrameType.DUMMY, FrameType.KEEPALIVE)


class LivenessAction(Enum):
    SEND_KEEPALIVE = "send_keepalive"
    TIMEOUT = "timeout"


class LivenessMonitor:
    """Tracks the keepalive timer and the read deadline of one link.

    - Receiving a frame other than dummy/keepalive arms the keepalive timer
      unless it is already armed; any send disarms it.
    - Sending a frame other than dummy/keepalive arms the read deadline
      unless it is already armed (later sends do not push it back); any
      receive disarms it.
    """

    def __init__(self, keepalive_delay: float = KEEPALIVE_DELAY,
                 peer_timeout: float = PEER_TIMEOUT) -> None:
        self.keepalive_delay = keepalive_delay
        self.peer_timeout = peer_timeout
        self.keepalive_at: float | None = None
        self.deadline_at: float | None = None

    def on_sent(self, ftype: int, now: float) -> None:
        self.keepalive_at = None
        if self.deadline_at is None and ftype not in _QUIET_TYPES:
            self.deadline_at = now + self.peer_timeout

    def on_received(self, ftype: int, now: float) -> None:
        self.deadline_at = None
        if self.keepalive_at is None and ftype not in _QUIET_TYPES:
            self.keepalive_at = now + self.keepalive_delay

    def next_deadline(self) -> float | None:
        """The earliest time `poll` may have something to do."""
        times = [t for t in (self.keepalive_at, self.deadline_at) if t is not None]
        return min(times) if times else None

    def poll(self, now: float) -> LivenessAction | None:
        """What is due at `now`. The timeout wins over a keepalive; the
        caller reports the keepalive it then writes through `on_sent`."""
        if self.deadline_at is not None and now >= self.deadline_at:
            return LivenessAction.TIMEOUT
        if self.keepalive_at is not None and now >= self.keepalive_at:
            self.keepalive_at = None
            return LivenessAction.SEND_KEEPALIVE
        return None
