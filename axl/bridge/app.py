"""The bridge's full application (aiohttp): every route, for the connections the front door hands over.

The front door (axl.bridge.front) serves plain core requests itself and
passes a connection here at its first request that needs more: the agent
routes, /ws, the dashboard and /metrics, and the core routes' uncommon
forms (a chunked or oversized body, `Expect: 100-continue`, HTTP/1.0, a
malformed head). This module and aiohttp load on that first request
(docs/operations.md "HTTP API", docs/openapi.yaml).

The bridge only translates HTTP to calls on the node and node errors to
status codes; it knows nothing about links, trees or sessions.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import ClientConnectionError, web
from aiohttp.http_exceptions import HttpProcessingError

from axl.adapters.bridge import AgentBridgeSettings, add_agent_routes
from axl.bridge import api
from axl.bridge.api import BridgeNode, ClientWatch, InFlightBoard, ReceiverSlot
from axl.bridge.guard import BridgeGuard, PageGuard, page_guard, unauthorized
from axl.bridge.http1 import Answer
from axl.bridge.peers import add_peer_routes
from axl.bridge.ws import CLIENTS, NODE, RECEIVER, handle_ws, track_streams
from axl.errors import DeliveryError
from axl.httpbody import BodyTimeout, ClientLeft, answer_and_close, read_limited_body, refuse_oversized_early
from axl.observe.observatory import Observatory
from axl.observe.web import ACCESS_LOG, add_observability, request_recorder

log = logging.getLogger("axl.bridge")

HANDLER_STOP_TIMEOUT = 2.0
"""A stopping bridge cancels the handlers still running after this long (an
event stream, an agent call); long polls and /ws end at once, on their own."""


class MalformedRequestLine(logging.Filter):
    """aiohttp logs a request it cannot parse as an ERROR with its traceback,
    though the client was answered 400 and the node is fine. This makes it
    one INFO line, so a local client cannot fill the log with tracebacks."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError):
            what = record.getMessage().replace("Error handling", "malformed")
            reason = " ".join(str(error.message).split())[:200]
            record.msg, record.args = "%s, answered %d: %s", (what, error.code, reason)
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
            record.exc_info = record.exc_text = None
        return True


def response_for(answer: Answer) -> web.Response:
    headers = dict(answer.headers)
    if answer.content_type is not None:
        headers["Content-Type"] = answer.content_type
    return web.Response(status=answer.status, body=answer.body, headers=headers)


async def handle_topology(request: web.Request) -> web.Response:
    return response_for(api.topology_answer(request.app[NODE]))


async def handle_health(request: web.Request) -> web.Response:
    return response_for(api.health_answer(request.app[NODE]))


async def handle_send(request: web.Request) -> web.Response:
    node = request.app[NODE]
    key = api.destination(node, request.headers.get(api.DEST_HEADER, ""))
    if isinstance(key, Answer):
        return response_for(key)
    try:
        payload = await read_limited_body(request, node.max_message_size,
                                          float(node.config.conn_read_timeout_secs))
    except BodyTimeout as exc:
        return await answer_and_close(request, response_for(api.body_timeout(node, key, str(exc))))
    except ClientLeft as exc:
        return await answer_and_close(request, web.Response(status=400, text=f"{exc}\n"))
    except DeliveryError as exc:
        return await answer_and_close(request, response_for(api.send_answer(node, key, 0, 0.0, exc)))
    answered: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
    api.begin_send(node, key, payload, lambda answer: answered.done() or answered.set_result(answer))
    return response_for(await answered)


async def handle_recv(request: web.Request) -> web.StreamResponse:
    node = request.app[NODE]
    wait = api.recv_wait(request.query.get("wait", "0"))
    if isinstance(wait, Answer):
        return response_for(wait)
    clients = request.app[CLIENTS]
    closing = clients.closing(request.transport)
    refusal = api.recv_refusal(node, request.app[RECEIVER], closing)
    if refusal is not None:
        return response_for(refusal)
    answer, message = api.recv_answer(node, request.app[RECEIVER], await node.recv(wait, until=closing))
    response = response_for(answer)
    if message is None:
        return response
    handoff = clients.handoff(request.transport)
    if handoff is None or request.transport is None or request.transport.is_closing():
        api.left_before_delivery(node, message)
        return response
    handoff.written(message)  # the connection's end settles it from now on (axl.bridge.handoff)
    try:
        await response.prepare(request)
        await response.write_eof()
    except asyncio.CancelledError:
        api.unwritten(node, handoff, message)
        raise
    except (ConnectionError, ClientConnectionError):
        # The client left while the answer was written: aiohttp takes the
        # response back as a client gone, with no traceback for an everyday event.
        api.unwritten(node, handoff, message)
    return response


