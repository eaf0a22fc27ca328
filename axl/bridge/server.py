"""Serving the bridge application on bridge_addr:api_port."""

from __future__ import annotations

import logging

from aiohttp import web

from axl.adapters import AgentBridgeSettings
from axl.bridge.app import BridgeNode, build_app
from axl.config import NodeConfig

log = logging.getLogger("axl.bridge")


class BridgeServer:
    def __init__(self, node: BridgeNode, config: NodeConfig) -> None:
        self.node = node
        self.config = config
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Bind and serve; an address in use raises OSError."""
        app = build_app(self.node, AgentBridgeSettings(
            mcp_timeout=float(self.config.mcp_timeout_secs),
            a2a_timeout=float(self.config.a2a_timeout_secs),
            max_message_size=self.config.max_message_size,
        ))
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.bridge_addr, self.config.api_port)
        await site.start()
        log.info("bridge listening on http://%s:%d", self.config.bridge_addr, self.config.api_port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
