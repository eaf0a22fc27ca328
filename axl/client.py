"""Python client for an AXL node's HTTP bridge.

An application talks to its own node over plain HTTP (``POST /send``,
``GET /recv``, ``GET /topology``, ``/mcp/...``, ``/a2a/...``). These classes
wrap those calls so that agents written in Python do not each re-implement
headers, long polls, timeouts and error statuses:

- ``AsyncClient``: asyncio, on aiohttp (already a dependency of the node).
- ``Client``: the same calls, blocking, on the standard library's
  http.client, for scripts and notebooks. It keeps its connection to the
  bridge open between calls (one per thread), as the async one does.

Both speak to one node; pass its bridge URL (``http://127.0.0.1:9002`` by
default). Every failure is a ``BridgeError`` carrying the HTTP status (None
when the bridge could not be reached) and the bridge's text.

Each operation is described once, as a ``Call`` (what to ask) and a parser
(what the answer means); the two clients differ only in how they carry a
``Call`` over HTTP.

For many messages, ``AsyncClient.stream()`` opens one ``GET /ws``
WebSocket (``MessageStream``): sends without an HTTP request each, many
under way at once, each answered by its ack, and optionally this node's
incoming messages pushed as they arrive. ``Client.stream()`` is the same
for blocking code (``BlockingMessageStream``, on aiohttp in a thread).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import http.client
import itertools
import json
import select
import socket
import threading
import time
import urllib.parse
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import aiohttp

from axl.budgets import WS_MAX_WINDOW

DEFAULT_URL = "http://127.0.0.1:9002"
DEFAULT_TIMEOUT = 60.0
# How much longer than the bridge's own wait an HTTP request may take.
MARGIN_SECONDS = 10.0
# /ws frames: a 32-byte peer key; deliveries start with an 8-byte message id.
KEY_BYTES = 32
ID_BYTES = 8
DEFAULT_WINDOW = 64
# A /ws connection pings this often, so a node that vanished is noticed.
HEARTBEAT_SECONDS = 30.0
# Sends a blocking /ws stream keeps unacknowledged before start_send waits
# (the node itself stops reading at 256 frames awaiting their ack).
SEND_WINDOW = 1024
# The bridge's limits (SPEC: /recv's wait, and /ws's window, WS_MAX_WINDOW): a
# value outside them is refused here, before a request, with the reason.
MAX_RECV_WAIT = 300.0
# What the bridge says when a second receiver asks; the WebSocket handshake
# gives the client the status only.
RECEIVER_TAKEN = "another /ws connection is receiving this node's messages"

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
    """One message taken from the node's receive queue.

    ``id`` is set for messages taken over ``/ws`` (``MessageStream``): the
    node's own id for the message, the same if it is delivered again.
    """

    sender: str
    body: bytes
    id: int | None = None

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


def bridge_url(url: str) -> str:
    """The bridge's base URL without a trailing slash; ValueError unless it
    is http(s)://host[:port] (without a scheme, the host would be taken
    for a path and the request would go elsewhere)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"bridge URL must be http://host:port or https://host:port, "
                         f"e.g. {DEFAULT_URL}; got {url!r}")
    return url.rstrip("/")


def _peer(peer: str) -> str:
    """A peer id as it goes in a header or a path. A malformed id of plain
    characters is the bridge's to refuse (400); one that HTTP cannot carry
    at all is refused here."""
    if not isinstance(peer, str) or not peer.isascii() or not peer.isprintable():
        raise ValueError(f"peer id must be 64 hex characters; got {peer!r}")
    return peer


def _payload(body: bytes | str) -> bytes:
    if isinstance(body, str):
        return body.encode()
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    raise TypeError(f"a message body is bytes or str, not {type(body).__name__}")


def _recv_wait(wait: float) -> float:
    if not 0 <= wait <= MAX_RECV_WAIT:  # False for NaN too
        raise ValueError(f"wait must be between 0 and {MAX_RECV_WAIT:g} seconds; got {wait!r}")
    return wait


def _window(window: int) -> int:
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= WS_MAX_WINDOW:
        raise ValueError(f"window must be an integer between 1 and {WS_MAX_WINDOW}; got {window!r}")
    return window


