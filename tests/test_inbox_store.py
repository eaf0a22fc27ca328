"""The durable inbox in one process: its SQLite file, commits grouped per loop
turn, answers only once committed, what a reopened file gives back, and the
files it refuses to start with (changing nothing in them)."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from axl.budgets import STREAM_WINDOW
from axl.node import journal
from axl.node import store as store_module
from axl.node.journal import JournalState
from axl.node.inbox import Inbox
from axl.node.msgstream import (STATUS_QUEUED, Answered, Hello, Message, SessionTable, StreamReceiver,
                                StreamSender, encode_hello, encode_message)
from axl.node.store import (APART_BYTES, CHECKPOINT_PAGES, ROW_FILE_BYTES, SCHEMA_VERSION, CommittedSession,
                            InboxStore, NotThisNodesInbox, StoreError)
from fuzzing import peak_allocation

OWNER = b"\x0a" * 32
SENDER = b"\x01" * 32


def open_store(path: Path, owner: bytes = OWNER) -> InboxStore:
    return InboxStore.open(path, "normal", owner)


class Outcomes:
    """What the inbox said of each message offered: stored or not, in order."""

    def __init__(self) -> None:
        self.settled: list[tuple[bytes, bool]] = []

    def offer(self, inbox: Inbox, payload: bytes, origin: tuple[int, int] | None = None) -> None:
        inbox.put(SENDER, payload, lambda stored: self.settled.append((payload, stored)), origin)


@pytest.fixture
def rows_in_database(monkeypatch) -> None:
    """Every row in the database, however long (as with inbox_sync "full"):
    for what the WAL and its checkpoints do with long rows."""
    monkeypatch.setattr(store_module, "ROW_FILE_BYTES", 1 << 62)


async def settle(inbox: Inbox) -> None:
    """Until every commit started or due has finished."""
    await inbox.flush()


async def test_messages_wait_for_their_commit_and_come_back_after_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "inbox.sqlite3"
    inbox = Inbox(100, 1 << 20, open_store(path))
    outcomes = Outcomes()
    for payload in (b"m1", b"m2", b"m3"):
        outcomes.offer(inbox, payload)
    # Nothing is answered, or visible to a client, before its commit.
    assert outcomes.settled == [] and len(inbox) == 0 and inbox.held == 3
    poll = inbox.take(5)
    await settle(inbox)
    assert outcomes.settled == [(b"m1", True), (b"m2", True), (b"m3", True)]
    assert inbox.commit_seconds.count == 1  # the three arrived in one turn: one transaction
    first = await poll
    assert first.payload == b"m1" and len(inbox) == 2
    inbox.delivered([first])
    second = inbox.get_nowait()  # taken, never said delivered: it stays in the file
    await settle(inbox)
    inbox.close()

    again = Inbox(100, 1 << 20, open_store(path))
    kept = [again.get_nowait() for _ in range(2)]
    assert [(m.id, m.payload) for m in kept] == [(second.id, b"m2"), (second.id + 1, b"m3")]
    assert again.held == 2 and again.held_bytes == 4
    again.delivered(kept)
    await settle(again)
    again.close()

    # The highest id was delivered and deleted; ids still never repeat.
    last = Inbox(100, 1 << 20, open_store(path))
    assert len(last) == 0
    Outcomes().offer(last, b"m4")
    await settle(last)
    assert last.get_nowait().id == kept[-1].id + 1
    last.close()


async def test_ids_never_repeat_when_the_row_that_holds_the_highest_is_all_start_up_has(tmp_path: Path) -> None:
    """A commit that adds a row leaves the highest id in that row alone, and
    start-up finds it there; a start-up that drops that row (its payload
    lost) keeps the id for the starts after it."""
    path = tmp_path / "inbox.sqlite3"
    inbox = Inbox(100, 1 << 30, open_store(path))
    for payload in (b"m1", b"m2"):
        Outcomes().offer(inbox, payload)
    await settle(inbox)
    inbox.close()

    again = Inbox(100, 1 << 30, open_store(path))
    kept = [again.get_nowait() for _ in range(2)]
    again.delivered(kept)
    await settle(again)
    Outcomes().offer(again, bytes(APART_BYTES))
    await settle(again)
    big = again.get_nowait()
    assert big.id == kept[-1].id + 1
    again.close()
    (path.with_name(path.name + ".payloads") / str(big.id)).unlink()

    for _ in range(2):  # the lost payload's row is dropped at the first start; the second finds no row at all
        later = Inbox(100, 1 << 30, open_store(path))
        assert len(later) == 0
        later.close()
    last = Inbox(100, 1 << 30, open_store(path))
    Outcomes().offer(last, b"m4")
    await settle(last)
    assert last.get_nowait().id == big.id + 1
    last.close()


async def until_ready(inbox: Inbox) -> None:
    while inbox.journal.state is not JournalState.READY:
        await asyncio.sleep(0.01)


async def turns(count: int = 3) -> None:
    """Let the loop run `count` turns (a step due at the end of a turn runs)."""
    for _ in range(count):
        await asyncio.sleep(0)


@pytest.fixture
def long_hold(monkeypatch) -> float:
    """Commits held back for long enough that a slow machine's turns never outlast it."""
    monkeypatch.setattr(journal, "GROUP_SECONDS", 0.3)
    monkeypatch.setattr(journal, "GROUP_ARRIVING_SECONDS", 0.5)
    return 0.3


