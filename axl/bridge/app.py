"""aiohttp application for the bridge (docs/operations.md "HTTP API", docs/openapi.yaml).

The bridge only translates HTTP to calls on the node and node errors to
status codes; it knows nothing about links, trees or sessions.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from aiohttp import ClientConnectionError, web

from axl.config import NodeConfig
from axl.adapters import AgentBridgeSettings, add_agent_routes
from axl.bridge.ws import ReceiverSlot, handle_ws, track_streams
from axl.errors import DeliveryError, status_for
from axl.httpbody import BodyTimeout, answer_and_close, read_limited_body, refuse_oversized_early
from axl.identity import parse_peer_id
from axl.observe import add_observability
from axl.observe.view import ObservedNode

log = logging.getLogger("axl.bridge")

MAX_RECV_WAIT = 300.0
DEST_HEADER = "X-Destination-Peer-Id"
RECEIVER_ATTACHED = "a /ws?recv=1 connection is receiving this node's messages"


class QueuedMessage(Protocol):
    """A message from the node's receive queue; `id` stays the same if it is delivered again."""

    id: int
    sender: bytes
    payload: bytes


class BridgeNode(ObservedNode, Protocol):
    """What the bridge needs from the node (and, through ObservedNode, its dashboard)."""

    max_message_size: int
    config: NodeConfig

    def topology(self) -> dict: ...

    async def send(self, dest_key: bytes, payload: bytes) -> None: ...

    def start_send(self, dest_key: bytes, payload: bytes) -> asyncio.Future: ...

    def keeps_order(self, dest_key: bytes) -> bool: ...

    async def recv(self, wait: float, until: asyncio.Future | None = None) -> QueuedMessage | None: ...

    def give_back(self, messages: list[QueuedMessage]) -> None: ...

    async def request(self, dest_key: bytes, payload: bytes, timeout: float) -> bytes: ...


class ClientWatch:
    """A future per open client connection, settled when that connection closes.

    The bridge runs without aiohttp's handler_cancellation, so a handler
    whose client has left keeps running. A long poll must notice, or it
    would take a message out of the queue for nobody. The server registers
    every connection here (axl.bridge.server).
    """

    def __init__(self) -> None:
        self._closed: dict[object, asyncio.Future[None]] = {}

    def opened(self, transport: object) -> None:
        self._closed[transport] = asyncio.get_running_loop().create_future()

    def closed(self, transport: object) -> None:
        closed = self._closed.pop(transport, None)
        if closed is not None and not closed.done():
            closed.set_result(None)

    def closing(self, request: web.Request) -> asyncio.Future[None] | None:
        """The future `request`'s connection settles on closing; None when it is already closed."""
        transport = request.transport
        if transport is None or transport.is_closing():
            return None
        closed = self._closed.get(transport)
        return closed if closed is not None else asyncio.get_running_loop().create_future()

    def release_all(self) -> None:
        """The node is stopping: treat every connection as closing, so long
        polls answer 204 at once and take nothing from the queue."""
        for closed in self._closed.values():
            if not closed.done():
                closed.set_result(None)

    def gone(self, request: web.Request) -> asyncio.Event | None:
        """An event set when `request`'s connection closes; None when it is already closed."""
        closed = self.closing(request)
        if closed is None:
            return None
        event = asyncio.Event()
        closed.add_done_callback(lambda _: event.set())
        return event


def text_error(status: int, message: str) -> web.Response:
    return web.Response(status=status, text=message + "\n")


def _node(request: web.Request) -> BridgeNode:
    return request.app["node"]


async def handle_topology(request: web.Request) -> web.Response:
    return web.json_response(_node(request).topology())


async def handle_health(request: web.Request) -> web.Response:
    topology = _node(request).topology()
    return web.json_response({
        "status": "ok",
        "our_public_key": topology["our_public_key"],
        "peers_up": sum(1 for peer in topology["peers"] if peer["up"]),
    })


