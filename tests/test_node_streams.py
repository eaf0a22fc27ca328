"""Message streams between two NodeCores on a virtual clock: one connection
for many messages, the fallback toward a node without streams, and a stream
broken mid-way that loses nothing acknowledged and delivers nothing twice."""

from __future__ import annotations

import dataclasses
import logging
import random

from test_node_core import SETTINGS, Pair

from axl.budgets import STREAM_BASE_WINDOW, STREAM_WINDOW
from axl.errors import DeliveryTimeout, MessageTooLarge, ReceiverFull
from axl.identity import NodeIdentity, address_for_key
from axl.node import msgstream
from axl.node.core import NodeCore
from axl.node.messages import Acknowledged, InboundMessage, SendFailed
from axl.node.streams import BODY_HOLD, PeerLogLimit
from axl.routing.frames import split_frame
from axl.tcp.connection import TcpConfig
from axl.tcp.framing import message_header

NO_STREAMS = dataclasses.replace(SETTINGS, streams=False)


def stream_connections(pair: Pair, index: int) -> list:
    return [conn for conn in pair.cores[index].stack.connections
            if SETTINGS.stream_port in (conn.local_port, conn.remote_port)]


def answer_all(pair: Pair, accepted: bool = True) -> list[bytes]:
    """Answer inbound messages as they come (one at a time per stream) until none is left."""
    payloads = []
    while True:
        pair.run(0.05)
        inbound = pair.take(1, InboundMessage)
        if not inbound:
            return payloads
        for event in inbound:
            payloads.append(event.payload)
            pair.cores[1].answer_inbound(event.handle, accepted, None, pair.now)

def send_many(pair: Pair, prefix: bytes, count: int) -> tuple[list, list]:
    """Sends prefix0..prefixN from the first node once the pair has formed:
    the sender's handles, and what reached the second node in half a second."""
    pair.run(3.0)
    handles = [pair.cores[0].send_message(pair.keys[1], prefix + b"%d" % i, pair.now) for i in range(count)]
    pair.run(0.5)
    return handles, pair.take(1, InboundMessage)



def test_many_messages_share_one_connection_in_order():
    pair = Pair()
    pair.run(3.0)
    handles = [pair.cores[0].send_message(pair.keys[1], b"m%d" % i, pair.now) for i in range(40)]
    pair.run(0.2)
    assert len(stream_connections(pair, 0)) == 1
    assert answer_all(pair) == [b"m%d" % i for i in range(40)]
    pair.run(1.0)
    assert [event.handle for event in pair.take(0, Acknowledged)] == handles
    assert len(stream_connections(pair, 0)) == 1
    assert pair.take(0, SendFailed) == []


def test_refusals_come_back_per_message_on_the_stream():
    pair = Pair()
    pair.run(3.0)
    first = pair.cores[0].send_message(pair.keys[1], b"refused", pair.now)
    second = pair.cores[0].send_message(pair.keys[1], b"taken", pair.now)
    pair.run(0.5)
    refused, taken = pair.take(1, InboundMessage)
    assert (refused.payload, taken.payload) == (b"refused", b"taken")
    pair.cores[1].answer_inbound(refused.handle, False, None, pair.now)
    pair.cores[1].answer_inbound(taken.handle, True, None, pair.now)
    pair.run(1.0)
    [failed] = pair.take(0, SendFailed)
    assert failed.handle == first and isinstance(failed.error, ReceiverFull)
    assert [event.handle for event in pair.take(0, Acknowledged)] == [second]


def test_a_sender_ignoring_the_window_is_refused_beyond_it():
    """A sender with a larger window than the protocol's (a hostile one):
    the receiver hands the application STREAM_WINDOW messages and answers
    each one beyond them 503, which its sender reports; nothing is lost."""
    overrunning = dataclasses.replace(SETTINGS, stream_window=STREAM_WINDOW + 100)
    pair = Pair((overrunning, SETTINGS))
    pair.run(3.0)
    handles = [pair.cores[0].send_message(pair.keys[1], b"o%d" % i, pair.now)
               for i in range(STREAM_WINDOW + 40)]
    pair.run(0.5)
    inbound = pair.take(1, InboundMessage)
    assert [event.payload for event in inbound] == [b"o%d" % i for i in range(STREAM_WINDOW)]
    assert pair.cores[1].messages.streams.most_unanswered() == STREAM_WINDOW
    refused = pair.take(0, SendFailed)
    assert [event.handle for event in refused] == handles[STREAM_WINDOW:]
    assert all(isinstance(event.error, ReceiverFull) for event in refused)
    assert pair.cores[1].messages.streams.window_refused == 40
    for event in inbound:
        pair.cores[1].answer_inbound(event.handle, True, None, pair.now)
    pair.run(1.0)
    assert [event.handle for event in pair.take(0, Acknowledged)] == handles[:STREAM_WINDOW]