async def test_small_messages_close_together_are_held_back_to_share_a_commit(tmp_path: Path, long_hold) -> None:
    inbox = Inbox(100, 1 << 20, open_store(tmp_path / "inbox.sqlite3"))
    outcomes = Outcomes()
    outcomes.offer(inbox, b"first")  # after a quiet while: committed at the end of its turn
    await turns()
    assert inbox.commit_seconds.count == 1 and outcomes.settled == [(b"first", True)]
    outcomes.offer(inbox, b"second")  # close behind the first: held back
    await turns()
    assert inbox.commit_seconds.count == 1 and len(outcomes.settled) == 1
    outcomes.offer(inbox, b"third")  # in a later turn, while the second waits: the same commit
    started = time.monotonic()
    while len(outcomes.settled) < 3:
        assert time.monotonic() - started < 10 * long_hold, "the held commit never came"
        await asyncio.sleep(0.01)
    assert inbox.commit_seconds.count == 2
    assert outcomes.settled[1:] == [(b"second", True), (b"third", True)]
    inbox.close()


async def test_a_sender_waiting_for_each_answer_is_soon_no_longer_held_back(tmp_path: Path, monkeypatch) -> None:
    """One message at a time, each sent once the last is stored: holding back
    gathers nothing, so after GROUP_ALONE_TRIES held commits none is held."""
    monkeypatch.setattr(journal, "GROUP_SECONDS", 0.05)
    monkeypatch.setattr(journal, "GROUP_RETRY_SECONDS", 3600.0)
    inbox = Inbox(100, 1 << 20, open_store(tmp_path / "inbox.sqlite3"))
    outcomes = Outcomes()
    waited: list[bool] = []  # per message: whether it was still unanswered after its turn
    for number in range(2 * journal.GROUP_ALONE_TRIES + 4):
        outcomes.offer(inbox, b"m%d" % number)
        await turns()
        waited.append(len(outcomes.settled) == number)
        while len(outcomes.settled) == number:
            await asyncio.sleep(0.005)
    # The first comes after a quiet while, and each after a held one comes
    # more than GROUP_SECONDS after it: every other one is held, until
    # GROUP_ALONE_TRIES were; then none.
    assert waited == [False, True] * journal.GROUP_ALONE_TRIES + [False] * 4
    assert all(stored for _, stored in outcomes.settled)
    inbox.close()


async def test_deliveries_wait_for_company_only_while_messages_come(tmp_path: Path, long_hold) -> None:
    """A delivery's deletion waits for the next commit while new messages
    come; on a node receiving nothing it is committed in its turn, so that a
    disk that cannot take it is found before another client is handed a message."""
    inbox = Inbox(100, 1 << 20, open_store(tmp_path / "inbox.sqlite3"))
    for payload in (b"one", b"two"):
        Outcomes().offer(inbox, payload)
    await inbox.flush()
    inbox.delivered([inbox.get_nowait()])  # messages came just now: the deletion waits
    await turns()
    assert inbox.commit_seconds.count == 1
    started = time.monotonic()
    while inbox.commit_seconds.count < 2:
        assert time.monotonic() - started < 10 * long_hold, "the held commit never came"
        await asyncio.sleep(0.01)
    await asyncio.sleep(journal.GROUP_ARRIVING_SECONDS)  # no message for a while
    inbox.delivered([inbox.get_nowait()])
    await turns()
    assert inbox.commit_seconds.count == 3
    inbox.close()


@pytest.mark.parametrize("later", [[b"x%d" % n for n in range(journal.GROUP_MOST)], [bytes(journal.GROUP_MOST_BYTES)]],
                         ids=["GROUP_MOST messages", "GROUP_MOST_BYTES"])
async def test_a_held_commit_is_brought_forward_once_its_batch_is_full(tmp_path: Path, long_hold,
                                                                        later: list[bytes]) -> None:
    """What comes behind a held commit, enough that the batch is no longer
    small, is committed at the end of its turn, not when the hold ends."""
    inbox = Inbox(100, 1 << 22, open_store(tmp_path / "inbox.sqlite3"))
    outcomes = Outcomes()
    outcomes.offer(inbox, b"first")
    await turns()
    outcomes.offer(inbox, b"second")  # close behind the first: held back
    await turns()
    assert len(outcomes.settled) == 1
    for payload in later:
        outcomes.offer(inbox, payload)
    await turns()
    assert len(outcomes.settled) == 2 + len(later) and inbox.commit_seconds.count == 2
    inbox.close()


async def test_held_deliveries_are_committed_once_there_are_group_most(tmp_path: Path, long_hold) -> None:
    """While messages come, deliveries wait for company, but never
    GROUP_MOST of them: /recv hands out at most that many before a held
    commit finds that the disk cannot take their deletions."""
    inbox = Inbox(100, 1 << 20, open_store(tmp_path / "inbox.sqlite3"))
    for number in range(journal.GROUP_MOST + 1):
        Outcomes().offer(inbox, b"m%d" % number)
    await inbox.flush()
    commits = inbox.commit_seconds.count
    for _ in range(journal.GROUP_MOST - 1):
        inbox.delivered([inbox.get_nowait()])
        await turns()
    assert inbox.commit_seconds.count == commits  # held: messages came just now
    inbox.delivered([inbox.get_nowait()])
    await turns()
    assert inbox.commit_seconds.count == commits + 1
    inbox.close()