async def handle_send(request: web.Request) -> web.Response:
    node = _node(request)
    header = request.headers.get(DEST_HEADER, "")
    try:
        dest = parse_peer_id(header.strip().lower())
    except ValueError:
        node.stats.send_finished(None, 0, 400, None, time.time())
        return text_error(400, f"missing or malformed {DEST_HEADER}: expected 64 hex characters")
    response, size, ack_seconds = await _deliver(request, node, dest)
    node.stats.send_finished(dest, size, response.status, ack_seconds, time.time())
    return response


async def _deliver(request: web.Request, node: BridgeNode,
                   dest: bytes) -> tuple[web.Response, int, float | None]:
    """Read the body and send it: (answer, payload size, seconds from send to acknowledgement)."""
    try:
        payload = await read_limited_body(request, node.max_message_size,
                                          float(node.config.conn_read_timeout_secs))
    except BodyTimeout as exc:
        return await answer_and_close(request, text_error(408, str(exc))), 0, None
    except DeliveryError as exc:
        return await answer_and_close(request, text_error(status_for(exc), str(exc))), 0, None
    started = time.monotonic()
    try:
        await node.send(dest, payload)
    except DeliveryError as exc:
        return text_error(status_for(exc), str(exc)), len(payload), None
    acked = time.monotonic() - started
    return web.Response(status=200, headers={"X-Sent-Bytes": str(len(payload))}), len(payload), acked


async def handle_recv(request: web.Request) -> web.StreamResponse:
    wait_text = request.query.get("wait", "0")
    try:
        wait = float(wait_text)
    except ValueError:
        return text_error(400, "wait must be a number of seconds")
    if not 0 <= wait <= MAX_RECV_WAIT:
        return text_error(400, f"wait must be between 0 and {MAX_RECV_WAIT:g} seconds")
    receiver = request.app["receiver"]
    if receiver.holder is not None:
        return text_error(409, RECEIVER_ATTACHED)
    node = _node(request)
    message = await take_for_client(request, node, wait)
    if message is None:
        return web.Response(status=204)
    if receiver.holder is not None:
        # A /ws receiver attached while this poll waited: the message is its.
        node.give_back([message])
        return text_error(409, RECEIVER_ATTACHED)
    response = web.Response(status=200, body=message.payload,
                            headers={"X-From-Peer-Id": message.sender.hex()},
                            content_type="application/octet-stream")
    try:
        await response.prepare(request)
        await response.write_eof()
    except (ConnectionError, ClientConnectionError, asyncio.CancelledError):
        node.give_back([message])
        log.info("recv client left before message %d was written: returned to the queue", message.id)
        raise
    return response


async def take_for_client(request: web.Request, node: BridgeNode, wait: float) -> QueuedMessage | None:
    """Dequeue a message only while the client is still connected.

    Waits up to `wait` seconds for a message or for the client to leave,
    whichever comes first; a client that left gets nothing taken for it.
    """
    closed = request.app["clients"].closing(request)
    if closed is None:
        return None
    return await node.recv(wait, until=closed)


async def _release_clients(app: web.Application) -> None:
    app["clients"].release_all()


def build_app(node: BridgeNode, agent_settings: AgentBridgeSettings | None = None,
              clients: ClientWatch | None = None) -> web.Application:
    app = web.Application(client_max_size=node.max_message_size + 1)
    app["node"] = node
    app["clients"] = clients or ClientWatch()
    app["receiver"] = ReceiverSlot()
    app.on_shutdown.append(_release_clients)
    track_streams(app)
    app.router.add_get("/topology", handle_topology)
    app.router.add_get("/health", handle_health)
    app.router.add_post("/send", handle_send, expect_handler=refuse_oversized_early(node.max_message_size))
    app.router.add_get("/recv", handle_recv)
    app.router.add_get("/ws", handle_ws)
    add_observability(app, node)
    add_agent_routes(app, node, agent_settings or AgentBridgeSettings(
        mcp_timeout=float(node.config.mcp_timeout_secs),
        a2a_timeout=float(node.config.a2a_timeout_secs),
        max_message_size=node.max_message_size,
    ))
    return app
