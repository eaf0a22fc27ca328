"""What both clients share: the bridge's address and token, errors,
messages, and every operation described as data (a ``Call`` and the
parser of its ``Reply``), so that the async and the blocking client differ
only in how they carry a ``Call`` over HTTP."""

from __future__ import annotations

import itertools
import json
import os
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

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
# (the node itself stops reading at 4,096 frames awaiting their ack).
SEND_WINDOW = 1024
# The bridge's limits (SPEC: /recv's wait, and /ws's window, WS_MAX_WINDOW): a
# value outside them is refused here, before a request, with the reason.
MAX_RECV_WAIT: Final = 300.0
# What the bridge says when a second receiver asks; the WebSocket handshake
# gives the client the status only.
RECEIVER_TAKEN = "another /ws connection is receiving this node's messages"
# The environment variable the node reads its bridge token from; the clients use it too.
TOKEN_VARIABLE = "AXL_BRIDGE_TOKEN"
UNIX_SCHEME = "unix://"
JSON_HEADERS = {"Content-Type": "application/json"}

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

    ``id`` is the node's own id for the message (``X-Message-Id`` on
    ``/recv``, the frame's first bytes over ``/ws``), the same if it is
    delivered again, so a client can drop duplicates; ``None`` from a node
    that sends none (a Go AXL node).
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
    message_id = reply.headers.get("x-message-id", "")
    return Message(reply.headers.get("x-from-peer-id", ""), reply.body,
                   int(message_id) if message_id.isdigit() else None)


def _nothing(reply: Reply, url: str) -> None:
    return None


def _peer_list(reply: Reply, url: str) -> list[dict[str, Any]]:
    return _json_body(reply, url)["peers"]


def _peer_uri(reply: Reply, url: str) -> str:
    return _json_body(reply, url)["uri"]


def _uri_body(uri: str) -> bytes:
    if not isinstance(uri, str) or not uri:
        raise ValueError(f"a peer URI is a non-empty string, e.g. tls://203.0.113.5:9001; got {uri!r}")
    return json.dumps({"uri": uri}).encode()


def _json_rpc(method: str, params: dict[str, Any] | None, ids: Iterator[int]) -> bytes:
    request: dict[str, Any] = {"jsonrpc": "2.0", "id": next(ids), "method": method}
    if params is not None:
        request["params"] = params
    return json.dumps(request).encode()


def bridge_url(url: str) -> str:
    """The bridge's base URL without a trailing slash; ValueError unless it
    is http(s)://host[:port] or unix:///path (without a scheme, the host
    would be taken for a path and the request would go elsewhere)."""
    if url.startswith(UNIX_SCHEME):
        if not url[len(UNIX_SCHEME):].startswith("/"):
            raise ValueError(f"a UNIX socket bridge is unix:///absolute/path; got {url!r}")
        return url
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"bridge URL must be http://host:port, https://host:port or unix:///path, "
                         f"e.g. {DEFAULT_URL}; got {url!r}")
    return url.rstrip("/")


@dataclass(frozen=True)
class Bridge:
    """Where a node's bridge is and what every request to it carries.

    ``url`` names it in errors; ``base`` is what request URLs start with
    (``http://localhost`` for a bridge on a UNIX socket, whose path is
    ``unix_path``); ``headers`` hold the bearer token when there is one."""

    url: str
    base: str
    unix_path: str | None
    headers: dict[str, str]


def bridge_at(url: str, token: str | None) -> Bridge:
    """The bridge at ``url``; ``token`` None means AXL_BRIDGE_TOKEN, if set."""
    url = bridge_url(url)
    token = os.environ.get(TOKEN_VARIABLE) if token is None else token
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if url.startswith(UNIX_SCHEME):
        return Bridge(url, "http://localhost", url[len(UNIX_SCHEME):], headers)
    return Bridge(url, url, None, headers)


def peer_text(peer: str) -> str:
    """A peer id as it goes in a header or a path. A malformed id of plain
    characters is the bridge's to refuse (400); one that HTTP cannot carry
    at all is refused here."""
    if not isinstance(peer, str) or not peer.isascii() or not peer.isprintable():
        raise ValueError(f"peer id must be 64 hex characters; got {peer!r}")
    return peer


def payload_bytes(body: bytes | str) -> bytes:
    if isinstance(body, str):
        return body.encode()
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    raise TypeError(f"a message body is bytes or str, not {type(body).__name__}")


def _recv_wait(wait: float) -> float:
    if not 0 <= wait <= MAX_RECV_WAIT:  # False for NaN too
        raise ValueError(f"wait must be between 0 and {MAX_RECV_WAIT:g} seconds; got {wait!r}")
    return wait


def checked_window(window: int) -> int:
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
        call = Call("POST", "/send", self.timeout, payload_bytes(body), {"X-Destination-Peer-Id": peer_text(peer)})
        return Operation(call, _nothing)

    def recv(self, wait: float) -> Operation[Message | None]:
        wait = _recv_wait(wait)
        path = "/recv?" + urllib.parse.urlencode({"wait": f"{wait:g}"}) if wait > 0 else "/recv"
        return Operation(Call("GET", path, wait + MARGIN_SECONDS, ok=(200, 204)), _message)

    def mcp(self, peer: str, service: str, method: str, params: dict[str, Any] | None) -> Operation[Any]:
        call = Call("POST", f"/mcp/{peer_text(peer)}/{urllib.parse.quote(service)}", self.timeout,
                    _json_rpc(method, params, self._ids), JSON_HEADERS)
        return Operation(call, _rpc_result)

    def peers(self) -> Operation[list[dict[str, Any]]]:
        return Operation(Call("GET", "/peers", MARGIN_SECONDS), _peer_list)

    def add_peer(self, uri: str) -> Operation[str]:
        return Operation(Call("POST", "/peers", MARGIN_SECONDS, _uri_body(uri), JSON_HEADERS), _peer_uri)

    def remove_peer(self, uri: str) -> Operation[str]:
        return Operation(Call("DELETE", "/peers", MARGIN_SECONDS, _uri_body(uri), JSON_HEADERS), _peer_uri)

    def a2a_card(self, peer: str) -> Operation[dict[str, Any]]:
        return Operation(Call("GET", f"/a2a/{peer_text(peer)}", self.timeout), _json_body)

    def a2a_send(self, peer: str, text: str) -> Operation[dict[str, Any]]:
        message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}
        call = Call("POST", f"/a2a/{peer_text(peer)}", self.timeout,
                    _json_rpc("SendMessage", {"message": message}, self._ids),
                    JSON_HEADERS)
        return Operation(call, _rpc_result)


def checked(operation: Operation[T], reply: Reply, url: str) -> T:
    if reply.status not in operation.call.ok:
        raise BridgeError(reply.status, reply.body.decode(errors="replace"), url)
    return operation.parse(reply, url)


def task_of(result: dict[str, Any]) -> dict[str, Any]:
    """SendMessage answers with a task (or a bare message); return the task when there is one."""
    return result.get("task", result) if isinstance(result, dict) else result




class BridgeClient:
    """What both clients hold: the bridge, its operations, and this node's peer id once fetched."""

    def __init__(self, url: str = DEFAULT_URL, *, timeout: float = DEFAULT_TIMEOUT,
                 token: str | None = None) -> None:
        """``url``: http(s)://host:port or unix:///path; ``token``: the bridge's
        bearer token (None: AXL_BRIDGE_TOKEN when set, else none)."""
        self.bridge = bridge_at(url, token)
        self.url = self.bridge.url
        self.operations = Operations(timeout)
        self._peer_id: str | None = None
