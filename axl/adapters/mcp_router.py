"""The MCP router: one local HTTP service that fans ``/route`` calls out to MCP servers.

A node with ``router_addr`` set POSTs every inbound MCP envelope here. The
router speaks the Go node's router protocol (register, deregister, services,
health, route, and always a ``response`` field in the answer) and adds what
the official MCP servers need to work in every mode: the ``Accept`` header,
event-stream answers turned into JSON, errors re-keyed to the request id,
the modern-era headers re-applied, and upstream sessions mapped per caller.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from axl.adapters.envelopes import RawValue, go_struct_fields, parse_json
from axl.adapters.jsonrpc import (
    SESSION_HEADER,
    carried_mcp_headers,
    clean_header_value,
    derived_mcp_headers,
    is_error_response,
    is_response,
    rekeyed,
    request_id_of,
    session_header,
)
from axl.adapters.runtime import configure_logging, run_until_signalled, service_parser
from axl.adapters.sse import SseDecoder
from axl.wire import DecodeError

log = logging.getLogger(__name__)

DEFAULT_PORT = 9003
DEFAULT_TIMEOUT = 30.0
MAX_RESPONSE_SIZE = 16 * 1024 * 1024
MAX_UPSTREAM_SESSIONS = 4096
ACCEPT = "application/json, text/event-stream"

SessionKey = tuple[str, str, str]


@dataclass
class Service:
    endpoint: str
    registered_at: str
    healthy: bool = True

    def as_json(self) -> dict[str, Any]:
        return {"endpoint": self.endpoint, "registered_at": self.registered_at, "healthy": self.healthy}


@dataclass
class RouteOutcome:
    """The router's answer: ``{"response", "error"}`` and the HTTP status to send it with."""

    response: Any = None
    error: str | None = None
    status: int = 200

    def as_json(self) -> dict[str, Any]:
        return {"response": self.response, "error": self.error}


@dataclass
class UpstreamSessions:
    """(caller peer, service, bridge session) -> the MCP server's own ``Mcp-Session-Id``.

    Stateful servers refuse requests without the session they issued on
    ``initialize``; callers on other nodes never see that id, so the router
    keeps it for them. Callers without a bridge session (Go nodes) share
    one mapping per peer and service.
    """

    capacity: int = MAX_UPSTREAM_SESSIONS
    _ids: OrderedDict[SessionKey, str] = field(default_factory=OrderedDict)

    def get(self, key: SessionKey) -> str | None:
        upstream = self._ids.get(key)
        if upstream is not None:
            self._ids.move_to_end(key)
        return upstream

    def put(self, key: SessionKey, upstream: str) -> None:
        self._ids[key] = upstream
        self._ids.move_to_end(key)
        while len(self._ids) > self.capacity:
            self._ids.popitem(last=False)

    def forget(self, key: SessionKey) -> None:
        self._ids.pop(key, None)

    def forget_service(self, service: str) -> None:
        for key in [key for key in self._ids if key[1] == service]:
            del self._ids[key]


def _first_response(events: list[str], request_id: Any) -> dict[str, Any] | None:
    """The JSON-RPC answer among event-stream data; notifications and pings are skipped."""
    for data in events:
        try:
            message = parse_json(data.encode()).value
        except DecodeError:
            continue
        if is_response(message):
            return rekeyed(message, request_id) if is_error_response(message) else message
    return None


def _json_answer(body: RawValue, status: int, request_id: Any) -> RouteOutcome:
    """An ``application/json`` upstream answer at any status."""
    message = body.value
    if is_error_response(message):
        if status >= 400 or message.get("id") is None or message.get("id") != request_id:
            message = rekeyed(message, request_id)
        return RouteOutcome(response=message)
    if status >= 400:
        return RouteOutcome(error=f"Service error: {status}", status=502)
    return RouteOutcome(response=message)


async def _read_bounded(content: aiohttp.StreamReader, limit: int) -> bytes | None:
    """The whole body, or None once it passes `limit` bytes. (`read(n)`
    returns what has arrived so far, at most n: part of a large answer.)"""
    parts: list[bytes] = []
    size = 0
    async for chunk in content.iter_any():
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
    return b"".join(parts)


