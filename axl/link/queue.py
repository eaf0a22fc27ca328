"""Per-link queue for traffic-class frames (types 6-9), sans-IO.

Frames wait here only while the transport is applying back-pressure. Flows
(one per destination/source pair) are served round robin so one bulk
sender cannot starve the others. Like ironwood, a queue whose head has
waited more than 25 ms sheds one packet before each push, taken from the
largest flow; a byte cap bounds memory regardless of timing.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass

from axl.budgets import LINK_QUEUE_BYTES

MAX_QUEUE_DELAY = 0.025


@dataclass(eq=False)
class _Queued:
    frame: bytes
    flow: bytes
    queued_at: float
    removed: bool = False


@dataclass
class _Flow:
    packets: deque[_Queued]
    size: int = 0


class FairQueue:
    def __init__(self, byte_cap: int = LINK_QUEUE_BYTES,
                 max_delay: float = MAX_QUEUE_DELAY) -> None:
        self.byte_cap = byte_cap
        self.max_delay = max_delay
        self.dropped = 0
        self._flows: OrderedDict[bytes, _Flow] = OrderedDict()
        self._arrivals: deque[_Queued] = deque()
        self._count = 0
        self._bytes = 0

    def __len__(self) -> int:
        return self._count

    @property
    def byte_count(self) -> int:
        return self._bytes

    def push(self, frame: bytes, flow_key: bytes, now: float) -> None:
        oldest = self._oldest()
        if oldest is not None and now - oldest.queued_at > self.max_delay:
            self._drop_one()
        item = _Queued(frame, flow_key, now)
        flow = self._flows.get(flow_key)
        if flow is None:
            flow = self._flows[flow_key] = _Flow(deque())
        flow.packets.append(item)
        flow.size += len(frame)
        self._arrivals.append(item)
        self._count += 1
        self._bytes += len(frame)
        while self._bytes > self.byte_cap:
            self._drop_one()

    def pop(self) -> bytes | None:
        """Next frame, taking one from each flow in turn."""
        if not self._flows:
            return None
        flow_key, flow = next(iter(self._flows.items()))
        item = flow.packets.popleft()
        frame = item.frame
        self._remove(item, flow)
        if flow.packets:
            self._flows.move_to_end(flow_key)
        return frame

    def clear(self) -> None:
        self._flows.clear()
        self._arrivals.clear()
        self._count = 0
        self._bytes = 0

    def _oldest(self) -> _Queued | None:
        while self._arrivals and self._arrivals[0].removed:
            self._arrivals.popleft()
        return self._arrivals[0] if self._arrivals else None

    def _drop_one(self) -> None:
        """Drop the oldest packet of the largest flow (by bytes)."""
        if not self._flows:
            return
        flow_key = max(self._flows, key=lambda key: self._flows[key].size)
        flow = self._flows[flow_key]
        self._remove(flow.packets.popleft(), flow)
        self.dropped += 1

    def _remove(self, item: _Queued, flow: _Flow) -> None:
        """Unlink `item`; its stub may linger in `_arrivals`, so it lets go
        of the frame to keep memory bounded by the byte cap."""
        size = len(item.frame)
        item.removed = True
        item.frame = b""
        flow.size -= size
        self._count -= 1
        self._bytes -= size
        if not flow.packets:
            del self._flows[item.flow]
