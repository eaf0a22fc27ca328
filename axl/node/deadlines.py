"""One timer for many objects: each holds its own `deadline`, a heap finds
the earliest. Changing a deadline pushes a new entry and leaves the old one
in the heap, where it is skipped because it no longer matches."""

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

    def set(self, owner: T, when: float | None) -> None:
        if owner.deadline == when:
            return
        owner.deadline = when
        if when is not None:
            heapq.heappush(self._heap, (when, next(self._order), owner))

    def earliest(self) -> float | None:
        heap = self._heap
        while heap and heap[0][2].deadline != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def due(self, now: float) -> Iterator[T]:
        """The owners whose deadline has passed, earliest first; each one's
        deadline is cleared before it is yielded."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            when, _, owner = heapq.heappop(heap)
            if owner.deadline != when:
                continue
            owner.deadline = None
            yield owner
