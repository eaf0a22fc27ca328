"""NodeCore end to end without sockets or sleeps: two cores joined by an
in-memory link on a virtual clock, every layer from tree frames to the
message acknowledgement."""

from __future__ import annotations

import json
import random

import pytest

from axl import __version__
from axl.build import build_fields
from axl.datagrams import nodeinfo_request
from axl.errors import MessageTooLarge, PeerUnreachable, ReceiverFull
from axl.identity import NodeIdentity
from axl.node.core import NAME_DELAY, NodeCore
from axl.node.corepair import CorePair
from axl.node.messages import (
    Acknowledged, InboundMessage, MessageSettings, ReplyReceived, SendFailed,
)
from axl.node.streams import SENDER_IDLE
from axl.sessions.manager import SESSION_TIMEOUT

SETTINGS = MessageSettings(lookup_timeout=5.0, send_timeout=10.0)


class Pair(CorePair):
    def __init__(self, settings: tuple[MessageSettings, MessageSettings] = (SETTINGS, SETTINGS),
                 **options) -> None:
        super().__init__(settings, **options)


@pytest.fixture
def pair() -> Pair:
    pair = Pair()
    pair.run(3.0)
    return pair


def test_send_is_acknowledged_once_the_receiver_accepts(pair):
    handle = pair.cores[0].send_message(pair.keys[1], b"hello", pair.now)
    pair.run(1.0)
    [inbound] = pair.take(1, InboundMessage)
    assert (inbound.sender, inbound.payload) == (pair.keys[0], b"hello")
    assert pair.take(0, Acknowledged) == []  # nothing before the application's answer
    pair.cores[1].answer_inbound(inbound.handle, True, None, pair.now)
    pair.run(1.0)
    assert [event.handle for event in pair.take(0, Acknowledged)] == [handle]


def test_refused_message_fails_as_receiver_full(pair):
    handle = pair.cores[0].send_message(pair.keys[1], b"no room", pair.now)
    pair.run(1.0)
    [inbound] = pair.take(1, InboundMessage)
    pair.cores[1].answer_inbound(inbound.handle, False, None, pair.now)
    pair.run(1.0)
    [failed] = pair.take(0, SendFailed)
    assert failed.handle == handle and isinstance(failed.error, ReceiverFull)


def test_request_gets_the_reply_on_the_same_connection(pair):
    handle = pair.cores[0].request(pair.keys[1], b"question", 5.0, pair.now)
    pair.run(1.0)
    [inbound] = pair.take(1, InboundMessage)
    pair.cores[1].answer_inbound(inbound.handle, True, b"answer", pair.now)
    pair.run(1.0)
    [reply] = pair.take(0, ReplyReceived)
    assert (reply.handle, reply.reply) == (handle, b"answer")


def test_large_message_crosses_many_segments_intact(pair):
    payload = random.Random(7).randbytes(300_000)
    pair.cores[0].send_message(pair.keys[1], payload, pair.now)
    pair.run(2.0)
    [inbound] = pair.take(1, InboundMessage)
    assert inbound.payload == payload


def test_unknown_destination_fails_unreachable_after_the_lookup_timeout(pair):
    start = pair.now
    handle = pair.cores[0].send_message(NodeIdentity.from_seed(b"\x09" * 32).public_key, b"x", pair.now)
    pair.run(SETTINGS.lookup_timeout - 0.5)
    assert pair.take(0, SendFailed) == []
    pair.run(1.0)
    [failed] = pair.take(0, SendFailed)
    assert failed.handle == handle and isinstance(failed.error, PeerUnreachable)
    assert pair.now - start >= SETTINGS.lookup_timeout


def test_oversized_payload_is_refused_before_anything_is_sent(pair):
    with pytest.raises(MessageTooLarge):
        pair.cores[0].send_message(pair.keys[1], bytes(SETTINGS.max_message_size + 1), pair.now)
    assert pair.cores[0].frames_to_send() == []


def test_one_timer_covers_the_maintenance_tick():
    pair = Pair()
    assert pair.cores[0].get_timer() <= pair.now + 1.0


def test_nodeinfo_reply_names_this_build() -> None:
    core = NodeCore(NodeIdentity.from_seed(bytes([3]) * 32), SETTINGS, 0.0, rng=random.Random(3))
    [reply] = core.datagrams.handle(bytes(32), nodeinfo_request(), 0.0)
    assert json.loads(reply.message[2:]) == {"buildname": "axl-py", "buildversion": __version__,
                                             "buildplatform": "linux", "buildarch": build_fields()["buildarch"]}


def test_each_peer_is_asked_its_name_once_the_tree_has_settled():
    pair = Pair(nodeinfo=b'{"name":"twin"}', ask_peer_names=True)
    pair.run(NAME_DELAY - 0.5)
    assert pair.cores[0].peer_names == {} and pair.cores[0].sessions.session_keys() == []
    pair.run(1.0)
    first, second = sorted(range(2), key=lambda index: pair.keys[index])
    assert pair.cores[first].peer_names == {pair.keys[second]: "twin"} and pair.cores[second].peer_names == {}
    pair.run(NAME_DELAY + 1.0)
    assert pair.cores[second].peer_names == {pair.keys[first]: "twin"}, "asked on the session the first made"
    assert pair.cores[0].next_reply().info == b'{"name":"twin"}', "the answer is offered to the driver too"
    pair.cores[0].link_down(1, pair.now)
    assert pair.cores[0].peer_names == {}


def test_a_peer_without_a_name_is_asked_once():
    pair = Pair(nodeinfo=b'{"site":"x"}', ask_peer_names=True)
    pair.run(2 * NAME_DELAY + 1.5)
    assert pair.cores[0].peer_names == {} and pair.cores[0]._name_due == {} == pair.cores[1]._name_due


def test_remote_questions_get_their_answers():
    pair = Pair()
    pair.run(3.0)
    pair.cores[0].request_debug(pair.keys[1], 3, pair.now)
    pair.run(1.0)
    reply = pair.cores[0].next_reply()
    assert (reply.key, reply.subtype, reply.payload) == (pair.keys[1], 4, pair.keys[0])
    assert pair.cores[1].datagrams.own_reply(nodeinfo_request()) == pair.cores[1].datagrams._nodeinfo_reply[2:]


@pytest.mark.replaces_compiled_method
def test_a_failing_router_tick_does_not_starve_the_other_layers(pair, monkeypatch, caplog):
    """The router's tick raising every second must not stop the session
    table's: an idle session still expires on time, and the failure is
    logged once with its traceback, not once a second."""
    core = pair.cores[0]
    core.send_message(pair.keys[1], b"hello", pair.now)
    pair.run(1.0)
    [inbound] = pair.take(1, InboundMessage)
    pair.cores[1].answer_inbound(inbound.handle, True, None, pair.now)
    pair.run(1.0)
    assert core.sessions.session_keys() == [pair.keys[1]]

    def broken_tick(now: float) -> list:
        raise RuntimeError("router bug")

    monkeypatch.setattr(core.router, "tick", broken_tick)
    with caplog.at_level("ERROR", logger="axl.node"):
        pair.run(SENDER_IDLE + SESSION_TIMEOUT + 5.0)  # the stream closes idle, then the session expires
    assert core.sessions.session_keys() == []
    tracebacks = [record for record in caplog.records if record.exc_info]
    assert len(tracebacks) == 1 and "router maintenance tick failed" in tracebacks[0].getMessage()
    assert core.tick_failures["router"] >= SESSION_TIMEOUT
