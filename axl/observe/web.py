"""HTTP side of observability on the bridge: /metrics, /dashboard/ and its API.

`add_observability` hangs the routes on the bridge's full application;
the Observatory they read runs with the bridge from start-up
(axl.observe.observatory). Requests the full application serves are timed
by an access logger (`request_recorder`) its runner installs; the front
door counts its own.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from axl.observe import report
from axl.observe.events import Event
from axl.observe.httpstats import HttpStats
from axl.observe.logring import MAX_LINES
from axl.observe.observatory import Observatory

log = logging.getLogger("axl.observe")

STATIC = Path(__file__).resolve().parent / "static"
ASSETS = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
PAGE_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}
SSE_KEEPALIVE = 15.0
DEFAULT_LOG_LIMIT = 100
UNMATCHED_ROUTE = "unmatched"
ACCESS_LOG = logging.getLogger("axl.bridge.access")


class ObservatoryRoutes:
    """The dashboard's and /metrics' handlers, over one node's Observatory."""

    def __init__(self, observatory: Observatory) -> None:
        self.observatory = observatory
        self.node = observatory.node

    async def handle_metrics(self, _request: web.Request) -> web.Response:
        from axl.observe import metrics
        body, content_type = metrics.exposition(self.observatory.metrics_registry())
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def handle_page(self, _request: web.Request) -> web.Response:
        return web.Response(body=(STATIC / "index.html").read_bytes(),
                            headers={**PAGE_HEADERS, "Content-Type": "text/html; charset=utf-8"})

    @staticmethod
    def handle_asset(name: str):
        """A handler for one of the page's files (a fixed set: no path comes from the request)."""
        async def handler(_request: web.Request) -> web.Response:
            return web.Response(body=(STATIC / name).read_bytes(),
                                headers={**PAGE_HEADERS, "Content-Type": f"{ASSETS[name]}; charset=utf-8"})
        return handler

    async def handle_snapshot(self, _request: web.Request) -> web.Response:
        return _json({**report.snapshot(self.node, self.observatory.adapters, time.time()),
                      "sample_interval_secs": self.observatory.sample_interval})

    async def handle_peers(self, _request: web.Request) -> web.Response:
        return _json(report.peers(self.node))

    async def handle_topology(self, _request: web.Request) -> web.Response:
        return _json(report.topology(self.node))

    async def handle_series(self, _request: web.Request) -> web.Response:
        observatory = self.observatory
        return _json({"interval_secs": observatory.sample_interval,
                      "samples": [sample.as_json() for sample in observatory.series.samples]})

    async def handle_log_lines(self, request: web.Request) -> web.Response:
        text = request.query.get("limit", str(DEFAULT_LOG_LIMIT))
        try:
            limit = int(text)
        except ValueError:
            limit = -1
        if not 1 <= limit <= MAX_LINES:
            return web.Response(status=400, text=f"limit must be an integer between 1 and {MAX_LINES}\n")
        return _json({"lines": self.observatory.logs.recent(limit)})

    async def handle_event_stream(self, request: web.Request) -> web.StreamResponse:
        events = self.observatory.events
        queue = events.subscribe()
        if queue is None:
            return web.Response(status=503, text="too many event streams open\n")
        try:
            response = web.StreamResponse(headers={**PAGE_HEADERS, "Content-Type": "text/event-stream"})
            await response.prepare(request)
            await response.write(b"retry: 3000\n\n")
            await self._stream(queue, response)
        except ConnectionResetError:
            log.debug("event stream client went away")
        finally:
            events.unsubscribe(queue)
        return response

    async def _stream(self, queue: asyncio.Queue[Event | None], response: web.StreamResponse) -> None:
        """Write events until the hub ends this stream or the client goes away."""
        while True:
            try:
                event = await asyncio.wait_for(queue.get(), SSE_KEEPALIVE)
            except asyncio.TimeoutError:
                await response.write(b": keepalive\n\n")
                continue
            if event is None:
                return
            kind, data = event
            await response.write(f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode())


def _json(document: dict) -> web.Response:
    return web.json_response(document, headers={"Cache-Control": "no-cache"})


def request_recorder(stats: HttpStats) -> type[AbstractAccessLogger]:
    """An aiohttp access logger class that counts requests into `stats`.

    aiohttp calls a server's access logger once per request, after the
    response went out, with the seconds since the request arrived. A
    middleware doing the same put two more coroutines (it and aiohttp's
    current-app wrapper, which exists only when middlewares do) on every
    request. aiohttp makes the instance itself, hence a class per stats."""
    class RequestRecorder(AbstractAccessLogger):
        def log(self, request: web.BaseRequest, response: web.StreamResponse, seconds: float) -> None:
            stats.observe(route_of(request), response.status, seconds)
    return RequestRecorder


def route_of(request: web.BaseRequest) -> str:
    """The route template answering `request`; unmatched for a 404 or a
    request refused before routing. A malformed request is never routed:
    aiohttp's `match_info` then asserts (or, under -O, is None), and a bare
    BaseRequest has none at all."""
    try:
        match_info = getattr(request, "match_info", None)
    except AssertionError:
        match_info = None
    resource = match_info.route.resource if match_info is not None else None
    return resource.canonical if resource is not None else UNMATCHED_ROUTE


def add_observability(app: web.Application, observatory: Observatory) -> None:
    """The dashboard's and /metrics' routes; the observatory itself runs with the bridge."""
    routes = ObservatoryRoutes(observatory)
    router = app.router
    router.add_get("/metrics", routes.handle_metrics)
    router.add_get("/dashboard", routes.handle_page)
    router.add_get("/dashboard/", routes.handle_page)
    for name in ASSETS:
        router.add_get(f"/dashboard/{name}", routes.handle_asset(name))
    router.add_get("/dashboard/api/snapshot", routes.handle_snapshot)
    router.add_get("/dashboard/api/peers", routes.handle_peers)
    router.add_get("/dashboard/api/topology", routes.handle_topology)
    router.add_get("/dashboard/api/series", routes.handle_series)
    router.add_get("/dashboard/api/logs", routes.handle_log_lines)
    router.add_get("/dashboard/api/events", routes.handle_event_stream)
