"""The sans-IO LinkConnection: handshake, framing and liveness on a virtual clock."""

from __future__ import annotations

from axl.identity import NodeIdentity
from axl.link.framing import KEEPALIVE_FRAME, FrameType, encode_frame
from axl.link.meta import encode_meta
from axl.link.protocol import (
    FrameReceived, HandshakeDone, LinkClosed, LinkConnection, LinkPolicy,
)

A = NodeIdentity.from_seed(b"\x0a" * 32)
B = NodeIdentity.from_seed(b"\x0b" * 32)
SIGREQ = encode_frame(FrameType.SIGREQ, b"\x01\x02")


def events(conn: LinkConnection) -> list:
    found = []
    while (event := conn.next_event()) is not None:
        found.append(event)
    return found


def exchange(x: LinkConnection, y: LinkConnection, now: float) -> None:
    for _ in range(4):
        y.receive_data(x.data_to_send(), now)
        x.receive_data(y.data_to_send(), now)


def pair(now: float = 0.0, **policy_b) -> tuple[LinkConnection, LinkConnection]:
    a = LinkConnection(LinkPolicy(A, inbound=False, priority=1), now)
    b = LinkConnection(LinkPolicy(B, inbound=True, **policy_b), now)
    return a, b


def test_first_bytes_are_our_meta_header_exactly():
    conn = LinkConnection(LinkPolicy(A, inbound=False, priority=3, password=b"pw"), 0.0)
    assert conn.data_to_send() == encode_meta(A, 3, b"pw")


def test_handshake_names_the_peer_and_the_higher_priority():
    a, b = pair()
    exchange(a, b, 0.0)
    [done_a], [done_b] = events(a), events(b)
    assert isinstance(done_a, HandshakeDone) and done_a.meta.key == B.public_key
    assert done_b.meta.key == A.public_key and done_a.priority == done_b.priority == 1
    assert a.get_timer() is None  # an idle established link has no deadline


def test_frames_after_the_meta_in_the_same_read_are_delivered():
    a, b = pair()
    a.send_frame(SIGREQ, 0.0)
    b.receive_data(a.data_to_send(), 0.0)
    assert [type(e) for e in events(b)] == [HandshakeDone, FrameReceived]


def test_keepalives_count_for_liveness_but_are_not_delivered():
    a, b = pair()
    exchange(a, b, 0.0)
    events(a), events(b)
    a.send_frame(KEEPALIVE_FRAME, 0.0)
    a.send_frame(SIGREQ, 0.0)
    b.receive_data(a.data_to_send(), 0.0)
    assert events(b) == [FrameReceived(FrameType.SIGREQ, b"\x01\x02")]


def test_handshake_deadline_closes_a_silent_peer():
    a = LinkConnection(LinkPolicy(A, inbound=False), 100.0, handshake_timeout=6.0)
    assert a.get_timer() == 106.0
    a.handle_timer(105.9)
    assert events(a) == []
    a.handle_timer(106.0)
    assert events(a) == [LinkClosed("handshake timeout", established=False)]


def test_unanswered_frame_times_the_link_out_and_an_answer_gets_a_keepalive():
    a, b = pair()
    exchange(a, b, 0.0)
    events(a), events(b)
    a.send_frame(SIGREQ, 10.0)
    b.receive_data(a.data_to_send(), 10.0)
    assert b.get_timer() == 11.0  # b owes a keepalive after 1 s of its own silence
    b.handle_timer(11.0)
    assert b.data_to_send() == KEEPALIVE_FRAME
    assert a.get_timer() == 13.0
    a.handle_timer(13.0)
    assert events(a)[-1] == LinkClosed("peer timeout", established=True)


def test_own_key_and_unlisted_keys_are_refused():
    a = LinkConnection(LinkPolicy(A, inbound=False), 0.0)
    mirror = LinkConnection(LinkPolicy(A, inbound=True), 0.0)
    a.receive_data(mirror.data_to_send(), 0.0)
    assert events(a) == [LinkClosed("connection to our own key", established=False, to_self=True)]
    a, b = pair(allowed_keys=frozenset({NodeIdentity.from_seed(b"\x0c" * 32).public_key}))
    b.receive_data(a.data_to_send(), 0.0)
    [closed] = events(b)
    assert not closed.established and "AllowedPublicKeys" in closed.reason


def test_pinned_key_mismatch_is_refused_on_the_dialing_side():
    a = LinkConnection(LinkPolicy(A, inbound=False, pinned_keys=frozenset({b"\x01" * 32})), 0.0)
    b = LinkConnection(LinkPolicy(B, inbound=True), 0.0)
    a.receive_data(b.data_to_send(), 0.0)
    [closed] = events(a)
    assert "pinned" in closed.reason


def test_malformed_frame_closes_the_link():
    a, b = pair()
    exchange(a, b, 0.0)
    events(b)
    b.receive_data(b"\x00", 0.0)  # an empty frame
    [closed] = events(b)
    assert closed.established and closed.reason.startswith("malformed frame")


def test_stream_ending_mid_frame_is_reported_as_such():
    a, b = pair()
    exchange(a, b, 0.0)
    events(b)
    b.receive_data(SIGREQ[:2], 0.0)
    b.connection_lost()
    assert events(b) == [LinkClosed("connection closed mid-frame", established=True)]
