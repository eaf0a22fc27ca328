"""The durable inbox's file: an SQLite database in WAL mode.

It holds the messages of the receive queue that no client has been handed
yet (or that one holds without having said it is done), and, per message
stream session, the sequence numbers whose messages it holds, so that a
sender repeating them after a restart gets its answer again instead of a
second delivery (axl.node.msgstream, SessionRecord.restored). A commit's
messages share one row (axl.node.inboxrows says why and how).

A payload of APART_BYTES or more is kept out of the database, in a file
of its own in `<file>.payloads/` named by the message's id, its record
holding only its length: written before the row is committed (and, with
"full", flushed to the disk with its folder first), removed after the
message's delivery is committed. So a crash at any moment leaves either a
record with its whole file, or a file without a record (the message was
never acknowledged, or was delivered), which start-up removes. SQLite would
copy such a payload four times (bound into the statement, into its pages,
into the WAL, checkpointed into the database) and read it back to free its
pages; a file is written once, and removed before the operating system may
even have written it out.

For the same reason, with "normal", a row of ROW_FILE_BYTES or more (a
busy commit's many small messages) is kept whole in a file of its own,
`r<first>` in the same folder, the database holding only its length:
written before the row is committed, removed after the commit that
delivers its last message, as above. Commits of 80-150 messages of 1 KiB
took SQLite 520-1,450 us each on a busy receiver (their pages, the WAL
frames and their checksums, then the checkpoint's copy); a 100 KiB file
takes about 60 us to write and remove (docs/performance-log.md, "Rows in
files of their own"). With
"full" rows stay in the database: a file of their own would cost two more
flushes to the disk per commit.

The node holds the file (an flock on `<file>.lock` beside it) while it
runs: a second node given the same `inbox_path` stops at start-up. What may wait for the disk runs on
threads of the store's own; the rest on the event loop's, where it costs
CPU only (docs/architecture.md, "The durable inbox"):
- `prepare` encodes a batch; `write` puts it into one transaction and
  commits it: with `inbox_sync` "normal" that is a write into the WAL,
  which the operating system holds, so a batch of small messages is
  written on the loop; `write_in_thread` is for "full", whose commit waits
  for `fsync`, and for a batch with payload files to write or remove or
  THREAD_BYTES to copy (`PreparedBatch.in_thread`);
- `checkpoint_in_thread` copies the WAL into the database and flushes both,
  every CHECKPOINT_PAGES or so, on a second connection and thread, while
  commits go on (SQLite's own automatic checkpoints, which would run inside
  a commit on the loop, are off).
One commit is under way at a time, so commits keep the order of the
messages.

Start-up refuses a file it cannot trust, in one line, and changes nothing
in it: not a database, damaged (`PRAGMA quick_check`), from a newer
version, of another node (NotThisNodesInbox: two nodes pointed at one file),
or on a full disk.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from axl.budgets import STREAM_WINDOW
from axl.config import NodeConfig
from axl.identity import NodeIdentity
from axl.node.inboxrows import (APART, DeliveryPlan, MessageRows, add_apart_record, add_record,
                                decode_bits, decode_records, encode_bits)
from axl.node.streamsessions import SessionKey, SessionLru
from axl.wire import KEY_SIZE

# 2: payloads of APART_BYTES or more in files of their own (messages.apart: their length).
# 3: session records of STREAM_WINDOW bits (4096, where 2 had 256).
# 4: a commit's messages in one row of `batches` (first: its first message's
#    id), the delivered ones in a bitmap in `delivered`; no `messages` table.
# 5: a row may be kept in a file of its own, its `records` then _ROW_IN_FILE
#    (the file's length).
SCHEMA_VERSION = 5
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS batches (first INTEGER PRIMARY KEY, records BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS delivered (first INTEGER PRIMARY KEY, bits BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS sessions (key BLOB PRIMARY KEY, record BLOB NOT NULL, used INTEGER NOT NULL)"
    " WITHOUT ROWID",
)
# Schemas 1 to 3 kept a row per message, moved into rows of this many at the upgrade.
_UPGRADE_ROW_RECORDS = 1000
_WINDOW_BYTES: Final = STREAM_WINDOW // 8
_WINDOW_MASK: Final = (1 << STREAM_WINDOW) - 1
_COMMITTED_UPTO: Final = struct.Struct("!Q")
# The window of the session records of schemas 1 and 2, in bits.
_OLD_WINDOW = 256
_SESSION_ID = struct.Struct("!Q")
_PAGE_SIZE: Final = 4096
# A checkpoint after about this many pages in the WAL (SQLite's own default),
# and one that commits wait for if the WAL grew this long all the same.
CHECKPOINT_PAGES: Final = 1000
WAL_CAP_PAGES = 16 * CHECKPOINT_PAGES
# Payloads this long or longer are kept in files of their own.
APART_BYTES: Final = 256 * 1024
# With "normal", a row this long or longer is kept in a file of its own.
ROW_FILE_BYTES = 16 * 1024
# A batch whose payloads in the row add up to this much is copied into the
# database (or its row's file) on the store's thread, not on the event loop.
THREAD_BYTES: Final = 1 << 20
# What a row kept in a file of its own holds in the database: the file's
# length (shorter than any record, so never taken for one).
_ROW_IN_FILE = struct.Struct("!Q")
# The tables every schema has.
_TABLES = {"meta", "sessions"}


log = logging.getLogger("axl.inbox")


class StoreError(Exception):
    """The inbox file cannot be used; the message says why in one line."""


class NotThisNodesInbox(StoreError):
    """The inbox file belongs to another node: the configuration points two
    nodes at one file (the caller reports it as a configuration error)."""


def open_inbox(config: NodeConfig, identity: NodeIdentity) -> InboxStore | None:
    """The node's durable inbox, or None to keep it in memory; says which in the log."""
    path = config.inbox_file()
    if path is None:
        why = 'inbox_path is ""' if config.inbox_path == "" else "no PrivateKeyPath to keep it beside"
        log.info("inbox in memory (%s): messages not yet read are lost when the node stops", why)
        return None
    store = InboxStore.open(path, config.inbox_sync, identity.public_key)
    log.info("inbox %s (inbox_sync %s): %d messages kept from before", path, config.inbox_sync,
             store.kept_messages)
    return store


