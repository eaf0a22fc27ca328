"""The bounded receive queue behind `GET /recv` and `/ws?recv=1`.

Unlike the Go node, a full queue refuses new messages instead of dropping
the oldest: a refused message is reported to its sender (HTTP 503 there),
so nothing that was acknowledged is ever lost. Before it refuses, a message
that finds the queue full waits up to ROOM_WAIT for room, unanswered: a
reader that keeps reading then slows its senders down (their answers come
later, and a message stream's TCP window stays closed meanwhile) instead of
having them refused whenever it falls a window behind. At most as many
bytes as the queue holds wait so, and as many messages as it holds or as
one stream sender keeps unanswered (STREAM_WINDOW), whichever is more;
beyond that, and past the wait, the answer is 503 as before. A message taken out for a
client that then cannot be given it (the HTTP client left, a WebSocket
closed before saying "done") is given back to the front of the queue. It
leaves the inbox for good once the bridge says it was delivered.

With a store (axl.node.store) the inbox is durable: a message is committed
before its sender is answered, and its deletion once it was delivered, in
batches (axl.node.journal). A message becomes visible to clients only once
committed, so a client never reads one its sender may still see fail.

A long poll waiting on an empty queue is handed the next message directly
(first come, first served): no wake-up of every poller, no task, one timer.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial

from axl.budgets import STREAM_WINDOW
from axl.eventloop import running_loop
from axl.node.journal import InboxMessage, Journal, Settled, StreamOrigin
from axl.node.msgstream import SessionRecord
from axl.node.stats import Histogram
from axl.node.store import InboxStore

# From a commit into the WAL (well under a millisecond) to one flushed to a
# slow disk under load.
COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

# How long a message that finds the queue full waits for room before its
# sender is refused: long enough to ride out a reader's pause (a /ws client
# a window behind, a poller between requests), short against the sender's
# send_timeout, so a reader that stopped costs its senders half a second.
ROOM_WAIT = 0.5


@dataclass(eq=False)
class WaitingForRoom:
    """A message that found the queue full, unanswered until room opens or `deadline`."""

    sender: bytes
    payload: bytes
    settled: Settled
    origin: StreamOrigin | None
    deadline: float


class Inbox:
    def __init__(self, max_messages: int, max_bytes: int, store: InboxStore | None = None,
                 room_wait: float = ROOM_WAIT) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.room_wait = room_wait
        self.max_waiting = max(max_messages, STREAM_WINDOW)
        self._waiting_for_room: deque[WaitingForRoom] = deque()
        self._waiting_bytes = 0
        self._room_timer: asyncio.TimerHandle | None = None
        self._taking_waiting = False
        # messages that waited for room: taken in the end, or refused
        self.waited_for_room = 0
        self.refused_after_wait = 0
        self._messages: deque[InboxMessage] = deque()
        self._bytes = 0
        # accepted and not yet delivered: queued, with a client, or being committed
        self.held = 0
        self.held_bytes = 0
        self._waiters: deque[asyncio.Future[InboxMessage | None]] = deque()
        self.commit_seconds = Histogram(COMMIT_BUCKETS)
        # the highest message id given (with a store, never given twice across restarts either)
        self._last_id = 0
        self.journal: Journal | None = None
        if store is not None:
            kept = store.take_kept()
            for id_, sender, payload in kept.messages:
                self._enqueue(InboxMessage(id_, sender, payload))
            self.held, self.held_bytes = len(self._messages), self._bytes
            self._last_id = kept.last_id
            self.journal = Journal(store, kept.sessions, kept.last_id, self.commit_seconds,
                                   stored=self._enqueue, refused=self._refused)

    def __len__(self) -> int:
        """Messages waiting for a client."""
        return len(self._messages)

    @property
    def queued_bytes(self) -> int:
        return self._bytes

    @property
    def durable(self) -> bool:
        return self.journal is not None

    @property
    def waiting_for_room(self) -> int:
        """Messages that found the queue full and wait, unanswered, for room."""
        return len(self._waiting_for_room)

    @property
    def waiting_polls(self) -> int:
        """Long polls waiting for the next message (the queue is empty while any do)."""
        return len(self._waiters)

    def session_records(self) -> list[tuple[bytes, int, SessionRecord]]:
        """The message stream sessions whose messages a durable inbox committed
        (after a restart: before it), as the stream's receiver remembers them."""
        return self.journal.session_records() if self.journal is not None else []

    @property
    def delivery_refusal(self) -> str | None:
        """Why no message may be handed to a client now (a durable inbox that
        cannot commit deletions: it would deliver them again), or None."""
        return self.journal.delivery_refusal if self.journal is not None else None

    def has_room(self, size: int) -> bool:
        """Would a message of `size` bytes fit? An inbox holding nothing takes any size."""
        if not self.held:
            return True
        return self.held < self.max_messages and self.held_bytes + size <= self.max_bytes

    def put(self, sender: bytes, payload: bytes, settled: Settled, origin: StreamOrigin | None = None) -> None:
        """Take a message if there is room, else let it wait for room (behind
        those already waiting: arrivals keep their order); `settled` says
        whether it is stored: in memory at once, with a store after its
        commit (False if that fails), False if no room opened in time."""
        if self._waiting_for_room or not self.has_room(len(payload)):
            self._wait_for_room(sender, payload, settled, origin)
            return
        self._take(sender, payload, settled, origin)

    def _take(self, sender: bytes, payload: bytes, settled: Settled, origin: StreamOrigin | None) -> None:
        self._last_id += 1
        message = InboxMessage(self._last_id, sender, payload)
        self.held += 1
        self.held_bytes += len(payload)
        if self.journal is None:
            self._enqueue(message)
            settled(True)
        else:
            self.journal.add(message, origin, settled)

    def _wait_for_room(self, sender: bytes, payload: bytes, settled: Settled,
                       origin: StreamOrigin | None) -> None:
        waiting = self._waiting_for_room
        if self.room_wait <= 0 or (waiting and (len(waiting) >= self.max_waiting
                                                or self._waiting_bytes + len(payload) > self.max_bytes)):
            settled(False)
            return
        loop = running_loop()
        waiting.append(WaitingForRoom(sender, payload, settled, origin, loop.time() + self.room_wait))
        self._waiting_bytes += len(payload)
        self.waited_for_room += 1
        if self._room_timer is None:
            self._room_timer = loop.call_at(waiting[0].deadline, self._room_wait_over)

    def _room_opened(self) -> None:
        """Take the messages waiting for room, in their order, while they fit.
        A journal that refuses at once (its WAL held) opens room again inside
        `_take`: that call returns, and this loop goes on to the next one."""
        if self._taking_waiting:
            return
        self._taking_waiting = True
        waiting = self._waiting_for_room
        try:
            while waiting and self.has_room(len(waiting[0].payload)):
                entry = self._stop_waiting()
                self._take(entry.sender, entry.payload, entry.settled, entry.origin)
        finally:
            self._taking_waiting = False
        if not waiting and self._room_timer is not None:
            self._room_timer.cancel()
            self._room_timer = None

    def _room_wait_over(self) -> None:
        """Refuse the messages whose wait ended with the queue still full."""
        self._room_timer = None
        waiting = self._waiting_for_room
        loop = running_loop()
        while waiting and waiting[0].deadline <= loop.time():
            self.refused_after_wait += 1
            self._stop_waiting().settled(False)
        if waiting:
            self._room_timer = loop.call_at(waiting[0].deadline, self._room_wait_over)

    def _stop_waiting(self) -> WaitingForRoom:
        entry = self._waiting_for_room.popleft()
        self._waiting_bytes -= len(entry.payload)
        return entry

    def _enqueue(self, message: InboxMessage) -> None:
        if not self._hand_over(message):
            self._messages.append(message)
            self._bytes += len(message.payload)

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

    def delivered(self, messages: Iterable[InboxMessage]) -> None:
        """Taken messages that reached their client: they leave the inbox (the store's copy too)."""
        ids: list[int] = []
        for message in messages:
            self._release(message)
            ids.append(message.id)
        if self.journal is not None and ids:
            self.journal.delete(ids)
        if self._waiting_for_room:
            self._room_opened()

    def _refused(self, message: InboxMessage) -> None:
        """A commit failed: `message` was refused after all, and its room is free."""
        self._release(message)
        if self._waiting_for_room:
            self._room_opened()

    def _release(self, message: InboxMessage) -> None:
        """`message` is no longer held: delivered, or refused after all."""
        self.held -= 1
        self.held_bytes -= len(message.payload)

    def get_nowait(self) -> InboxMessage | None:
        """The next message, or None: also while the inbox cannot commit
        deletions, so that no client path hands out what it would deliver again."""
        if not self._messages or self.delivery_refusal is not None:
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
        loop = running_loop()
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
            message = waiter.result() if waiter.done() and not waiter.cancelled() else None
            if message is not None:
                self.give_back([message])
            raise

    async def flush(self) -> None:
        """Commit what waits (the node is stopping): its senders get their
        answers, and those of messages waiting for room a refusal."""
        while self._waiting_for_room:
            self._stop_waiting().settled(False)
        if self._room_timer is not None:
            self._room_timer.cancel()
            self._room_timer = None
        if self.journal is not None:
            await self.journal.flush()

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()


def _give_up(waiter: asyncio.Future, _settled: object = None) -> None:
    """A poll's wait is over (its time ran out or its client left): it gets None."""
    if not waiter.done():
        waiter.set_result(None)
