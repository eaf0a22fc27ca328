"""The acknowledged message stream's state machines, without a network."""

from __future__ import annotations

import pytest

from axl.budgets import STREAM_BASE_WINDOW, STREAM_WINDOW
from axl.node.msgstream import (
    BODY_BATCH_BYTES,
    STATUS_QUEUED,
    STATUS_REFUSED,
    STATUS_TOO_LARGE,
    Ack,
    Answered,
    Hello,
    Message,
    OutsideWindow,
    SessionRecord,
    SessionTable,
    StreamError,
    StreamReceiver,
    PATH_HEADROOM,
    StreamSender,
    VERSION,
    encode_ack,
    encode_hello,
    encode_message,
    encode_window,
)

PEER = bytes(32)


def feed_bytewise(receiver: StreamReceiver, data: bytes) -> list:
    return [event for i in range(len(data)) for event in receiver.feed(data[i:i + 1])]


def feed(receiver: StreamReceiver, data: bytes) -> list:
    """All events of `data`: a Hello pauses the receiver, so feed on after one."""
    events = receiver.feed(data)
    if events and isinstance(events[0], Hello):
        events += receiver.feed(b"")
    return events


def test_messages_arrive_in_order_and_acks_free_the_window() -> None:
    sender = StreamSender(session_id=7, fixed_window=2)
    receiver = StreamReceiver(SessionTable(), PEER, max_message_size=100)
    wire = sender.start_connection()
    for payload in (b"one", b"", b"three"):
        sender.submit(payload)
    wire += sender.take_output()
    assert sender.take_output() == b""
    events = feed_bytewise(receiver, wire)
    assert events == [Hello(7, 1), Message(1, b"one"), Message(2, b"")]
    acks = sender.receive(receiver.answer(1, STATUS_QUEUED) + receiver.answer(2, STATUS_REFUSED)[:5])
    assert acks == [Ack(1, STATUS_QUEUED)]
    assert feed_bytewise(receiver, sender.take_output()) == [Message(3, b"three")]
    assert sender.receive(receiver.answer(2, STATUS_REFUSED)[5:]) == [Ack(2, STATUS_REFUSED)]
    assert list(sender.unacked) == [3]
    assert not receiver.partial


@pytest.mark.parametrize("piece", [1, 7, 4096, 65475])
def test_large_messages_in_pieces_of_any_size_arrive_whole(piece: int) -> None:
    """Payloads whose header comes before the rest are gathered piece by
    piece; the piece that ends one may carry the next messages' frames."""
    sender = StreamSender(session_id=3)
    receiver = StreamReceiver(SessionTable(), PEER, max_message_size=1 << 20)
    payloads = [bytes(range(256)) * 700, b"x", bytes(3000), bytes(range(200)) * 999]
    wire = sender.start_connection()
    for payload in payloads:
        sender.submit(payload)
    while output := sender.take_output():
        wire += output
    events = []
    for start in range(0, len(wire), piece):
        events += feed(receiver, wire[start:start + piece])
        if 13 < start + piece < 100_000:  # past the hello, inside the first message
            assert receiver.partial
    assert not receiver.partial
    assert events == [Hello(3, 1)] + [Message(seq, p) for seq, p in enumerate(payloads, 1)]


def test_a_large_payload_is_written_alone_and_uncopied() -> None:
    sender = StreamSender(session_id=5)
    large = bytes(range(256)) * 1024
    wire = sender.start_connection()
    for payload in (b"a", b"b", large, b"c"):
        sender.submit(payload)
    outputs = []
    while output := sender.take_output():
        outputs.append(output)
    assert len(outputs) == 3 and outputs[1] is large and sender.payload_of(3) is large
    receiver = StreamReceiver(SessionTable(), PEER, max_message_size=1 << 20)
    events = feed(receiver, wire + b"".join(outputs))
    assert events[1:] == [Message(1, b"a"), Message(2, b"b"), Message(3, large), Message(4, b"c")]
    assert sender.receive(receiver.answer(3, STATUS_QUEUED)) == [Ack(3, STATUS_QUEUED)]
    assert list(sender.unacked) == [1, 2, 4]
    again = StreamReceiver(SessionTable(), PEER, max_message_size=1 << 20)
    events = feed(again, sender.start_connection())
    assert events[1:] == [Message(1, b"a"), Message(2, b"b"), Message(4, b"c")]


