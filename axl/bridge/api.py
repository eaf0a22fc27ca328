"""The core routes' answers (`/send`, `/recv`, `/topology`, `/health`), whichever server carries them.

Two servers carry these routes: the bridge's own HTTP/1.1 front door
(axl.bridge.front), which serves plain requests, and the full application
(axl.bridge.app), which gets a connection whose requests need more (a
chunked body, `Expect: 100-continue`, a WebSocket, the agent routes). Both
answer from here, so the routes behave the same on either.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol

from axl.bridge.handoff import Handoff
from axl.bridge.http1 import Answer, text_answer
from axl.budgets import WS_MAX_IN_FLIGHT, WS_MAX_IN_FLIGHT_BYTES, BudgetBoard, BudgetUse
from axl.config import NodeConfig
from axl.errors import DeliveryError, status_for
from axl.eventloop import running_loop
from axl.identity import parse_peer_id
from axl.observe.view import ObservedNode

log = logging.getLogger("axl.bridge")

MAX_RECV_WAIT: Final = 300.0
DEST_HEADER = "X-Destination-Peer-Id"
# The message's own id (as /ws gives it): the same if it is delivered again.
MESSAGE_ID_HEADER: Final = "X-Message-Id"
RECEIVER_ATTACHED: Final = "a /ws?recv=1 connection is receiving this node's messages"
JSON = "application/json; charset=utf-8"


class QueuedMessage(Protocol):
    """A message from the node's receive queue; `id` stays the same if it is delivered again."""

    id: int
    sender: bytes
    payload: bytes


class BridgeNode(ObservedNode, Protocol):
    """What the bridge needs from the node (and, through ObservedNode, its dashboard)."""

    max_message_size: int
    config: NodeConfig
    budgets: BudgetBoard

    def topology(self) -> dict: ...

    def start_send_then(self, dest_key: bytes, payload: bytes,
                        settled: Callable[[DeliveryError | None], None]) -> None: ...

    def open_body(self, dest_key: bytes, length: int, settled: Callable[[DeliveryError | None], None]) -> int | None: ...

    def write_body(self, handle: int, part: bytes) -> None: ...

    def end_body(self, handle: int) -> None: ...

    def cancel_body(self, handle: int) -> None: ...

    def keeps_order(self, dest_key: bytes) -> bool: ...

    async def recv(self, wait: float, until: asyncio.Future | None = None) -> QueuedMessage | None: ...

    def take(self, wait: float, until: asyncio.Future | None = None) -> asyncio.Future: ...

    def take_nowait(self) -> QueuedMessage | None: ...

    def give_back(self, messages: list[QueuedMessage]) -> None: ...

    def delivered(self, messages: list[QueuedMessage]) -> None: ...

    async def request(self, dest_key: bytes, payload: bytes, timeout: float) -> bytes: ...

    def peer_list(self) -> list[dict]: ...

    def add_peer(self, uri: str) -> str: ...

    def remove_peer(self, uri: str) -> str: ...


class InFlight(Protocol):
    """What one /ws connection's sends hold until their acks are written."""

    frames: int
    bytes: int


@dataclass
class InFlightBoard:
    """Every /ws connection's sends awaiting acknowledgement, as /metrics
    shows them: the most any one connection holds, and how often a
    connection's reading paused at each limit."""

    # each open connection's (it leaves when the connection ends)
    flows: set[InFlight] = field(default_factory=set)
    paused_at_frames: int = 0
    paused_at_bytes: int = 0

    def usage(self) -> list[BudgetUse]:
        flows = list(self.flows)
        return [
            BudgetUse("ws_in_flight", "connection", WS_MAX_IN_FLIGHT,
                      max((flow.frames for flow in flows), default=0), self.paused_at_frames),
            BudgetUse("ws_in_flight_bytes", "connection", WS_MAX_IN_FLIGHT_BYTES,
                      max((flow.bytes for flow in flows), default=0), self.paused_at_bytes),
        ]


@dataclass
class ReceiverSlot:
    """Which connection, if any, receives the node's messages instead of `/recv`."""

    holder: object | None = None


