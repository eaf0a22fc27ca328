"""Python client for an AXL node's HTTP bridge.

An application talks to its own node over plain HTTP (``POST /send``,
``GET /recv``, ``GET /topology``, ``/mcp/...``, ``/a2a/...``). These classes
wrap those calls so that agents written in Python do not each re-implement
headers, long polls, timeouts and error statuses:

- ``AsyncClient``: asyncio, on aiohttp (already a dependency of the node).
- ``Client``: the same calls, blocking, on the standard library's urllib,
  for scripts and notebooks.

Both speak to one node; pass its bridge URL (``http://127.0.0.1:9002`` by
default). Every failure is a ``BridgeError`` carrying the HTTP status (None
when the bridge could not be reached) and the bridge's text.

Each operation is described once, as a ``Call`` (what to ask) and a parser
(what the answer means); the two clients differ only in how they carry a
``Call`` over HTTP. A further transport (a ``/ws`` subscription for
incoming messages, say) plugs in the same way: ``messages()`` is the one
place that decides how incoming messages are fetched.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import aiohttp

DEFAULT_URL = "http://127.0.0.1:9002"
DEFAULT_TIMEOUT = 60.0
# How much longer than the bridge's own wait an HTTP request may take.
MARGIN_SECONDS = 10.0

T = TypeVar("T")


class BridgeError(Exception):
    """The bridge refused a request or could not be reached.

    ``status`` is the HTTP status (None when there was no answer) and
    ``text`` what the bridge said, so callers can branch on 502 (peer
    unreachable) versus 503 (queue full) and so on.
    """

    def __init__(self, status: int | None, text: str, url: str) -> None:
        self.status = status
        self.text = text.strip()
        self.url = url
        where = f"HTTP {status}" if status is not None else "no answer"
        super().__init__(f"{url}: {where}: {self.text}")


class BridgeUnreachable(BridgeError):
    """No HTTP answer at all: the node is not running there, or not yet."""


class RpcError(BridgeError):
    """The remote MCP server or A2A agent answered with a JSON-RPC error."""

    def __init__(self, error: dict[str, Any], url: str) -> None:
        self.code = error.get("code")
        self.data = error.get("data")
        super().__init__(200, f"JSON-RPC error {self.code}: {error.get('message', '')}", url)


@dataclass(frozen=True)
class Message:
    """One message taken from the node's receive queue."""

    sender: str
    body: bytes

    def text(self) -> str:
        return self.body.decode()

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Call:
    """One HTTP request to the bridge, described without performing it."""

    method: str
    path: str
    timeout: float
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    ok: tuple[int, ...] = (200,)


@dataclass(frozen=True)
class Reply:
    """The bridge's answer: status, headers (lower-case names) and body."""

    status: int
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Operation(Generic[T]):
    """A ``Call`` and what its reply means; both clients run the same operations."""

    call: Call
    parse: Callable[[Reply, str], T]


def _json_body(reply: Reply, url: str) -> Any:
    try:
        return json.loads(reply.body)
    except ValueError:
        raise BridgeError(reply.status, "the answer is not JSON", url) from None


def _rpc_result(reply: Reply, url: str) -> Any:
    document = _json_body(reply, url)
    if isinstance(document, dict) and "error" in document:
        raise RpcError(document["error"] if isinstance(document["error"], dict) else {}, url)
    return document.get("result") if isinstance(document, dict) else document


def _message(reply: Reply, url: str) -> Message | None:
    if reply.status == 204:
        return None
    return Message(reply.headers.get("x-from-peer-id", ""), reply.body)


def _nothing(reply: Reply, url: str) -> None:
    return None


def _json_rpc(method: str, params: dict[str, Any] | None, ids: Iterator[int]) -> bytes:
    request: dict[str, Any] = {"jsonrpc": "2.0", "id": next(ids), "method": method}
    if params is not None:
        request["params"] = params
    return json.dumps(request).encode()


