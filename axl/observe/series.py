"""The dashboard's time series: a reading every few seconds, kept for an hour.

Counters are read as running totals and stored as per-second rates between
two readings; gauges (queues, memory) are stored as read. The ring has a
fixed capacity, so an hour of history costs the same after a month.
"""

from __future__ import annotations

import os
import resource
from collections import deque
from dataclasses import asdict, dataclass

SAMPLE_INTERVAL = 2.0
HISTORY_SECONDS = 3600.0


@dataclass(frozen=True, slots=True)
class Reading:
    """Running totals and gauges at one instant."""

    time: float
    messages_in: int
    messages_out: int
    bytes_in: int
    bytes_out: int
    recv_queue_messages: int
    link_queue_bytes: int
    rss_bytes: int


@dataclass(frozen=True, slots=True)
class Sample:
    time: float
    messages_in_per_sec: float
    messages_out_per_sec: float
    bytes_in_per_sec: float
    bytes_out_per_sec: float
    recv_queue_messages: int
    link_queue_bytes: int
    rss_bytes: int

    def as_json(self) -> dict:
        return asdict(self)


class SeriesRing:
    def __init__(self, capacity: int = int(HISTORY_SECONDS / SAMPLE_INTERVAL)) -> None:
        self.samples: deque[Sample] = deque(maxlen=capacity)
        self._last: Reading | None = None

    def add(self, reading: Reading) -> Sample | None:
        """Store the rates since the previous reading; the first reading only sets the origin."""
        last, self._last = self._last, reading
        if last is None or reading.time <= last.time:
            return None
        elapsed = reading.time - last.time
        sample = Sample(
            time=reading.time,
            messages_in_per_sec=(reading.messages_in - last.messages_in) / elapsed,
            messages_out_per_sec=(reading.messages_out - last.messages_out) / elapsed,
            bytes_in_per_sec=(reading.bytes_in - last.bytes_in) / elapsed,
            bytes_out_per_sec=(reading.bytes_out - last.bytes_out) / elapsed,
            recv_queue_messages=reading.recv_queue_messages,
            link_queue_bytes=reading.link_queue_bytes,
            rss_bytes=reading.rss_bytes,
        )
        self.samples.append(sample)
        return sample


def resident_bytes() -> int:
    """This process's resident memory now (Linux /proc), else its peak."""
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