def send_expect(node: BridgeNode) -> Callable[[web.Request], Awaitable[web.StreamResponse | None]]:
    """/send's `Expect: 100-continue` handler: the shared one, with its early
    413 counted like every other /send answer."""
    early = refuse_oversized_early(node.max_message_size)

    async def expect(request: web.Request) -> web.StreamResponse | None:
        response = await early(request)
        if response is not None and response.status == 413:
            api.refused_before_body(node, request.headers.get(api.DEST_HEADER, ""))
        return response

    return expect


def page_middleware(pages: PageGuard) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Requests a web page of another site could make are refused (403,
    or 415 for a JSON route's other content type); /ws's upgrade too."""
    @web.middleware
    async def check_page(request: web.Request, handler) -> web.StreamResponse:
        headers = request.headers
        refusal = pages.refusal(request.method, request.path, headers.get("Host", ""),
                                headers.get("Origin", ""), headers.get("Content-Type"))
        if refusal is None:
            return await handler(request)
        return await answer_and_close(request, response_for(refusal))
    return check_page


def guard_middleware(guard: BridgeGuard) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Every route needs the bridge token (the dashboard may show its cookie instead)."""
    @web.middleware
    async def check_token(request: web.Request, handler) -> web.StreamResponse:
        if guard.allows(request.headers.get("Authorization", "")) or \
                guard.allows_dashboard(request.path, request.headers.get("Cookie", "")):
            return await handler(request)
        signed_in = guard.sign_in(request.path, request.query_string)
        refused = unauthorized(request.path, request.headers.get("Authorization", ""))
        return response_for(signed_in if signed_in is not None else refused)
    return check_token


def build_app(node: BridgeNode, clients: ClientWatch, receiver: ReceiverSlot, in_flight: InFlightBoard,
              observatory: Observatory) -> web.Application:
    config = node.config
    middlewares = [guard_middleware(BridgeGuard(config.bridge_token))] if config.bridge_token else []
    middlewares.append(page_middleware(page_guard(config)))
    app = web.Application(client_max_size=node.max_message_size + 1, middlewares=middlewares)
    app[NODE] = node
    app[CLIENTS] = clients
    app[RECEIVER] = receiver
    track_streams(app, in_flight)
    app.router.add_get("/topology", handle_topology)
    app.router.add_get("/health", handle_health)
    app.router.add_post("/send", handle_send, expect_handler=send_expect(node))
    app.router.add_get("/recv", handle_recv)
    app.router.add_get("/ws", handle_ws)
    add_peer_routes(app, node)
    add_observability(app, observatory)
    add_agent_routes(app, node, AgentBridgeSettings(
        mcp_timeout=float(config.mcp_timeout_secs),
        a2a_timeout=float(config.a2a_timeout_secs),
        max_message_size=node.max_message_size,
        body_timeout=float(config.conn_read_timeout_secs),
    ), observatory.adapters)
    return app


class FullApplication:
    """The application and its aiohttp runner, made on the first connection handed over."""

    def __init__(self, node: BridgeNode, clients: ClientWatch, receiver: ReceiverSlot,
                 in_flight: InFlightBoard, observatory: Observatory, keepalive_timeout: float) -> None:
        self._app = build_app(node, clients, receiver, in_flight, observatory)
        self._runner = web.AppRunner(self._app, access_log=ACCESS_LOG,
                                     access_log_class=request_recorder(observatory.http),
                                     handle_signals=False, keepalive_timeout=keepalive_timeout,
                                     shutdown_timeout=HANDLER_STOP_TIMEOUT)

    async def start(self) -> Callable[[], asyncio.Protocol]:
        """Set up the runner; its protocol factory serves handed-over connections."""
        server_log = logging.getLogger("aiohttp.server")
        if not any(isinstance(known, MalformedRequestLine) for known in server_log.filters):
            server_log.addFilter(MalformedRequestLine())
        await self._runner.setup()
        return self._runner.server

    async def stop(self) -> None:
        """Close the /ws connections (1001) and wait for the handlers, up to HANDLER_STOP_TIMEOUT."""
        await self._runner.cleanup()
