"""One timer for many objects: each holds its own `deadline`, a heap finds
the earliest.

Each owner keeps at most one live heap entry. Moving a deadline earlier
pushes a new entry; moving it later (an idle timer pushed back on every
received chunk) only changes the owner, and when the old entry comes up it
is moved to the owner's current deadline. So the heap holds about one entry
per owner, however often deadlines move, instead of one per move until the
old ones expire.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar


class HasDeadline(Protocol):
    deadline: float | None


T = TypeVar("T", bound=HasDeadline)


class Deadlines(Generic[T]):
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, T]] = []
        self._order = itertools.count()
        self._queued: dict[T, float] = {}

    def __len__(self) -> int:
        """Heap entries held (for tests: stays near the number of owners)."""
        return len(self._heap)

    def set(self, owner: T, when: float | None) -> None:
        if owner.deadline == when:
            return
        owner.deadline = when
        if when is None:
            return
        queued = self._queued.get(owner)
        if queued is None or when < queued:
            self._queued[owner] = when
            heapq.heappush(self._heap, (when, next(self._order), owner))

    def earliest(self) -> float | None:
        self._settle_top()
        return self._heap[0][0] if self._heap else None

    def due(self, now: float) -> Iterator[T]:
        """The owners whose deadline has passed, earliest first; each one's
        deadline is cleared before it is yielded."""
        heap = self._heap
        while True:
            self._settle_top()
            if not heap or heap[0][0] > now:
                return
            _, _, owner = heapq.heappop(heap)
            del self._queued[owner]
            owner.deadline = None
            yield owner

    def _settle_top(self) -> None:
        """Drop superseded entries and move postponed ones until the top is live."""
        heap = self._heap
        queued = self._queued
        while heap:
            when, _, owner = heap[0]
            if queued.get(owner) != when:
                heapq.heappop(heap)
                continue
            deadline = owner.deadline
            if deadline == when:
                return
            heapq.heappop(heap)
            if deadline is None:
                del queued[owner]
            else:
                queued[owner] = deadline
                heapq.heappush(heap, (deadline, next(self._order), owner))