def test_a_receiver_without_streams_gets_one_connection_per_message():
    pair = Pair((SETTINGS, NO_STREAMS))
    pair.run(3.0)
    handles = [pair.cores[0].send_message(pair.keys[1], b"go %d" % i, pair.now) for i in range(3)]
    assert sorted(answer_all(pair)) == [b"go 0", b"go 1", b"go 2"]
    pair.run(1.0)
    assert sorted(event.handle for event in pair.take(0, Acknowledged)) == handles
    assert not pair.cores[0].messages.streams.usable(pair.keys[1], pair.now)
    # remembered: the next message goes straight to port tcp_port
    pair.cores[0].send_message(pair.keys[1], b"later", pair.now)
    pair.run(0.1)
    assert stream_connections(pair, 0) == []
    assert answer_all(pair) == [b"later"]


def test_a_sender_without_streams_is_served_as_before():
    pair = Pair((NO_STREAMS, SETTINGS))
    pair.run(3.0)
    handle = pair.cores[0].send_message(pair.keys[1], b"plain", pair.now)
    assert answer_all(pair) == [b"plain"]
    pair.run(1.0)
    assert [event.handle for event in pair.take(0, Acknowledged)] == [handle]
    assert stream_connections(pair, 1) == []


def test_a_broken_stream_repeats_the_unacknowledged_and_delivers_nothing_twice():
    pair = Pair()
    pair.run(3.0)
    handles = [pair.cores[0].send_message(pair.keys[1], b"n%d" % i, pair.now) for i in range(3)]
    pair.run(0.5)
    inbound = pair.take(1, InboundMessage)
    assert [event.payload for event in inbound] == [b"n0", b"n1", b"n2"]
    pair.cores[1].answer_inbound(inbound[0].handle, True, None, pair.now)
    pair.run(0.5)
    # the connection breaks while the application holds n1 and n2; the sender
    # reopens and repeats them; their answers come only after that
    [conn] = stream_connections(pair, 1)
    conn.abort()
    pair.run(1.0)
    pair.cores[1].answer_inbound(inbound[1].handle, False, None, pair.now)
    pair.cores[1].answer_inbound(inbound[2].handle, True, None, pair.now)
    assert answer_all(pair) == []
    pair.run(1.0)
    # each repeat is answered with its first answer, once that exists
    assert sorted(event.handle for event in pair.take(0, Acknowledged)) == [handles[0], handles[2]]
    [refused] = pair.take(0, SendFailed)
    assert refused.handle == handles[1] and isinstance(refused.error, ReceiverFull)
    # the session goes on: a new message is delivered once
    pair.cores[0].send_message(pair.keys[1], b"n3", pair.now)
    assert answer_all(pair) == [b"n3"]


def test_a_refusal_among_more_messages_than_the_window_is_reported_after_a_break():
    """More messages than the receiver remembers answers for are under way
    when the stream breaks: the refused first one must come back refused,
    not as delivered (the sender keeps the rest back until there is room)."""
    pair = Pair((dataclasses.replace(SETTINGS, stream_window=STREAM_WINDOW), SETTINGS))  # grown to the full window
    count = STREAM_WINDOW + 20
    handles, inbound = send_many(pair, b"w", count)
    assert len(inbound) == STREAM_WINDOW
    [conn] = stream_connections(pair, 1)
    conn.abort()
    pair.run(1.0)
    for event in inbound:
        pair.cores[1].answer_inbound(event.handle, event is not inbound[0], None, pair.now)
    assert answer_all(pair) == [b"w%d" % i for i in range(STREAM_WINDOW, count)]
    pair.run(1.0)
    [refused] = pair.take(0, SendFailed)
    assert refused.handle == handles[0] and isinstance(refused.error, ReceiverFull)
    assert sorted(event.handle for event in pair.take(0, Acknowledged)) == handles[1:]