class Operations:
    """Every bridge operation as data; shared by the async and the blocking client."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._ids = itertools.count(1)

    def topology(self) -> Operation[dict[str, Any]]:
        return Operation(Call("GET", "/topology", MARGIN_SECONDS), _json_body)

    def send(self, peer: str, body: bytes | str) -> Operation[None]:
        call = Call("POST", "/send", self.timeout, _payload(body), {"X-Destination-Peer-Id": _peer(peer)})
        return Operation(call, _nothing)

    def recv(self, wait: float) -> Operation[Message | None]:
        wait = _recv_wait(wait)
        path = "/recv?" + urllib.parse.urlencode({"wait": f"{wait:g}"}) if wait > 0 else "/recv"
        return Operation(Call("GET", path, wait + MARGIN_SECONDS, ok=(200, 204)), _message)

    def mcp(self, peer: str, service: str, method: str, params: dict[str, Any] | None) -> Operation[Any]:
        call = Call("POST", f"/mcp/{_peer(peer)}/{urllib.parse.quote(service)}", self.timeout,
                    _json_rpc(method, params, self._ids), {"Content-Type": "application/json"})
        return Operation(call, _rpc_result)

    def a2a_card(self, peer: str) -> Operation[dict[str, Any]]:
        return Operation(Call("GET", f"/a2a/{_peer(peer)}", self.timeout), _json_body)

    def a2a_send(self, peer: str, text: str) -> Operation[dict[str, Any]]:
        message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}
        call = Call("POST", f"/a2a/{_peer(peer)}", self.timeout,
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
        self.url = bridge_url(url)
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

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    async def run(self, operation: Operation[T]) -> T:
        """Perform one operation; the other methods are this with a ready-made operation."""
        call = operation.call
        url = self.url + call.path
        try:
            async with self._http().request(call.method, url, data=call.body, headers=call.headers,
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

    def stream(self, *, receive: bool = False, window: int = DEFAULT_WINDOW) -> "MessageStream":
        """One ``/ws`` WebSocket for many messages: ``async with node.stream() as ws:``.

        ``await ws.send(peer, body)`` returns the message's ``Ack``; many sends may
        be under way at once. With ``receive=True`` it also takes this node's
        incoming messages, at most ``window`` of them not yet handled:
        ``async for message in ws.messages(): ...``.
        """
        return MessageStream(self._http(), self.url, self.operations.timeout, receive, _window(window))

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


@dataclass(frozen=True)
class Ack:
    """A message sent over ``/ws`` that is in the receiver's queue; ``number`` is
    its frame's number on the connection (1, 2, 3, ...)."""

    number: int


def _frame_key(peer: str, url: str) -> bytes:
    try:
        key = bytes.fromhex(peer)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise BridgeError(400, f"peer id must be {2 * KEY_BYTES} hex digits, not {peer!r}", url)
    return key