@dataclass
class Batch:
    """One transaction: messages in, messages out, session records written and forgotten."""

    inserts: list[tuple[int, bytes, bytes]] = field(default_factory=list)
    deletes: list[int] = field(default_factory=list)
    sessions: dict[SessionKey, CommittedSession] = field(default_factory=dict)
    forgotten: list[SessionKey] = field(default_factory=list)
    last_id: int = 0


@dataclass
class PreparedBatch:
    """A batch encoded for its transaction: the records of the new row
    (`row_in_file`: kept in a file of its own), the payloads kept apart,
    what its deliveries change, and whether it is written on the store's thread."""

    batch: Batch
    records: list[bytes]
    row_bytes: int
    row_in_file: bool
    apart: list[tuple[int, bytes]]
    deliveries: DeliveryPlan
    in_thread: bool

    @property
    def first(self) -> int:
        """The id of the new row (its first message's), 0 without one."""
        inserts = self.batch.inserts
        return inserts[0][0] if inserts else 0


@dataclass(frozen=True)
class Checkpointed:
    """What a checkpoint left: the WAL's length in pages, and whether it
    could do all it was asked (False: another connection was in its way)."""

    wal_pages: int
    complete: bool


@dataclass
class Kept:
    """What the file held at start-up: messages in id order, session records
    least recently written first, and the highest message id ever given."""

    messages: list[tuple[int, bytes, bytes]]
    sessions: list[tuple[SessionKey, CommittedSession]]
    last_id: int


@dataclass
class Found:
    """What start-up read from the file: what it kept, the rows that hold
    it, the ids kept apart, and the sessions' last `used` number."""

    kept: Kept
    rows: MessageRows
    apart: set[int]
    row_files: dict[int, int]
    used: int


def _session_key(key: SessionKey) -> bytes:
    peer, session_id = key
    return peer + _SESSION_ID.pack(session_id)


