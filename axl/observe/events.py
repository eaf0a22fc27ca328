"""Fan-out of live events (peer up/down, samples, log lines) to Server-Sent Events clients.

Every subscriber has a bounded queue. One that falls behind is dropped (its
stream ends and the browser reconnects) instead of making the node buffer
without limit; the number of subscribers is capped too.
"""

from __future__ import annotations

import asyncio

MAX_SUBSCRIBERS = 32
QUEUE_LIMIT = 256

Event = tuple[str, dict]


class EventHub:
    def __init__(self, max_subscribers: int = MAX_SUBSCRIBERS, queue_limit: int = QUEUE_LIMIT) -> None:
        self.max_subscribers = max_subscribers
        self.queue_limit = queue_limit
        self._queues: set[asyncio.Queue[Event | None]] = set()

    def subscribe(self) -> asyncio.Queue[Event | None] | None:
        """A new subscriber's queue, or None when there are already too many."""
        if len(self._queues) >= self.max_subscribers:
            return None
        queue: asyncio.Queue[Event | None] = asyncio.Queue(self.queue_limit + 1)
        self._queues.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[Event | None]) -> None:
        self._queues.discard(queue)

    def publish(self, kind: str, data: dict) -> None:
        for queue in list(self._queues):
            if queue.qsize() >= self.queue_limit:
                self._end(queue)
            else:
                queue.put_nowait((kind, data))

    def close(self) -> None:
        """End every stream (the bridge is shutting down)."""
        for queue in list(self._queues):
            self._end(queue)

    def _end(self, queue: asyncio.Queue[Event | None]) -> None:
        self._queues.discard(queue)
        queue.put_nowait(None)