async def test_full_sync_never_holds_a_commit_back(tmp_path: Path, long_hold) -> None:
    """With "full" each commit waits for the disk on a thread, and what comes
    meanwhile gathers for the next: nothing is held back on top of that."""
    inbox = Inbox(100, 1 << 20, InboxStore.open(tmp_path / "inbox.sqlite3", "full", OWNER))
    outcomes = Outcomes()
    for payload in (b"a", b"b"):
        outcomes.offer(inbox, payload)
        started = time.monotonic()
        while not outcomes.settled or outcomes.settled[-1][0] != payload:
            await asyncio.sleep(0.005)
        assert time.monotonic() - started < long_hold
    inbox.close()


async def test_a_commit_that_fails_refuses_its_messages(tmp_path: Path, rows_in_database) -> None:
    store = open_store(tmp_path / "inbox.sqlite3")
    inbox = Inbox(100, 1 << 30, store)
    outcomes = Outcomes()
    outcomes.offer(inbox, b"first")
    await settle(inbox)
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages}")  # the disk is "full"
    outcomes.offer(inbox, bytes(64 << 10))
    await settle(inbox)
    assert outcomes.settled[-1] == (bytes(64 << 10), False)
    assert inbox.held == 1 and len(inbox) == 1  # what was taken before stays
    store._db.execute("PRAGMA max_page_count = 1073741823")
    outcomes.offer(inbox, b"after")
    await settle(inbox)
    assert outcomes.settled[-1] == (b"after", True)
    # The WAL grew into what room there was while commits failed: the first
    # commit that succeeds has it emptied, so the room comes back at once.
    await asyncio.wait_for(until_ready(inbox), 5)
    assert (tmp_path / "inbox.sqlite3-wal").stat().st_size == 0
    assert [inbox.get_nowait().payload for _ in range(2)] == [b"first", b"after"]
    inbox.close()


@pytest.mark.replaces_compiled_method
async def test_what_arrives_during_a_threaded_commit_that_fails_is_tried_at_once(tmp_path: Path, monkeypatch) -> None:
    """With inbox_sync "full" a commit runs on the store's thread and what
    arrives meanwhile waits for it. When that commit fails (a full disk: made
    to fail here, once), what waited is tried at once: not stranded until
    another message comes, while its sender times out."""
    store = InboxStore.open(tmp_path / "inbox.sqlite3", "full", OWNER)
    inbox = Inbox(100, 1 << 20, store)
    commit = store.commit

    def full_disk_once() -> None:
        monkeypatch.setattr(store, "commit", commit)
        time.sleep(0.2)
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(store, "commit", full_disk_once)
    outcomes = Outcomes()
    outcomes.offer(inbox, b"fails")
    await asyncio.sleep(0)  # its commit is under way on the store's thread
    outcomes.offer(inbox, b"meanwhile")
    deadline = time.monotonic() + 10
    while len(outcomes.settled) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert outcomes.settled == [(b"fails", False), (b"meanwhile", True)]
    assert inbox.get_nowait().payload == b"meanwhile"
    inbox.close()


async def test_the_wal_is_checkpointed_off_the_loop_as_it_grows(tmp_path: Path, rows_in_database) -> None:
    """SQLite's own checkpoints would flush the disk inside a commit, on the
    event loop; the store's checkpoint thread does them instead, and the WAL
    starts over rather than grow with what went through it."""
    path = tmp_path / "inbox.sqlite3"
    wal = path.with_name(path.name + "-wal")
    inbox = Inbox(10_000, 1 << 30, open_store(path))
    outcomes = Outcomes()
    sizes = []
    for number in range(150):  # about 10 MB, a commit each
        outcomes.offer(inbox, bytes([number]) * (64 << 10))
        await settle(inbox)
        sizes.append(wal.stat().st_size)
    assert max(sizes) < (2 * CHECKPOINT_PAGES + 100) * 4096
    assert path.stat().st_size > 8 << 20  # the messages were copied into the database
    assert all(stored for _, stored in outcomes.settled) and len(inbox) == 150
    inbox.close()