@dataclass(slots=True)
class CommittedSession:
    """The messages of one sender's stream session that the inbox committed:
    the highest sequence number, and which of the STREAM_WINDOW numbers up
    to it (bit i: `taken_upto - i`). What a restarted node answers a sender
    repeating them, in 8 + STREAM_WINDOW / 8 bytes, updated in constant
    time: a number far ahead of the others (the first the stream saw of a
    session it did not know) leaves no number of the window behind it,
    never a shift that long."""

    taken_upto: int = 0
    bits: int = 0

    def add(self, seq: int) -> None:
        ahead = seq - self.taken_upto
        if ahead >= STREAM_WINDOW:
            self.bits = 1
            self.taken_upto = seq
        elif ahead > 0:
            self.bits = ((self.bits << ahead) | 1) & _WINDOW_MASK
            self.taken_upto = seq
        elif -ahead < STREAM_WINDOW:
            self.bits |= 1 << -ahead

    def add_all(self, seqs: list[int]) -> None:
        """`add` each of `seqs`: a run of numbers one after another past
        `taken_upto` (a busy sender's batch) in one shift of the bits."""
        first, count = seqs[0], len(seqs)
        if first > self.taken_upto and seqs == list(range(first, first + count)):
            last = first + count - 1
            ahead = last - self.taken_upto
            run = (1 << min(count, STREAM_WINDOW)) - 1
            self.bits = run if ahead >= STREAM_WINDOW else ((self.bits << ahead) | run) & _WINDOW_MASK
            self.taken_upto = last
            return
        for seq in seqs:
            self.add(seq)

    def committed(self) -> Iterator[int]:
        """The sequence numbers committed within the window, in order."""
        bits = self.bits
        while bits:
            back = bits.bit_length() - 1
            yield self.taken_upto - back
            bits ^= 1 << back

    def encode(self) -> bytes:
        return _COMMITTED_UPTO.pack(self.taken_upto) + self.bits.to_bytes(_WINDOW_BYTES, "big")

    @classmethod
    def decode(cls, blob: bytes, window: int = STREAM_WINDOW) -> CommittedSession:
        """A record written by `encode`, or by a schema whose window was `window` bits."""
        if len(blob) != _COMMITTED_UPTO.size + window // 8:
            raise ValueError(f"a session record of {len(blob)} bytes")
        return cls(_COMMITTED_UPTO.unpack_from(blob)[0], int.from_bytes(blob[_COMMITTED_UPTO.size:], "big"))


# The sessions the inbox keeps answers for, bounded as the message stream's receiver keeps them.
CommittedSessions = SessionLru[CommittedSession]