class ClientWatch:
    """A future per open client connection, settled when that connection
    closes, and the connection's Handoff (its /recv messages not yet proven
    received).

    A handler whose client has left keeps running (neither server cancels
    it). A long poll must notice, or it would take a message out of the
    queue for nobody. The front door registers every connection here, and
    the transport it shows the full application as another name for it.
    """

    def __init__(self) -> None:
        self._closed: dict[object, asyncio.Future[None]] = {}
        self._handoffs: dict[object, Handoff] = {}

    def opened(self, transport: object, handoff: Handoff) -> None:
        self._closed[transport] = running_loop().create_future()
        self._handoffs[transport] = handoff

    def alias(self, alias: object, transport: object) -> None:
        """`alias` names the same connection as `transport`."""
        self._closed[alias] = self._closed[transport]
        self._handoffs[alias] = self._handoffs[transport]

    def left(self, transport: object) -> None:
        """The client sends no more (its FIN): long polls on it take nothing."""
        closed = self._closed.get(transport)
        if closed is not None and not closed.done():
            closed.set_result(None)

    def closed(self, transport: object) -> None:
        self.left(transport)
        self._closed.pop(transport, None)
        self._handoffs.pop(transport, None)

    def handoff(self, transport: object) -> Handoff | None:
        """The connection's Handoff; None once it is closed."""
        return self._handoffs.get(transport)

    def closing(self, transport: asyncio.BaseTransport | None) -> asyncio.Future[None] | None:
        """The future `transport` settles on closing; None when it is already closed."""
        if transport is None or transport.is_closing():
            return None
        closed = self._closed.get(transport)
        return closed if closed is not None else running_loop().create_future()

    def release_all(self) -> None:
        """The node is stopping: treat every connection as closing, so long
        polls answer 204 at once and take nothing from the queue."""
        for closed in self._closed.values():
            if not closed.done():
                closed.set_result(None)

    def gone(self, transport: asyncio.BaseTransport | None) -> asyncio.Event | None:
        """An event set when `transport` closes; None when it is already closed."""
        closed = self.closing(transport)
        if closed is None:
            return None
        event = asyncio.Event()
        closed.add_done_callback(lambda _: event.set())
        return event


def json_answer(document: dict) -> Answer:
    return Answer(200, json.dumps(document).encode(), JSON)


def topology_answer(node: BridgeNode) -> Answer:
    return json_answer(node.topology())


def health_answer(node: BridgeNode) -> Answer:
    topology = node.topology()
    return json_answer({
        "status": "ok",
        "our_public_key": topology["our_public_key"],
        "peers_up": sum(1 for peer in topology["peers"] if peer["up"]),
    })


def _named_key(header: str) -> bytes | None:
    """The key a /send's destination header names, or None when it names none."""
    try:
        return parse_peer_id(header.strip().lower())
    except ValueError:
        return None


def destination(node: BridgeNode, header: str) -> bytes | Answer:
    """The key a /send names, or its 400 (counted as a failed send)."""
    key = _named_key(header)
    if key is None:
        node.stats.send_finished(None, 0, 400, None, time.time())
        return text_answer(400, f"missing or malformed {DEST_HEADER}: expected 64 hex characters")
    return key


def refused_before_body(node: BridgeNode, header: str) -> None:
    """Count a /send refused with 413 on its declared length, before its body
    was sent (`Expect: 100-continue`), as the sends refused after it are."""
    node.stats.send_finished(_named_key(header), 0, 413, None, time.time())


def record_send(node: BridgeNode, key: bytes, size: int, started: float,
                error: DeliveryError | None) -> tuple[int, str | None]:
    """Count a send whose fate is known: its status and, unless 200, the error's text."""
    now = time.time()
    if error is None:
        node.stats.send_finished(key, size, 200, time.monotonic() - started, now)
        return 200, None
    status = status_for(error)
    node.stats.send_finished(key, size, status, None, now)
    return status, str(error)


def body_timeout(node: BridgeNode, key: bytes | None, reason: str) -> Answer:
    """A /send whose body did not arrive in time: its 408, counted as a failed send."""
    node.stats.send_finished(key, 0, 408, None, time.time())
    return text_answer(408, reason)


