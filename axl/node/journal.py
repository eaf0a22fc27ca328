"""The durable inbox's journal: the inbox's changes, written to its store
(axl.node.store) a batch at a time.

Arrivals and deliveries wait in the batch being gathered; a commit takes
them all, at the end of the event-loop turn, or once the commit under way
on the store's thread (with `inbox_sync` "full") is done. Checkpoints run
meanwhile on a thread of their own.
So an idle node commits each message alone and a busy one hundreds at once,
and batches are committed in the order they were gathered. Only once its
batch is committed is a message handed to the inbox's queue and its sender
answered; if the commit fails (a full disk), the message is refused instead,
never acknowledged, and the batch's deletions wait for the next commit.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING

from axl.node.msgstream import SessionRecord
from axl.node.stats import Histogram
from axl.node.store import WAL_CAP_PAGES, Batch, CommittedSession, CommittedSessions, InboxStore
from axl.node.streamsessions import SessionKey

if TYPE_CHECKING:
    from axl.node.inbox import InboxMessage

log = logging.getLogger("axl.inbox")

# After a failed commit, deletions wait this long before the next try (new
# messages try at once, and are refused while commits fail).
RETRY_SECONDS = 1.0

# Told whether a message was stored (True: answer its sender "queued").
Settled = Callable[[bool], None]
# Where a message came from on its sender's message stream: (session id, sequence number).
StreamOrigin = tuple[int, int]


@dataclass
class _Staged:
    message: InboxMessage
    origin: StreamOrigin | None
    settled: Settled


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
        # what commits wait for: a commit with inbox_sync "full", or a checkpoint that empties the WAL
        self._busy: asyncio.Future | None = None
        self._checkpointing: asyncio.Future | None = None
        self._truncate = False  # the WAL grew long all the same: the next checkpoint empties it
        self._commit_scheduled = False
        self._retry: asyncio.TimerHandle | None = None
        self._failing = False
        self._failures = 0
        self._closed = False
        for key, session in sessions:
            self._keep(key, session)

    def session_records(self) -> list[tuple[bytes, int, SessionRecord]]:
        """The committed sessions as the message streams' receiver remembers
        them (MessageStreams.restore_sessions), least recently written first."""
        return [(*key, SessionRecord.restored(session.taken_upto, session.committed()))
                for key, session in self._sessions.items()]

    def add(self, message: InboxMessage, origin: StreamOrigin | None, settled: Settled) -> None:
        self._last_id = max(self._last_id, message.id)
        self._staged.append(_Staged(message, origin, settled))
        self._commit_soon()

    def delete(self, message_id: int) -> None:
        self._deletes.append(message_id)
        self._commit_soon()

    @property
    def _pending(self) -> bool:
        return bool(self._staged or self._deletes or self._forgotten)

    def _commit_soon(self) -> None:
        """Commit at the end of this loop turn, or once the store's thread is free."""
        if self._busy is None and not self._commit_scheduled:
            self._commit_scheduled = True
            asyncio.get_running_loop().call_soon(self._commit)

    def _commit(self) -> None:
        self._commit_scheduled = False
        if self._closed or self._busy is not None or not self._pending:
            return
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
            store.stage(batch)
            if store.commits_in_thread:
                self._busy = asyncio.wrap_future(store.commit_in_thread())
                self._busy.add_done_callback(partial(self._committed, staged, batch, started))
                return
            store.commit()
        except Exception as exc:
            store.abandon()
            self._failed(staged, batch, exc)
            return
        self._stored(staged, batch, started)

    def _committed(self, staged: list[_Staged], batch: Batch, started: float, done: asyncio.Future) -> None:
        self._busy = None
        error = done.exception()
        if error is not None:
            self.store.abandon()
            self._failed(staged, batch, error)
        else:
            self._stored(staged, batch, started)

    def _stored(self, staged: list[_Staged], batch: Batch, started: float) -> None:
        """A batch is committed: its messages are queued and their senders answered."""
        self.commit_seconds.observe(time.monotonic() - started)
        if self._failing:
            self._failing = False
            log.info("inbox: commits succeed again")
        for key, session in batch.sessions.items():
            self._keep(key, session)
        for entry in staged:
            self._on_stored(entry.message)
            entry.settled(True)
        self._checkpoint_if_due()
        if self._pending:
            self._commit_soon()

    def _checkpoint_if_due(self) -> None:
        """Start a checkpoint when the WAL has grown by CHECKPOINT_PAGES: one
        that commits wait for if the WAL would not start over otherwise."""
        if self._checkpointing is not None or not (self._truncate or self.store.checkpoint_due):
            return
        if self._truncate and self._busy is not None:
            return  # after the commit under way
        self._checkpointing = asyncio.wrap_future(self.store.checkpoint_in_thread(truncate=self._truncate))
        if self._truncate:
            self._busy = self._checkpointing
        self._checkpointing.add_done_callback(self._checkpointed)

    def _checkpointed(self, done: asyncio.Future) -> None:
        self._checkpointing = None
        if self._busy is done:
            self._busy = None
        if done.exception() is not None:
            log.warning("inbox: checkpoint of %s failed (%s); its WAL grows until one succeeds",
                        self.store.path, done.exception())
        else:
            self._truncate = done.result() >= WAL_CAP_PAGES
        self._checkpoint_if_due()
        if self._pending:
            self._commit_soon()

    def _sessions_after(self, staged: list[_Staged]) -> dict[SessionKey, CommittedSession]:
        """The stream sessions as they will be once `staged` is committed, as
        copies: a failed commit leaves the committed ones as they were."""
        sessions: dict[SessionKey, CommittedSession] = {}
        for entry in staged:
            if entry.origin is None:
                continue
            session_id, seq = entry.origin
            key = (entry.message.sender, session_id)
            session = sessions.get(key)
            if session is None:
                committed = self._sessions.get(key)
                session = sessions[key] = CommittedSession() if committed is None else replace(committed)
            session.add(seq)
        return sessions

    def _keep(self, key: SessionKey, session: CommittedSession) -> None:
        self._forgotten += self._sessions.put(key, session)

    def _failed(self, staged: list[_Staged], batch: Batch, error: BaseException) -> None:
        """A commit failed (a full disk): its messages are refused, never
        acknowledged; its deletions wait for the next commit."""
        self._failures += 1
        if not self._failing:
            self._failing = True
            log.error("inbox: cannot commit to %s (%s): new messages are refused (503) until a "
                      "commit succeeds", self.store.path, error)
        for entry in staged:
            self._on_refused(entry.message)
            entry.settled(False)
        self._deletes[:0] = batch.deletes
        self._forgotten[:0] = batch.forgotten
        if (self._deletes or self._forgotten) and self._retry is None:
            self._retry = asyncio.get_running_loop().call_later(RETRY_SECONDS, self._retry_now)

    def _retry_now(self) -> None:
        self._retry = None
        self._commit_soon()

    async def flush(self) -> None:
        """Commit what waits (the node is stopping): its senders get their
        answers. Gives up at the first commit that fails."""
        failures = self._failures
        while failures == self._failures:
            if self._busy is not None:
                await asyncio.wait([self._busy])
            elif self._pending:
                self._commit()
            elif self._checkpointing is not None:
                await asyncio.wait([self._checkpointing])
            else:
                return

    def close(self) -> None:
        """Close the store (after `flush`); the journal is not used again."""
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
        self.store.close()
