"""How many MCP and A2A requests this node carried, each way, and how many failed.

Plain integers, bumped where a request starts and where it fails, read by
/metrics and the dashboard. Outbound: this bridge's ``/mcp`` and ``/a2a``
calls to a peer; an error is an answer the bridge had to make itself (the
peer was unreachable or timed out, its adapter is off or failed). Inbound: a
peer's envelope forwarded to the local MCP router or A2A server; an error is
a reply carrying an error because that service failed or gave no usable
answer. A JSON-RPC error the remote service itself returns is an answer,
not a failure of the forwarding.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class ForwardCounts:
    requests: int = 0
    errors: int = 0

    def record(self, failed: bool) -> None:
        self.requests += 1
        self.errors += failed


@dataclass(slots=True)
class AdapterCounts:
    mcp_out: ForwardCounts = field(default_factory=ForwardCounts)
    a2a_out: ForwardCounts = field(default_factory=ForwardCounts)
    mcp_in: ForwardCounts = field(default_factory=ForwardCounts)
    a2a_in: ForwardCounts = field(default_factory=ForwardCounts)

    def as_rows(self) -> list[tuple[str, str, ForwardCounts]]:
        """(adapter, direction, counts) for each of the four."""
        return [("mcp", "out", self.mcp_out), ("a2a", "out", self.a2a_out),
                ("mcp", "in", self.mcp_in), ("a2a", "in", self.a2a_in)]
