"""The in-memory inbox when it is full: a message waits for room, unanswered,
and is taken when a client takes one, or refused when the wait is over."""

import asyncio

from axl.node.inbox import Inbox
from axl.node.journal import JournalState
from axl.node.store import InboxStore

SENDER = bytes(32)
OWNER = b"\x0a" * 32


class Answers:
    """What each message's sender was told, in the order told."""

    def __init__(self) -> None:
        self.told: list[tuple[bytes, bool]] = []

    def settled_for(self, payload: bytes):
        return lambda stored: self.told.append((payload, stored))


async def test_a_message_waits_for_room_and_is_taken_when_a_client_takes_one() -> None:
    inbox, answers = Inbox(2, 1 << 20, room_wait=5.0), Answers()
    for payload in (b"a", b"b", b"c", b"d"):
        inbox.put(SENDER, payload, answers.settled_for(payload))
    assert answers.told == [(b"a", True), (b"b", True)]
    assert inbox.waiting_for_room == 2
    taken = inbox.get_nowait()
    inbox.delivered([taken])
    assert answers.told[2:] == [(b"c", True)]
    inbox.put(SENDER, b"e", answers.settled_for(b"e"))
    assert inbox.waiting_for_room == 2
    taken = [inbox.get_nowait(), inbox.get_nowait()]
    inbox.delivered(taken)
    assert answers.told[3:] == [(b"d", True), (b"e", True)]
    assert [message.payload for message in taken] == [b"b", b"c"]
    assert [inbox.get_nowait().payload for _ in range(2)] == [b"d", b"e"]
    assert (inbox.waited_for_room, inbox.refused_after_wait) == (3, 0)


async def test_a_message_is_refused_when_no_room_opens_within_the_wait() -> None:
    inbox, answers = Inbox(1, 1 << 20, room_wait=0.05), Answers()
    inbox.put(SENDER, b"kept", answers.settled_for(b"kept"))
    inbox.put(SENDER, b"late", answers.settled_for(b"late"))
    await asyncio.sleep(0.02)
    assert answers.told == [(b"kept", True)]
    await asyncio.sleep(0.1)
    assert answers.told == [(b"kept", True), (b"late", False)]
    assert (inbox.waiting_for_room, inbox.refused_after_wait) == (0, 1)
    assert inbox.get_nowait().payload == b"kept"


async def test_no_more_bytes_wait_than_the_queue_holds_and_no_wait_when_switched_off() -> None:
    inbox, answers = Inbox(100, 10, room_wait=5.0), Answers()
    for payload in (b"11111", b"22222", b"33333", b"44444", b"55555"):
        inbox.put(SENDER, payload, answers.settled_for(payload))
    assert answers.told == [(b"11111", True), (b"22222", True), (b"55555", False)]
    assert inbox.waiting_for_room == 2
    await inbox.flush()
    assert answers.told[3:] == [(b"33333", False), (b"44444", False)]
    at_once, answers = Inbox(1, 1 << 20, room_wait=0), Answers()
    at_once.put(SENDER, b"x", answers.settled_for(b"x"))
    at_once.put(SENDER, b"y", answers.settled_for(b"y"))
    assert answers.told == [(b"x", True), (b"y", False)]


async def test_messages_waiting_when_the_journal_refuses_at_once_are_refused_one_by_one(tmp_path) -> None:
    """A durable inbox whose WAL cannot be emptied refuses each new message
    as it is offered: room opening for thousands waiting must refuse them in
    turn, not by recursing once per message."""
    inbox, answers = Inbox(1, 1 << 20, InboxStore.open(tmp_path / "inbox.sqlite3", "normal", OWNER), room_wait=5.0), Answers()
    inbox.put(SENDER, b"kept", answers.settled_for(b"kept"))
    await inbox.flush()
    waiting = [f"w{i}".encode() for i in range(3000)]
    for payload in waiting:
        inbox.put(SENDER, payload, answers.settled_for(payload))
    inbox.journal.state = JournalState.WAL_HELD
    inbox.delivered([inbox.get_nowait()])
    assert answers.told == [(b"kept", True)] + [(payload, False) for payload in waiting]
    assert inbox.waiting_for_room == 0 and inbox.held == 0
    inbox.journal.state = JournalState.CLOSED
    inbox.close()
