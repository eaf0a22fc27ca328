"""``Client``: a node's bridge from blocking code, on the standard
library's http.client (``stream()`` aside)."""

from __future__ import annotations

import contextlib
import http.client
import select
import socket
import threading
import time
import urllib.parse
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from axl.client.blocking_stream import BlockingMessageStream
from axl.client.common import (
    DEFAULT_TIMEOUT, DEFAULT_URL, DEFAULT_WINDOW, BridgeClient, BridgeError, BridgeUnreachable, Call, Message,
    Operation, Reply, T, checked, checked_window, task_of,
)

# A kept connection idle this long is not used again: the bridge closes idle
# ones after 75 s, and a request must not meet a close on its way in.
REUSE_SECONDS = 30.0


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over a UNIX stream socket (a bridge on ``unix:///path``)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


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


class Client(BridgeClient):
    """A node's bridge from blocking code, on the standard library's
    http.client (``stream()`` aside): ``with Client(url) as node: ...``.

    Each thread keeps one connection to the bridge open between calls (a new
    connection per call costs the client and the node more than a small
    message does); ``close()``, or leaving the ``with`` block, closes every
    thread's. A thread's connection also closes when the thread ends."""

    def __init__(self, url: str = DEFAULT_URL, *, timeout: float = DEFAULT_TIMEOUT,
                 token: str | None = None) -> None:
        super().__init__(url, timeout=timeout, token=token)
        parts = urllib.parse.urlsplit(self.bridge.base)
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
        return checked(operation, reply, url)

    def _exchange(self, call: Call) -> Reply:
        """One request and its whole answer, on this thread's kept connection
        (opened again when it has gone stale) or a new one."""
        kept: _Kept | None = getattr(self._local, "kept", None)
        if kept is None or not kept.reusable():
            if kept is not None:
                kept.connection.close()
            kept = self._local.kept = _Kept(self._connect(call.timeout), 0.0)
            with self._every_kept_lock:
                self._every_kept.add(kept)
        connection = kept.connection
        connection.timeout = call.timeout
        if connection.sock is not None:
            connection.sock.settimeout(call.timeout)
        connection.request(call.method, self._prefix + call.path, body=call.body,
                           headers={**self.bridge.headers, **call.headers})
        response = connection.getresponse()
        reply = Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
        if response.will_close:
            self._drop_kept()
        else:
            kept.used = time.monotonic()
        return reply

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        if self.bridge.unix_path is not None:
            return UnixHTTPConnection(self.bridge.unix_path, timeout)
        kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return kind(self._host, self._port, timeout=timeout)

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
        return BlockingMessageStream(self.bridge, self.operations.timeout, receive, checked_window(window))

    def mcp(self, peer: str, service: str, method: str, params: dict[str, Any] | None = None) -> Any:
        return self.run(self.operations.mcp(peer, service, method, params))

    def list_tools(self, peer: str, service: str) -> list[dict[str, Any]]:
        return self.mcp(peer, service, "tools/list")["tools"]

    def call_tool(self, peer: str, service: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return self.mcp(peer, service, "tools/call", {"name": name, "arguments": arguments})

    def peers(self) -> list[dict[str, Any]]:
        return self.run(self.operations.peers())

    def add_peer(self, uri: str) -> str:
        return self.run(self.operations.add_peer(uri))

    def remove_peer(self, uri: str) -> str:
        return self.run(self.operations.remove_peer(uri))

    def a2a_card(self, peer: str) -> dict[str, Any]:
        return self.run(self.operations.a2a_card(peer))

    def a2a_send(self, peer: str, text: str) -> dict[str, Any]:
        return task_of(self.run(self.operations.a2a_send(peer, text)))