def test_a_message_resent_in_pieces_is_answered_not_delivered() -> None:
    sender = StreamSender(session_id=4)
    receiver = StreamReceiver(SessionTable(), PEER, max_message_size=1 << 20)
    sender.submit(bytes(100_000))
    first = sender.start_connection()
    assert feed(receiver, first)[-1] == Message(1, bytes(100_000))
    receiver.answer(1, STATUS_QUEUED)  # (a new connection waits for the older one's answers)
    again = StreamReceiver(receiver.table, PEER, max_message_size=1 << 20)
    resent = sender.start_connection()
    events = feed(again, resent[:50_000]) + again.feed(resent[50_000:])
    assert events == [Hello(4, 1), Answered(1, STATUS_QUEUED)]
    assert not again.partial


def test_a_reconnected_session_is_not_delivered_twice() -> None:
    table = SessionTable()
    sender = StreamSender(session_id=1)
    first = StreamReceiver(table, PEER, max_message_size=100)
    feed(first, sender.start_connection())
    for payload in (b"a", b"b", b"c"):
        sender.submit(payload)
    events = feed(first, sender.take_output())
    assert [e.seq for e in events if isinstance(e, Message)] == [1, 2, 3]
    # all three were answered, but only 1's acknowledgement reached the sender
    sender.receive(first.answer(1, STATUS_QUEUED))
    first.answer(2, STATUS_REFUSED)
    first.answer(3, STATUS_QUEUED)
    # the connection broke; the sender starts a new one, repeats 2 and 3, then sends 4
    second = StreamReceiver(table, PEER, max_message_size=100)
    sender.submit(b"d")
    events = feed(second, sender.start_connection())
    assert events == [Hello(1, 1), Answered(2, STATUS_REFUSED), Answered(3, STATUS_QUEUED), Message(4, b"d")]


def test_another_session_or_peer_starts_afresh() -> None:
    table = SessionTable()
    for peer, session in ((PEER, 1), (PEER, 2), (b"\1" * 32, 1)):
        sender = StreamSender(session_id=session)
        receiver = StreamReceiver(table, peer, max_message_size=100)
        sender.submit(b"x")
        events = feed(receiver, sender.start_connection())
        assert events[1] == Message(1, b"x")
        receiver.answer(1, STATUS_QUEUED)


def test_a_repeat_without_an_answer_on_record_is_delivered_unless_older_than_the_window() -> None:
    """A record restored after a restart holds only the answers committed
    with their messages: a repeat within the window without one was never
    taken for good, and is delivered; one older than the window cannot be
    repeated by a sender whose window kept it, so it was acknowledged."""
    top = STREAM_WINDOW + 10
    record = SessionRecord(taken_upto=top)
    record.remember(top - 1, STATUS_QUEUED)
    assert record.status_of(top - 1) == STATUS_QUEUED
    assert record.status_of(top - 2) is None and record.status_of(top - STREAM_WINDOW + 1) is None
    assert record.status_of(top - STREAM_WINDOW) == STATUS_QUEUED
    table = SessionTable()
    table.adopt(PEER, 5, record)
    receiver = StreamReceiver(table, PEER, max_message_size=100)
    assert receiver.feed(encode_hello(5)) == [Hello(5, 1)]
    assert receiver.feed(encode_message(top - 1, b"a") + encode_message(top - 2, b"b")) == [
        Answered(top - 1, STATUS_QUEUED), Message(top - 2, b"b")]


