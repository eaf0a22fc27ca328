"""``AsyncClient``: a node's bridge from asyncio code, on aiohttp."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from axl.client.common import (
    DEFAULT_TIMEOUT, DEFAULT_URL, DEFAULT_WINDOW, BridgeClient, BridgeError, BridgeUnreachable, Message, Operation,
    Reply, T, checked, checked_window, task_of,
)
from axl.client.stream import MessageStream, session_for


class AsyncClient(BridgeClient):
    """A node's bridge from asyncio code: ``async with AsyncClient(url) as node: ...``."""

    def __init__(self, url: str = DEFAULT_URL, *, timeout: float = DEFAULT_TIMEOUT,
                 token: str | None = None) -> None:
        super().__init__(url, timeout=timeout, token=token)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = session_for(self.bridge)
        return self._session

    async def run(self, operation: Operation[T]) -> T:
        """Perform one operation; the other methods are this with a ready-made operation."""
        call = operation.call
        url = self.url + call.path
        try:
            async with self._http().request(call.method, self.bridge.base + call.path, data=call.body,
                                             headers={**self.bridge.headers, **call.headers},
                                             timeout=aiohttp.ClientTimeout(total=call.timeout)) as response:
                reply = Reply(response.status, {k.lower(): v for k, v in response.headers.items()},
                              await response.read())
        except aiohttp.ClientConnectionError as error:
            raise BridgeUnreachable(None, f"cannot connect ({error.__class__.__name__})", url) from None
        except asyncio.TimeoutError:
            raise BridgeError(None, f"no answer within {call.timeout:g} s", url) from None
        return checked(operation, reply, url)

    async def topology(self) -> dict[str, Any]:
        """This node's key and address, its peerings and the spanning tree (``GET /topology``)."""
        return await self.run(self.operations.topology())

    async def peer_id(self) -> str:
        """This node's peer id (its public key in hex), fetched once."""
        if self._peer_id is None:
            self._peer_id = (await self.topology())["our_public_key"]
        return self._peer_id

    async def send(self, peer: str, body: bytes | str) -> None:
        """Deliver ``body`` into ``peer``'s receive queue; returns once it is there."""
        await self.run(self.operations.send(peer, body))

    async def recv(self, wait: float = 0.0) -> Message | None:
        """One message, or None when none arrived within ``wait`` seconds."""
        return await self.run(self.operations.recv(wait))

    async def messages(self, wait: float = 30.0) -> AsyncIterator[Message]:
        """Incoming messages, forever, by long-polling ``/recv`` ``wait`` seconds at a time."""
        while True:
            message = await self.recv(wait)
            if message is not None:
                yield message

    def __aiter__(self) -> AsyncIterator[Message]:
        return self.messages()

    def stream(self, *, receive: bool = False, window: int = DEFAULT_WINDOW) -> "MessageStream":
        """One ``/ws`` WebSocket for many messages: ``async with node.stream() as ws:``.

        ``await ws.send(peer, body)`` returns the message's ``Ack``; many sends may
        be under way at once. With ``receive=True`` it also takes this node's
        incoming messages, at most ``window`` of them not yet handled:
        ``async for message in ws.messages(): ...``.
        """
        return MessageStream(self._http(), self.bridge, self.operations.timeout, receive, checked_window(window))

    async def mcp(self, peer: str, service: str, method: str, params: dict[str, Any] | None = None) -> Any:
        """One JSON-RPC request to MCP ``service`` next to ``peer``; returns its ``result``."""
        return await self.run(self.operations.mcp(peer, service, method, params))

    async def list_tools(self, peer: str, service: str) -> list[dict[str, Any]]:
        return (await self.mcp(peer, service, "tools/list"))["tools"]

    async def call_tool(self, peer: str, service: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return await self.mcp(peer, service, "tools/call", {"name": name, "arguments": arguments})

    async def peers(self) -> list[dict[str, Any]]:
        """This node's peerings (``GET /peers``): configured ones, up or not, and inbound ones."""
        return await self.run(self.operations.peers())

    async def add_peer(self, uri: str) -> str:
        """Peer with ``uri`` from now on, until removed or the node stops (``POST /peers``;
        not saved in the node's config). Returns the URI as the node reads it."""
        return await self.run(self.operations.add_peer(uri))

    async def remove_peer(self, uri: str) -> str:
        """Close the peering with ``uri`` and stop dialing it (``DELETE /peers``)."""
        return await self.run(self.operations.remove_peer(uri))

    async def a2a_card(self, peer: str) -> dict[str, Any]:
        """The A2A agent card of the agent next to ``peer``."""
        return await self.run(self.operations.a2a_card(peer))

    async def a2a_send(self, peer: str, text: str) -> dict[str, Any]:
        """Send one text message to the A2A agent next to ``peer``; returns the task."""
        return task_of(await self.run(self.operations.a2a_send(peer, text)))