class InboxStore:
    """The open inbox file. `open` checks it and reads it whole; then the node
    writes a batch at a time: `prepare`, then `write` (or `write_in_thread`
    when it would wait for the disk or copy megabytes), and now and then
    `checkpoint_in_thread`."""

    def __init__(self, path: Path, lock: int, writer: sqlite3.Connection, checkpointer: sqlite3.Connection,
                 sync: str, found: Found) -> None:
        self.path = path
        self.payloads = _payloads_folder(path)
        self._lock = lock
        self._db = writer
        self._checkpointer = checkpointer
        # With "full", a commit waits for the disk: not on the event loop.
        self._full = sync == "full"
        self._apart = found.apart  # ids of the messages whose payloads are in files of their own
        self._row_files = found.row_files  # rows kept in files of their own: first id -> bytes
        self._rows = found.rows
        self._kept: Kept | None = found.kept
        self._used = found.used
        self._wal_pages = 0  # about how many pages were written since the last checkpoint began
        self._commits = ThreadPoolExecutor(max_workers=1, thread_name_prefix="axl-inbox")
        self._checkpoints = ThreadPoolExecutor(max_workers=1, thread_name_prefix="axl-inbox-checkpoint")

    @classmethod
    def open(cls, path: Path, sync: str, owner: bytes) -> InboxStore:
        """Open (or create) the file for the node whose key is `owner`.

        Raises StoreError (the file is damaged, in use, or the disk full;
        NotThisNodesInbox: the file is another node's). The file is opened by
        its real name (symbolic links resolved), so that one file is one lock."""
        path = Path(os.path.realpath(path))
        lock = _lock(path)
        connections: list[sqlite3.Connection] = []
        try:
            writer = _connect(path, connections)
            _check(writer, path, owner)
            _set_modes(writer, path, sync)
            _claim(writer, path, owner)
            found = _read(writer, path)
            checkpointer = _connect(path, connections)
            _set_modes(checkpointer, path, sync)
        except BaseException:
            for connection in connections:
                connection.close()
            os.close(lock)
            raise
        return cls(path, lock, writer, checkpointer, sync, found)

    @property
    def kept_messages(self) -> int:
        """How many messages the file held at start-up."""
        return len(self._kept.messages) if self._kept is not None else 0

    def take_kept(self) -> Kept:
        """What the file held at start-up (once: the store keeps no copy)."""
        kept, self._kept = self._kept, None
        assert kept is not None
        return kept

    def prepare(self, batch: Batch) -> PreparedBatch:
        """Encode `batch` (on the loop: a pass over its messages, no copy of
        a payload). Raises ValueError for a message it cannot hold."""
        records: list[bytes] = []
        apart: list[tuple[int, bytes]] = []
        row_bytes = 0
        for id_, sender, payload in batch.inserts:
            size = len(payload)
            if size < APART_BYTES:
                row_bytes += size
                add_record(records, id_, sender, payload)
            else:
                apart.append((id_, payload))
                add_apart_record(records, id_, sender, size)
        deliveries = self._rows.plan(batch.deletes)
        row_files = self._row_files
        in_thread = (self._full or bool(apart) or row_bytes >= THREAD_BYTES
                     or bool(self._apart) and not self._apart.isdisjoint(deliveries.deletes)
                     or bool(row_files) and any(row_files.get(first, 0) >= THREAD_BYTES
                                                for first in deliveries.emptied))
        row_in_file = not self._full and row_bytes >= ROW_FILE_BYTES
        return PreparedBatch(batch, records, row_bytes, row_in_file, apart, deliveries, in_thread)

    def write(self, prepared: PreparedBatch) -> None:
        """Commit the batch in one transaction: its payload files written
        first, and those of its deliveries removed after. Raises
        sqlite3.Error or OSError, having rolled back and removed the files it wrote."""
        self._count_pages(prepared)
        self._write(prepared)

    def write_in_thread(self, prepared: PreparedBatch) -> Future[None]:
        """`write` on the store's thread; the future fails as `write` raises."""
        self._count_pages(prepared)
        return self._commits.submit(self._write, prepared)

    def _count_pages(self, prepared: PreparedBatch) -> None:
        """About how many pages the batch adds to the WAL: one for each table
        touched, and the payloads kept in the database."""
        self._wal_pages += 5 + (0 if prepared.row_in_file else prepared.row_bytes // _PAGE_SIZE)

    def _write(self, prepared: PreparedBatch) -> None:
        apart = prepared.apart
        row = b"".join(prepared.records)
        files = [(str(id_), payload) for id_, payload in apart]
        if prepared.row_in_file:
            files.append((_row_file_name(prepared.first), row))
        try:
            self._write_files(files)
            self.stage(prepared, _ROW_IN_FILE.pack(len(row)) if prepared.row_in_file else row)
            self.commit()
        except BaseException:
            self.abandon()
            self._remove_files([name for name, _ in files])
            raise
        inserts = prepared.batch.inserts
        if inserts:
            self._rows.add(prepared.first, [id_ for id_, _, _ in inserts], len(inserts))
        if prepared.row_in_file:
            self._row_files[prepared.first] = len(row)
        self._rows.apply(prepared.deliveries)
        self._apart.update(id_ for id_, _ in apart)
        self._remove_delivered(prepared.deliveries)

    def _remove_delivered(self, deliveries: DeliveryPlan) -> None:
        """The files of what this commit delivered for good: payloads kept
        apart, and rows kept in files whose last message it delivered."""
        done: list[str] = []
        if self._apart:
            for id_ in deliveries.deletes:
                if id_ in self._apart:
                    self._apart.discard(id_)
                    done.append(str(id_))
        if self._row_files:
            for first in deliveries.emptied:
                if self._row_files.pop(first, None) is not None:
                    done.append(_row_file_name(first))
        self._remove_files(done)

    def _write_files(self, files: list[tuple[str, bytes]]) -> None:
        """Each payload or row into its own file; with "full", flushed to the
        disk with the folder that names it, before the row that points at it."""
        if not files:
            return
        if not self.payloads.is_dir():
            self.payloads.mkdir(mode=0o700)
            if self._full:
                _sync_folder(self.path.parent)
        for name, content in files:
            file = os.open(self.payloads / name, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
            try:
                _write_all(file, content)
                if self._full:
                    os.fsync(file)
            finally:
                os.close(file)
        if self._full:
            _sync_folder(self.payloads)

    def _remove_files(self, names: list[str]) -> None:
        """Remove files no record points at any more (any left by a crash go at start-up)."""
        for name in names:
            try:
                os.unlink(self.payloads / name)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("inbox: cannot remove %s (%s); it is removed at the next start",
                            self.payloads / name, exc.strerror)

    def stage(self, prepared: PreparedBatch, row: bytes) -> None:
        """Begin a transaction and write the batch into it, its new row as
        `row` (no disk I/O but for pages SQLite's cache cannot hold). Raises sqlite3.Error."""
        db = self._db
        batch = prepared.batch
        db.execute("BEGIN")
        try:
            if batch.inserts:
                db.execute("INSERT INTO batches (first, records) VALUES (?, ?)", (prepared.first, row))
            _write_deliveries(db, prepared.deliveries)
            if batch.sessions:
                self._used += 1
                db.executemany("INSERT OR REPLACE INTO sessions (key, record, used) VALUES (?, ?, ?)",
                               [(_session_key(key), session.encode(), self._used)
                                for key, session in batch.sessions.items()])
            if batch.forgotten:
                db.executemany("DELETE FROM sessions WHERE key = ?", [(_session_key(key),) for key in batch.forgotten])
            if not batch.inserts or prepared.row_in_file:
                _write_last_id(db, batch.last_id)
        except BaseException:
            self.abandon()
            raise

    def commit(self) -> None:
        """COMMIT the staged transaction (with "normal", into the WAL, no wait
        for the disk). Raises sqlite3.Error."""
        self._db.execute("COMMIT")

    @property
    def commits_wait_for_disk(self) -> bool:
        """With "full", every commit waits for the disk (on the store's thread)."""
        return self._full

    @property
    def checkpoint_due(self) -> bool:
        return self._wal_pages >= CHECKPOINT_PAGES

    def checkpoint_in_thread(self, truncate: bool = False) -> Future[Checkpointed]:
        """Copy the WAL into the database file (and flush both) on the
        checkpoint thread, through a connection of its own: commits go on
        meanwhile. While commits keep coming, the WAL may never start over,
        and once it is WAL_CAP_PAGES long the caller makes them wait for a
        checkpoint with `truncate`, which empties it, unless another process
        reads the file (it does not wait for that reader: `complete` is then False)."""
        self._wal_pages = 0
        return self._checkpoints.submit(self._checkpoint, "TRUNCATE" if truncate else "PASSIVE")

    def _checkpoint(self, mode: str) -> Checkpointed:
        busy, wal_pages, _copied = self._checkpointer.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
        return Checkpointed(wal_pages=wal_pages, complete=not busy)

    def abandon(self) -> None:
        """Roll back a transaction that could not be written whole."""
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")

    def close(self) -> None:
        self._commits.shutdown(wait=True)
        self._checkpoints.shutdown(wait=True)
        self._checkpointer.close()
        self._db.close()
        os.close(self._lock)


def _lock(path: Path) -> int:
    """Hold `path` for this process alone while it runs, by an flock on a
    file beside it (`<path>.lock`: SQLite's own locks are on the database,
    and closing any descriptor of that file would drop them), so that a
    second node given the same inbox_path stops at start-up. The database
    is created if new, owner-only like the key file (SQLite gives its WAL
    the same mode). `path` is the file's real name; a file with a second
    name (a hard link) is refused: that name would be a second lock, and
    SQLite names the WAL after the name it is given."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = os.open(path.with_name(path.name + ".lock"), os.O_CREAT | os.O_RDWR, 0o600)
    except OSError as exc:
        raise StoreError(f"inbox {path}: cannot write beside it: {exc.strerror}") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        database = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
        links = os.fstat(database).st_nlink
        os.close(database)
    except BlockingIOError:
        os.close(lock)
        raise StoreError(f"inbox {path}: another process has it open: each running node needs "
                         f"its own inbox_path") from None
    except OSError as exc:
        os.close(lock)
        raise StoreError(f"inbox {path}: cannot write it: {exc.strerror}") from None
    if links > 1:
        os.close(lock)
        raise StoreError(f"inbox {path}: the file has {links} names (hard links): another node may use it "
                         f"by another name; give inbox_path a file of its own")
    return lock


def _payloads_folder(path: Path) -> Path:
    return path.with_name(path.name + ".payloads")


def _row_file_name(first: int) -> str:
    """The name of the file that keeps row `first` (a payload's file is named by its id alone)."""
    return f"r{first}"


def _sync_folder(folder: Path) -> None:
    """Flush `folder`'s entries to the disk: the names of the files just made."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _connect(path: Path, opened: list[sqlite3.Connection]) -> sqlite3.Connection:
    try:
        connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=0)
    except sqlite3.Error as exc:
        raise StoreError(f"inbox {path}: cannot open it: {exc}") from None
    opened.append(connection)
    return connection


def _check(db: sqlite3.Connection, path: Path, owner: bytes) -> None:
    """Check the file, writing nothing: an SQLite database whose pages are
    sound, new or an inbox of this node."""
    try:
        problems = [row[0] for row in db.execute("PRAGMA quick_check")]
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        found = dict(db.execute("SELECT name, value FROM meta")) if "meta" in tables else {}
    except sqlite3.Error as exc:
        raise _open_error(path, exc) from None
    if problems != ["ok"]:
        raise StoreError(f"inbox {path}: the database is damaged ({problems[0]}); {_LEFT_AS_IS}")
    if tables and not (_TABLES <= tables and found):
        raise StoreError(f"inbox {path}: an SQLite database, but not a node's inbox (its tables: "
                         f"{', '.join(sorted(tables))}); nothing in it was changed: give inbox_path another file")
    if found:
        _check_meta(found, path, owner)


def _set_modes(db: sqlite3.Connection, path: Path, sync: str) -> None:
    try:
        # A new file's switch to WAL is a commit in the rollback journal,
        # flushed to the disk as it ends: behind other programs' writes that
        # held the node's start-up for seconds. "normal" promises to survive
        # a crash of the process, not of the machine, so it need not wait.
        db.execute("PRAGMA synchronous = OFF" if sync == "normal" else "PRAGMA synchronous = FULL")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute(f"PRAGMA synchronous = {sync.upper()}")
        # Checkpoints flush to disk: the node runs them itself, off the event loop.
        db.execute("PRAGMA wal_autocheckpoint = 0")
        # When the WAL starts over, a longer one is cut back to this.
        db.execute(f"PRAGMA journal_size_limit = {2 * CHECKPOINT_PAGES * _PAGE_SIZE}")
    except sqlite3.Error as exc:
        raise _open_error(path, exc) from None


@contextmanager
def _start_up_transaction(db: sqlite3.Connection, path: Path) -> Iterator[None]:
    """A write at start-up, committed whole or not at all; SQLite's errors as StoreError."""
    try:
        db.execute("BEGIN IMMEDIATE")
        yield
        db.execute("COMMIT")
    except sqlite3.Error as exc:
        raise _open_error(path, exc) from None
    finally:
        if db.in_transaction:
            db.execute("ROLLBACK")


def _claim(db: sqlite3.Connection, path: Path, owner: bytes) -> None:
    """Make a new file an inbox of this node (or upgrade one of an older
    schema), and write once (a start counter), so that a disk too full for a
    commit shows now."""
    with _start_up_transaction(db, path):
        for statement in _SCHEMA:
            db.execute(statement)
        if db.execute("SELECT count(*) FROM meta").fetchone()[0] == 0:
            db.executemany("INSERT INTO meta (name, value) VALUES (?, ?)",
                           [("schema", SCHEMA_VERSION), ("node", owner.hex()), ("last_id", 0), ("starts", 0)])
        else:
            _upgrade(db, path)
        db.execute("UPDATE meta SET value = value + 1 WHERE name = 'starts'")


def _upgrade(db: sqlite3.Connection, path: Path) -> None:
    """Bring a file of an older schema to this one, inside the start-up transaction."""
    schema = db.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone()[0]
    if schema == SCHEMA_VERSION:
        return
    if schema <= 2:
        # Versions 1 and 2 kept a session's window in 256 bits: the same bits, wider.
        try:
            widened = [(CommittedSession.decode(record, _OLD_WINDOW).encode(), key)
                       for key, record in db.execute("SELECT key, record FROM sessions")]
        except (ValueError, TypeError) as exc:
            raise StoreError(f"inbox {path}: the database is damaged ({exc}); {_LEFT_AS_IS}") from None
        db.executemany("UPDATE sessions SET record = ? WHERE key = ?", widened)
    if schema <= 3:
        _move_messages_into_rows(db, path, apart_column=schema >= 2)
    # 4 to 5 changes nothing written: 5 adds a way to keep a row, which 4 cannot read.
    db.execute("UPDATE meta SET value = ? WHERE name = 'schema'", (SCHEMA_VERSION,))
    log.info("inbox %s: upgraded from schema %d to %d", path, schema, SCHEMA_VERSION)


def _move_messages_into_rows(db: sqlite3.Connection, path: Path, apart_column: bool) -> None:
    """Schemas 1 to 3 kept a row per message in `messages` (version 1 every
    payload in its row; 2 and 3 those kept apart as their length, in
    `apart`): into rows of _UPGRADE_ROW_RECORDS records."""
    apart = "apart" if apart_column else "NULL"
    records: list[bytes] = []
    first = count = 0
    try:
        for id_, sender, payload, size in db.execute(f"SELECT id, sender, payload, {apart} FROM messages ORDER BY id"):
            if not count:
                first = id_
            if size is None:
                add_record(records, id_, sender, payload)
            else:
                add_apart_record(records, id_, sender, size)
            count += 1
            if count == _UPGRADE_ROW_RECORDS:
                db.execute("INSERT INTO batches (first, records) VALUES (?, ?)", (first, b"".join(records)))
                records, count = [], 0
    except (ValueError, TypeError) as exc:
        raise StoreError(f"inbox {path}: the database is damaged ({exc}); {_LEFT_AS_IS}") from None
    if count:
        db.execute("INSERT INTO batches (first, records) VALUES (?, ?)", (first, b"".join(records)))
    db.execute("DROP TABLE messages")


def _check_meta(found: dict, path: Path, owner: bytes) -> None:
    if found.get("schema") not in range(1, SCHEMA_VERSION + 1):
        raise StoreError(f"inbox {path}: written by another version of the node (schema "
                         f"{found.get('schema')!r}, this one reads {SCHEMA_VERSION}); {_LEFT_AS_IS}")
    if found.get("node") != owner.hex():
        raise NotThisNodesInbox(f"inbox_path: {path} is the inbox of node {str(found.get('node'))[:16]}…, "
                          f"not of this node ({owner.hex()[:16]}…); give each node its own inbox_path, "
                          f"or move the file aside if this node's key was replaced")


def _read(db: sqlite3.Connection, path: Path) -> Found:
    """What the file holds, with the rows and payloads kept apart read back;
    a record or row whose file is missing or short (a power cut with
    inbox_sync "normal") is dropped, and a file no row points at (a crash
    before its row was committed, or after its delivery was) removed."""
    folder = _payloads_folder(path)
    row_files: dict[int, int] = {}
    lost_rows: list[int] = []
    try:
        stored = db.execute("SELECT first, records FROM batches ORDER BY first").fetchall()
        delivered = dict(db.execute("SELECT first, bits FROM delivered"))
        session_rows = db.execute("SELECT key, record, used FROM sessions ORDER BY used").fetchall()
        last_id = db.execute("SELECT value FROM meta WHERE name = 'last_id'").fetchone()[0]
        sessions = [((key[:KEY_SIZE], _SESSION_ID.unpack(key[KEY_SIZE:])[0]),
                     CommittedSession.decode(record)) for key, record, _ in session_rows]
        rows = []
        for first, records in stored:
            if len(records) == _ROW_IN_FILE.size:
                size = _ROW_IN_FILE.unpack(records)[0]
                records = _read_payload(folder / _row_file_name(first), size, "row")
                if records is None:
                    lost_rows.append(first)
                    continue
                row_files[first] = size
            rows.append((first, list(decode_records(records)), decode_bits(delivered.get(first, b""))))
    except sqlite3.Error as exc:
        raise _open_error(path, exc) from None
    except (ValueError, struct.error, TypeError) as exc:
        raise StoreError(f"inbox {path}: the database is damaged ({exc}); {_LEFT_AS_IS}") from None
    if lost_rows:
        _drop_rows(db, path, lost_rows)
    messages: list[tuple[int, bytes, bytes]] = []
    apart: set[int] = set()
    found_rows = MessageRows()
    lost: list[int] = []
    for first, records, bits in rows:
        found_rows.add(first, [record.id for record in records], len(records), bits)
        for position, record in enumerate(records):
            last_id = max(last_id, record.id)
            if bits >> position & 1:
                continue
            if record.where != APART:
                messages.append((record.id, record.sender, record.payload))
                continue
            payload = _read_payload(folder / str(record.id), record.size)
            if payload is None:
                lost.append(record.id)
                continue
            apart.add(record.id)
            messages.append((record.id, record.sender, payload))
    if lost:
        _drop(db, path, found_rows, lost, last_id)
    _remove_strays(folder, {str(id_) for id_ in apart} | {_row_file_name(first) for first in row_files})
    return Found(Kept(messages, sessions, last_id), found_rows, apart, row_files,
                 session_rows[-1][2] if session_rows else 0)


def _drop(db: sqlite3.Connection, path: Path, rows: MessageRows, ids: list[int], last_id: int) -> None:
    """Mark messages whose payload file was lost as delivered, at start-up;
    `last_id` is written too, as the rows this empties may have held it."""
    plan = rows.plan(ids)
    with _start_up_transaction(db, path):
        _write_deliveries(db, plan)
        _write_last_id(db, last_id)
    rows.apply(plan)


def _drop_rows(db: sqlite3.Connection, path: Path, firsts: list[int]) -> None:
    """Delete rows whose file was lost, at start-up (their messages with them)."""
    with _start_up_transaction(db, path):
        _write_deliveries(db, DeliveryPlan(emptied=firsts))


def _write_last_id(db: sqlite3.Connection, last_id: int) -> None:
    """The highest message id ever given, into the transaction under way.

    A commit that adds a row need not write it: that row holds the highest
    id any client can have seen (ids above it belong to refused messages,
    or to messages a later commit adds), and
    start-up takes the highest of `meta` and the rows (_read). So only a
    commit that adds none (its deliveries may empty the row that held it),
    or whose row goes to a file of its own (a power cut may lose the file,
    and its ids with it), writes it: one statement and one page fewer in
    the WAL for most commits of a busy receiver."""
    db.execute("UPDATE meta SET value = ? WHERE name = 'last_id'", (last_id,))


def _write_deliveries(db: sqlite3.Connection, plan: DeliveryPlan) -> None:
    """Into the transaction under way: the rows the plan empties deleted, the others' bitmaps written."""
    if plan.emptied:
        emptied = [(first,) for first in plan.emptied]
        db.executemany("DELETE FROM batches WHERE first = ?", emptied)
        db.executemany("DELETE FROM delivered WHERE first = ?", emptied)
    if plan.bitmaps:
        db.executemany("INSERT OR REPLACE INTO delivered (first, bits) VALUES (?, ?)",
                       [(first, encode_bits(bits)) for first, bits in plan.bitmaps.items()])


def _write_all(file: int, content: bytes) -> None:
    """os.write until all of `content` is written (a write may take part of it)."""
    written = 0
    with memoryview(content) as view:
        while written < len(view):
            written += os.write(file, view[written:])


def _read_payload(file: Path, size: int, what: str = "message") -> bytes | None:
    """The payload (or the row: `what`) kept in `file`, or None (logged) if it is not there whole."""
    try:
        payload = file.read_bytes()
    except FileNotFoundError:
        payload = b""
    except OSError as exc:
        raise StoreError(f"inbox: cannot read {file}: {exc.strerror}") from None
    if len(payload) == size:
        return payload
    log.warning("inbox: %s holds %d of the %s's %d bytes (lost in a power cut with inbox_sync "
                "normal?): the %s is dropped", file, len(payload), what, size, what)
    return None


def _remove_strays(folder: Path, kept: set[str]) -> None:
    """Remove the payload and row files (named by an id, or `r` and an id) not in `kept`."""
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"inbox: cannot read {folder}: {exc.strerror}") from None
    strays = [entry.path for entry in entries
              if entry.name.removeprefix("r").isdigit() and entry.name not in kept]
    for stray in strays:
        try:
            os.unlink(stray)
        except OSError as exc:
            raise StoreError(f"inbox: cannot remove {stray}: {exc.strerror}") from None
    if strays:
        log.info("inbox: removed %d payload files of messages not committed before a crash, or "
                 "delivered before it", len(strays))


_LEFT_AS_IS = ("nothing in it was changed: move it aside to start with an empty inbox "
               "(the sqlite3 shell's .recover may save its messages)")


def _open_error(path: Path, exc: sqlite3.Error) -> StoreError:
    """One line for what SQLite said, with what to do about it."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF  # the primary code of an extended one
    if code == sqlite3.SQLITE_FULL:
        return StoreError(f"inbox {path}: the disk is full ({exc}): free some space and start again")
    if code == sqlite3.SQLITE_BUSY:
        return StoreError(f"inbox {path}: another process has it open ({exc}): "
                          f"each running node needs its own inbox_path")
    if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
        return StoreError(f"inbox {path}: the database is damaged ({exc}); {_LEFT_AS_IS}")
    return StoreError(f"inbox {path}: cannot use it ({exc})")