def test_answers_older_than_the_window_are_let_go() -> None:
    """A record holds one byte per number of the window, however many the
    session answered: moving up forgets the answers it leaves behind."""
    record = SessionRecord()
    for seq in range(1, 3 * STREAM_WINDOW):
        record.take(seq)
        record.remember(seq, STATUS_REFUSED)
    assert len(record.answers) == STREAM_WINDOW
    top = 3 * STREAM_WINDOW - 1
    assert record.status_of(top - STREAM_WINDOW + 1) == STATUS_REFUSED
    assert record.status_of(top - STREAM_WINDOW) == STATUS_QUEUED  # older than the window: acknowledged
    record.take(top + 10)
    assert [record.status_of(seq) for seq in range(top + 1, top + 11)] == [None] * 10
    assert record.status_of(top + 10 - STREAM_WINDOW + 1) == STATUS_REFUSED
    record.take(top + 10 + STREAM_WINDOW)
    assert not any(record.answers)


def test_session_memory_is_bounded() -> None:
    table = SessionTable(capacity=2)
    table.record(PEER, 1).remember(5, STATUS_QUEUED)
    table.record(PEER, 2)
    table.record(PEER, 3)
    assert table.record(PEER, 1).answers is None


def test_a_sender_minting_sessions_pushes_out_only_its_own() -> None:
    """Each sender has its share of the table: one that opens session after
    session forgets its own oldest, never another sender's record (whose
    resend after a reconnection would then be delivered twice)."""
    table = SessionTable(capacity=8, per_peer=2)
    other = b"\2" * 32
    table.record(other, 1).remember(1, STATUS_QUEUED)
    for session_id in range(100):
        table.record(PEER, session_id)
    assert table.record(other, 1).status_of(1) == STATUS_QUEUED
    assert table.most_held_by_one_peer() == 2 and len(table) == 3
    assert table.pushed_out == {"peer": 98, "node": 0}


def test_a_sequence_number_beyond_the_window_is_a_stream_error() -> None:
    """A sender numbers its messages as they go out, at most STREAM_WINDOW of
    them unanswered, so none is further than that beyond the highest the
    receiver has seen of the session: one that is (a jump of 2**31 took a
    receiver from 47 to 593 MiB in its durable inbox's session record) is
    refused on its header, before anything of it is taken, on this
    connection and on the next of the session."""
    table = SessionTable()
    receiver = StreamReceiver(table, PEER, max_message_size=100)
    edge = 1 + STREAM_WINDOW
    assert feed(receiver, encode_hello(1) + encode_message(1, b"a") + encode_message(edge, b"b"))[1:] == [
        Message(1, b"a"), Message(edge, b"b")]
    with pytest.raises(OutsideWindow):
        receiver.feed(encode_message(edge + STREAM_WINDOW + 1, b"c"))
    again = StreamReceiver(table, PEER, max_message_size=100)
    with pytest.raises(OutsideWindow):
        feed(again, encode_hello(1) + encode_message(edge + (1 << 31), b"x" * 1000))  # too large too: the header is enough
    record = table.record(PEER, 1)
    assert (record.taken_upto, record.seen_upto) == (edge, edge)


def test_the_first_number_seen_of_a_session_sets_where_it_is() -> None:
    """A session this node does not know (new, forgotten, or restored after a
    restart without the 503s it gave) may be anywhere: its first number is
    taken as it is, and the window counts from there."""
    receiver = StreamReceiver(SessionTable(), PEER, max_message_size=100)
    far = 1 << 63
    assert feed(receiver, encode_hello(3) + encode_message(far, b"x")) == [Hello(3, 1), Message(far, b"x")]
    with pytest.raises(OutsideWindow):
        receiver.feed(encode_message(far + STREAM_WINDOW + 1, b"y"))


def test_an_oversize_message_is_refused_unread_and_the_stream_goes_on() -> None:
    sender = StreamSender(session_id=3)
    receiver = StreamReceiver(SessionTable(), PEER, max_message_size=4)
    sender.submit(b"x" * 10)
    sender.submit(b"ok")
    events = feed_bytewise(receiver, sender.start_connection())
    assert events == [Hello(3, 1), Answered(1, STATUS_TOO_LARGE), Message(2, b"ok")]


@pytest.mark.parametrize("data", [b"AXLX\x01" + bytes(8), b"AXLS\x03" + bytes(8), b"AXLS\x00" + bytes(8)])
def test_a_wrong_hello_is_refused(data: bytes) -> None:
    with pytest.raises(StreamError):
        StreamReceiver(SessionTable(), PEER, 100).feed(data)