def offer_a_checkpoints_worth(inbox: Inbox, outcomes: Outcomes) -> int:
    """CHECKPOINT_PAGES of WAL in one commit, in payloads kept in the
    database (below APART_BYTES); returns how many messages."""
    count = CHECKPOINT_PAGES * 4096 // (APART_BYTES // 2) + 1
    for _ in range(count):
        outcomes.offer(inbox, bytes(APART_BYTES // 2))
    return count


async def test_commits_go_on_while_a_checkpoint_runs(tmp_path: Path, rows_in_database) -> None:
    inbox = Inbox(10_000, 1 << 30, open_store(tmp_path / "inbox.sqlite3"))
    outcomes = Outcomes()
    count = offer_a_checkpoints_worth(inbox, outcomes)  # their commit starts a checkpoint
    while len(outcomes.settled) < count:
        await asyncio.sleep(0)
    assert inbox.journal._checkpoint is not None
    outcomes.offer(inbox, b"meanwhile")
    while len(outcomes.settled) < count + 1:
        await asyncio.sleep(0)
    assert outcomes.settled[count] == (b"meanwhile", True)
    assert inbox.journal._checkpoint is not None  # still copying the first
    await settle(inbox)
    inbox.close()


@pytest.mark.replaces_compiled_method
async def test_a_wal_that_keeps_growing_is_emptied_while_commits_wait(tmp_path: Path, monkeypatch,
                                                                     rows_in_database) -> None:
    """Under commits that never pause the WAL may never start over; past
    WAL_CAP_PAGES a checkpoint that commits wait for empties it."""
    monkeypatch.setattr(journal, "WAL_CAP_PAGES", 1)
    path = tmp_path / "inbox.sqlite3"
    store = open_store(path)
    # The checkpoint that empties the WAL is held until the test has seen a commit wait for it.
    looked = threading.Event()
    checkpoint = store._checkpoint

    def held_checkpoint(mode: str) -> store_module.Checkpointed:
        if mode == "TRUNCATE":
            looked.wait(10)
        return checkpoint(mode)

    monkeypatch.setattr(store, "_checkpoint", held_checkpoint)
    inbox = Inbox(10_000, 1 << 30, store)
    outcomes = Outcomes()
    count = offer_a_checkpoints_worth(inbox, outcomes)
    # the checkpoint that found the WAL long, then the one that empties it
    deadline = time.monotonic() + 10
    while not (inbox.journal.state is JournalState.EMPTYING and inbox.journal._checkpoint is not None):
        assert time.monotonic() < deadline, f"no checkpoint emptying the WAL: {inbox.journal.state}"
        await asyncio.sleep(0.001)
    outcomes.offer(inbox, b"waits")
    await asyncio.sleep(0)
    assert len(inbox.journal._staged) == 1  # its commit waits for the checkpoint
    looked.set()
    await settle(inbox)
    assert outcomes.settled[count] == (b"waits", True)
    assert path.with_name(path.name + "-wal").stat().st_size < 64 << 10
    inbox.close()


async def test_stream_answers_are_kept_with_their_messages(tmp_path: Path) -> None:
    """A sender repeating messages after the receiver restarted is answered
    for those committed and has the others delivered, once."""
    path = tmp_path / "inbox.sqlite3"
    inbox = Inbox(100, 1 << 20, open_store(path))
    outcomes = Outcomes()
    for seq in (1, 2, 3):
        outcomes.offer(inbox, b"s%d" % seq, origin=(7, seq))
    outcomes.offer(inbox, b"plain")  # one connection per message: nothing to remember
    await settle(inbox)
    inbox.close()

    [(peer, session_id, record)] = Inbox(100, 1 << 20, open_store(path)).session_records()
    assert (peer, session_id, record.taken_upto) == (SENDER, 7, 3)
    assert [record.status_of(seq) for seq in (1, 2, 3)] == [STATUS_QUEUED] * 3
    table = SessionTable()
    table.adopt(peer, session_id, record)
    sender = StreamSender(session_id=7)
    for seq in range(1, 6):
        sender.submit(b"s%d" % seq)  # 4 and 5 were never committed (the node died first)
    receiver = StreamReceiver(table, SENDER, max_message_size=100)
    assert receiver.feed(sender.start_connection()) == [Hello(7, 1)]
    assert receiver.feed(b"") == [Answered(1, STATUS_QUEUED), Answered(2, STATUS_QUEUED),
                                  Answered(3, STATUS_QUEUED), Message(4, b"s4"), Message(5, b"s5")]


async def test_an_answer_whose_commit_failed_is_not_kept(tmp_path: Path, rows_in_database) -> None:
    path = tmp_path / "inbox.sqlite3"
    store = open_store(path)
    inbox = Inbox(100, 1 << 30, store)
    Outcomes().offer(inbox, b"one", origin=(9, 1))
    await settle(inbox)
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages}")
    Outcomes().offer(inbox, bytes(64 << 10), origin=(9, 2))
    await settle(inbox)
    store._db.execute("PRAGMA max_page_count = 1073741823")
    Outcomes().offer(inbox, b"three", origin=(9, 3))
    await settle(inbox)
    inbox.close()
    [(_, _, record)] = Inbox(100, 1 << 20, open_store(path)).session_records()
    assert [record.status_of(seq) for seq in (1, 2, 3)] == [STATUS_QUEUED, None, STATUS_QUEUED]
    # The sender repeats 2 after the restart (its 503 never reached it): taken anew, not taken for queued.
    table = SessionTable()
    table.adopt(SENDER, 9, record)
    sender = StreamSender(session_id=9)
    for payload in (b"one", b"two", b"three"):
        sender.submit(payload)
    receiver = StreamReceiver(table, SENDER, max_message_size=1 << 20)
    assert receiver.feed(sender.start_connection()) == [Hello(9, 1)]
    assert receiver.feed(b"") == [Answered(1, STATUS_QUEUED), Message(2, b"two"), Answered(3, STATUS_QUEUED)]


def test_a_session_number_far_ahead_is_committed_in_constant_memory() -> None:
    """The first message a stream sees of a session it does not know may carry
    any number: the committed record moves there in constant memory, not by
    a shift as long as the jump (2**31 took 546 MiB, 2**45 MemoryError)."""
    session = CommittedSession()
    session.add(3)
    far = 3 + (1 << 26)
    assert peak_allocation(lambda: session.add(far)) < 64 * 1024
    session.add(far - 2)
    assert list(session.committed()) == [far - 2, far]
    assert CommittedSession.decode(session.encode()) == session



@pytest.mark.parametrize("batches", [
    [[1, 2, 3], [4, 5], [9, 10, 11]],                    # runs, with a gap
    [[5, 6], [1, 2, 3]],                                  # a run behind taken_upto
    [[1, 3, 2], [7]],                                     # not in order
    [[2], list(range(3, 3 + STREAM_WINDOW + 10))],        # a run longer than the window
    [[1, 2], [(1 << 26) + 1, (1 << 26) + 2]],             # a run far ahead
    [[10], [10, 11]],                                     # a number again
])
def test_a_batch_of_numbers_is_committed_as_one_by_one(batches: list[list[int]]) -> None:
    """`add_all`'s one shift for a run comes to what `add` makes of each number."""
    one_by_one, at_once = CommittedSession(), CommittedSession()
    for seqs in batches:
        for seq in seqs:
            one_by_one.add(seq)
        at_once.add_all(seqs)
        assert at_once == one_by_one

async def test_a_batch_that_fails_for_any_reason_is_refused_and_gives_its_room_back(tmp_path: Path) -> None:
    """Not only SQLite's errors: a batch that fails as it is built or staged
    (here a sequence number no stream can carry, beyond 64 bits) refuses
    every message in it, whose room in the inbox is given back, instead of
    stranding them with their senders unanswered."""
    inbox = Inbox(2, 1 << 20, open_store(tmp_path / "inbox.sqlite3"))
    outcomes = Outcomes()
    outcomes.offer(inbox, b"fine", origin=(5, 1))
    outcomes.offer(inbox, b"unwritable", origin=(5, 1 << 64))
    await settle(inbox)
    assert outcomes.settled == [(b"fine", False), (b"unwritable", False)]
    assert inbox.held == 0
    outcomes.offer(inbox, b"after", origin=(5, 2))
    outcomes.offer(inbox, b"and another")
    await settle(inbox)
    assert outcomes.settled[2:] == [(b"after", True), (b"and another", True)]
    inbox.close()


def test_session_records_are_bounded(tmp_path: Path) -> None:
    async def fill() -> None:
        inbox = Inbox(10_000, 1 << 30, open_store(tmp_path / "inbox.sqlite3"))
        inbox.journal._sessions.capacity = 3
        for session_id in range(1, 6):
            Outcomes().offer(inbox, b"x", origin=(session_id, 1))
            await settle(inbox)
        await settle(inbox)
        inbox.close()

    asyncio.run(fill())
    kept = Inbox(100, 1 << 20, open_store(tmp_path / "inbox.sqlite3")).session_records()
    assert [session_id for _, session_id, _ in kept] == [3, 4, 5]


# -- payloads kept apart -------------------------------------------------------

BIG = APART_BYTES * 4


def payload_files(path: Path) -> list[str]:
    folder = path.with_name(path.name + ".payloads")
    return sorted(entry.name for entry in folder.iterdir()) if folder.exists() else []


async def test_a_big_payload_is_written_to_its_own_file_off_the_loop(tmp_path: Path) -> None:
    """Not copied through SQLite's pages, WAL and checkpoint on the event
    loop: written once to a file, on the store's thread, before its row is
    committed; back after a reopen; removed once delivered."""
    path = tmp_path / "inbox.sqlite3"
    inbox = Inbox(100, 1 << 30, open_store(path))
    outcomes = Outcomes()
    big = bytes(range(256)) * (BIG // 256)
    outcomes.offer(inbox, big)
    outcomes.offer(inbox, b"small")
    await asyncio.sleep(0)
    assert inbox.journal._commit_under_way is not None  # on the store's thread
    await settle(inbox)
    assert outcomes.settled == [(big, True), (b"small", True)]
    [name] = payload_files(path)
    assert path.with_name(path.name + "-wal").stat().st_size < APART_BYTES
    inbox.close()

    again = Inbox(100, 1 << 30, open_store(path))
    first, second = again.get_nowait(), again.get_nowait()
    assert (str(first.id), first.payload, second.payload) == (name, big, b"small")
    again.delivered([first, second])
    await settle(again)
    assert payload_files(path) == []
    again.close()
    assert len(Inbox(100, 1 << 30, open_store(path))) == 0


async def test_a_payload_file_that_cannot_be_written_refuses_its_message(tmp_path: Path) -> None:
    path = tmp_path / "inbox.sqlite3"
    inbox = Inbox(100, 1 << 30, open_store(path))
    blocker = path.with_name(path.name + ".payloads")
    blocker.write_bytes(b"")  # where the folder should be
    outcomes = Outcomes()
    outcomes.offer(inbox, bytes(BIG))
    await settle(inbox)
    assert outcomes.settled == [(bytes(BIG), False)] and inbox.held == 0
    assert inbox.journal.state is JournalState.FAILING
    blocker.unlink()
    outcomes.offer(inbox, b"x" * BIG)
    await settle(inbox)
    assert outcomes.settled[-1] == (b"x" * BIG, True)
    assert inbox.get_nowait().payload == b"x" * BIG
    inbox.close()


async def test_start_up_removes_files_without_rows_and_drops_rows_without_their_file(tmp_path: Path, caplog) -> None:
    """What a crash leaves: a file whose row was never committed, or whose
    deletion was; after a power cut with "normal", a row whose file is short."""
    caplog.set_level(logging.INFO, "axl.inbox")
    path = tmp_path / "inbox.sqlite3"
    inbox = Inbox(100, 1 << 30, open_store(path))
    for fill in (b"a", b"b", b"c"):
        Outcomes().offer(inbox, fill * BIG)
        await settle(inbox)
    inbox.close()
    folder = path.with_name(path.name + ".payloads")
    first, second, third = payload_files(path)
    (folder / second).write_bytes(b"b" * (BIG // 2))  # not all of it reached the disk
    (folder / "99").write_bytes(b"never committed")
    (folder / "notes.txt").write_bytes(b"not the node's")

    again = Inbox(100, 1 << 30, open_store(path))
    assert [again.get_nowait().payload[:1] for _ in range(len(again))] == [b"a", b"c"]
    assert payload_files(path) == sorted([first, third, "notes.txt"])
    assert f"{second} holds {BIG // 2} of the message's {BIG} bytes" in caplog.text
    assert "removed 2 payload files" in caplog.text  # the one never committed, the short one
    again.close()
    assert len(Inbox(100, 1 << 30, open_store(path))) == 2


V1_SCHEMA = (
    "CREATE TABLE meta (name TEXT PRIMARY KEY, value) WITHOUT ROWID",
    "CREATE TABLE messages (id INTEGER PRIMARY KEY, sender BLOB NOT NULL, payload BLOB NOT NULL)",
    "CREATE TABLE sessions (key BLOB PRIMARY KEY, record BLOB NOT NULL, used INTEGER NOT NULL) WITHOUT ROWID",
)


async def test_an_inbox_of_schema_1_opens_with_its_messages_and_is_upgraded(tmp_path: Path) -> None:
    """A file written by the node before payloads were kept apart: its
    messages (big ones too, in their rows) and sessions are kept."""
    path = tmp_path / "inbox.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode = WAL")
        for statement in V1_SCHEMA:
            db.execute(statement)
        db.executemany("INSERT INTO meta (name, value) VALUES (?, ?)",
                       [("schema", 1), ("node", OWNER.hex()), ("last_id", 7), ("starts", 3)])
        db.executemany("INSERT INTO messages (id, sender, payload) VALUES (?, ?, ?)",
                       [(6, SENDER, b"old"), (7, SENDER, b"B" * BIG)])
        session = (7).to_bytes(8, "big") + (1 << 255 | 1).to_bytes(32, "big")
        db.execute("INSERT INTO sessions (key, record, used) VALUES (?, ?, ?)",
                   (SENDER + (5).to_bytes(8, "big"), session, 1))
    db.close()

    inbox = Inbox(100, 1 << 30, open_store(path))
    [(peer, session_id, record)] = inbox.session_records()
    assert (peer, session_id, record.taken_upto) == (SENDER, 5, 7)
    old = [inbox.get_nowait() for _ in range(2)]
    assert [(m.id, m.payload) for m in old] == [(6, b"old"), (7, b"B" * BIG)]
    Outcomes().offer(inbox, b"N" * BIG)
    inbox.delivered(old)
    await settle(inbox)
    inbox.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone() == (SCHEMA_VERSION,)
    db.close()
    again = Inbox(100, 1 << 30, open_store(path))
    [new] = [again.get_nowait() for _ in range(len(again))]
    assert (new.id, new.payload) == (8, b"N" * BIG)
    again.close()


@contextmanager
def row_per_message_inbox(path: Path, schema: int, last_id: int) -> Iterator[sqlite3.Connection]:
    """A file of schema 2 or 3 (a row per message, with `apart`), for the
    caller to fill, then closed."""
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode = WAL")
        for statement in V1_SCHEMA:
            db.execute(statement)
        db.execute("ALTER TABLE messages ADD COLUMN apart INTEGER")
        db.executemany("INSERT INTO meta (name, value) VALUES (?, ?)",
                       [("schema", schema), ("node", OWNER.hex()), ("last_id", last_id), ("starts", 1)])
        yield db
    db.close()


def schema_2_inbox(path: Path, session_records: list[bytes]) -> None:
    """A file as the node wrote it before stream windows grew past 256: a
    session record is u64 taken_upto and 256 bits (bit i: taken_upto - i)."""
    with row_per_message_inbox(path, schema=2, last_id=1) as db:
        db.execute("INSERT INTO messages (id, sender, payload) VALUES (1, ?, ?)", (SENDER, b"kept"))
        db.executemany("INSERT INTO sessions (key, record, used) VALUES (?, ?, ?)",
                       [(SENDER + session_id.to_bytes(8, "big"), record, session_id)
                        for session_id, record in enumerate(session_records, 1)])


def test_an_inbox_of_schema_2_keeps_its_sessions_answers_in_the_wider_window(tmp_path: Path) -> None:
    """Its session records are rewritten in the wider format on open, with
    the same committed numbers: a sender repeating them after the upgrade
    is answered, not delivered twice, and the one not committed is delivered."""
    path = tmp_path / "inbox.sqlite3"
    # session 1: 300 committed, and 45 (255 back), not 299 and 298
    record = (300).to_bytes(8, "big") + (1 << 255 | 0b1001).to_bytes(32, "big")
    schema_2_inbox(path, [record])
    inbox = Inbox(100, 1 << 30, open_store(path))
    [(peer, session_id, restored)] = inbox.session_records()
    assert (peer, session_id, restored.taken_upto) == (SENDER, 1, 300)
    assert [inbox.get_nowait().payload] == [b"kept"]
    inbox.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone() == (SCHEMA_VERSION,)
        [(blob,)] = db.execute("SELECT record FROM sessions").fetchall()
    db.close()
    assert len(blob) == 8 + STREAM_WINDOW // 8
    assert list(CommittedSession.decode(blob).committed()) == [45, 297, 300]
    table = SessionTable()
    table.adopt(peer, session_id, restored)
    receiver = StreamReceiver(table, SENDER, max_message_size=100)
    receiver.feed(encode_hello(1))
    assert receiver.feed(encode_message(297, b"a") + encode_message(298, b"b") + encode_message(300, b"c")) == [
        Answered(297, STATUS_QUEUED), Message(298, b"b"), Answered(300, STATUS_QUEUED)]


def test_an_inbox_of_schema_2_with_a_damaged_session_record_is_refused_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "inbox.sqlite3"
    schema_2_inbox(path, [bytes(40), bytes(39)])
    before = path.read_bytes()
    with pytest.raises(StoreError, match="damaged.*a session record of 39 bytes"):
        open_store(path)
    assert path.read_bytes() == before


# -- files it will not start with ---------------------------------------------


def test_a_file_that_is_not_a_database_is_refused_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "inbox.sqlite3"
    path.write_bytes(b"these are not the bytes of a database" * 200)
    before = path.read_bytes()
    with pytest.raises(StoreError, match=r"the database is damaged \(file is not a database\); nothing in it"):
        open_store(path)
    assert path.read_bytes() == before


def damaged_inbox(path: Path) -> bytes:
    """An inbox with messages, one of its table pages overwritten; its bytes."""
    async def write() -> None:
        inbox = Inbox(10_000, 1 << 30, open_store(path))
        for number in range(300):
            Outcomes().offer(inbox, b"message %d " % number * 40)
        await settle(inbox)
        inbox.close()

    asyncio.run(write())
    data = bytearray(path.read_bytes())
    page = 4096
    data[5 * page:6 * page] = b"\xff" * page
    path.write_bytes(bytes(data))
    return bytes(data)


def test_a_damaged_database_is_refused_unchanged(tmp_path: Path, rows_in_database) -> None:
    path = tmp_path / "inbox.sqlite3"
    before = damaged_inbox(path)
    with pytest.raises(StoreError, match="the database is damaged"):
        open_store(path)
    assert path.read_bytes() == before
    assert not path.with_name(path.name + "-wal").exists() or not path.with_name(path.name + "-wal").stat().st_size


def test_a_database_that_is_not_an_inbox_is_refused_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "app.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    db.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match=r"an SQLite database, but not a node's inbox \(its tables: orders\)"):
        open_store(path)
    assert path.read_bytes() == before


def test_another_nodes_inbox_is_refused_as_not_this_nodes(tmp_path: Path) -> None:
    path = tmp_path / "inbox.sqlite3"
    open_store(path).close()
    before = path.read_bytes()
    with pytest.raises(NotThisNodesInbox, match=r"^inbox_path: .* is the inbox of node 0a0a0a0a0a0a0a0a…, not of this node"):
        open_store(path, owner=b"\x0b" * 32)
    assert path.read_bytes() == before


def test_an_inbox_in_use_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "inbox.sqlite3"
    first = open_store(path)
    try:
        with pytest.raises(StoreError, match="another process has it open"):
            open_store(path)
    finally:
        first.close()
    open_store(path).close()


def test_the_file_is_for_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "deeper" / "inbox.sqlite3"
    open_store(path).close()
    assert path.stat().st_mode & 0o777 == 0o600
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def table_rows(path: Path, table: str) -> int:
    with sqlite3.connect(path) as db:
        count = db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    db.close()
    return count


async def test_a_commits_messages_share_a_row_kept_until_the_last_is_delivered(tmp_path: Path) -> None:
    """One row per commit; a row partly delivered gives back only its other
    messages after a reopen, and goes once they are delivered too."""
    path = tmp_path / "inbox.sqlite3"
    inbox = Inbox(100, 1 << 30, open_store(path))
    outcomes = Outcomes()
    for payload in (b"m1", b"m2", b"m3"):
        outcomes.offer(inbox, payload)
    await settle(inbox)
    outcomes.offer(inbox, b"m4")
    await settle(inbox)
    assert table_rows(path, "batches") == 2
    m1, m2 = inbox.get_nowait(), inbox.get_nowait()
    inbox.delivered([m2])
    await settle(inbox)
    inbox.close()
    assert (table_rows(path, "batches"), table_rows(path, "delivered")) == (2, 1)

    again = Inbox(100, 1 << 30, open_store(path))
    kept = [again.get_nowait() for _ in range(len(again))]
    assert [(m.id, m.payload) for m in kept] == [(m1.id, b"m1"), (m1.id + 2, b"m3"), (m1.id + 3, b"m4")]
    again.delivered(kept[:2])
    await settle(again)
    assert (table_rows(path, "batches"), table_rows(path, "delivered")) == (1, 0)
    again.close()


async def test_an_inbox_of_schema_3_moves_its_messages_into_rows(tmp_path: Path) -> None:
    """A row per message, a payload kept apart as its length: after the
    upgrade the same messages, the file of the one kept apart still used."""
    path = tmp_path / "inbox.sqlite3"
    with row_per_message_inbox(path, schema=3, last_id=12) as db:
        db.executemany("INSERT INTO messages (id, sender, payload, apart) VALUES (?, ?, ?, ?)",
                       [(10, SENDER, b"in its row", None), (12, SENDER, b"", BIG)])
    folder = path.with_name(path.name + ".payloads")
    folder.mkdir()
    (folder / "12").write_bytes(b"A" * BIG)

    inbox = Inbox(100, 1 << 30, open_store(path))
    kept = [inbox.get_nowait() for _ in range(len(inbox))]
    assert [(m.id, m.payload) for m in kept] == [(10, b"in its row"), (12, b"A" * BIG)]
    with sqlite3.connect(path) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    db.close()
    assert "messages" not in tables and table_rows(path, "batches") == 1
    inbox.delivered(kept)
    await settle(inbox)
    assert payload_files(path) == [] and table_rows(path, "batches") == 0
    Outcomes().offer(inbox, b"new")
    await settle(inbox)
    assert inbox.get_nowait().id == 13
    inbox.close()


def row_files(path: Path) -> list[str]:
    return [name for name in payload_files(path) if name.startswith("r")]


async def test_a_long_row_is_kept_in_a_file_of_its_own_until_its_last_message_is_delivered(tmp_path: Path) -> None:
    """A busy commit's small messages, ROW_FILE_BYTES or more in all: their row
    is written to one file, not through SQLite's pages, WAL and checkpoint;
    back after a reopen; the file goes with the commit that delivers the last."""
    path = tmp_path / "inbox.sqlite3"
    inbox = Inbox(1000, 1 << 30, open_store(path))
    payloads = [b"%04d" % number * 256 for number in range(2 * ROW_FILE_BYTES // 1024)]
    for payload in payloads:
        Outcomes().offer(inbox, payload)
    await settle(inbox)
    Outcomes().offer(inbox, b"alone, in the database")
    await settle(inbox)
    [name] = row_files(path)
    with sqlite3.connect(path) as db:
        lengths = [row[0] for row in db.execute("SELECT length(records) FROM batches ORDER BY first")]
    db.close()
    assert lengths[0] == 8 and lengths[1] > len(b"alone, in the database")  # the file's length; a record
    taken = [inbox.get_nowait() for _ in range(len(payloads) - 1)]
    assert name == f"r{taken[0].id}"
    inbox.delivered(taken)
    await settle(inbox)
    inbox.close()

    again = Inbox(1000, 1 << 30, open_store(path))
    kept = [again.get_nowait() for _ in range(len(again))]
    assert [m.payload for m in kept] == [payloads[-1], b"alone, in the database"]
    assert row_files(path) == [name]
    again.delivered(kept[:1])
    await settle(again)
    assert row_files(path) == [] and table_rows(path, "batches") == 1
    again.close()


async def test_with_full_a_long_row_stays_in_the_database(tmp_path: Path) -> None:
    path = tmp_path / "inbox.sqlite3"
    inbox = Inbox(1000, 1 << 30, InboxStore.open(path, "full", OWNER))
    for _ in range(2 * ROW_FILE_BYTES // 1024):
        Outcomes().offer(inbox, bytes(1024))
    await settle(inbox)
    assert payload_files(path) == [] and table_rows(path, "batches") == 1
    inbox.close()


async def test_start_up_drops_a_row_whose_file_is_lost_and_removes_row_files_without_a_row(tmp_path: Path,
                                                                                        caplog) -> None:
    """After a power cut with "normal" a row's file may be short; after a
    crash, a row file may have no row (never committed, or delivered)."""
    caplog.set_level(logging.INFO, "axl.inbox")
    path = tmp_path / "inbox.sqlite3"
    inbox = Inbox(1000, 1 << 30, open_store(path))
    for fill in (b"a", b"b"):
        for _ in range(2 * ROW_FILE_BYTES // 1024):
            Outcomes().offer(inbox, fill * 1024)
        await settle(inbox)
    inbox.close()
    folder = path.with_name(path.name + ".payloads")
    first, second = sorted(row_files(path), key=lambda name: int(name[1:]))
    (folder / second).write_bytes((folder / second).read_bytes()[:100])
    (folder / "r99999").write_bytes(b"never committed")

    again = Inbox(1000, 1 << 30, open_store(path))
    assert {m.payload[:1] for m in (again.get_nowait() for _ in range(len(again)))} == {b"a"}
    assert row_files(path) == [first]
    assert f"{second} holds 100 of the row's" in caplog.text and "the row is dropped" in caplog.text
    assert "removed 2 payload files" in caplog.text
    assert table_rows(path, "batches") == 1
    Outcomes().offer(again, b"c")
    await settle(again)
    # The lost row's ids are not given again: 2 rows of 2 * ROW_FILE_BYTES // 1024 came before.
    assert again.get_nowait().id == 4 * ROW_FILE_BYTES // 1024 + 1
    again.close()


async def test_an_inbox_of_schema_4_is_upgraded_with_its_rows_as_they_are(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, "axl.inbox")
    path = tmp_path / "inbox.sqlite3"
    inbox = Inbox(100, 1 << 30, open_store(path))
    Outcomes().offer(inbox, b"kept from before")
    await settle(inbox)
    inbox.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = 4 WHERE name = 'schema'")
    db.close()

    again = Inbox(100, 1 << 30, open_store(path))
    assert again.get_nowait().payload == b"kept from before"
    assert f"upgraded from schema 4 to {SCHEMA_VERSION}" in caplog.text
    again.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone()[0] == SCHEMA_VERSION
    db.close()