def test_a_stream_that_cannot_be_reopened_reports_504():
    pair = Pair()
    pair.run(3.0)
    handle = pair.cores[0].send_message(pair.keys[1], b"lost?", pair.now)
    pair.run(0.5)
    pair.take(1, InboundMessage)
    pair.cores[1].link_down(1, pair.now)
    pair.cores[0].link_down(1, pair.now)
    [conn] = stream_connections(pair, 0)
    conn.abort()
    pair.run(SETTINGS.lookup_timeout + 1)
    [failed] = pair.take(0, SendFailed)
    assert failed.handle == handle and isinstance(failed.error, DeliveryTimeout)



def restart_second(pair: Pair) -> None:
    """The second node is killed and starts again with the same key: no
    connection, session or message of before, and the link comes up anew."""
    new = NodeCore(NodeIdentity.from_seed(bytes([2]) * 32), SETTINGS, pair.now, rng=random.Random(22))
    pair.cores[1] = new
    pair.events[1] = []
    pair.cores[0].link_down(1, pair.now)
    pair.cores[0].link_up(1, new.identity.public_key, 0, pair.now)
    new.link_up(1, pair.cores[0].identity.public_key, 0, pair.now)


def test_a_receiver_that_restarted_before_answering_a_full_window_is_found_and_the_stream_reopened():
    """Every byte of a full window was acknowledged by the receiver's TCP, but
    the receiver restarted before it answered any message: with the window
    full nothing more goes on the wire, so only a probe at the send timeout
    finds out. The restarted receiver resets it, the stream reopens, the
    unanswered messages come again (their senders were told 504, "may or may
    not have been delivered"), and what is sent next is delivered."""
    pair = Pair()
    handles, inbound = send_many(pair, b"r", STREAM_BASE_WINDOW + 5)
    assert len(inbound) == STREAM_BASE_WINDOW  # held by the application, unanswered; 5 wait for room
    restart_second(pair)
    pair.run(SETTINGS.send_timeout + 1)
    failed = pair.take(0, SendFailed)
    assert sorted(event.handle for event in failed) == sorted(handles)
    assert all(isinstance(event.error, DeliveryTimeout) for event in failed)
    assert answer_all(pair) == [b"r%d" % i for i in range(STREAM_BASE_WINDOW)]
    after = pair.cores[0].send_message(pair.keys[1], b"after", pair.now)
    assert answer_all(pair) == [b"after"]
    pair.run(1.0)
    assert [event.handle for event in pair.take(0, Acknowledged)] == [after]

def test_order_is_kept_once_connected_through_a_reconnection_and_never_toward_the_fallback():
    """`keeps_order` lets /ws start a destination's sends without waiting for
    each fate: it must hold only where later messages cannot overtake."""
    pair = Pair()
    pair.run(3.0)
    messages = pair.cores[0].messages
    first = pair.cores[0].send_message(pair.keys[1], b"o0", pair.now)
    assert not messages.keeps_order(pair.keys[1])  # not connected: may yet fall back
    pair.run(0.5)
    assert messages.keeps_order(pair.keys[1])
    for i in (1, 2):
        pair.cores[0].send_message(pair.keys[1], b"o%d" % i, pair.now)
    pair.run(0.5)
    held = pair.take(1, InboundMessage)
    [conn] = stream_connections(pair, 1)
    conn.abort()
    # sent while the stream reopens: they queue behind the repeats
    for i in (3, 4):
        pair.cores[0].send_message(pair.keys[1], b"o%d" % i, pair.now)
        assert messages.keeps_order(pair.keys[1])
    pair.run(1.0)
    for event in held:
        pair.cores[1].answer_inbound(event.handle, True, None, pair.now)
    assert [event.payload for event in held] + answer_all(pair) == [b"o%d" % i for i in range(5)]
    pair.run(1.0)
    assert first in {event.handle for event in pair.take(0, Acknowledged)}

    toward_go = Pair((SETTINGS, NO_STREAMS))
    toward_go.run(3.0)
    toward_go.cores[0].send_message(toward_go.keys[1], b"g", toward_go.now)
    answer_all(toward_go)
    assert not toward_go.cores[0].messages.keeps_order(toward_go.keys[1])


