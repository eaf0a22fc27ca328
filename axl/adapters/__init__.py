"""MCP and A2A over the overlay: the bridge routes, inbound dispatch and the bundled services.

Only the bridge and dispatch live at package level; the MCP router and the
A2A server are separate programs (``axl-mcp-router``, ``axl-a2a-server``)
and import their optional dependencies themselves.
"""

from axl.adapters.bridge import AgentBridgeSettings, McpSessions, Requester, add_agent_routes
from axl.adapters.inbound import DispatchKind, DispatchResult, DispatchSettings, InboundDispatcher

__all__ = [
    "AgentBridgeSettings",
    "DispatchKind",
    "DispatchResult",
    "DispatchSettings",
    "InboundDispatcher",
    "McpSessions",
    "Requester",
    "add_agent_routes",
]
