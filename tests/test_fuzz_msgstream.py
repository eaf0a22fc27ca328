"""Property tests for the message stream's frames (axl.node.msgstream), the
protocol AXL nodes speak over overlay TCP: a peer controls every byte the
receiver reads and every acknowledgement the sender reads, cut into segments
as it likes, so both sides must fail only with StreamError, decode the same
events however the bytes are split, and never buffer a claimed length. The
receiver keeps the window: no message it accepts is numbered more than
STREAM_WINDOW beyond the highest of its session before it, and what it holds
stays bounded whatever the numbers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from axl.budgets import STREAM_WINDOW
from axl.node.msgstream import (
    STATUS_QUEUED, STATUS_REFUSED, STATUS_TOO_LARGE, Answered, Hello, Message, OutsideWindow, SessionTable,
    StreamError, StreamReceiver, StreamSender, encode_ack, encode_hello, encode_message,
)
from fuzzing import FUZZ, chunkings, feed_all, noise_or_mutation, peak_allocation, with_chunkings

PEER = bytes(range(32))
MAX_SIZE = 200
SEQS = st.integers(min_value=1, max_value=12)
PAYLOADS = st.one_of(st.binary(max_size=40), st.binary(min_size=MAX_SIZE - 2, max_size=MAX_SIZE + 40))
VALID_STREAMS = [
    encode_hello(7) + encode_message(1, b"one") + encode_message(2, b"x" * 150) + encode_message(1, b"one"),
    encode_hello(2**64 - 1) + encode_message(3, b"y" * (MAX_SIZE + 1)) + encode_message(4, b""),
    encode_hello(5) + encode_message(2**40, b"far") + encode_message(2**40 + STREAM_WINDOW, b"edge"),
]
# How far each message's number is from the one before: mostly within the
# window (repeats, reorderings), sometimes beyond it, by a little or a lot.
STEPS = st.one_of(st.integers(min_value=-3, max_value=STREAM_WINDOW + 2),
                  st.integers(min_value=STREAM_WINDOW + 1, max_value=2**62))


def _receive(chunks: list[bytes]) -> tuple[list[Hello | Message | Answered], bool]:
    """Every event a fresh receiver reports for `chunks`, fed as its caller
    does (b"" after a Hello), and whether it refused the stream. Checks the
    window after each call: the messages it let through keep to it, and it
    holds one session, no answer, and no more than one frame's bytes."""
    receiver = StreamReceiver(SessionTable(), PEER, MAX_SIZE)
    seen = 0

    def feed(chunk: bytes) -> list[Hello | Message | Answered]:
        nonlocal seen
        events = receiver.feed(chunk)
        events = events + receiver.feed(b"") if events and isinstance(events[-1], Hello) else events
        for event in events:
            if isinstance(event, (Message, Answered)):
                assert not seen or event.seq <= seen + STREAM_WINDOW
                seen = max(seen, event.seq)
        record = receiver.record
        assert len(receiver.table) <= 1 and len(receiver._buffer) < 13 + MAX_SIZE
        assert record is None or (record.answers is None and record.taken_upto <= record.seen_upto)
        return events

    return feed_all(feed, chunks, StreamError)


def _numbered(first: int, steps: list[tuple[int, bytes]]) -> tuple[list[int], int | None]:
    """The sequence numbers `steps` make from `first` (kept to u64), and the
    index of the first one outside the window, if any."""
    seqs, seq = [], first
    for step, _ in steps:
        seqs.append(seq)
        seq = min(max(1, seq + step), 2**64 - 1)
    top, outside = 0, None
    for index, seq in enumerate(seqs):
        if top and seq > top + STREAM_WINDOW:
            outside = index
            break
        top = max(top, seq)
    return seqs, outside


def _bytewise(data: bytes) -> list[bytes]:
    return [data[i:i + 1] for i in range(len(data))]


def _same_up_to_the_refusal(split: tuple[list, bool], whole: tuple[list, bool], bytewise: tuple[list, bool]) -> None:
    """The events of a split stream are those of the whole one; when it is
    refused, the call that raises loses the events it completed, so each run
    reports a prefix of the byte-by-byte run's events."""
    assert split[1] == whole[1] == bytewise[1]
    if not whole[1]:
        assert split == whole == bytewise
    for events, _ in (split, whole):
        assert events == bytewise[0][:len(events)]


@FUZZ
@given(with_chunkings(noise_or_mutation(VALID_STREAMS, 300)))
def test_receiver_any_bytes_any_chunking_same_events_only_stream_error(case):
    data, chunks = case
    whole = _receive([data])
    _same_up_to_the_refusal(_receive(chunks), whole, _receive(_bytewise(data)))
    events, _ = whole
    assert all(isinstance(event, Hello) for event in events[:1])
    for event in events[1:]:
        assert isinstance(event, (Message, Answered))
        if isinstance(event, Message):
            assert len(event.payload) <= MAX_SIZE


@FUZZ
@given(st.integers(min_value=0, max_value=2**64 - 1),
       st.lists(st.tuples(SEQS, PAYLOADS), max_size=6), st.data())
