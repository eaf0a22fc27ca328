"""Serving the bridge application on bridge_addr:api_port."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from axl.adapters import AgentBridgeSettings
from axl.bridge.app import BridgeNode, ClientWatch, build_app
from axl.config import NodeConfig
from axl.observe.web import ACCESS_LOG, OBSERVATORY

log = logging.getLogger("axl.bridge")

HEADER_END = b"\r\n\r\n"
# Idle keep-alive connections are closed after this long (aiohttp's default is an hour).
KEEPALIVE_TIMEOUT = 75.0
HANDLER_STOP_TIMEOUT = 2.0
"""A stopping bridge cancels the handlers still running after this long (an
event stream, an agent call); long polls and /ws end at once, on their own."""


class HeaderDeadline(asyncio.Protocol):
    """aiohttp's protocol, plus a deadline on a connection's first request headers
    and a note to the ClientWatch when the connection opens and closes.

    aiohttp times out neither a client that never finishes its headers nor
    one that sends nothing, so each would hold a connection (and a file
    descriptor) for ever. Bodies have their own deadline (axl.httpbody) and
    idle keep-alive connections aiohttp's keepalive timeout.
    """

    def __init__(self, inner: Any, timeout: float, clients: ClientWatch) -> None:
        self.inner = inner
        self.timeout = timeout
        self.clients = clients
        self._timer: asyncio.TimerHandle | None = None
        self._tail = b""
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self._timer = asyncio.get_running_loop().call_later(self.timeout, transport.close)
        self.clients.opened(transport)
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._timer is not None:
            seen = self._tail + data
            if HEADER_END in seen:
                self._cancel()
            else:
                self._tail = seen[-(len(HEADER_END) - 1):]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        self.clients.closed(self.transport)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class BridgeServer:
    def __init__(self, node: BridgeNode, config: NodeConfig) -> None:
        self.node = node
        self.config = config
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        """Bind and serve; an address in use raises OSError."""
        clients = ClientWatch()
        app = build_app(self.node, AgentBridgeSettings(
            mcp_timeout=float(self.config.mcp_timeout_secs),
            a2a_timeout=float(self.config.a2a_timeout_secs),
            max_message_size=self.config.max_message_size,
            body_timeout=float(self.config.conn_read_timeout_secs),
        ), clients)
        self._runner = web.AppRunner(app, access_log=ACCESS_LOG,
                                     access_log_class=app[OBSERVATORY].recorder, handle_signals=False,
                                     keepalive_timeout=KEEPALIVE_TIMEOUT,
                                     shutdown_timeout=HANDLER_STOP_TIMEOUT)
        await self._runner.setup()
        handler_factory = self._runner.server
        timeout = float(self.config.conn_read_timeout_secs)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: HeaderDeadline(handler_factory(), timeout, clients),
            self.config.bridge_addr, self.config.api_port, reuse_address=True,
        )
        log.info("bridge listening on http://%s:%d", self.config.bridge_addr, self.config.api_port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