class MessageStream:
    """One ``/ws`` connection (``AsyncClient.stream()``): pipelined sends, each
    answered by its ack, and with ``receive`` this node's incoming messages.

    One task reads the socket: it settles each send's future from its ack and
    queues deliveries. Frames to one peer arrive in the order sent. The node
    stops reading the socket while 256 frames await their ack, so a sender that
    outruns delivery waits in ``start_send``.
    """

    def __init__(self, session: aiohttp.ClientSession, url: str, timeout: float, receive: bool,
                 window: int) -> None:
        self.url = f"{url}/ws" + (f"?recv=1&window={window}" if receive else "")
        self.timeout = timeout
        self.receive = receive
        self._session = session
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        self._sent = 0
        self._pending: dict[int, asyncio.Future[Ack]] = {}
        self._arrived: asyncio.Queue[Message | None] = asyncio.Queue()
        self._handed_out: int | None = None
        self._done: list[int] = []
        self._ended: BridgeError | None = None
        self._closing = False

    async def __aenter__(self) -> "MessageStream":
        await self.open()
        return self

    async def __aexit__(self, exc_type: type | None, *exc_info: object) -> None:
        await self.close(finished=exc_type is None)

    async def open(self) -> None:
        try:
            self._ws = await self._session.ws_connect(
                self.url, compress=0, max_msg_size=0, heartbeat=HEARTBEAT_SECONDS,
                timeout=aiohttp.ClientWSTimeout(ws_close=MARGIN_SECONDS))
        except aiohttp.WSServerHandshakeError as error:
            text = RECEIVER_TAKEN if error.status == 409 else f"the bridge refused the WebSocket ({error.status})"
            raise BridgeError(error.status, text, self.url) from None
        except aiohttp.ClientConnectionError as error:
            raise BridgeUnreachable(None, f"cannot connect ({error.__class__.__name__})", self.url) from None
        self._reader = asyncio.get_running_loop().create_task(self._read(self._ws))

    async def close(self, finished: bool = True, handled: Sequence[int] = ()) -> None:
        """Close the connection, marking the handled messages done (those of
        ``messages()``, and the ids in ``handled``). When ``finished`` (the
        ``async with`` block ended without an exception), the last message
        handed out counts as handled too, and the acks of the sends under way
        are awaited first: the node drops the frames it has not started once
        the client is gone."""
        ws, reader = self._ws, self._reader
        if ws is None or reader is None:
            return
        if self._ended is None:
            if finished:
                self._handled()
            self._done.extend(handled)
            await self._send_done(ws)
            if finished and self._pending:
                await asyncio.wait(list(self._pending.values()), timeout=self.timeout)
        self._closing = True
        await ws.close()
        await asyncio.wait({reader}, timeout=MARGIN_SECONDS)
        reader.cancel()

    # -- sending -------------------------------------------------------------

    async def start_send(self, peer: str, body: bytes | str) -> asyncio.Future[Ack]:
        """Write one message; the returned future settles with its ``Ack``, or with
        the ``BridgeError`` that ``AsyncClient.send`` would raise (502, 503, ...).
        Returns as soon as the frame is written, so many can be under way."""
        ws = self._open_socket()
        frame = _frame_key(peer, self.url) + _payload(body)
        self._sent += 1
        future: asyncio.Future[Ack] = asyncio.get_running_loop().create_future()
        self._pending[self._sent] = future
        try:
            await ws.send_bytes(frame)
        except (ConnectionError, aiohttp.ClientConnectionError):
            self._pending.pop(self._sent, None)
            raise BridgeError(None, "the /ws connection is closed", self.url) from None
        return future

    async def send(self, peer: str, body: bytes | str) -> Ack:
        """Deliver ``body`` into ``peer``'s receive queue; returns its ack once it is there."""
        future = await self.start_send(peer, body)
        try:
            return await asyncio.wait_for(future, self.timeout)
        except asyncio.TimeoutError:
            raise BridgeError(None, f"no ack within {self.timeout:g} s", self.url) from None

    def _open_socket(self) -> aiohttp.ClientWebSocketResponse:
        if self._ended is not None:
            raise self._ended
        if self._ws is None:
            raise BridgeError(None, "the /ws stream is not open (use async with)", self.url)
        return self._ws

    # -- receiving -----------------------------------------------------------

    async def messages(self) -> AsyncIterator[Message]:
        """This node's incoming messages, each with its ``id``.

        A message counts as handled, and is marked done, once the next one is
        asked for (or the ``async with`` block ends without an exception). One
        not done when the connection closes goes back to the front of the
        node's queue, for the next receiver. Ends when the stream is closed;
        raises ``BridgeError`` if the connection is lost.
        """
        if not self.receive:
            raise ValueError("open the stream with receive=True to take messages")
        while True:
            self._handled()
            batch = await self.arrivals(())
            if not batch:
                return
            for message in batch:
                self._handled()
                self._handed_out = message.id
                yield message

    async def arrivals(self, handled: Sequence[int]) -> list[Message]:
        """Mark ``handled`` done, then wait for the messages that have arrived:
        all those queued (at least one), none of them marked done; [] once the
        stream is closed (raises ``BridgeError`` if the connection was lost).
        ``messages()`` hands them out one by one; ``BlockingMessageStream``
        takes each batch across threads in one go."""
        ws = self._open_socket()
        self._done.extend(handled)
        if self._arrived.empty():
            await self._send_done(ws)
        batch = [await self._arrived.get()]
        while batch[-1] is not None and not self._arrived.empty():
            batch.append(self._arrived.get_nowait())
        if batch[-1] is not None:
            return batch
        self._arrived.put_nowait(None)
        if len(batch) > 1 or self._closing:
            return batch[:-1]
        raise self._ended or BridgeError(None, "the /ws connection closed", self.url)

    def _handled(self) -> None:
        if self._handed_out is not None:
            self._done.append(self._handed_out)
            self._handed_out = None

    async def _send_done(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        """Mark the handled messages done, all in one frame."""
        if not self._done:
            return
        ids, self._done = self._done, []
        try:
            await ws.send_str(json.dumps({"done": ids}))
        except (ConnectionError, aiohttp.ClientConnectionError):
            pass  # the node gives them back to its queue: they are delivered again

    # -- the reader ----------------------------------------------------------

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        reason = ""
        try:
            while True:
                message = await ws.receive()
                if message.type == aiohttp.WSMsgType.TEXT:
                    self._acked(json.loads(message.data))
                elif message.type == aiohttp.WSMsgType.BINARY:
                    data = message.data
                    self._arrived.put_nowait(Message(data[ID_BYTES:ID_BYTES + KEY_BYTES].hex(),
                                                     data[ID_BYTES + KEY_BYTES:],
                                                     int.from_bytes(data[:ID_BYTES], "big")))
                else:
                    if message.data == aiohttp.WSCloseCode.MESSAGE_TOO_BIG:
                        reason = (f" ({message.data}: a frame was far over the node's max_message_size, "
                                  f"so the node closed the stream)")
                    elif message.type == aiohttp.WSMsgType.CLOSE:
                        reason = f" ({message.data}: {message.extra or ''})"
                    return
        finally:
            self._end(reason)

    def _acked(self, ack: dict[str, Any]) -> None:
        future = self._pending.pop(ack["ack"], None)
        if future is None or future.done():
            return
        if ack["status"] == 200:
            future.set_result(Ack(ack["ack"]))
        else:
            future.set_exception(BridgeError(ack["status"], ack.get("error", ""), self.url))

    def _end(self, reason: str) -> None:
        """The connection is gone: sends without an ack have an unknown fate."""
        self._ended = BridgeError(None, f"the /ws connection closed{reason}", self.url)
        unknown = BridgeError(None, f"the /ws connection closed{reason} before the ack; the message "
                                    f"may or may not have been delivered", self.url)
        for future in self._pending.values():
            if not future.done():
                future.set_exception(unknown)
        self._pending.clear()
        self._arrived.put_nowait(None)


class BlockingMessageStream:
    """``Client.stream()``: a ``MessageStream`` for blocking code, used as
    ``with node.stream() as ws:``, with the same methods, not awaited.

    The WebSocket needs a reader while the caller does something else (acks
    arrive for sends under way, messages are pushed), so it lives on an event
    loop in a thread of the stream's own; each method hands its work to that
    loop and waits for the result. Ctrl-C while waiting cancels that work.
    """

    def __init__(self, url: str, timeout: float, receive: bool, window: int) -> None:
        self.url = url
        self.timeout = timeout
        self.receive = receive
        self.window = window
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._session: aiohttp.ClientSession | None = None
        self._stream: MessageStream | None = None
        self._room = threading.BoundedSemaphore(SEND_WINDOW)
        self._lock = threading.Lock()
        self._outgoing: collections.deque[tuple[str, bytes | str, concurrent.futures.Future[Ack]]] = \
            collections.deque()
        self._writing = False
        self._writer: asyncio.Task[None] | None = None
        self._handed_out: int | None = None
        self._handled: list[int] = []

    def __enter__(self) -> "BlockingMessageStream":
        self.open()
        return self

    def __exit__(self, exc_type: type | None, *exc_info: object) -> None:
        self.close(finished=exc_type is None)

    def open(self) -> None:
        loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="axl-client-stream", daemon=True)
        self._thread.start()
        self._loop = loop
        try:
            self._call(self._open(), self.timeout)
        except BaseException:
            self._stop_loop()
            raise

    async def _open(self) -> None:
        self._session = aiohttp.ClientSession()
        self._stream = MessageStream(self._session, self.url, self.timeout, self.receive, self.window)
        try:
            await self._stream.open()
        except BaseException:
            await self._session.close()
            raise

    def close(self, finished: bool = True) -> None:
        """As ``MessageStream.close``; then the stream's thread ends."""
        if self._loop is None:
            return
        if finished:
            self._mark_handled()
        handled, self._handled = self._handled, []
        try:
            self._call(self._close(finished, handled))
        finally:
            self._stop_loop()

    async def _close(self, finished: bool, handled: list[int]) -> None:
        assert self._stream is not None and self._session is not None
        try:
            if self._writer is not None:
                await self._writer
            await self._stream.close(finished, handled)
        finally:
            await self._session.close()

    def start_send(self, peer: str, body: bytes | str) -> concurrent.futures.Future[Ack]:
        """Queue one message; the returned future's ``result()`` is its ``Ack``,
        or raises what ``send`` raises. Messages leave in the order queued; with
        SEND_WINDOW of them unacknowledged, this waits (``timeout`` at most)
        for room."""
        self._open_stream()
        _frame_key(peer, self.url)
        body = _payload(body)
        if not self._room.acquire(timeout=self.timeout):
            raise BridgeError(None, f"no room to send within {self.timeout:g} s", self.url)
        outcome: concurrent.futures.Future[Ack] = concurrent.futures.Future()
        outcome.set_running_or_notify_cancel()  # settled by the ack alone
        outcome.add_done_callback(lambda _: self._room.release())
        with self._lock:
            self._outgoing.append((peer, body, outcome))
            idle, self._writing = not self._writing, True
        if idle:
            self._running_loop().call_soon_threadsafe(self._start_writer)
        return outcome

    def send(self, peer: str, body: bytes | str) -> Ack:
        """Deliver ``body`` into ``peer``'s receive queue; returns its ack once it is there."""
        outcome = self.start_send(peer, body)
        try:
            return outcome.result(self.timeout)
        except concurrent.futures.TimeoutError:
            raise BridgeError(None, f"no ack within {self.timeout:g} s", self.url) from None

    def _start_writer(self) -> None:
        self._writer = self._running_loop().create_task(self._write_queued())

    async def _write_queued(self) -> None:
        """Write what the callers queued, in order, until nothing is left
        (one wake-up of the loop for a burst of sends, not one for each)."""
        stream = self._open_stream()
        while True:
            with self._lock:
                if not self._outgoing:
                    self._writing = False
                    return
                batch = list(self._outgoing)
                self._outgoing.clear()
            for index, (peer, body, outcome) in enumerate(batch):
                try:
                    acked = await stream.start_send(peer, body)
                except asyncio.CancelledError:
                    with self._lock:  # left for _stop_loop to fail
                        self._outgoing.extendleft(reversed(batch[index:]))
                    raise
                except Exception as error:
                    outcome.set_exception(error)
                else:
                    acked.add_done_callback(functools.partial(_copy_outcome, outcome))

    def messages(self) -> Iterator[Message]:
        """This node's incoming messages, as ``MessageStream.messages``: one
        counts as handled once the next one is asked for (or the ``with``
        block ends without an exception). They are fetched a batch at a time
        (all that have arrived), and marked done a batch at a time."""
        stream = self._open_stream()
        if not self.receive:
            raise ValueError("open the stream with receive=True to take messages")
        fetched: collections.deque[Message] = collections.deque()
        while True:
            self._mark_handled()
            if not fetched:
                handled, self._handled = self._handled, []
                try:
                    fetched.extend(self._call(stream.arrivals(handled)))
                except concurrent.futures.CancelledError:
                    return  # closed from another thread
                if not fetched:
                    return
            message = fetched.popleft()
            self._handed_out = message.id
            yield message

    def _mark_handled(self) -> None:
        if self._handed_out is not None:
            self._handled.append(self._handed_out)
            self._handed_out = None

    def _open_stream(self) -> MessageStream:
        if self._stream is None or self._loop is None:
            raise BridgeError(None, "the /ws stream is not open (use with)", self.url)
        return self._stream

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None
        return self._loop

    def _call(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``work`` on the stream's loop and wait for it (it is cancelled
        if the wait is interrupted or times out)."""
        future = asyncio.run_coroutine_threadsafe(work, self._running_loop())
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            if future.done():
                raise  # the work's own
            future.cancel()
            raise BridgeError(None, f"no answer within {timeout:g} s", self.url) from None
        except BaseException:
            future.cancel()
            raise

    def _stop_loop(self) -> None:
        """End the thread, leaving no caller waiting: the loop's work is
        cancelled, and sends never written fail."""
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(_cancel_other_tasks(), loop).result(MARGIN_SECONDS)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(MARGIN_SECONDS)
            loop.close()
            unsent = BridgeError(None, "the /ws stream closed before the message was written", self.url)
            with self._lock:
                while self._outgoing:
                    self._outgoing.popleft()[2].set_exception(unsent)


async def _cancel_other_tasks() -> None:
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


def _copy_outcome(target: concurrent.futures.Future[T], source: asyncio.Future[T]) -> None:
    if source.cancelled():
        target.cancel()
    elif source.exception() is not None:
        target.set_exception(source.exception())
    else:
        target.set_result(source.result())


# A kept connection idle this long is not used again: the bridge closes idle
# ones after 75 s, and a request must not meet a close on its way in.
REUSE_SECONDS = 30.0


@dataclass(eq=False)
class _Kept:
    """A connection to the bridge kept open between calls, and when it was last used
    (compared and hashed by identity: the client keeps a weak set of them)."""

    connection: http.client.HTTPConnection
    used: float

    def reusable(self) -> bool:
        """Still fresh, and the bridge has not closed it: a socket with
        something to read between answers has an end of file (or junk) on it."""
        sock = self.connection.sock
        if sock is None or time.monotonic() - self.used > REUSE_SECONDS:
            return False
        poller = select.poll()  # not select.select: it refuses descriptors from 1024 on
        poller.register(sock, select.POLLIN)
        return not poller.poll(0)


class Client:
    """A node's bridge from blocking code, on the standard library's
    http.client (``stream()`` aside): ``with Client(url) as node: ...``.

    Each thread keeps one connection to the bridge open between calls (a new
    connection per call costs the client and the node more than a small
    message does); ``close()``, or leaving the ``with`` block, closes every
    thread's. A thread's connection also closes when the thread ends."""

    def __init__(self, url: str = DEFAULT_URL, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.url = bridge_url(url)
        self.operations = Operations(timeout)
        self._peer_id: str | None = None
        parts = urllib.parse.urlsplit(self.url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port
        self._prefix = parts.path
        self._local = threading.local()
        # Weak, so that a connection goes with its thread's locals when the thread ends.
        self._every_kept: weakref.WeakSet[_Kept] = weakref.WeakSet()
        self._every_kept_lock = threading.Lock()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections of every thread; a later call opens a new one
        (a call under way in another thread fails with BridgeUnreachable)."""
        self._local.kept = None
        with self._every_kept_lock:
            every = list(self._every_kept)
            self._every_kept.clear()
        for kept in every:
            if kept.connection.sock is not None:
                # A call blocked reading in another thread wakes now, and
                # fails; close() alone would leave it waiting.
                with contextlib.suppress(OSError):
                    kept.connection.sock.shutdown(socket.SHUT_RDWR)
            kept.connection.close()

    def _drop_kept(self) -> None:
        """Close the calling thread's connection, which must not serve another call."""
        kept: _Kept | None = getattr(self._local, "kept", None)
        self._local.kept = None
        if kept is not None:
            with self._every_kept_lock:
                self._every_kept.discard(kept)
            kept.connection.close()

    def run(self, operation: Operation[T]) -> T:
        """Perform one operation; the other methods are this with a ready-made operation."""
        call = operation.call
        url = self.url + call.path
        try:
            reply = self._exchange(call)
        except TimeoutError:
            self._drop_kept()
            raise BridgeError(None, f"no answer within {call.timeout:g} s", url) from None
        except (OSError, http.client.HTTPException) as error:
            self._drop_kept()
            raise BridgeUnreachable(None, f"cannot connect ({error})", url) from None
        except BaseException:
            # Interrupted (Ctrl-C) or refused before sending: the connection may
            # hold a half-sent request or a long poll still waiting, which would
            # take a message for nobody. It must not serve another call.
            self._drop_kept()
            raise
        return _checked(operation, reply, url)

    def _exchange(self, call: Call) -> Reply:
        """One request and its whole answer, on this thread's kept connection
        (opened again when it has gone stale) or a new one."""
        kept: _Kept | None = getattr(self._local, "kept", None)
        if kept is None or not kept.reusable():
            if kept is not None:
                kept.connection.close()
            kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            kept = self._local.kept = _Kept(kind(self._host, self._port, timeout=call.timeout), 0.0)
            with self._every_kept_lock:
                self._every_kept.add(kept)
        connection = kept.connection
        connection.timeout = call.timeout
        if connection.sock is not None:
            connection.sock.settimeout(call.timeout)
        connection.request(call.method, self._prefix + call.path, body=call.body, headers=call.headers)
        response = connection.getresponse()
        reply = Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
        if response.will_close:
            self._drop_kept()
        else:
            kept.used = time.monotonic()
        return reply

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

    def stream(self, *, receive: bool = False, window: int = DEFAULT_WINDOW) -> BlockingMessageStream:
        """One ``/ws`` WebSocket for many messages, as ``AsyncClient.stream()``:
        ``with node.stream() as ws: ws.send(peer, body)``. Its connection is
        its own (aiohttp, on an event loop in a thread of the stream's)."""
        return BlockingMessageStream(self.url, self.operations.timeout, receive, _window(window))

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
