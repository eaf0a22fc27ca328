"""The caller's side of MCP and A2A: ``/mcp/{peer}/{service}`` and ``/a2a/{peer}`` on the bridge.

Each call becomes one envelope sent to the remote node and one reply read
back. The rules here exist because the official MCP and A2A clients must
accept this bridge as if it were the remote server itself (see
AGENT-PROTOCOLS.md): every MCP request is answered 200 with its own ``id``,
notifications get 202, and the A2A card is rewritten to point back here.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from axl.adapters.counts import AdapterCounts, ForwardCounts
from axl.adapters.envelopes import (
    RawValue,
    encode_a2a_request,
    encode_mcp_request,
    parse_json,
    parse_reply,
)
from axl.adapters.inbound import A2A_VERSION_HEADER, a2a_version_for
from axl.adapters.jsonrpc import (
    SESSION_HEADER,
    carried_mcp_headers,
    error_response,
    is_response,
    rekeyed,
)
from axl.errors import DeliveryError, DeliveryTimeout, MessageTooLarge, PeerUnreachable, ReceiverFull
from axl.httpbody import BodyTimeout, ClientLeft, answer_and_close, read_limited_body, refuse_oversized_early
from axl.identity import parse_peer_id
from axl.wire import DecodeError, KEY_SIZE

log = logging.getLogger(__name__)

MAX_BRIDGE_SESSIONS = 4096


class Requester(Protocol):
    """One request/response exchange with a peer over a fresh overlay connection."""

    async def request(self, dest_key: bytes, payload: bytes, timeout: float) -> bytes:
        """Send one framed message to ``dest_key`` and return its one framed reply."""
        ...


@dataclass(frozen=True)
class AgentBridgeSettings:
    """Limits for the agent routes; the timeouts bound the whole remote round trip."""

    mcp_timeout: float = 30.0
    a2a_timeout: float = 30.0
    max_message_size: int = 16 * 1024 * 1024
    body_timeout: float = 60.0


class McpSessions:
    """Session ids minted on ``initialize``; the oldest are forgotten beyond a cap."""

    def __init__(self, capacity: int = MAX_BRIDGE_SESSIONS) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._capacity = capacity

    def mint(self, service: str, peer: str) -> str:
        session_id = f"mcp-{service}-{peer[:8]}-{secrets.token_hex(12)}"
        self._ids[session_id] = None
        while len(self._ids) > self._capacity:
            self._ids.popitem(last=False)
        return session_id

    def known(self, session_id: str) -> bool:
        if session_id in self._ids:
            self._ids.move_to_end(session_id)
            return True
        return False

    def forget(self, session_id: str) -> None:
        self._ids.pop(session_id, None)


def _peer_key(text: str) -> bytes:
    """The 32-byte key in a URL's peer id; HTTPBadRequest otherwise."""
    try:
        key = parse_peer_id(text)
    except ValueError as exc:
        raise web.HTTPBadRequest(text=f"{exc}\n") from None
    if len(key) != KEY_SIZE:
        raise web.HTTPBadRequest(text="peer id must be 64 hex characters\n")
    return key


class _BodyRefused(Exception):
    """The request body was too large or too slow; `response` says which."""

    def __init__(self, response: web.Response) -> None:
        super().__init__(response.text)
        self.response = response


async def _read_body(request: web.Request, settings: AgentBridgeSettings) -> bytes:
    """The request body, or _BodyRefused (413 over the limit, 408 when it
    trickles, 400 for nobody when the client left mid-body)."""
    try:
        return await read_limited_body(request, settings.max_message_size, settings.body_timeout)
    except MessageTooLarge as exc:
        raise _BodyRefused(web.Response(status=413, text=f"{exc}\n")) from None
    except BodyTimeout as exc:
        raise _BodyRefused(web.Response(status=408, text=f"{exc}\n")) from None
    except ClientLeft as exc:
        raise _BodyRefused(web.Response(status=400, text=f"{exc}\n")) from None


async def _read_json(request: web.Request, settings: AgentBridgeSettings, invalid: str) -> RawValue:
    """The body as one JSON document; 400 with `invalid` when it is not one."""
    raw = await _read_body(request, settings)
    try:
        return parse_json(raw)
    except DecodeError:
        raise web.HTTPBadRequest(text=f"{invalid}\n") from None