class McpRouter:
    """Registry, session map and the HTTP forwarding of ``/route``."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.timeout = timeout
        self.services: dict[str, Service] = {}
        self.sessions = UpstreamSessions()
        self._http: aiohttp.ClientSession | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_RESPONSE_SIZE + 64 * 1024)
        app.router.add_post("/route", self.handle_route)
        app.router.add_post("/register", self.handle_register)
        app.router.add_delete("/register/{service}", self.handle_deregister)
        app.router.add_get("/services", self.handle_services)
        app.router.add_get("/health", self.handle_health)
        app.on_cleanup.append(self._close)
        return app

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        return self._http

    async def _close(self, _app: web.Application) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def handle_register(self, request: web.Request) -> web.Response:
        try:
            body = parse_json(await request.read()).value
        except DecodeError as exc:
            return web.json_response({"error": str(exc)}, status=400)  # "invalid JSON: ..."
        name = body.get("service") if isinstance(body, dict) else None
        endpoint = body.get("endpoint") if isinstance(body, dict) else None
        if not isinstance(name, str) or not name or not isinstance(endpoint, str) or not endpoint:
            return web.json_response({"error": "Both 'service' and 'endpoint' are required"}, status=400)
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return web.json_response({"error": "endpoint must be an http:// or https:// URL with a host"},
                                     status=400)
        self.services[name] = Service(endpoint, datetime.now(timezone.utc).isoformat())
        self.sessions.forget_service(name)
        log.info("registered service %s -> %s", name, endpoint)
        return web.json_response({"status": "registered", "service": name})

    async def handle_deregister(self, request: web.Request) -> web.Response:
        name = request.match_info["service"]
        if self.services.pop(name, None) is None:
            return web.json_response({"error": f"Service not found: {name}"}, status=404)
        self.sessions.forget_service(name)
        log.info("deregistered service %s", name)
        return web.json_response({"status": "deregistered", "service": name})

    async def handle_services(self, _request: web.Request) -> web.Response:
        return web.json_response({name: svc.as_json() for name, svc in self.services.items()})

    async def handle_health(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "service_count": len(self.services)})

    async def handle_route(self, request: web.Request) -> web.Response:
        outcome = await self.route(await request.read())
        return web.json_response(outcome.as_json(), status=outcome.status)

    async def route(self, raw: bytes) -> RouteOutcome:
        """Forward one ``{"service","request","from_peer_id","headers"?}`` call to its server."""
        try:
            fields = go_struct_fields(
                raw, {"service": str, "request": object, "from_peer_id": str, "headers": object}
            )
        except DecodeError as exc:
            return RouteOutcome(error=f"Invalid JSON: {exc}", status=400)
        name = fields["service"].value if "service" in fields else ""
        if not name:
            return RouteOutcome(error="Missing 'service' field", status=400)
        service = self.services.get(name)
        if service is None:
            log.warning("route for unknown service %s", name)
            return RouteOutcome(error=f"Service not found: {name}", status=404)
        request = fields.get("request") or RawValue("null", None)
        from_peer = fields["from_peer_id"].value if "from_peer_id" in fields else "unknown"
        carried = fields["headers"].value if "headers" in fields else {}
        carried = carried if isinstance(carried, dict) else {}
        carried = {k: v for k, v in carried.items() if isinstance(k, str) and isinstance(v, str)}
        key: SessionKey = (from_peer, name, session_header(carried) or "")
        return await self._forward(name, service, request, key, self._upstream_headers(name, request, from_peer, carried))

    def _upstream_headers(
        self, name: str, request: RawValue, from_peer: str, carried: dict[str, str]
    ) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": ACCEPT,
            "X-From-Peer-Id": clean_header_value(from_peer) or "unknown",
            "X-Service": clean_header_value(name) or "",
        }
        headers.update(carried_mcp_headers(carried) or derived_mcp_headers(request.value))
        return headers

    async def _forward(
        self, name: str, service: Service, request: RawValue, key: SessionKey, headers: dict[str, str]
    ) -> RouteOutcome:
        request_id = request_id_of(request.value)
        initializing = isinstance(request.value, dict) and request.value.get("method") == "initialize"
        upstream_session = None if initializing else self.sessions.get(key)
        if upstream_session:
            headers[SESSION_HEADER] = upstream_session
        log.info("routing %s request from peer %s", name, key[0][:16])
        try:
            async with self._client().post(service.endpoint, data=request.text.encode(), headers=headers) as resp:
                if initializing and resp.headers.get(SESSION_HEADER):
                    self.sessions.put(key, resp.headers[SESSION_HEADER])
                if resp.status == 404 and upstream_session:
                    self.sessions.forget(key)
                outcome = await self._read_answer(resp, request_id)
        except TimeoutError:
            log.error("timeout forwarding to %s", name)
            service.healthy = False
            return RouteOutcome(error="Service timeout", status=504)
        except aiohttp.ClientError as exc:
            log.error("cannot reach service %s at %s: %s", name, service.endpoint, exc)
            service.healthy = False
            return RouteOutcome(error=f"Service unreachable at {service.endpoint}: {exc}", status=502)
        service.healthy = outcome.status < 500 or outcome.response is not None
        return outcome

    async def _read_answer(self, resp: aiohttp.ClientResponse, request_id: Any) -> RouteOutcome:
        if resp.status in (202, 204):
            return RouteOutcome()
        if resp.content_type == "text/event-stream":
            return await self._read_event_stream(resp, request_id)
        body = await _read_bounded(resp.content, MAX_RESPONSE_SIZE)
        if body is None:
            return RouteOutcome(error="Service response too large", status=502)
        try:
            parsed = parse_json(body)
        except DecodeError:
            return RouteOutcome(error=f"Service error: {resp.status} (non-JSON answer)", status=502)
        return _json_answer(parsed, resp.status, request_id)

    async def _read_event_stream(self, resp: aiohttp.ClientResponse, request_id: Any) -> RouteOutcome:
        """Read events until the first JSON-RPC answer; the stream may stay open after it."""
        decoder = SseDecoder(MAX_RESPONSE_SIZE)
        try:
            async for chunk in resp.content.iter_any():
                found = _first_response(decoder.feed(chunk), request_id)
                if found is not None:
                    return RouteOutcome(response=found)
            found = _first_response(decoder.finish(), request_id)
        except DecodeError as exc:
            return RouteOutcome(error=f"Service error: {exc}", status=502)
        if found is not None:
            return RouteOutcome(response=found)
        return RouteOutcome(error="Service sent no response in its event stream", status=502)


async def serve(host: str, port: int, timeout: float, stop: asyncio.Event) -> None:
    """Run the router until ``stop`` is set."""
    runner = web.AppRunner(McpRouter(timeout).app(), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        log.info("MCP router listening on http://%s:%d", host, port)
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = service_parser(
        "axl-mcp-router",
        "Route MCP requests arriving at an AXL node to locally registered MCP servers. "
        'Servers register with POST /register {"service", "endpoint"}; the node calls POST /route.',
        DEFAULT_PORT,
        "seconds to wait for an MCP server's answer",
    )
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    return run_until_signalled(lambda stop: serve(args.host, args.port, args.timeout, stop))


if __name__ == "__main__":
    sys.exit(main())