def test_a_bad_frame_type_is_refused() -> None:
    sender = StreamSender(session_id=1)
    receiver = StreamReceiver(SessionTable(), PEER, 100)
    with pytest.raises(StreamError):
        feed(receiver, sender.start_connection() + b"\x07" + bytes(12))


def test_an_ack_for_nothing_outstanding_is_refused() -> None:
    sender = StreamSender(session_id=1)
    sender.submit(b"x")
    with pytest.raises(StreamError):
        sender.receive(encode_ack(2, STATUS_QUEUED))
    with pytest.raises(StreamError):
        StreamSender(session_id=1).receive(encode_ack(1, 299))


def test_a_refusal_is_never_repeated_as_queued_however_many_messages_wait() -> None:
    """The receiver remembers the last STREAM_WINDOW answers of a session;
    a repeat older than that is taken as queued. So the sender never has
    more than that many messages on the wire unanswered: the rest wait in it
    until acknowledgements make room, and a refusal is repeated as one."""
    table = SessionTable()
    sender = StreamSender(session_id=9, fixed_window=STREAM_WINDOW)  # grown to the full window
    first = StreamReceiver(table, PEER, max_message_size=100)
    feed(first, sender.start_connection())
    count = STREAM_WINDOW + 10
    for number in range(count):
        sender.submit(b"m%d" % number)
    delivered = [event for event in feed(first, sender.take_output()) if isinstance(event, Message)]
    assert [event.seq for event in delivered] == list(range(1, STREAM_WINDOW + 1))
    # The receiver's queue was full for the first: it was refused, and the
    # connection broke before any acknowledgement reached the sender.
    for event in delivered:
        first.answer(event.seq, STATUS_REFUSED if event.seq == 1 else STATUS_QUEUED)
    second = StreamReceiver(table, PEER, max_message_size=100)
    events = feed(second, sender.start_connection())
    assert events[:2] == [Hello(9, 1), Answered(1, STATUS_REFUSED)]
    assert all(isinstance(event, Answered) for event in events[1:]) and len(events) == STREAM_WINDOW + 1
    # Acknowledgements make room: the ten that waited go out, numbered in order.
    acks = sender.receive(b"".join(second.answer(event.seq, event.status) for event in events[1:]))
    assert acks[0] == Ack(1, STATUS_REFUSED) and len(acks) == STREAM_WINDOW
    later = [event.seq for event in feed(second, sender.take_output()) if isinstance(event, Message)]
    assert later == list(range(STREAM_WINDOW + 1, count + 1))
    assert len(sender.unacked) == 10


def test_an_ack_for_a_message_still_waiting_in_the_sender_is_refused() -> None:
    sender = StreamSender(session_id=2, fixed_window=1)
    sender.start_connection()
    sender.submit(b"sent")
    sender.submit(b"waiting")
    with pytest.raises(StreamError):
        sender.receive(encode_ack(2, STATUS_QUEUED))


def test_a_message_withdrawn_while_waiting_is_never_sent_and_leaves_no_gap_on_the_wire() -> None:
    """The next message takes the number on the wire the withdrawn one would
    have had; its sender still knows it by the number submit gave it."""
    sender = StreamSender(session_id=2, fixed_window=1)
    receiver = StreamReceiver(SessionTable(), PEER, max_message_size=100)
    wire = sender.start_connection()
    for payload in (b"sent", b"given up", b"later"):
        sender.submit(payload)
    sender.withdraw(2)
    sender.withdraw(1)  # on the wire already: it stays outstanding
    wire += sender.take_output()
    assert feed(receiver, wire)[1:] == [Message(1, b"sent")]
    sender.receive(receiver.answer(1, STATUS_QUEUED))
    assert feed(receiver, sender.take_output()) == [Message(2, b"later")]
    assert sender.receive(receiver.answer(2, STATUS_QUEUED)) == [Ack(3, STATUS_QUEUED)]
    assert not sender.unacked


