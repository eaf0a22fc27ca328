"""The bounded receive queue behind `GET /recv`.

Unlike the Go node, a full queue refuses new messages instead of dropping
the oldest: a refused message is reported to its sender (HTTP 503 there),
so nothing that was acknowledged is ever lost. A message taken out for a
client that then cannot be given it (the HTTP client left, a WebSocket
closed before saying "done") is given back to the front of the queue.

A long poll waiting on an empty queue is handed the next message directly
(first come, first served): no wake-up of every poller, no task, one timer.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
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
        self._waiters: deque[asyncio.Future[InboxMessage | None]] = deque()
        self._ids = count(1)

    def __len__(self) -> int:
        return len(self._messages)

    @property
    def queued_bytes(self) -> int:
        return self._bytes

    @property
    def waiting_polls(self) -> int:
        """Long polls waiting for the next message (the queue is empty while any do)."""
        return len(self._waiters)

    def has_room(self, size: int) -> bool:
        """Would a message of `size` bytes fit? An empty queue takes any size."""
        if not self._messages:
            return True
        return len(self._messages) < self.max_messages and self._bytes + size <= self.max_bytes

    def put(self, sender: bytes, payload: bytes) -> bool:
        if not self.has_room(len(payload)):
            return False
        message = InboxMessage(next(self._ids), sender, payload)
        if not self._hand_over(message):
            self._messages.append(message)
            self._bytes += len(payload)
        return True

    def _hand_over(self, message: InboxMessage) -> bool:
        """Give `message` to the longest-waiting poll still waiting, if any."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(message)
                return True
        return False

    def give_back(self, messages: Iterable[InboxMessage]) -> None:
        """Return taken messages to the front, in their order, even over the bounds.

        They were accepted (their sender saw 200) before they were taken, so
        refusing them now would lose them; the bounds apply to new arrivals.
        """
        returned = deque(messages)
        while returned and self._hand_over(returned[0]):
            returned.popleft()
        self._messages.extendleft(reversed(returned))
        self._bytes += sum(len(message.payload) for message in returned)

    def get_nowait(self) -> InboxMessage | None:
        if not self._messages:
            return None
        message = self._messages.popleft()
        self._bytes -= len(message.payload)
        return message

    def take(self, wait: float, until: asyncio.Future | None = None) -> asyncio.Future[InboxMessage | None]:
        """The next message as a future, for a caller that would rather not
        run a task per poll: settled at once when a message is queued (or
        `wait` is 0), else with the next message to arrive, or with None when
        `wait` seconds pass or `until` (if given) settles: the client has left.
        """
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[InboxMessage | None] = loop.create_future()
        if until is not None and until.done():
            waiter.set_result(None)
            return waiter
        message = self.get_nowait()
        if message is not None or wait <= 0:
            waiter.set_result(message)
            return waiter
        self._waiters.append(waiter)
        timer = loop.call_later(wait, _give_up, waiter)
        gives_up = partial(_give_up, waiter)
        if until is not None:
            until.add_done_callback(gives_up)
        waiter.add_done_callback(partial(self._waited, timer, until, gives_up))
        return waiter

    def _waited(self, timer: asyncio.TimerHandle, until: asyncio.Future | None,
                gives_up: partial, waiter: asyncio.Future) -> None:
        timer.cancel()
        if until is not None:
            until.remove_done_callback(gives_up)
        if waiter in self._waiters:
            self._waiters.remove(waiter)

    async def get(self, wait: float, until: asyncio.Future | None = None) -> InboxMessage | None:
        """`take`, awaited. A caller cancelled after a message was handed to it gives it back."""
        waiter = self.take(wait, until)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.result() is not None:
                self.give_back([waiter.result()])
            raise


def _give_up(waiter: asyncio.Future, _settled: object = None) -> None:
    """A poll's wait is over (its time ran out or its client left): it gets None."""
    if not waiter.done():
        waiter.set_result(None)