class Operations:
    """Every bridge operation as data; shared by the async and the blocking client."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._ids = itertools.count(1)

    def topology(self) -> Operation[dict[str, Any]]:
        return Operation(Call("GET", "/topology", MARGIN_SECONDS), _json_body)

    def send(self, peer: str, body: bytes | str) -> Operation[None]:
        data = body.encode() if isinstance(body, str) else body
        call = Call("POST", "/send", self.timeout, data, {"X-Destination-Peer-Id": peer})
        return Operation(call, _nothing)

    def recv(self, wait: float) -> Operation[Message | None]:
        path = "/recv?" + urllib.parse.urlencode({"wait": f"{wait:g}"}) if wait > 0 else "/recv"
        return Operation(Call("GET", path, wait + MARGIN_SECONDS, ok=(200, 204)), _message)

    def mcp(self, peer: str, service: str, method: str, params: dict[str, Any] | None) -> Operation[Any]:
        call = Call("POST", f"/mcp/{peer}/{urllib.parse.quote(service)}", self.timeout,
                    _json_rpc(method, params, self._ids), {"Content-Type": "application/json"})
        return Operation(call, _rpc_result)

    def a2a_card(self, peer: str) -> Operation[dict[str, Any]]:
        return Operation(Call("GET", f"/a2a/{peer}", self.timeout), _json_body)

    def a2a_send(self, peer: str, text: str) -> Operation[dict[str, Any]]:
        message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}
        call = Call("POST", f"/a2a/{peer}", self.timeout,
                    _json_rpc("SendMessage", {"message": message}, self._ids),
                    {"Content-Type": "application/json"})
        return Operation(call, _rpc_result)


def _checked(operation: Operation[T], reply: Reply, url: str) -> T:
    if reply.status not in operation.call.ok:
        raise BridgeError(reply.status, reply.body.decode(errors="replace"), url)
    return operation.parse(reply, url)


def _task_of(result: dict[str, Any]) -> dict[str, Any]:
    """SendMessage answers with a task (or a bare message); return the task when there is one."""
    return result.get("task", result) if isinstance(result, dict) else result


class AsyncClient:
    """A node's bridge from asyncio code: ``async with AsyncClient(url) as node: ...``."""

    def __init__(self, url: str = DEFAULT_URL, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.url = url.rstrip("/")
        self.operations = Operations(timeout)
        self._session: aiohttp.ClientSession | None = None
        self._peer_id: str | None = None

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def run(self, operation: Operation[T]) -> T:
        """Perform one operation; the other methods are this with a ready-made operation."""
        call = operation.call
        url = self.url + call.path
        if self._session is None:
            self._session = aiohttp.ClientSession()
        try:
            async with self._session.request(call.method, url, data=call.body, headers=call.headers,
                                             timeout=aiohttp.ClientTimeout(total=call.timeout)) as response:
                reply = Reply(response.status, {k.lower(): v for k, v in response.headers.items()},
                              await response.read())
        except aiohttp.ClientConnectionError as error:
            raise BridgeUnreachable(None, f"cannot connect ({error.__class__.__name__})", url) from None
        except asyncio.TimeoutError:
            raise BridgeError(None, f"no answer within {call.timeout:g} s", url) from None
        return _checked(operation, reply, url)

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

    async def mcp(self, peer: str, service: str, method: str, params: dict[str, Any] | None = None) -> Any:
        """One JSON-RPC request to MCP ``service`` next to ``peer``; returns its ``result``."""
        return await self.run(self.operations.mcp(peer, service, method, params))

    async def list_tools(self, peer: str, service: str) -> list[dict[str, Any]]:
        return (await self.mcp(peer, service, "tools/list"))["tools"]

    async def call_tool(self, peer: str, service: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return await self.mcp(peer, service, "tools/call", {"name": name, "arguments": arguments})

    async def a2a_card(self, peer: str) -> dict[str, Any]:
        """The A2A agent card of the agent next to ``peer``."""
        return await self.run(self.operations.a2a_card(peer))

    async def a2a_send(self, peer: str, text: str) -> dict[str, Any]:
        """Send one text message to the A2A agent next to ``peer``; returns the task."""
        return _task_of(await self.run(self.operations.a2a_send(peer, text)))


class Client:
    """A node's bridge from blocking code, standard library only: ``with Client(url) as node: ...``."""

    def __init__(self, url: str = DEFAULT_URL, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.url = url.rstrip("/")
        self.operations = Operations(timeout)
        self._peer_id: str | None = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def run(self, operation: Operation[T]) -> T:
        """Perform one operation; the other methods are this with a ready-made operation."""
        call = operation.call
        url = self.url + call.path
        request = urllib.request.Request(url, data=call.body, headers=call.headers, method=call.method)
        try:
            with urllib.request.urlopen(request, timeout=call.timeout) as response:
                reply = Reply(response.status, {k.lower(): v for k, v in response.headers.items()},
                              response.read())
        except urllib.error.HTTPError as error:
            reply = Reply(error.code, {k.lower(): v for k, v in error.headers.items()}, error.read())
        except TimeoutError:
            raise BridgeError(None, f"no answer within {call.timeout:g} s", url) from None
        except (urllib.error.URLError, ConnectionError) as error:
            reason = getattr(error, "reason", error)
            raise BridgeUnreachable(None, f"cannot connect ({reason})", url) from None
        return _checked(operation, reply, url)

    def topology(self) -> dict[str, Any]:
        return self.run(self.operations.topology())

    def peer_id(self) -> str:
        if self._peer_id is None:
            self._peer_id = self.topology()["our_public_key"]
        return self._peer_id

    def send(self, peer: str, body: bytes | str) -> None:
        self.run(self.operations.send(peer, body))

    def recv(self, wait: float = 0.0) -> Message | None:
        return self.run(self.operations.recv(wait))

    def messages(self, wait: float = 30.0) -> Iterator[Message]:
        while True:
            message = self.recv(wait)
            if message is not None:
                yield message

    def __iter__(self) -> Iterator[Message]:
        return self.messages()

    def mcp(self, peer: str, service: str, method: str, params: dict[str, Any] | None = None) -> Any:
        return self.run(self.operations.mcp(peer, service, method, params))

    def list_tools(self, peer: str, service: str) -> list[dict[str, Any]]:
        return self.mcp(peer, service, "tools/list")["tools"]

    def call_tool(self, peer: str, service: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return self.mcp(peer, service, "tools/call", {"name": name, "arguments": arguments})

    def a2a_card(self, peer: str) -> dict[str, Any]:
        return self.run(self.operations.a2a_card(peer))

    def a2a_send(self, peer: str, text: str) -> dict[str, Any]:
        return _task_of(self.run(self.operations.a2a_send(peer, text)))