def test_many_messages_withdrawn_while_waiting_do_not_take_the_session_outside_the_window() -> None:
    """A slow receiver: more than a window of messages wait in the sender
    and are withdrawn at their send timeout. The next one still goes out
    within the receiver's window (numbered on the way out)."""
    sender = StreamSender(session_id=2, fixed_window=1)
    receiver = StreamReceiver(SessionTable(), PEER, max_message_size=100)
    feed(receiver, sender.start_connection())
    first = sender.submit(b"slow")
    given_up = [sender.submit(b"given up") for _ in range(2 * STREAM_WINDOW)]
    for seq in given_up:
        sender.withdraw(seq)
    later = sender.submit(b"later")
    assert feed(receiver, sender.take_output()) == [Message(1, b"slow")]
    assert sender.receive(receiver.answer(1, STATUS_QUEUED)) == [Ack(first, STATUS_QUEUED)]
    assert feed(receiver, sender.take_output()) == [Message(2, b"later")]
    assert sender.receive(receiver.answer(2, STATUS_QUEUED)) == [Ack(later, STATUS_QUEUED)]


def test_a_body_written_as_it_arrives_goes_out_whole_and_holds_back_later_messages() -> None:
    sender = StreamSender(session_id=6)
    receiver = StreamReceiver(SessionTable(), PEER, max_message_size=1 << 20)
    wire = sender.start_connection()
    sender.submit(b"before")
    seq = sender.open(300_000)
    sender.write(b"a" * 100_000)
    sender.submit(b"after")  # waits: the open message's frame must stay whole
    assert not sender.can_open()
    sender.write(b"b" * 200_000)
    sender.close()
    while output := sender.take_output():
        wire += output
    events = feed(receiver, wire)
    assert events[1:] == [Message(1, b"before"), Message(seq, b"a" * 100_000 + b"b" * 200_000),
                          Message(3, b"after")]
    assert sender.payload_of(seq) == b"a" * 100_000 + b"b" * 200_000


