"""HTTP/1.1 request heads and responses for the bridge's own routes, sans-IO.

The bridge answers its core routes (`POST /send`, `GET /recv`, `GET
/topology`, `GET /health`, `GET /metrics`, and the WebSocket upgrade of `GET
/ws`) itself, because a general framework's request machinery costs more
per message than the node's overlay work does. This module reads only the
plain requests those routes get; anything else it declines (`parse_head`
returns None), and the connection goes to the full application, which
handles every other form (docs/architecture.md, "The bridge").
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from email.utils import formatdate
from functools import lru_cache
from http import HTTPStatus
from typing import Final

from axl.bridge.wsframes import valid_key

HEAD_END: Final = b"\r\n\r\n"
_REQUEST_LINE = re.compile(rb"([A-Z]+) (/[!-~]*) HTTP/1\.1")
# Header lines, each ending in CRLF: a token, a colon, a value without control characters.
_HEADER_LINES = re.compile(rb"(?:[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[^\x00-\x08\x0a-\x1f\x7f]*\r\n)*")
# A client sends the same head again and again (same route, headers and body
# size): heads up to this size are parsed once, and the last CACHED_HEADS of
# them remembered (at most 128 KiB).
CACHED_HEAD_SIZE: Final = 1024
CACHED_HEADS = 128


@dataclass(init=False, slots=True)
class RequestHead:
    """A request line and what the core routes read of the headers."""

    method: str
    path: str
    query: str
    content_length: int
    keep_alive: bool
    destination: str  # X-Destination-Peer-Id, as sent ("" when absent)
    authorization: str  # the Authorization header, for the bridge token
    host: str  # the Host and Origin headers ("" when absent), for the page guard
    origin: str
    websocket_key: str  # Sec-WebSocket-Key of a WebSocket upgrade ("" for any other request)

    def __init__(self, method: str, path: str, query: str, content_length: int, keep_alive: bool,
                 destination: str, authorization: str = "", host: str = "", origin: str = "",
                 websocket_key: str = "") -> None:
        self.method = method
        self.path = path
        self.query = query
        self.content_length = content_length
        self.keep_alive = keep_alive
        self.destination = destination
        self.authorization = authorization
        self.host = host
        self.origin = origin
        self.websocket_key = websocket_key


def parse_head(head: bytes) -> RequestHead | None:
    """`read_head`, remembered for the short heads a client repeats."""
    return _read_head_cached(head) if len(head) <= CACHED_HEAD_SIZE else read_head(head)


def read_head(head: bytes) -> RequestHead | None:
    """The head (without its final blank line), or None when it is not a plain
    HTTP/1.1 request with at most one Content-Length and none of the headers
    that need the full application.

    One pass of a regular expression checks every header line, and the few
    headers the core routes read are found in the head lowered once: no
    Python loop over the headers a client sends."""
    line_end = head.find(b"\r\n")
    request_line = _REQUEST_LINE.fullmatch(head if line_end < 0 else head[:line_end])
    if request_line is None:
        return None
    block = b"\r\n" if line_end < 0 else head[line_end:] + b"\r\n"
    if _HEADER_LINES.fullmatch(block, 2) is None:
        return None
    lowered = block.lower()
    # The full application has the rules for 100-continue, chunked bodies,
    # upgrades other than a plain WebSocket one, and repeated headers.
    if (b"\r\nexpect:" in lowered or b"\r\ntransfer-encoding:" in lowered
            or lowered.count(b"\r\ncontent-length:") > 1 or lowered.count(b"\r\nhost:") > 1
            or lowered.count(b"\r\norigin:") > 1):
        return None
    websocket_key = ""
    if b"\r\nupgrade:" in lowered:
        websocket_key = _websocket_key(block, lowered)
        if not websocket_key:
            return None
    # An empty Content-Length is no length at all (not 0): the full application refuses it.
    length_text = _header(block, lowered, b"\r\ncontent-length:") if b"\r\ncontent-length:" in lowered else b"0"
    if not length_text.isdigit() or len(length_text) > 18:
        return None
    method, target = request_line[1].decode(), request_line[2].decode()
    path, _, query = target.partition("?")
    return RequestHead(method, path, query, int(length_text), not _asks_to_close(lowered),
                       _header(block, lowered, b"\r\nx-destination-peer-id:").decode("latin-1"),
                       _header(block, lowered, b"\r\nauthorization:").decode("latin-1"),
                       _header(block, lowered, b"\r\nhost:").decode("latin-1"),
                       _header(block, lowered, b"\r\norigin:").decode("latin-1"), websocket_key)


_read_head_cached = lru_cache(maxsize=CACHED_HEADS)(read_head)


def _asks_to_close(lowered: bytes) -> bool:
    """Whether a Connection header (any of them) lists the token `close`."""
    return b"close" in lowered and _lists_token(lowered, b"close")


def _lists_token(lowered: bytes, token: bytes) -> bool:
    """Whether a Connection header (any of them) lists `token` (lower case)."""
    start = lowered.find(b"\r\nconnection:")
    while start >= 0:
        start += len(b"\r\nconnection:")
        end = lowered.find(b"\r\n", start)
        if token in [listed.strip(b" \t") for listed in lowered[start:end].split(b",")]:
            return True
        start = lowered.find(b"\r\nconnection:", end)
    return False


def _websocket_key(block: bytes, lowered: bytes) -> str:
    """The Sec-WebSocket-Key of a well-formed WebSocket upgrade (RFC 6455
    4.2.1: Upgrade: websocket, a Connection listing upgrade, version 13, one
    key of 16 bytes), or "" for any other head with an Upgrade header."""
    if (lowered.count(b"\r\nupgrade:") > 1 or lowered.count(b"\r\nsec-websocket-key:") != 1
            or _header(block, lowered, b"\r\nupgrade:").lower() != b"websocket"
            or _header(block, lowered, b"\r\nsec-websocket-version:") != b"13"
            or not _lists_token(lowered, b"upgrade")):
        return ""
    key = _header(block, lowered, b"\r\nsec-websocket-key:").decode("latin-1")
    return key if valid_key(key) else ""


def _header(block: bytes, lowered: bytes, line_start: bytes) -> bytes:
    """The value of the first header line beginning `line_start` (lower case), or b""."""
    start = lowered.find(line_start)
    if start < 0:
        return b""
    start += len(line_start)
    end = block.find(b"\r\n", start)
    return block[start:end].strip(b" \t")


@dataclass(init=False, slots=True)
class Answer:
    """A whole response: status, body and the headers beyond the framing ones."""

    status: int
    body: bytes
    content_type: str | None
    headers: tuple[tuple[str, str], ...]

    def __init__(self, status: int, body: bytes = b"", content_type: str | None = None,
                 headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        self.headers = headers


def text_answer(status: int, message: str) -> Answer:
    return Answer(status, (message + "\n").encode(), "text/plain; charset=utf-8")


_STATUS_LINES: Final[dict[int, bytes]] = {
    status.value: f"HTTP/1.1 {status.value} {status.phrase}\r\n".encode() for status in HTTPStatus
}


class HttpDate:
    """The last lines of every answer's head (Date, Server, the blank line),
    formatted once per second."""

    def __init__(self) -> None:
        self._second = -1
        self._value = b""

    def now(self) -> bytes:
        second = int(time.time())
        if second != self._second:
            self._second = second
            self._value = b"Date: %s\r\nServer: axl-node\r\n\r\n" % formatdate(second, usegmt=True).encode()
        return self._value


def render_head(answer: Answer, keep_alive: bool, date_lines: bytes) -> bytes:
    """The status line and headers of `answer`, up to and with the blank line
    (`date_lines` from HttpDate.now)."""
    head = _fixed_lines(answer.status, len(answer.body), answer.content_type)
    for name, value in answer.headers:
        head += b"%s: %s\r\n" % (name.encode(), value.encode("latin-1"))
    if not keep_alive:
        head += b"Connection: close\r\n"
    return head + date_lines


@lru_cache(maxsize=CACHED_HEADS)
def _fixed_lines(status: int, length: int, content_type: str | None) -> bytes:
    """The lines of a head that the node's answers repeat (a /send's 200 with
    its size, say). An answer's own headers stay out: a /recv's carries the
    message's id, and would make each of its answers a miss that evicts another."""
    parts = [_STATUS_LINES[status]]
    if status != 204:  # a 204 has no body, and says nothing of its length (RFC 9110 8.6)
        parts.append(b"Content-Length: %d\r\n" % length)
    if content_type is not None:
        parts.append(b"Content-Type: %s\r\n" % content_type.encode())
    return b"".join(parts)