def receive_and_answer(pair: Pair, payload: bytes, flush: bool) -> int:
    """Send one message on the open stream; the receiver takes its frames with
    `flush`, answers, then flushes. Returns how many frames it writes back."""
    sender, receiver = pair.cores
    sender.send_message(pair.keys[1], payload, pair.now)
    for write in sender.frames_to_send():
        receiver.frame_received(1, *split_frame(write.frame), pair.now, flush=flush)
    written = len(receiver.frames_to_send())
    [inbound] = [event for event in iter(receiver.next_event, None) if isinstance(event, InboundMessage)]
    receiver.answer_inbound(inbound.handle, True, None, pair.now, flush=False)
    receiver.flush(pair.now)
    return written + len(receiver.frames_to_send())


def test_the_tcp_ack_rides_on_the_answer_whenever_the_receiver_flushes():
    pair = pair_with_a_stream()
    assert receive_and_answer(pair, b"immediate", flush=True) == 1
    pair.run(1.0)
    assert receive_and_answer(pair, b"deferred", flush=False) == 1
    pair.run(1.0)
    assert len(pair.take(0, Acknowledged)) == 2


def test_an_unanswered_message_is_acked_alone_after_the_ack_delay():
    pair = pair_with_a_stream()
    sender, receiver = pair.cores
    sender.send_message(pair.keys[1], b"held", pair.now)
    for write in sender.frames_to_send():
        receiver.frame_received(1, *split_frame(write.frame), pair.now)
    assert receiver.frames_to_send() == []
    delay = TcpConfig().ack_delay
    assert receiver.get_timer() <= pair.now + delay
    receiver.handle_timer(pair.now + delay)
    [bare_ack] = receiver.frames_to_send()
    assert [event.payload for event in iter(receiver.next_event, None)
            if isinstance(event, InboundMessage)] == [b"held"]


def test_a_body_sent_as_it_arrives_is_delivered_whole_and_once():
    pair = Pair()
    pair.run(3.0)
    sender = pair.cores[0]
    assert sender.open_body(pair.keys[1], 10, pair.now) is None  # no stream yet: gathered first
    sender.send_message(pair.keys[1], b"first", pair.now)
    assert answer_all(pair) == [b"first"]
    handle = sender.open_body(pair.keys[1], 10, pair.now)
    assert handle is not None and sender.open_body(pair.keys[1], 5, pair.now) is None
    sender.write_body(handle, b"01234")
    later = sender.send_message(pair.keys[1], b"later", pair.now)
    pair.run(0.5)
    assert pair.take(1, InboundMessage) == []
    sender.write_body(handle, b"56789")
    sender.end_body(handle, pair.now)
    sender.flush(pair.now)
    assert answer_all(pair) == [b"0123456789", b"later"]
    pair.run(1.0)
    assert [event.handle for event in pair.take(0, Acknowledged)][-2:] == [handle, later]


def pair_with_a_stream() -> Pair:
    """Two cores whose stream 0 -> 1 has connected (a first message crossed it)."""
    pair = Pair()
    pair.run(3.0)
    pair.cores[0].send_message(pair.keys[1], b"first", pair.now)
    assert answer_all(pair) == [b"first"]
    pair.run(1.0)
    assert len(pair.take(0, Acknowledged)) == 1
    return pair


def test_a_cancelled_body_never_arrives_and_the_others_still_do():
    pair = pair_with_a_stream()
    sender = pair.cores[0]
    pair.run(1.0)
    pair.take(0, Acknowledged)
    handle = sender.open_body(pair.keys[1], 10, pair.now)
    sender.write_body(handle, b"half")
    waiting = sender.send_message(pair.keys[1], b"waiting", pair.now)
    sender.flush(pair.now)
    pair.run(0.5)
    sender.cancel_body(handle, pair.now)
    assert answer_all(pair) == [b"waiting"]
    pair.run(1.0)
    assert [event.handle for event in pair.take(0, Acknowledged)] == [waiting]
    assert pair.take(0, SendFailed) == []


