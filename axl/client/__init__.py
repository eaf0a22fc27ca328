"""Python client for an AXL node's HTTP bridge.

An application talks to its own node over plain HTTP (``POST /send``,
``GET /recv``, ``GET /topology``, ``/peers``, ``/mcp/...``, ``/a2a/...``).
These classes wrap those calls so that agents written in Python do not
each re-implement headers, long polls, timeouts and error statuses:

- ``AsyncClient`` (async_client.py): asyncio, on aiohttp (already a
  dependency of the node).
- ``Client`` (blocking.py): the same calls, blocking, on the standard
  library's http.client, for scripts and notebooks. It keeps its
  connection to the bridge open between calls (one per thread), as the
  async one does.
- ``MessageStream`` (stream.py): ``AsyncClient.stream()``, one ``GET /ws``
  WebSocket: sends without an HTTP request each, many under way at once,
  each answered by its ack, and optionally this node's incoming messages
  pushed as they arrive.
- ``BlockingMessageStream`` (blocking_stream.py): ``Client.stream()``, the
  same for blocking code, on aiohttp in a thread.

Each speaks to one node; pass its bridge URL (``http://127.0.0.1:9002`` by
default, or ``unix:///path`` for a bridge on a UNIX socket) and, when the
bridge has one, its token (by default AXL_BRIDGE_TOKEN). Every failure is
a ``BridgeError`` carrying the HTTP status (None when the bridge could not
be reached) and the bridge's text. Each operation is described once
(common.py), as a ``Call`` and a parser of its ``Reply``.
"""

from axl.client.async_client import AsyncClient
from axl.client.blocking import Client
from axl.client.blocking_stream import BlockingMessageStream
from axl.client.common import (
    DEFAULT_TIMEOUT, DEFAULT_URL, DEFAULT_WINDOW, Bridge, BridgeError, BridgeUnreachable, Call, Message,
    Operation, Operations, Reply, RpcError, bridge_url,
)
from axl.client.stream import Ack, MessageStream

__all__ = [
    "DEFAULT_TIMEOUT", "DEFAULT_URL", "DEFAULT_WINDOW", "Ack", "AsyncClient", "BlockingMessageStream", "Bridge",
    "BridgeError", "BridgeUnreachable", "Call", "Client", "Message", "MessageStream", "Operation", "Operations",
    "Reply", "RpcError", "bridge_url",
]
