"""What our code makes of WebSocket messages: the ws:// link's pump
(axl.link.websocket) and the bridge's `GET /ws` sessions (axl.bridge.streaming).
The frames themselves (masking, lengths, fragments, the message size limit)
are read by aiohttp for the link and by the front door's own reader for
/ws (fuzzed in test_fuzz_wsframes.py); these tests start from the messages
those hand over, in any sequence, of any size and text.

- The link pump: binary messages reach the link as one byte stream, in
  order (their boundaries mean nothing, and the link's frame decoder is
  fuzzed under any chunking in test_fuzz_link); a text message or an error
  ends the link with ConnectionError; nothing escapes the pump.
- /ws: `window` is an integer in range or ValueError; a `{"done": ...}` text
  gives distinct integer ids or ProtocolViolation (the close reason), however
  deep or odd its JSON; binary frames of any size each get exactly one ack,
  in order per destination where the node does not keep order, and once
  every send has settled the session holds nothing for them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from aiohttp import WebSocketError, WSCloseCode, WSMsgType
from hypothesis import given
from hypothesis import strategies as st

from axl.bridge.api import InFlightBoard
from axl.bridge.streaming import KEY_SIZE, ProtocolViolation, StreamingSession, parse_done, parse_window
from axl.budgets import WS_MAX_WINDOW
from axl.errors import DeliveryError, PeerUnreachable, status_for
from axl.link.websocket import _pump
from axl.node.stats import NodeStats
from fuzzing import FUZZ, noise_or_mutation

# --- the ws:// link ------------------------------------------------------------


@dataclass
class Message:
    type: WSMsgType
    data: object


class Socket:
    def __init__(self, messages: list[Message]) -> None:
        self.messages = messages

    def __aiter__(self):
        return self._each()

    async def _each(self):
        for message in self.messages:
            yield message

    def exception(self) -> BaseException | None:
        return None


class LinkTransport:
    def __init__(self) -> None:
        self.fed: list[bytes] = []
        self.aborted: list[BaseException] = []
        self.closed: list[BaseException | None] = []

    def feed(self, data: bytes) -> None:
        self.fed.append(data)

    def abort(self, error: BaseException) -> None:
        self.aborted.append(error)

    def carrier_closed(self, error: BaseException | None) -> None:
        self.closed.append(error)


class LinkSettings:
    def __init__(self) -> None:
        self.refusals: dict[str, int] = {"ws_message_bytes": 0}


link_messages = st.lists(st.one_of(
    st.binary(max_size=300).map(lambda data: Message(WSMsgType.BINARY, data)),
    st.text(max_size=20).map(lambda text: Message(WSMsgType.TEXT, text)),
    st.sampled_from([Message(WSMsgType.PING, b""), Message(WSMsgType.PONG, b"x"), Message(WSMsgType.CLOSE, 1000),
                     Message(WSMsgType.ERROR, WebSocketError(WSCloseCode.MESSAGE_TOO_BIG, "too big")),
                     Message(WSMsgType.ERROR, None)]),
), max_size=12)


@FUZZ
@given(link_messages)
def test_link_pump_feeds_binary_messages_in_order_and_ends_on_text_or_error(messages):
    transport, settings = LinkTransport(), LinkSettings()
    pump = _pump(Socket(messages), transport, settings)
    with pytest.raises(StopIteration):
        pump.send(None)
    end = next((n for n, m in enumerate(messages) if m.type in (WSMsgType.TEXT, WSMsgType.ERROR)), len(messages))
    assert transport.fed == [m.data for m in messages[:end] if m.type is WSMsgType.BINARY]
    assert len(transport.closed) == 1
    if end < len(messages):
        assert len(transport.aborted) == 1 and isinstance(transport.aborted[0], ConnectionError)
        assert transport.closed[0] is transport.aborted[0]
        too_big = isinstance(messages[end].data, WebSocketError)
        assert settings.refusals["ws_message_bytes"] == too_big
    else:
        assert transport.aborted == [] and transport.closed == [None]


# --- GET /ws: the query and the text frames -----------------------------------------

@FUZZ
@given(st.one_of(st.none(), st.text(max_size=12), st.integers(-5, WS_MAX_WINDOW + 5).map(str)))
def test_window_is_in_range_or_value_error(text):
    try:
        window = parse_window(text)
    except ValueError as exc:
        assert "\n" not in str(exc)
        return
    assert 1 <= window <= WS_MAX_WINDOW
    if text is not None:
        assert window == int(text)


VALID_DONE = [b'{"done": 5}', b'{"done": [1, 2, 3]}', b'{"done": []}', b'{"done": [7, 7]}']
done_texts = st.one_of(
    noise_or_mutation(VALID_DONE, 60).map(lambda data: data.decode("utf-8", "replace")),
    st.integers(1, 3000).map(lambda depth: '{"done": ' + "[" * depth + "1" + "]" * depth + "}"),
    st.integers(1, 3000).map(lambda depth: '{"done": ' + '{"a": ' * depth),
    st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
                 lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                 max_leaves=8).map(lambda value: json.dumps({"done": value})),
)


@FUZZ
@given(done_texts)
def test_done_gives_distinct_integer_ids_or_protocol_violation(text):
    try:
        ids = parse_done(text)
    except ProtocolViolation:
        return
    assert all(type(i) is int for i in ids) and len(set(ids)) == len(ids)


# --- GET /ws: binary frames and their acks --------------------------------------------

class Node:
    """The node's side of the session: sends that settle when the test says."""

    max_message_size = 1 << 20

    def __init__(self, ordered: frozenset[int]) -> None:
        self.ordered = ordered
        self.stats = NodeStats(now=0.0)
        self.sends: list[Callable[[DeliveryError | None], None]] = []
        self.done: list[int] = []

    def keeps_order(self, key: bytes) -> bool:
        return key[0] in self.ordered

    def start_send_then(self, key: bytes, payload: bytes, settled: Callable[[DeliveryError | None], None]) -> None:
        if key[0] == 9:
            raise PeerUnreachable("no route")
        self.sends.append(settled)

    def delivered(self, messages: list) -> None:
        self.done += [message.id for message in messages]