def _json_response(body: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(),
        content_type="application/json",
        headers=headers,
    )


class _McpFailed(Exception):
    """No JSON-RPC response came back from the remote service; the text says why."""


class _McpRoutes:
    """``/mcp/{peer_id}/{service}``: a remote MCP server seen through the overlay."""

    def __init__(self, requester: Requester, settings: AgentBridgeSettings, counts: ForwardCounts) -> None:
        self.requester = requester
        self.settings = settings
        self.counts = counts
        self.sessions = McpSessions()

    async def post(self, request: web.Request) -> web.StreamResponse:
        peer = request.match_info["peer_id"]
        service = request.match_info["service"]
        key = _peer_key(peer)
        try:
            message = await _read_json(request, self.settings, "invalid JSON-RPC body")
        except _BodyRefused as refused:
            return await answer_and_close(request, refused.response)
        body = message.value
        if not isinstance(body, dict):
            raise web.HTTPBadRequest(text="body must be one JSON-RPC object\n")
        method = body.get("method")
        if "id" not in body or not isinstance(method, str):
            return web.Response(status=202)
        request_id = body["id"]
        session_id = request.headers.get(SESSION_HEADER)
        if method == "initialize":
            session_id = self.sessions.mint(service, peer)
        elif session_id and not self.sessions.known(session_id):
            raise web.HTTPNotFound(text="unknown or expired MCP session\n")
        headers = carried_mcp_headers(request.headers)
        if session_id:
            headers[SESSION_HEADER] = session_id
        answer = await self._round_trip(key, service, message.text, headers, request_id)
        return _json_response(answer, {SESSION_HEADER: session_id} if session_id else None)

    async def _round_trip(
        self, key: bytes, service: str, request_text: str, headers: dict[str, str], request_id: Any
    ) -> dict[str, Any]:
        """The JSON-RPC answer for one request; delivery failures become -32603 errors."""
        try:
            answer = await self._remote_response(key, encode_mcp_request(service, request_text, headers))
        except _McpFailed as failure:
            self.counts.record(failed=True)
            return error_response(request_id, str(failure))
        self.counts.record(failed=False)
        return rekeyed(answer, request_id)

    async def _remote_response(self, key: bytes, envelope: bytes) -> dict[str, Any]:
        """The remote service's JSON-RPC response; _McpFailed when none came back."""
        if len(envelope) > self.settings.max_message_size:
            raise _McpFailed("message too large")
        try:
            reply_bytes = await self.requester.request(key, envelope, self.settings.mcp_timeout)
        except DeliveryTimeout:
            raise _McpFailed("timeout") from None
        except DeliveryError as exc:
            raise _McpFailed(str(exc) or type(exc).__name__) from None
        try:
            reply = parse_reply(reply_bytes)
        except DecodeError:
            raise _McpFailed("invalid response from peer") from None
        if reply.error:
            raise _McpFailed(reply.error)
        inner = reply.response.value if reply.response is not None else None
        if not is_response(inner):
            raise _McpFailed("peer returned no JSON-RPC response")
        return inner

    async def delete(self, request: web.Request) -> web.StreamResponse:
        _peer_key(request.match_info["peer_id"])
        session_id = request.headers.get(SESSION_HEADER)
        if session_id:
            self.sessions.forget(session_id)
        return web.Response(status=204)

    async def get(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPMethodNotAllowed(request.method, ["POST", "DELETE"])


_A2A_FAILURE_STATUS: list[tuple[type[DeliveryError], int]] = [
    (DeliveryTimeout, 504),
    (MessageTooLarge, 413),
    (ReceiverFull, 503),
    (PeerUnreachable, 502),
]


class _A2aRefused(Exception):
    """A failed A2A exchange, carrying the HTTP status and one-line text for the caller."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason

    def response(self) -> web.Response:
        return web.Response(status=self.status, text=f"{self.reason}\n")


def _a2a_failure(exc: DeliveryError) -> _A2aRefused:
    status = next((code for kind, code in _A2A_FAILURE_STATUS if isinstance(exc, kind)), 502)
    return _A2aRefused(status, str(exc) or type(exc).__name__)


def rewrite_agent_card(card: dict[str, Any], local_url: str) -> dict[str, Any]:
    """Point every interface of a remote card at this bridge and turn streaming off.

    The remote cannot know our port, and the envelope carries one reply, not
    an SSE stream, so a client that believed the original card would bypass
    the bridge or wait for events that never come.
    """
    rewritten = dict(card)
    for list_name in ("supportedInterfaces", "additionalInterfaces"):
        interfaces = card.get(list_name)
        if isinstance(interfaces, list):
            rewritten[list_name] = [
                {**item, "url": local_url} if isinstance(item, dict) else item for item in interfaces
            ]
    if "url" in card or "supportedInterfaces" not in card:
        rewritten["url"] = local_url
    capabilities = card.get("capabilities")
    rewritten["capabilities"] = {**(capabilities if isinstance(capabilities, dict) else {}), "streaming": False}
    return rewritten


class _A2aRoutes:
    """``/a2a/{peer_id}``: a remote A2A agent seen through the overlay."""

    def __init__(self, requester: Requester, settings: AgentBridgeSettings, counts: ForwardCounts) -> None:
        self.requester = requester
        self.settings = settings
        self.counts = counts

    async def _exchange(self, key: bytes, envelope: bytes) -> Any:
        """The remote's decoded response; _A2aRefused for every failure on the way."""
        try:
            answer = await self._remote_answer(key, envelope)
        except _A2aRefused:
            self.counts.record(failed=True)
            raise
        self.counts.record(failed=False)
        return answer

    async def _remote_answer(self, key: bytes, envelope: bytes) -> Any:
        if len(envelope) > self.settings.max_message_size:
            raise _A2aRefused(413, "message too large")
        try:
            reply_bytes = await self.requester.request(key, envelope, self.settings.a2a_timeout)
        except DeliveryError as exc:
            raise _a2a_failure(exc) from None
        try:
            reply = parse_reply(reply_bytes)
        except DecodeError:
            raise _A2aRefused(502, "invalid response from peer") from None
        if reply.error:
            raise _A2aRefused(502, reply.error)
        if reply.response is None:
            raise _A2aRefused(502, "peer returned no response")
        return reply.response.value

    async def card(self, request: web.Request) -> web.StreamResponse:
        peer = request.match_info["peer_id"]
        key = _peer_key(peer)
        try:
            card = await self._exchange(key, encode_a2a_request(None, None))
        except _A2aRefused as refused:
            return refused.response()
        if not isinstance(card, dict):
            return web.Response(status=502, text="remote agent card is not a JSON object\n")
        return _json_response(rewrite_agent_card(card, f"http://{request.host}/a2a/{peer}"))

    async def post(self, request: web.Request) -> web.StreamResponse:
        key = _peer_key(request.match_info["peer_id"])
        try:
            message = await _read_json(request, self.settings, "invalid JSON body")
        except _BodyRefused as refused:
            return await answer_and_close(request, refused.response)
        version = request.headers.get(A2A_VERSION_HEADER) or a2a_version_for(message.value)
        headers = {A2A_VERSION_HEADER: version} if version else {}
        try:
            answer = await self._exchange(key, encode_a2a_request(message.text, headers))
        except _A2aRefused as refused:
            return refused.response()
        if isinstance(answer, dict) and isinstance(message.value, dict) and "id" in message.value:
            answer = rekeyed(answer, message.value["id"])
        return _json_response(answer)


def add_agent_routes(app: web.Application, requester: Requester, settings: AgentBridgeSettings,
                     counts: AdapterCounts) -> None:
    """Register the ``/mcp`` and ``/a2a`` routes on the bridge application."""
    mcp = _McpRoutes(requester, settings, counts.mcp_out)
    a2a = _A2aRoutes(requester, settings, counts.a2a_out)
    mcp_path = "/mcp/{peer_id}/{service:.+}"
    early = refuse_oversized_early(settings.max_message_size)
    app.router.add_post(mcp_path, mcp.post, expect_handler=early)
    app.router.add_delete(mcp_path, mcp.delete)
    app.router.add_get(mcp_path, mcp.get, allow_head=False)
    for path in ("/a2a/{peer_id}", "/a2a/{peer_id}/"):
        app.router.add_get(path, a2a.card, allow_head=False)
        app.router.add_post(path, a2a.post, expect_handler=early)
    for card_name in ("agent-card.json", "agent.json"):
        app.router.add_get(f"/a2a/{{peer_id}}/.well-known/{card_name}", a2a.card, allow_head=False)
