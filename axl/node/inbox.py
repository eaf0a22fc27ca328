"""The bounded receive queue behind `GET /recv`.

Unlike the Go node, a full queue refuses new messages instead of dropping
the oldest: a refused message is reported to its sender (HTTP 503 there),
so nothing that was acknowledged is ever lost. A message taken out for a
client that then cannot be given it (the HTTP client left, a WebSocket
closed before saying "done") is given back to the front of the queue.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import count


@dataclass(frozen=True)
class InboxMessage:
    """One queued message; `id` is its own for life, so a redelivery carries the same id."""

    id: int
    sender: bytes
    payload: bytes


class Inbox:
    def __init__(self, max_messages: int, max_bytes: int) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self._messages: deque[InboxMessage] = deque()
        self._bytes = 0
        self._arrived = asyncio.Event()
        self._ids = count(1)

    def __len__(self) -> int:
        return len(self._messages)

    @property
    def queued_bytes(self) -> int:
        return self._bytes

    def has_room(self, size: int) -> bool:
        """Would a message of `size` bytes fit? An empty queue takes any size."""
        if not self._messages:
            return True
        return len(self._messages) < self.max_messages and self._bytes + size <= self.max_bytes

    def put(self, sender: bytes, payload: bytes) -> bool:
        if not self.has_room(len(payload)):
            return False
        self._messages.append(InboxMessage(next(self._ids), sender, payload))
        self._bytes += len(payload)
        self._arrived.set()
        return True

    def give_back(self, messages: Iterable[InboxMessage]) -> None:
        """Return taken messages to the front, in their order, even over the bounds.

        They were accepted (their sender saw 200) before they were taken, so
        refusing them now would lose them; the bounds apply to new arrivals.
        """
        returned = list(messages)
        self._messages.extendleft(reversed(returned))
        self._bytes += sum(len(message.payload) for message in returned)
        if self._messages:
            self._arrived.set()

    def get_nowait(self) -> InboxMessage | None:
        if not self._messages:
            return None
        message = self._messages.popleft()
        self._bytes -= len(message.payload)
        if not self._messages:
            self._arrived.clear()
        return message

    async def get(self, wait: float) -> InboxMessage | None:
        """Dequeue one message, waiting up to `wait` seconds for one to arrive."""
        message = self.get_nowait()
        if message is not None or wait <= 0:
            return message
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while message is None:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except asyncio.TimeoutError:
                return None
            message = self.get_nowait()
        return message
