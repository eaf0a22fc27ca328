"""Property tests for the message stream's frames (axl.node.msgstream), the
protocol AXL nodes speak over overlay TCP: a peer controls every byte the
receiver reads and every acknowledgement the sender reads, cut into segments
as it likes, so both sides must fail only with StreamError, decode the same
events however the bytes are split, and never buffer a claimed length."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from axl.node.msgstream import (
    STATUS_QUEUED, STATUS_REFUSED, STATUS_TOO_LARGE, Answered, Hello, Message, SessionTable,
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
]


def _receive(chunks: list[bytes]) -> tuple[list[Hello | Message | Answered], bool]:
    """Every event a fresh receiver reports for `chunks`, fed as its caller
    does (b"" after a Hello), and whether it refused the stream."""
    receiver = StreamReceiver(SessionTable(), PEER, MAX_SIZE)

    def feed(chunk: bytes) -> list[Hello | Message | Answered]:
        events = receiver.feed(chunk)
        return events + receiver.feed(b"") if events and isinstance(events[-1], Hello) else events

    return feed_all(feed, chunks, StreamError)


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
    expected = [Hello(session_id)] + [
        Answered(seq, STATUS_TOO_LARGE) if len(body) > MAX_SIZE else Message(seq, body)
        for seq, body in messages]
    cut = data.draw(st.integers(min_value=0, max_value=len(stream)))
    assert _receive([stream]) == (expected, False)
    assert _receive([stream[:cut], stream[cut:]]) == (expected, False)
    assert _receive(data.draw(chunkings(stream))) == (expected, False)


def test_a_huge_claimed_length_is_answered_from_the_header_and_skipped_unbuffered():
    receiver = StreamReceiver(SessionTable(), PEER, MAX_SIZE)
    assert receiver.feed(encode_hello(1)) == [Hello(1)]
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
    sender = StreamSender(9, window_messages=4)
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