@dataclass
class Delivered:
    id: int
    sender: bytes = bytes(32)
    payload: bytes = b""


frames = st.one_of(
    st.binary(max_size=40),
    st.tuples(st.sampled_from([0, 1, 2, 9]), st.binary(max_size=64)).map(lambda f: bytes([f[0]]) * KEY_SIZE + f[1]),
)
session_steps = st.lists(st.one_of(
    frames.map(lambda data: ("binary", data)),
    done_texts.map(lambda text: ("text", text)),
    st.sampled_from(['{"done": 1}', '{"done": [2, 3]}', '{"done": []}']).map(lambda text: ("text", text)),
    st.tuples(st.integers(0, 30), st.booleans()).map(lambda settle: ("settle", settle)),
), max_size=20)


@FUZZ
@given(session_steps, st.frozensets(st.sampled_from([0, 1, 2])), st.sampled_from([None, 4]))
def test_any_messages_get_one_ack_each_and_leave_nothing_behind(steps, ordered, window):
    node = Node(ordered)
    board = InFlightBoard()
    session = StreamingSession(node, None, window, asyncio.Event(), board)
    session._delivered = {n: Delivered(n) for n in (1, 2, 3)} if window else {}
    keys: dict[int, bytes] = {}
    for kind, item in steps:
        if kind == "binary":
            keys[session._frames + 1] = item[:KEY_SIZE]
            session._accept_send(item)
        elif kind == "text":
            try:
                session._accept_done(item)
            except ProtocolViolation:
                break  # the connection closes
        else:
            _settle(node, *item)
    while node.sends:
        _settle(node, 0, True)
    acks = [json.loads(text) for text, _ in session._acks]
    numbers = [ack["ack"] for ack in acks]
    assert sorted(numbers) == list(range(1, session._frames + 1))
    for ack in acks:
        short = len(keys[ack["ack"]]) < KEY_SIZE
        assert ack["status"] in ((400,) if short else (200, status_for(PeerUnreachable(""))))
    for key in {key for key in keys.values() if len(key) == KEY_SIZE and key[0] not in ordered}:
        mine = [n for n in numbers if keys[n] == key]
        assert mine == sorted(mine)
    assert session._destinations == {} and session._under_way == 0
    assert session._flow.frames == len(acks)
    assert board.usage()[0].in_use == len(acks)
    # every send the node settled is counted once in its statistics (a short frame never reaches it)
    assert sum(node.stats.sent_by_status.values()) == sum(ack["status"] != 400 for ack in acks)
    assert len(set(node.done)) == len(node.done)


def _settle(node: Node, index: int, delivered: bool) -> None:
    if node.sends:
        settled = node.sends.pop(index % len(node.sends))
        settled(None if delivered else PeerUnreachable("gone"))


def test_a_deeply_nested_done_is_a_protocol_violation():
    with pytest.raises(ProtocolViolation):
        parse_done('{"done": ' + "[" * 100_000 + "}")