def send_answer(node: BridgeNode, key: bytes, size: int, started: float,
                error: DeliveryError | None) -> Answer:
    """What `/send` answers once the send's fate is known."""
    status, text = record_send(node, key, size, started, error)
    if text is not None:
        return text_answer(status, text)
    return Answer(200, headers=(("X-Sent-Bytes", str(size)),))


def begin_send(node: BridgeNode, key: bytes, payload: bytes, answered: Callable[[Answer], None]) -> None:
    """Start a `/send`; `answered` gets its answer once its fate is known
    (at once when it cannot start). No task per send: the node calls back."""
    started = time.monotonic()
    size = len(payload)
    try:
        node.start_send_then(key, payload, lambda error: answered(send_answer(node, key, size, started, error)))
    except DeliveryError as exc:
        answered(send_answer(node, key, size, started, exc))


def open_send(node: BridgeNode, key: bytes, length: int, answered: Callable[[Answer], None]) -> int | None:
    """Start a `/send` of `length` bytes before its body is whole (the node's
    `open_body`); `answered` gets its answer as with `begin_send`. None when
    the node cannot start it yet: the caller gathers the body and begins then."""
    started = time.monotonic()
    try:
        return node.open_body(key, length, lambda error: answered(send_answer(node, key, length, started, error)))
    except DeliveryError:
        return None


def recv_wait(text: str) -> float | Answer:
    """The `wait` of a /recv, or its 400."""
    try:
        wait = float(text)
    except ValueError:
        return text_answer(400, "wait must be a number of seconds")
    if not 0 <= wait <= MAX_RECV_WAIT:
        return text_answer(400, f"wait must be between 0 and {MAX_RECV_WAIT:g} seconds")
    return wait


def recv_refusal(node: BridgeNode, slot: ReceiverSlot, closing: asyncio.Future | None) -> Answer | None:
    """What a /recv answers before waiting at all: 409 while a /ws receiver
    is attached, 503 while the inbox cannot delete what it hands out (a full
    disk: it would deliver it again), 204 when its client has already left; else None."""
    if slot.holder is not None:
        return text_answer(409, RECEIVER_ATTACHED)
    refusal = node.inbox.delivery_refusal
    if refusal is not None:
        return text_answer(503, refusal)
    if closing is None:
        return Answer(204)
    return None


def recv_answer(node: BridgeNode, slot: ReceiverSlot,
                message: QueuedMessage | None) -> tuple[Answer, QueuedMessage | None]:
    """A /recv's answer once its wait is over, and the message it carries.

    The wait (`node.take(wait, until=closing)`) takes a message only while
    the client is still there, and ends early when it leaves. The caller
    gives the message back if writing the answer fails, and hands it to
    the connection's Handoff as it writes it: the message leaves the inbox
    once the client is proven to have it (axl.bridge.handoff).
    """
    if message is None:
        return Answer(204), None
    if slot.holder is not None:
        # A /ws receiver attached while this poll waited: the message is its.
        node.give_back([message])
        return text_answer(409, RECEIVER_ATTACHED), None
    return Answer(200, message.payload, "application/octet-stream",
                  (("X-From-Peer-Id", message.sender.hex()), (MESSAGE_ID_HEADER, str(message.id)))), message


def left_before_delivery(node: BridgeNode, message: QueuedMessage) -> None:
    node.give_back([message])
    log.info("recv client left before message %d was written: returned to the queue", message.id)


def unwritten(node: BridgeNode, handoff: Handoff, message: QueuedMessage) -> None:
    """Writing `message`'s answer failed: it goes back, unless the connection's end gave it back already."""
    if handoff.withdraw(message):
        left_before_delivery(node, message)


def not_received(node: BridgeNode, messages: list[QueuedMessage], how: str) -> None:
    """Messages written to a client not proven to have them (axl.bridge.handoff) go back, in one line."""
    if messages:
        node.give_back(messages)
        log.info("recv connection %s before its client was known to have message%s %s: returned to the queue",
                 how, "s" if len(messages) > 1 else "", ", ".join(str(message.id) for message in messages))
