"""MCP and A2A over the overlay: the bridge routes, inbound dispatch and the bundled services.

Only inbound dispatch lives at package level: the bridge routes
(``axl.adapters.bridge``) load with the bridge's full application, and the
MCP router and the A2A server are separate programs (``axl-mcp-router``,
``axl-a2a-server``) that import their optional dependencies themselves.
"""

from axl.adapters.inbound import DispatchKind, DispatchResult, DispatchSettings, InboundDispatcher

__all__ = [
    "DispatchKind",
    "DispatchResult",
    "DispatchSettings",
    "InboundDispatcher",
]