def test_valid_streams_decode_identically_split_anywhere(session_id, messages, data):
    stream = encode_hello(session_id) + b"".join(encode_message(seq, body) for seq, body in messages)
    # Nothing is answered here, so a repeated number (within the window) is delivered again.
    expected = [Hello(session_id, 1)] + [
        Answered(seq, STATUS_TOO_LARGE) if len(body) > MAX_SIZE else Message(seq, body)
        for seq, body in messages]
    cut = data.draw(st.integers(min_value=0, max_value=len(stream)))
    assert _receive([stream]) == (expected, False)
    assert _receive([stream[:cut], stream[cut:]]) == (expected, False)
    assert _receive(data.draw(chunkings(stream))) == (expected, False)


@FUZZ
@given(st.integers(min_value=1, max_value=2**64 - 1), st.lists(st.tuples(STEPS, PAYLOADS), max_size=8), st.data())
def test_a_number_outside_the_window_refuses_the_stream_before_anything_of_it(first, steps, data):
    """Numbers anywhere (the first sets where the session is): the stream is
    refused exactly when one runs more than the window beyond those before
    it, with OutsideWindow, and every message before it decodes as sent."""
    seqs, outside = _numbered(first, steps)
    stream = encode_hello(1) + b"".join(encode_message(seq, body) for seq, (_, body) in zip(seqs, steps))
    kept = seqs[:outside] if outside is not None else seqs
    expected = [Hello(1, 1)] + [Answered(seq, STATUS_TOO_LARGE) if len(body) > MAX_SIZE else Message(seq, body)
                             for seq, (_, body) in zip(kept, steps)]
    events, refused = _receive(data.draw(chunkings(stream)))
    assert refused == (outside is not None)
    if refused:
        assert events == expected[:len(events)]
        receiver = StreamReceiver(SessionTable(), PEER, MAX_SIZE)
        receiver.feed(encode_hello(1))
        with pytest.raises(OutsideWindow):
            receiver.feed(stream[13:])
    else:
        assert events == expected


def test_a_huge_claimed_length_is_answered_from_the_header_and_skipped_unbuffered():
    receiver = StreamReceiver(SessionTable(), PEER, MAX_SIZE)
    assert receiver.feed(encode_hello(1)) == [Hello(1, 1)]
    header = encode_message(5, b"")[:-4] + (2**32 - 1).to_bytes(4, "big")
    events: list = []
    data = header + bytes(60_000)
    assert peak_allocation(lambda: events.extend(receiver.feed(data))) < 64 * 1024
    assert events == [Answered(5, STATUS_TOO_LARGE)]
    assert receiver.partial and not receiver._buffer  # skipping, holding nothing


def test_a_length_within_the_limit_is_not_preallocated():
    receiver = StreamReceiver(SessionTable(), PEER, 1 << 31)
    receiver.feed(encode_hello(1))
    header = encode_message(5, b"")[:-4] + (1 << 31).to_bytes(4, "big")
    assert peak_allocation(lambda: receiver.feed(header + b"abc")) < 64 * 1024


# --- the sender reading acknowledgements ---------------------------------------

STATUSES = (STATUS_QUEUED, STATUS_TOO_LARGE, STATUS_REFUSED)
VALID_ACKS = [encode_ack(1, STATUS_QUEUED) + encode_ack(2, STATUS_REFUSED) + encode_ack(3, STATUS_TOO_LARGE)]


def _sender() -> StreamSender:
    """Messages 1 to 4 on the wire, none waiting. (An ack frees room in the
    window only once the call that reads it ends, so with messages waiting
    an ack for one released meanwhile is taken in a later segment and refused
    in the same one: test_msgstream.py checks that case.)"""
    sender = StreamSender(9, fixed_window=4)
    for n in range(4):
        sender.submit(b"m%d" % n)
    sender.start_connection()
    return sender


def _acks(chunks: list[bytes]) -> tuple[list, bool]:
    return feed_all(_sender().receive, chunks, StreamError)


@FUZZ
@given(with_chunkings(noise_or_mutation(VALID_ACKS, 80)))
def test_sender_any_ack_bytes_any_chunking_only_stream_error(case):
    data, chunks = case
    whole = _acks([data])
    _same_up_to_the_refusal(_acks(chunks), whole, _acks(_bytewise(data)))
    acks, _ = whole
    seqs = [ack.seq for ack in acks]
    assert len(set(seqs)) == len(seqs) and all(1 <= seq <= 4 for seq in seqs)
    assert all(ack.status in STATUSES for ack in acks)


@FUZZ
@given(st.permutations([1, 2, 3, 4]), st.lists(st.sampled_from(STATUSES), min_size=4, max_size=4), st.data())
def test_acks_for_everything_outstanding_are_taken_split_anywhere(order, statuses, data):
    stream = b"".join(encode_ack(seq, status) for seq, status in zip(order, statuses))
    acks, refused = _acks(data.draw(chunkings(stream)))
    assert not refused
    assert [(ack.seq, ack.status) for ack in acks] == list(zip(order, statuses))


@pytest.mark.parametrize("frame", [encode_ack(5, STATUS_QUEUED), encode_ack(1, 201), b"\x01" + bytes(10)])
def test_an_ack_for_nothing_outstanding_or_of_a_bad_shape_is_refused(frame):
    with pytest.raises(StreamError):
        _sender().receive(frame)