def test_a_body_s_send_timeout_starts_once_it_is_whole():
    """Its upload is bounded by the bridge's read timeout, not by the send timeout."""
    pair = pair_with_a_stream()
    sender = pair.cores[0]
    handle = sender.open_body(pair.keys[1], 10, pair.now)
    sender.write_body(handle, b"slow")
    sender.flush(pair.now)
    pair.run(SETTINGS.send_timeout + 1)
    assert pair.take(0, SendFailed) == []
    sender.write_body(handle, b"...ok")
    sender.write_body(handle, b"!")
    sender.end_body(handle, pair.now)
    sender.flush(pair.now)
    assert answer_all(pair) == [b"slow...ok!"]
    pair.run(1.0)
    assert [event.handle for event in pair.take(0, Acknowledged)] == [handle]


def test_messages_do_not_wait_long_behind_a_slow_body():
    """After BODY_HOLD, a body still arriving is taken off the stream and sent
    once whole; the messages behind it go at once, each delivered once."""
    pair = pair_with_a_stream()
    sender = pair.cores[0]
    handle = sender.open_body(pair.keys[1], 10, pair.now)
    sender.write_body(handle, b"01234")
    behind = sender.send_message(pair.keys[1], b"behind", pair.now)
    sender.flush(pair.now)
    pair.run(0.5)
    assert pair.take(1, InboundMessage) == []
    pair.run(BODY_HOLD)
    assert answer_all(pair) == [b"behind"]
    sender.write_body(handle, b"56789")
    sender.end_body(handle, pair.now)
    sender.flush(pair.now)
    assert answer_all(pair) == [b"0123456789"]
    pair.run(1.0)
    assert sorted(event.handle for event in pair.take(0, Acknowledged)) == sorted([behind, handle])
    assert pair.take(0, SendFailed) == []


def test_a_receiver_refusing_an_open_body_as_too_large_fails_that_one_alone():
    pair = Pair((SETTINGS, dataclasses.replace(SETTINGS, max_message_size=100)))
    pair.run(3.0)
    sender = pair.cores[0]
    sender.send_message(pair.keys[1], b"first", pair.now)
    assert answer_all(pair) == [b"first"]
    pair.run(1.0)
    pair.take(0, Acknowledged)
    ahead = sender.send_message(pair.keys[1], b"ahead", pair.now)
    sender.flush(pair.now)
    pair.run(0.2)
    [ahead_inbound] = pair.take(1, InboundMessage)
    handle = sender.open_body(pair.keys[1], 1000, pair.now)
    sender.write_body(handle, b"x" * 10)
    behind = sender.send_message(pair.keys[1], b"behind", pair.now)
    sender.flush(pair.now)
    pair.run(0.5)
    pair.cores[1].answer_inbound(ahead_inbound.handle, True, None, pair.now)
    sender.write_body(handle, b"y" * 990)  # the client goes on: ignored
    sender.end_body(handle, pair.now)
    assert answer_all(pair) == [b"behind"]
    pair.run(1.0)
    [refused] = pair.take(0, SendFailed)
    assert refused.handle == handle and isinstance(refused.error, MessageTooLarge)
    assert sorted(event.handle for event in pair.take(0, Acknowledged)) == sorted([ahead, behind])


def test_a_body_open_when_the_stream_breaks_is_delivered_whole_on_the_next():
    """The receiver resets a frame that takes too long (or the path breaks):
    the rest of the body is gathered, and the message crosses whole, once."""
    pair = pair_with_a_stream()
    sender = pair.cores[0]
    handle = sender.open_body(pair.keys[1], 8, pair.now)
    sender.write_body(handle, b"abcd")
    sender.flush(pair.now)
    pair.run(0.5)
    [conn] = stream_connections(pair, 1)
    conn.abort()
    pair.run(1.0)
    sender.write_body(handle, b"efgh")
    sender.end_body(handle, pair.now)
    sender.flush(pair.now)
    assert answer_all(pair) == [b"abcdefgh"]
    pair.run(1.0)
    assert handle in [event.handle for event in pair.take(0, Acknowledged)]
    assert pair.take(0, SendFailed) == []


