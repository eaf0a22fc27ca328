"""HTTP side of observability on the bridge: /metrics, /dashboard/ and its API.

`add_observability` hangs everything on the bridge application: the
routes and start/stop hooks for the sampler, the log ring and the event
hub. Requests are timed by an access logger (`Observatory.recorder`) that
the bridge's runner installs; the rest of the bridge does not know any of
it exists.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from axl.observe import report
from axl.observe.events import Event, EventHub
from axl.observe.logring import MAX_LINES, LogRing
from axl.observe.httpstats import HttpStats
from axl.observe.series import SAMPLE_INTERVAL, SeriesRing
from axl.observe.view import ObservedNode
from axl.tasks import start_task

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

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


class Observatory:
    """One node's metrics registry, series, log ring and event hub."""

    def __init__(self, node: ObservedNode, sample_interval: float = SAMPLE_INTERVAL) -> None:
        self.node = node
        self.sample_interval = sample_interval
        self.http = HttpStats()
        self.recorder = request_recorder(self.http)
        self._registry: CollectorRegistry | None = None
        self.series = SeriesRing()
        self.events = EventHub()
        self.logs = LogRing(self._log_line)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sampler: asyncio.Task | None = None

    # -- life cycle (aiohttp application signals) -------------------------

    async def start(self, _app: web.Application) -> None:
        self._loop = asyncio.get_running_loop()
        logging.getLogger("axl").addHandler(self.logs)
        self.node.stats.listeners.append(self.events.publish)
        self._sampler = start_task(self._sample_forever(), log, "dashboard sampler")

    async def shutdown(self, _app: web.Application) -> None:
        self.events.close()

    async def cleanup(self, _app: web.Application) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
        logging.getLogger("axl").removeHandler(self.logs)
        if self.events.publish in self.node.stats.listeners:
            self.node.stats.listeners.remove(self.events.publish)

    def _log_line(self, line: dict) -> None:
        """Log records may come from any thread: publish on the loop's."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.events.publish, "log", line)

    async def _sample_forever(self) -> None:
        while True:
            sample = self.series.add(report.reading(self.node, time.time()))
            if sample is not None:
                self.events.publish("sample", sample.as_json())
            await asyncio.sleep(self.sample_interval)

    # -- request accounting ----------------------------------------------

    # -- handlers --------------------------------------------------------

    async def handle_metrics(self, _request: web.Request) -> web.Response:
        """The registry is made on the first scrape: prometheus_client and the
        stdlib servers it imports cost about 1 MB resident, which a node nobody
        scrapes need not pay."""
        from axl.observe import metrics
        if self._registry is None:
            self._registry = metrics.build_registry(self.node, self.http)
        body, content_type = metrics.exposition(self._registry)
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
        return _json({**report.snapshot(self.node, time.time()),
                      "sample_interval_secs": self.sample_interval})

    async def handle_peers(self, _request: web.Request) -> web.Response:
        return _json(report.peers(self.node))

    async def handle_topology(self, _request: web.Request) -> web.Response:
        return _json(report.topology(self.node))

    async def handle_series(self, _request: web.Request) -> web.Response:
        return _json({"interval_secs": self.sample_interval,
                      "samples": [sample.as_json() for sample in self.series.samples]})

    async def handle_log_lines(self, request: web.Request) -> web.Response:
        text = request.query.get("limit", str(DEFAULT_LOG_LIMIT))
        try:
            limit = int(text)
        except ValueError:
            limit = -1
        if not 1 <= limit <= MAX_LINES:
            return web.Response(status=400, text=f"limit must be an integer between 1 and {MAX_LINES}\n")
        return _json({"lines": self.logs.recent(limit)})

    async def handle_event_stream(self, request: web.Request) -> web.StreamResponse:
        queue = self.events.subscribe()
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
            self.events.unsubscribe(queue)
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
    request refused before routing. A malformed request is never routed,
    and aiohttp's `match_info` property asserts on it, hence the attribute."""
    match_info = getattr(request, "_match_info", None)
    resource = match_info.route.resource if match_info is not None else None
    return resource.canonical if resource is not None else UNMATCHED_ROUTE


OBSERVATORY = web.AppKey("observatory", Observatory)


def add_observability(app: web.Application, node: ObservedNode) -> Observatory:
    observatory = Observatory(node)
    app[OBSERVATORY] = observatory
    app.on_startup.append(observatory.start)
    app.on_shutdown.append(observatory.shutdown)
    app.on_cleanup.append(observatory.cleanup)
    router = app.router
    router.add_get("/metrics", observatory.handle_metrics)
    router.add_get("/dashboard", observatory.handle_page)
    router.add_get("/dashboard/", observatory.handle_page)
    for name in ASSETS:
        router.add_get(f"/dashboard/{name}", observatory.handle_asset(name))
    router.add_get("/dashboard/api/snapshot", observatory.handle_snapshot)
    router.add_get("/dashboard/api/peers", observatory.handle_peers)
    router.add_get("/dashboard/api/topology", observatory.handle_topology)
    router.add_get("/dashboard/api/series", observatory.handle_series)
    router.add_get("/dashboard/api/logs", observatory.handle_log_lines)
    router.add_get("/dashboard/api/events", observatory.handle_event_stream)
    return observatory
