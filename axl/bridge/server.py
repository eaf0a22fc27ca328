"""Serving the bridge on bridge_addr:api_port: the front door, and the full application when first needed."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from axl.adapters.counts import AdapterCounts
from axl.bridge.api import BridgeNode, ClientWatch, ReceiverSlot
from axl.bridge.front import KEEPALIVE_TIMEOUT, BridgeConnection, FrontDoor, ProtocolFactory
from axl.bridge.guard import BridgeGuard, page_guard
from axl.bridge.streaming import STOP_CLOSE_TIMEOUT
from axl.config import NodeConfig
from axl.localsocket import bind_unix_socket, is_loopback, remove_socket
from axl.observe.observatory import Observatory

if TYPE_CHECKING:
    from axl.bridge.app import FullApplication

log = logging.getLogger("axl.bridge")

# A bridge on a UNIX socket is its owner's alone.
UNIX_SOCKET_MODE = 0o600
ANSWER_STOP_TIMEOUT = 2.0
"""How long a stopping bridge waits for the front door's answers under way
(a /send waiting for its acknowledgement), and then for the clients of /recv
answers not yet proven received to end their connections, before closing them."""


class BridgeServer:
    def __init__(self, node: BridgeNode, config: NodeConfig, adapters: AdapterCounts,
                 full_application_loaded: Callable[[], object] = lambda: None) -> None:
        self.node = node
        # called once the full application (and aiohttp with it) has loaded
        self.full_application_loaded = full_application_loaded
        self.config = config
        self.clients = ClientWatch()
        self.receiver = ReceiverSlot()
        self.observatory = Observatory(node, adapters)
        self._door = FrontDoor(node, self.clients, self.receiver, self.observatory.http,
                               float(config.conn_read_timeout_secs), self._full_application,
                               self._metrics, page_guard(config),
                               BridgeGuard(config.bridge_token) if config.bridge_token else None)
        node.budgets.add(self._door.budget_use)
        self.in_flight = self._door.in_flight
        node.budgets.add(self.in_flight.usage)
        self._server: asyncio.Server | None = None
        self._full: asyncio.Future[ProtocolFactory] | None = None
        self._full_app: FullApplication | None = None

    async def start(self) -> None:
        """Bind and serve; an address in use raises OSError."""
        loop = asyncio.get_running_loop()
        host, port, path = self.config.bridge_addr, self.config.api_port, self.config.bridge_unix_path
        try:
            if path is not None:
                sock = bind_unix_socket(path, UNIX_SOCKET_MODE)
                self._server = await loop.create_unix_server(lambda: BridgeConnection(self._door), sock=sock)
            else:
                self._server = await loop.create_server(
                    lambda: BridgeConnection(self._door), host, port, reuse_address=True)
        except socket.gaierror as exc:
            raise OSError(f"bridge_addr {host!r}: {exc.strerror}") from None
        except OSError as exc:
            if path is None:
                raise
            raise OSError(f"bridge_addr {host}: {exc.strerror or exc}") from None
        self.observatory.start()
        shown = f"[{host}]" if ":" in host else host
        log.info("bridge listening on %s", host if path is not None else f"http://{shown}:{port}")
        if path is None and not self.config.bridge_token and not is_loopback(host):
            log.warning("bridge on %s, which is not loopback, without bridge_token: anyone who reaches "
                        "port %d can send as this node and read its messages", host, port)

    def _metrics(self) -> tuple[bytes, str]:
        from axl.observe import metrics  # prometheus_client loads here, on the first scrape
        return metrics.exposition(self.observatory.metrics_registry())

    def _full_application(self) -> asyncio.Future[ProtocolFactory]:
        """The full application's protocol factory, started on the first call."""
        if self._full is None:
            self._full = asyncio.ensure_future(self._start_full_application())
        return self._full

    async def _start_full_application(self) -> ProtocolFactory:
        started = time.monotonic()
        from axl.bridge.app import FullApplication  # aiohttp loads here, on first need
        self._full_app = FullApplication(self.node, self.clients, self.receiver, self.in_flight,
                                         self.observatory, KEEPALIVE_TIMEOUT)
        factory = await self._full_app.start()
        self.full_application_loaded()
        log.info("full application loaded for the first request beyond /send, /recv, "
                 "/topology, /health and /metrics (%.0f ms)", (time.monotonic() - started) * 1000)
        return factory

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        self._server = None
        if self.config.bridge_unix_path is not None:
            remove_socket(self.config.bridge_unix_path)
        self.clients.release_all()
        self.observatory.shutdown()
        if self._full is not None:
            await asyncio.wait({self._full})
        if self._full_app is not None:
            await self._full_app.stop()
        await self._door.close_streams(STOP_CLOSE_TIMEOUT)
        deadline = time.monotonic() + ANSWER_STOP_TIMEOUT
        while self._door.busy() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        self._door.finish_all()
        while self._door.handing_over() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        self._door.close_all()
        self.observatory.cleanup()