def test_a_message_held_by_the_application_does_not_stall_the_next_behind_the_ack_delay():
    # A fresh stream: the sender knows only the SYN-ACK's unscaled 64 KiB
    # window. While the first message waits for a slow handler (MCP/A2A), the
    # receiver does not consume, so no window update leaves; the next 70 kB
    # must not wait for the delayed ACK to bring the scaled window.
    pair = Pair()
    pair.run(3.0)
    pair.cores[0].send_message(pair.keys[1], b"held by a slow handler", pair.now)
    pair.run(0.001)
    assert len(pair.take(1, InboundMessage)) == 1
    pair.cores[0].send_message(pair.keys[1], b"o" * 70_000, pair.now)
    pair.run(0.001)
    assert len(pair.take(1, InboundMessage)) == 1, "the second message waits for the delayed ACK"


def test_the_listener_counts_streams_taken_oversize_messages_and_stalls():
    small = dataclasses.replace(SETTINGS, max_message_size=100, read_timeout=5.0)
    pair = Pair((SETTINGS, small))
    pair.run(3.0)
    sender, counts = pair.cores[0], pair.cores[1].messages.listener
    sender.send_message(pair.keys[1], b"fits", pair.now)
    sender.send_message(pair.keys[1], b"x" * 1000, pair.now)
    assert answer_all(pair) == [b"fits"]
    assert (counts.accepts, counts.oversize, counts.read_errors) == (1, 1, 0)
    handle = sender.open_body(pair.keys[1], 50, pair.now)
    sender.write_body(handle, b"half")
    sender.flush(pair.now)
    pair.run(small.read_timeout + 1)
    assert counts.read_errors == 1


def test_the_listener_counts_connections_messages_over_the_limit_and_ends_mid_message():
    small = dataclasses.replace(NO_STREAMS, max_message_size=100)
    pair = Pair((NO_STREAMS, small))
    pair.run(3.0)
    sender, counts = pair.cores[0], pair.cores[1].messages.listener
    sender.send_message(pair.keys[1], b"fits", pair.now)
    sender.send_message(pair.keys[1], b"x" * 1000, pair.now)
    pair.run(1.0)
    assert answer_all(pair) == [b"fits"]
    assert (counts.accepts, counts.oversize, counts.read_errors) == (2, 1, 0)
    conn = sender.stack.connect(address_for_key(pair.keys[1]), SETTINGS.port, now=pair.now)
    conn.send(message_header(50) + b"half")
    conn.close()
    sender.apply([], pair.now)
    pair.run(1.0)
    assert (counts.accepts, counts.read_errors) == (3, 1)


def test_a_peer_breaking_the_protocol_is_logged_at_most_once_an_interval() -> None:
    """Each reset of a peer's stream could write a line: one per interval per
    peer gets out, saying how many were left out; other peers are not held back."""
    limit = PeerLogLimit(interval=10.0, capacity=2)
    hostile, other = b"\1" * 32, b"\2" * 32
    assert limit.allow(hostile, 0.0) == 0
    assert [limit.allow(hostile, when) for when in (1.0, 2.0, 9.9)] == [None, None, None]
    assert limit.allow(other, 5.0) == 0
    assert limit.allow(hostile, 10.0) == 3
    assert limit.allow(hostile, 11.0) is None
    for number in range(3, 10):  # more peers than it remembers: the oldest go
        limit.allow(bytes([number]) * 32, 12.0)
    assert len(limit._peers) == 2


def test_a_receiver_that_knows_only_version_1_gets_version_1_within_its_window(monkeypatch, caplog):
    """A node of ours from before version 2 resets its hello as not a
    message stream: the sender speaks version 1 to it from then on, never
    more than that version's 256 unanswered, and loses nothing."""
    monkeypatch.setattr(msgstream, "VERSIONS", frozenset({1}))  # the receiver's code before version 2
    caplog.set_level(logging.INFO, "axl.streams")
    pair = Pair()
    count = STREAM_BASE_WINDOW + 50
    handles, inbound = send_many(pair, b"v", count)
    assert len(inbound) == STREAM_BASE_WINDOW
    for event in inbound:
        pair.cores[1].answer_inbound(event.handle, True, None, pair.now)
    assert [event.payload for event in inbound] + answer_all(pair) == [b"v%d" % i for i in range(count)]
    pair.run(1.0)
    assert [event.handle for event in pair.take(0, Acknowledged)] == handles
    assert "speaking version 1" in caplog.text
    assert pair.cores[1].messages.streams.window_refused == 0