def test_a_body_arriving_in_small_parts_goes_out_in_segment_sized_batches() -> None:
    """4 KiB parts would each make a segment of their own: they wait until
    BODY_BATCH_BYTES have come, and the rest goes when the body is whole."""
    sender = StreamSender(session_id=6)
    receiver = StreamReceiver(SessionTable(), PEER, max_message_size=1 << 20)
    wire = sender.start_connection()
    seq = sender.open(100 * 4096)
    header = sender.take_output()
    outputs = []
    ready = []
    for index in range(100):
        ready.append(sender.write(bytes([index]) * 4096))
        while output := sender.take_output():
            outputs.append(output)
    sender.close()
    last = sender.take_output()
    assert [len(output) for output in outputs] == [BODY_BATCH_BYTES] * (100 * 4096 // BODY_BATCH_BYTES)
    per_batch = BODY_BATCH_BYTES // 4096
    assert ready == [(index + 1) % per_batch == 0 for index in range(100)]  # True: output to take
    assert len(last) == 100 * 4096 % BODY_BATCH_BYTES
    events = feed(receiver, wire + header + b"".join(outputs) + last)
    assert events[1:] == [Message(seq, b"".join(bytes([index]) * 4096 for index in range(100)))]


def test_after_a_reconnection_an_open_body_is_gathered_and_sent_whole() -> None:
    """The receiver may have reset the first connection because the frame was
    too slow to complete: the new one gets the message only once it is whole."""
    table = SessionTable()
    sender = StreamSender(session_id=6)
    sender.submit(b"before")
    first = StreamReceiver(table, PEER, max_message_size=100)
    wire = sender.start_connection() + sender.take_output()
    seq = sender.open(10)
    sender.write(b"12345")
    assert feed(first, wire + sender.take_output())[1:] == [Message(1, b"before")]
    first.answer(1, STATUS_QUEUED)
    second = StreamReceiver(table, PEER, max_message_size=100)
    wire = sender.start_connection()
    sender.write(b"678")
    assert feed(second, wire + sender.take_output()) == [Hello(6, 1), Answered(1, STATUS_QUEUED)]
    sender.write(b"90")
    sender.close()
    assert feed(second, sender.take_output()) == [Message(seq, b"1234567890")]


def test_a_body_cancelled_after_a_reconnection_needs_no_new_connection() -> None:
    sender = StreamSender(session_id=6)
    sender.start_connection()
    sender.open(10)
    sender.write(b"12345")
    assert sender.cancel()  # on the wire: the connection must break
    sender.open(10)
    sender.start_connection()
    assert not sender.cancel()


def test_an_open_body_cannot_be_acknowledged_and_a_cancelled_one_is_gone() -> None:
    sender = StreamSender(session_id=8)
    sender.start_connection()
    sender.submit(b"kept")
    seq = sender.open(10)
    sender.write(b"half")
    sender.submit(b"next")
    with pytest.raises(StreamError):
        sender.receive(encode_ack(seq, STATUS_QUEUED))
    sender.cancel()
    assert list(sender.unacked) == [1, 3] and sender.can_open()
    receiver = StreamReceiver(SessionTable(), PEER, max_message_size=100)
    assert feed(receiver, sender.start_connection())[1:] == [Message(1, b"kept"), Message(3, b"next")]


def test_an_open_body_may_be_refused_as_too_large_before_it_is_whole() -> None:
    """The receiver answers 413 on reading the announced length; the sender
    takes that answer and leaves the message for its caller to cancel."""
    sender = StreamSender(session_id=5)
    receiver = StreamReceiver(SessionTable(), PEER, max_message_size=100)
    wire = sender.start_connection()
    seq = sender.open(1000)
    sender.write(b"x" * 10)
    events = feed(receiver, wire + sender.take_output())
    assert events[1:] == [Answered(seq, STATUS_TOO_LARGE)]
    assert sender.receive(receiver.answer(seq, STATUS_TOO_LARGE)) == [Ack(seq, STATUS_TOO_LARGE)]
    assert sender.open_seq == seq and sender.cancel()
    with pytest.raises(StreamError):
        again = StreamSender(session_id=5)
        again.start_connection()
        again.open(10)
        again.receive(encode_ack(1, STATUS_QUEUED))


def answer_all(sender: StreamSender, receiver: StreamReceiver, status: int = STATUS_QUEUED) -> list[Ack]:
    """Deliver the sender's output and bring every answer back."""
    events = feed(receiver, sender.take_output())
    return sender.receive(b"".join(receiver.answer(event.seq, status) for event in events))


def told_sender(receiver: StreamReceiver, said: bytes | None = None) -> StreamSender:
    """A version 2 sender whose receiver has said its window (or `said`)."""
    sender = StreamSender(session_id=8, version=VERSION)
    [hello] = receiver.feed(sender.start_connection())
    assert hello == Hello(8, VERSION)
    assert sender.receive(said or receiver.welcome(hello)) == []
    return sender


def test_a_version_2_window_is_sized_to_what_the_path_carries_each_round_trip() -> None:
    """The receiver says its window first. The sender starts at the base
    window and, each round trip, keeps PATH_HEADROOM times what the path
    carried in the last one, up to the receiver's window: on a long path
    that is its whole window within two round trips; a refusal (a full
    queue) halves it."""
    receiver = StreamReceiver(SessionTable(), PEER, max_message_size=100)
    sender = told_sender(receiver)
    assert sender.granted == STREAM_WINDOW and sender.window == STREAM_BASE_WINDOW
    rtt, now = 0.2, 100.0
    for number in range(4 * STREAM_WINDOW):
        sender.submit(b"%d" % number)
        sender.size_to_path(0, now, rtt)
    rounds = []
    for _ in range(3):
        now += rtt
        acks = answer_all(sender, receiver)
        rounds.append(len(acks))
        sender.size_to_path(len(acks), now, rtt)
    assert rounds == [STREAM_BASE_WINDOW, PATH_HEADROOM * STREAM_BASE_WINDOW, STREAM_WINDOW]
    answer_all(sender, receiver, STATUS_REFUSED)
    assert sender.window == STREAM_BASE_WINDOW


def test_a_short_path_keeps_the_base_window_and_a_long_one_starts_a_burst_at_the_whole() -> None:
    """On a loopback round trip the path carries a few messages per round
    trip: the window stays at the base, and a burst of thousands does not
    all land in the receiver at once. After a quiet round trip on a long
    path, a burst starts at the receiver's whole window, or at the smaller
    one it said."""
    receiver = StreamReceiver(SessionTable(), PEER, max_message_size=100)
    short = told_sender(receiver)
    short.size_to_path(0, 1.0, 0.001)
    short.size_to_path(3, 1.002, 0.001)
    assert short.window == STREAM_BASE_WINDOW
    for said, window in ((None, STREAM_WINDOW), (encode_window(300), 300)):
        far = told_sender(StreamReceiver(SessionTable(), PEER, max_message_size=100), said)
        far.size_to_path(0, 1.0, 0.2)
        far.size_to_path(0, 2.0, 0.2)  # a message submitted after a quiet round trip
        assert far.window == window


def test_on_a_long_path_a_round_trip_the_application_limited_does_not_shrink_the_window() -> None:
    """One large message (or a few requests) answered in a round trip whose
    window was never full says nothing of what the path takes: the burst
    that follows starts at the receiver's whole window. A round trip that
    filled the window is sized by what it carried; on a short path what a
    round trip carried always sizes it."""
    receiver = StreamReceiver(SessionTable(), PEER, max_message_size=100)
    far = told_sender(receiver)
    rtt, now = 0.2, 100.0
    far.submit(b"large")
    far.size_to_path(0, now, rtt)
    now += rtt
    far.size_to_path(len(answer_all(far, receiver)), now, rtt)
    assert far.window == STREAM_WINDOW
    for number in range(2 * STREAM_WINDOW):
        far.submit(b"%d" % number)
    events = feed(receiver, far.take_output())
    now += rtt
    acks = far.receive(b"".join(receiver.answer(event.seq, STATUS_QUEUED) for event in events[:300]))
    far.size_to_path(len(acks), now, rtt)
    assert far.window == PATH_HEADROOM * 300  # it filled, and carried 300
    near_receiver = StreamReceiver(SessionTable(), PEER, max_message_size=100)
    short = told_sender(near_receiver)
    short.submit(b"one")
    short.size_to_path(0, 1.0, 0.001)
    short.size_to_path(len(answer_all(short, near_receiver)), 1.002, 0.001)
    assert short.window == STREAM_BASE_WINDOW


@pytest.mark.parametrize("first", [encode_ack(1, STATUS_QUEUED), encode_window(STREAM_BASE_WINDOW - 1)])
def test_a_version_2_receiver_must_say_its_window_first(first: bytes) -> None:
    sender = StreamSender(session_id=8, version=VERSION)
    sender.start_connection()
    sender.submit(b"x")
    with pytest.raises(StreamError):
        sender.receive(first)


def test_a_version_1_receiver_says_no_window_and_a_version_1_sender_takes_none() -> None:
    receiver = StreamReceiver(SessionTable(), PEER, max_message_size=100)
    [hello] = receiver.feed(encode_hello(3))
    assert receiver.welcome(hello) == b""
    sender = StreamSender(session_id=3)
    sender.start_connection()
    sender.submit(b"x")
    with pytest.raises(StreamError):
        sender.receive(encode_window(STREAM_WINDOW) + bytes(6))


def test_a_sender_whose_version_2_hello_went_unanswered_speaks_version_1() -> None:
    """An older receiver resets a version 2 hello before it says anything:
    the next connection speaks version 1, within the base window, and
    repeats what was outstanding."""
    sender = StreamSender(session_id=5, version=VERSION)
    sender.start_connection()
    for number in range(STREAM_BASE_WINDOW + 1):
        sender.submit(b"%d" % number)
    assert sender.hello_unanswered()
    sender.speak_version_1()
    older = StreamReceiver(SessionTable(), PEER, max_message_size=100)
    events = feed(older, sender.start_connection())
    assert events[0] == Hello(5, 1) and len(events) == 1 + STREAM_BASE_WINDOW
    assert not sender.hello_unanswered()
    answered = StreamSender(session_id=6, version=VERSION)
    answered.start_connection()
    answered.receive(encode_window(STREAM_WINDOW))
    assert not answered.hello_unanswered()
