"""The durable inbox's journal: the inbox's changes, written to its store
(axl.node.store) a batch at a time.

Arrivals and deliveries wait in the batch being gathered; a commit takes
them all, at the end of the event-loop turn, or once the commit under way
on the store's thread (with `inbox_sync` "full", or with payload files to
write or remove: PreparedBatch.in_thread) is done. Checkpoints run
meanwhile on a thread of their own.
So an idle node commits each message alone and a busy one hundreds at once,
and batches are committed in the order they were gathered.

A commit costs SQLite about as much for one small message as for eight
(its statements, its pages into the WAL, then the checkpoint's copy), so a
busy node does not commit small messages one by one: when they come less
than GROUP_SECONDS apart, a commit of fewer than GROUP_MOST of them waits
GROUP_SECONDS for those that come meanwhile (eight clients' /send to one
receiver: 1.2 messages a commit became 5, the receiver's CPU per message
fell by an eighth and the sender's by a sixth). A sender that waits for
each answer before it sends again would only wait longer: after
GROUP_ALONE_TRIES held commits in a row that gathered nothing more, none
is held for GROUP_RETRY_SECONDS. Deliveries alone, whose deletion no one
waits for, wait GROUP_SECONDS for company while new messages come (one
came within GROUP_ARRIVING_SECONDS; a message delivered in that while, if
the node is killed, is delivered again, with the same id, as in the turn
before a commit). On a node receiving nothing they are committed at the
end of their turn, so that a failing disk is found before /recv hands out
another message it could not delete. No held commit gathers GROUP_MOST
deliveries or more: once it has them, or GROUP_MOST new messages, or
GROUP_MOST_BYTES, it is committed at the end of the turn, so that while
messages come /recv hands out at most GROUP_MOST more before a full disk
is found.

Only once its batch is committed is a message handed to the inbox's queue
and its sender answered; if the commit fails (a full disk), the message is
refused instead, never acknowledged, and the batch's deletions wait for the
next commit.

What the journal does next depends on one `JournalState`; `_enter` makes
every change of it, and logs those an operator must hear of, once each.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from functools import partial

from axl.eventloop import running_loop
from axl.node.msgstream import SessionRecord
from axl.node.stats import Histogram
from axl.node.store import (WAL_CAP_PAGES, Batch, Checkpointed, CommittedSession, CommittedSessions,
                            InboxStore)
from axl.node.streamsessions import SessionKey

log = logging.getLogger("axl.inbox")

# After a failed commit, or a checkpoint that could not empty the WAL, the
# next try waits this long, doubled after each failure up to the most
# (new messages try at once while commits fail).
RETRY_FIRST_SECONDS = 0.1
RETRY_MOST_SECONDS = 5.0

# Holding a small commit back (above): how long, for batches of fewer
# messages and bytes than these, and how long none is held after holding
# back gathered nothing GROUP_ALONE_TRIES times in a row.
GROUP_SECONDS = 0.001
GROUP_MOST = 8
GROUP_MOST_BYTES = 16 * 1024
GROUP_ALONE_TRIES = 3
GROUP_RETRY_SECONDS = 1.0
# Deliveries alone wait for company (above) while a message came this recently.
GROUP_ARRIVING_SECONDS = 0.01

# Told whether a message was stored (True: answer its sender "queued").
Settled = Callable[[bool], None]
# Where a message came from on its sender's message stream: (session id, sequence number).
StreamOrigin = tuple[int, int]


@dataclass(init=False)
class InboxMessage:
    """One queued message; `id` is its own for life, so a redelivery carries the same id."""

    id: int
    sender: bytes
    payload: bytes

    def __init__(self, id: int, sender: bytes, payload: bytes) -> None:
        self.id = id
        self.sender = sender
        self.payload = payload


class JournalState(Enum):
    """What the journal does with new messages, deliveries and checkpoints."""

    # Batches commit as they gather.
    READY = "ready"
    # The WAL reached WAL_CAP_PAGES, or commits succeed again after FAILING:
    # commits wait for a checkpoint that empties it.
    EMPTYING = "emptying"
    # That checkpoint could not empty it (another process reads the file, or the
    # disk has no room for the pages it copies into the database): new
    # messages are refused, deliveries commit, the checkpoint is tried again after a back-off.
    WAL_HELD = "wal held"
    # The last commit failed (a full disk): new messages try at once (and are
    # refused while commits fail), the rest after a back-off; no client is handed a message.
    # The first commit that succeeds again empties the WAL (EMPTYING): while
    # commits failed and the disk had room now and then, the WAL grew into it,
    # and a checkpoint is due only every CHECKPOINT_PAGES.
    FAILING = "failing"
    CLOSED = "closed"


# From each state, those the journal may go to.
_TRANSITIONS: dict[JournalState, frozenset[JournalState]] = {
    JournalState.READY: frozenset({JournalState.EMPTYING, JournalState.FAILING, JournalState.CLOSED}),
    JournalState.EMPTYING: frozenset({JournalState.READY, JournalState.WAL_HELD, JournalState.FAILING,
                                      JournalState.CLOSED}),
    JournalState.WAL_HELD: frozenset({JournalState.EMPTYING, JournalState.FAILING, JournalState.CLOSED}),
    JournalState.FAILING: frozenset({JournalState.EMPTYING, JournalState.CLOSED}),
    JournalState.CLOSED: frozenset(),
}


@dataclass(init=False, slots=True)
class _Staged:
    message: InboxMessage
    origin: StreamOrigin | None
    settled: Settled

    def __init__(self, message: InboxMessage, origin: StreamOrigin | None, settled: Settled) -> None:
        self.message = message
        self.origin = origin
        self.settled = settled


@dataclass
class Backoff:
    """The wait before the next try after a failure: doubled each time, up to `most`."""

    first: float = RETRY_FIRST_SECONDS
    most: float = RETRY_MOST_SECONDS
    tries: int = 0

    def next_wait(self) -> float:
        wait = min(self.most, self.first * 2 ** min(self.tries, 32))
        self.tries += 1
        return wait

    def reset(self) -> None:
        self.tries = 0


class Journal:
    """Commits the inbox's arrivals and deliveries to `store`. `stored` and
    `refused` are told each message's fate before its sender is."""

    def __init__(self, store: InboxStore, sessions: list[tuple[SessionKey, CommittedSession]], last_id: int,
                 commit_seconds: Histogram, stored: Callable[[InboxMessage], None],
                 refused: Callable[[InboxMessage], None]) -> None:
        self.store = store
        self.commit_seconds = commit_seconds
        self._on_stored = stored
        self._on_refused = refused
        self._last_id = last_id
        self._staged: list[_Staged] = []
        self._deletes: list[int] = []
        # The stream sessions' messages as committed (what a restart would find).
        self._sessions = CommittedSessions()
        self._forgotten: list[SessionKey] = []
        self.state = JournalState.READY
        self._why = ""  # what went wrong, in FAILING and WAL_HELD
        # Work under way on the store's threads: a commit (inbox_sync "full"), a checkpoint.
        self._commit_under_way: asyncio.Future | None = None
        self._checkpoint: asyncio.Future | None = None
        # The next step (at the end of this loop turn, or held back), and the next try after a failure.
        self._next_step: asyncio.Handle | None = None
        self._step_held = False
        self._retry: asyncio.TimerHandle | None = None
        self._backoff = Backoff()
        # When the last message came and how long after the one before, and
        # before when no new message is held back (loop time).
        self._last_arrival_at = -GROUP_SECONDS
        self._arrival_gap = GROUP_SECONDS
        self._hold_again_at = 0.0
        self._held_alone = 0  # commits held back in a row that gathered one new message alone
        for key, session in sessions:
            self._keep(key, session)

    def session_records(self) -> list[tuple[bytes, int, SessionRecord]]:
        """The committed sessions as the message streams' receiver remembers
        them (MessageStreams.restore_sessions), least recently written first."""
        return [(*key, SessionRecord.restored(session.taken_upto, session.committed()))
                for key, session in self._sessions.items()]

    @property
    def delivery_refusal(self) -> str | None:
        """Why no client may be handed a message now (its deletion could not
        be committed, so it would be delivered again after a restart), or None."""
        if self.state is JournalState.FAILING:
            return f"the inbox cannot record deliveries ({self._why}): no message is handed out until it can"
        return None

    def add(self, message: InboxMessage, origin: StreamOrigin | None, settled: Settled) -> None:
        if message.id > self._last_id:
            self._last_id = message.id
        if self.state is JournalState.WAL_HELD:
            self._refuse([_Staged(message, origin, settled)])
            return
        self._staged.append(_Staged(message, origin, settled))
        now = running_loop().time()
        self._arrival_gap, self._last_arrival_at = now - self._last_arrival_at, now
        self._step_soon()

    def delete(self, message_ids: list[int]) -> None:
        """The messages `message_ids` were delivered: they leave the file with the next commit."""
        self._deletes += message_ids
        if self.state is not JournalState.FAILING:  # else with the next try
            self._step_soon()

    # -- the state, and its changes ------------------------------------------------

    def _enter(self, state: JournalState, why: str = "") -> None:
        """Change the state (the only place that does), logging what an
        operator must hear of once per episode, not once per try."""
        before = self.state
        if state is before:
            return
        assert state in _TRANSITIONS[before], f"inbox journal: {before} -> {state}"
        self.state = state
        if why:
            self._why = why
        held_before = self._backoff.tries > 0
        if state is JournalState.FAILING:
            log.error("inbox: cannot commit to %s (%s): new messages are refused (503) and /recv hands "
                      "out none until a commit succeeds", self.store.path, why)
        elif state is JournalState.WAL_HELD and not held_before:
            log.error("inbox: the WAL of %s cannot be emptied (%s): new messages are refused (503) until it "
                      "can; trying again every %g s at most", self.store.path, why, RETRY_MOST_SECONDS)
        elif before is JournalState.FAILING:
            log.info("inbox: commits succeed again; emptying the WAL")
        elif state is JournalState.READY and held_before:
            log.info("inbox: the WAL of %s was emptied: new messages are taken again", self.store.path)
        if state in (JournalState.READY, JournalState.CLOSED) or before is JournalState.FAILING:
            self._backoff.reset()
            if self._retry is not None:
                self._retry.cancel()
                self._retry = None
        if state is JournalState.CLOSED and self._next_step is not None:
            self._next_step.cancel()
            self._next_step = None

    def _step_soon(self) -> None:
        """The next step, at the end of this loop turn; a step held back
        (`_holds_back`) is brought forward once its batch is no longer
        worth holding (a message that may not wait, or a full batch)."""
        if self.state is JournalState.CLOSED:
            return
        if self._next_step is not None:
            if not self._step_held or self._worth_holding(running_loop().time()):
                return
            self._next_step.cancel()
        self._step_held = False
        self._next_step = running_loop().call_soon(self._step)

    def _holds_back(self) -> bool:
        """Whether the commit due at the end of this turn waits GROUP_SECONDS
        for more to commit with it; only while commits succeed on the event
        loop (not "full", whose commits wait for the disk on a thread and
        gather meanwhile)."""
        if self.state is not JournalState.READY or self.store.commits_wait_for_disk:
            return False
        return self._worth_holding(running_loop().time())

    def _worth_holding(self, now: float) -> bool:
        """A batch of fewer than GROUP_MOST deliveries, and either a few new
        messages (fewer than GROUP_MOST, under GROUP_MOST_BYTES) while they
        come close together, or none while new messages come (a commit is
        due soon anyway). The bound on deliveries bounds what /recv hands out
        before a held commit finds that the disk cannot take their deletions."""
        if len(self._deletes) >= GROUP_MOST:
            return False
        staged = self._staged
        if not staged:
            return now - self._last_arrival_at < GROUP_ARRIVING_SECONDS
        return (len(staged) < GROUP_MOST and sum(len(entry.message.payload) for entry in staged) < GROUP_MOST_BYTES
                and self._may_hold(now))

    def _may_hold(self, now: float) -> bool:
        return self._arrival_gap < GROUP_SECONDS and now >= self._hold_again_at

    def _count_held(self) -> None:
        """A held back commit is due: if it gathered one new message alone
        GROUP_ALONE_TRIES times in a row, none is held for GROUP_RETRY_SECONDS."""
        if not self._staged:
            return
        self._held_alone = self._held_alone + 1 if len(self._staged) == 1 else 0
        if self._held_alone >= GROUP_ALONE_TRIES:
            self._held_alone = 0
            self._hold_again_at = running_loop().time() + GROUP_RETRY_SECONDS

    def _retry_later(self) -> None:
        """Try again after a back-off: a commit (FAILING) or emptying the WAL (WAL_HELD)."""
        if self._retry is None and self.state is not JournalState.CLOSED:
            self._retry = running_loop().call_later(self._backoff.next_wait(), self._retried)

    def _retried(self) -> None:
        self._retry = None
        if self.state is JournalState.WAL_HELD:
            self._enter(JournalState.EMPTYING)
        self._step_soon()

    def _commits_wait_for(self) -> asyncio.Future | None:
        """What the next commit must wait for: the commit under way, or a
        checkpoint that empties the WAL (it takes SQLite's write lock)."""
        if self._commit_under_way is not None:
            return self._commit_under_way
        if self.state is JournalState.EMPTYING:
            return self._checkpoint
        return None

    def _step(self) -> None:
        """Do what the state says is next: empty the WAL, or commit."""
        self._next_step = None
        held, self._step_held = self._step_held, False
        if self.state is JournalState.CLOSED or self._commits_wait_for() is not None:
            return
        if self.state is JournalState.EMPTYING:
            self._start_checkpoint(truncate=True)
        elif self._pending or self.state is JournalState.FAILING:
            # In FAILING with nothing waiting, a commit of nothing finds out whether the disk has room.
            if held:
                self._count_held()
            elif self._holds_back():
                self._step_held = True
                self._next_step = running_loop().call_later(GROUP_SECONDS, self._step)
                return
            self._commit()

    @property
    def _pending(self) -> bool:
        return bool(self._staged or self._deletes or self._forgotten)

    # -- commits -------------------------------------------------------------------

    def _commit(self) -> None:
        store = self.store
        staged, self._staged = self._staged, []
        batch = Batch(deletes=self._deletes, forgotten=self._forgotten, last_id=self._last_id)
        self._deletes, self._forgotten = [], []
        started = time.monotonic()
        # Whatever fails from here on (not only SQLite: building the batch,
        # out of memory) refuses the batch's messages, which hold inbox room.
        try:
            batch.inserts = [(s.message.id, s.message.sender, s.message.payload) for s in staged]
            batch.sessions = self._sessions_after(staged)
            prepared = store.prepare(batch)
            if prepared.in_thread:
                self._commit_under_way = asyncio.wrap_future(store.write_in_thread(prepared))
                self._commit_under_way.add_done_callback(partial(self._committed, staged, batch, started))
                return
            store.write(prepared)
        except Exception as exc:
            self._failed(staged, batch, exc)
            return
        self._stored(staged, batch, started)

    def _committed(self, staged: list[_Staged], batch: Batch, started: float, done: asyncio.Future) -> None:
        self._commit_under_way = None
        error = done.exception()
        if error is not None:
            self._failed(staged, batch, error)
        else:
            self._stored(staged, batch, started)

    def _stored(self, staged: list[_Staged], batch: Batch, started: float) -> None:
        """A batch is committed: its messages are queued and their senders answered."""
        self.commit_seconds.observe(time.monotonic() - started)
        if self.state is JournalState.FAILING:
            self._enter(JournalState.EMPTYING)
        for key, session in batch.sessions.items():
            self._keep(key, session)
        for entry in staged:
            self._on_stored(entry.message)
            entry.settled(True)
        self._checkpoint_if_due()
        if self._pending or self.state is JournalState.EMPTYING:
            self._step_soon()

    def _failed(self, staged: list[_Staged], batch: Batch, error: BaseException) -> None:
        """A commit failed (a full disk): its messages are refused, never
        acknowledged; its deletions wait for the next try. What was staged
        meanwhile (a commit on the store's thread) tries at once."""
        if self.state is not JournalState.CLOSED:
            self._enter(JournalState.FAILING, str(error))
        self._refuse(staged)
        self._deletes[:0] = batch.deletes
        self._forgotten[:0] = batch.forgotten
        if self._staged:
            self._step_soon()
        self._retry_later()

    def _refuse(self, staged: list[_Staged]) -> None:
        for entry in staged:
            self._on_refused(entry.message)
            entry.settled(False)

    def _sessions_after(self, staged: list[_Staged]) -> dict[SessionKey, CommittedSession]:
        """The stream sessions as they will be once `staged` is committed, as
        copies: a failed commit leaves the committed ones as they were."""
        numbers: dict[SessionKey, list[int]] = {}
        for entry in staged:
            origin = entry.origin
            if origin is not None:
                key = (entry.message.sender, origin[0])
                found = numbers.get(key)
                if found is None:
                    numbers[key] = [origin[1]]
                else:
                    found.append(origin[1])
        sessions: dict[SessionKey, CommittedSession] = {}
        for key, seqs in numbers.items():
            committed = self._sessions.get(key)
            session = sessions[key] = CommittedSession() if committed is None else replace(committed)
            session.add_all(seqs)
        return sessions

    def _keep(self, key: SessionKey, session: CommittedSession) -> None:
        self._forgotten += self._sessions.put(key, session)

    # -- checkpoints ---------------------------------------------------------------

    def _checkpoint_if_due(self) -> None:
        """A checkpoint, on its thread while commits go on, when the WAL has
        grown by CHECKPOINT_PAGES (none while the WAL waits to be emptied)."""
        if self._checkpoint is None and self.state in (JournalState.READY, JournalState.FAILING) \
                and self.store.checkpoint_due:
            self._start_checkpoint(truncate=False)

    def _start_checkpoint(self, truncate: bool) -> None:
        """With `truncate`, one that empties the WAL, which commits wait for:
        it never waits for another process's reader, so not for long."""
        self._checkpoint = asyncio.wrap_future(self.store.checkpoint_in_thread(truncate=truncate))
        self._checkpoint.add_done_callback(partial(self._checkpointed, truncate))

    def _checkpointed(self, truncate: bool, done: asyncio.Future) -> None:
        self._checkpoint = None
        if self.state is JournalState.CLOSED:
            return
        error = done.exception()
        result: Checkpointed | None = None if error is not None else done.result()
        if truncate and self.state is JournalState.EMPTYING:
            if result is not None and result.complete:
                self._enter(JournalState.READY)
            else:
                self._enter(JournalState.WAL_HELD, _held_because(result, error))
                staged, self._staged = self._staged, []
                self._refuse(staged)
                self._retry_later()
        elif error is not None:
            log.warning("inbox: checkpoint of %s failed (%s); its WAL grows until one succeeds",
                        self.store.path, error)
        elif result is not None and result.wal_pages >= WAL_CAP_PAGES and self.state is JournalState.READY:
            self._enter(JournalState.EMPTYING)
        self._checkpoint_if_due()
        if self._pending or self.state is JournalState.EMPTYING:
            self._step_soon()

    # -- stopping ------------------------------------------------------------------

    async def flush(self) -> None:
        """Commit what waits (the node is stopping): its senders get their
        answers. Gives up at the first commit that fails."""
        while self.state is not JournalState.CLOSED:
            waiting = self._commits_wait_for()
            if waiting is not None:
                await asyncio.wait([waiting])
            elif self._pending:
                self._commit()
                if self._commit_under_way is not None:
                    await asyncio.wait([self._commit_under_way])
                if self.state is JournalState.FAILING:
                    return
            elif self._checkpoint is not None:
                await asyncio.wait([self._checkpoint])
            else:
                return

    def close(self) -> None:
        """Close the store (after `flush`); the journal is not used again."""
        self._enter(JournalState.CLOSED)
        self.store.close()


def _held_because(result: Checkpointed | None, error: BaseException | None) -> str:
    if error is not None:
        return f"the checkpoint failed: {error}"
    assert result is not None
    return (f"{result.wal_pages} pages; another process holds a read transaction on it: an sqlite3 "
            f"shell or a backup?")
