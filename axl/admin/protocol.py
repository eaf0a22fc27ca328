"""yggdrasil 0.5's admin protocol on the wire, sans-IO (yggdrasil-go
v0.5.12 src/admin/admin.go).

A client writes JSON requests, `{"request": NAME, "arguments": {...},
"keepalive": bool}`, one after another (yggdrasilctl ends each with a
newline, but nothing requires it). Each is answered with
`{"status": "success"|"error", "error": ..., "request": <the request>,
"response": ...}`, laid out as Go's json.Encoder with a two-space indent
lays it out: yggdrasilctl prints parts of that text as they arrived. The
connection closes after an answer unless the request asked `keepalive`,
and after any request that is not JSON.

`RequestReader` cuts requests out of the bytes as they arrive, and
`render` writes an answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from axl.gojson import Raw, dumps, indent, loads

# Larger requests are refused: the biggest real one is an addPeer with a long URI.
MAX_REQUEST = 64 << 10
NOT_JSON = "Failed to find request"
NOT_A_REQUEST = "Failed to unmarshal request"
NO_NAME = "No request specified"

# Inside a value: a string (group 1 set when it is closed) or a bracket.
_SCAN = re.compile(rb'"(?:[^"\\]|\\.)*(")?|[\[\]{}]', re.S)
_SPACE = re.compile(rb"[ \t\r\n]*")
_SCALAR = re.compile(rb'[^ \t\r\n\[\]{},:"]*')


class JsonNumber(Raw):
    """A number in a request, kept as the client wrote it (so that it is
    echoed as written), and never taken for a string argument."""


@dataclass
class AdminRequest:
    """A request that parsed; `echo` is what the answer's "request" field repeats."""

    name: str
    arguments: Any
    keepalive: bool
    echo: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BadRequest:
    """Bytes that are not a request: answered with `error`, then the connection closes."""

    error: str
    echo: dict[str, Any]


def _decode(text: bytes) -> Any:
    return loads(text, parse_int=JsonNumber, parse_float=JsonNumber)


class RequestReader:
    """Requests out of a byte stream, each as soon as its JSON value is whole."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[AdminRequest | BadRequest]:
        """The requests `data` completed; after a BadRequest nothing more is read."""
        self._buffer += data
        found: list[AdminRequest | BadRequest] = []
        while True:
            start = _SPACE.match(self._buffer).end()
            end = _value_end(self._buffer, start)
            if end is None:
                self._buffer = self._buffer[start:]
                if len(self._buffer) > MAX_REQUEST:
                    found.append(BadRequest(NOT_JSON, {"request": ""}))
                return found
            text, self._buffer = self._buffer[start:end], self._buffer[end:]
            request = parse_request(text)
            found.append(request)
            if isinstance(request, BadRequest):
                self._buffer = b""
                return found


def _value_end(buffer: bytes, start: int) -> int | None:
    """Where the JSON value starting at `start` ends; None when more bytes
    are needed. A value that is not JSON ends where its container closes,
    or at its first delimiter; parsing it then says it is not JSON."""
    if start >= len(buffer):
        return None
    if buffer[start:start + 1] not in (b"{", b"[", b'"'):
        end = _SCALAR.match(buffer, start).end()
        if end == start:
            return start + 1  # a stray delimiter
        return end if end < len(buffer) else None
    depth = 0
    for match in _SCAN.finditer(buffer, start):
        token = match.group()
        if token[:1] == b'"':
            if match.group(1) is None:
                return None  # the string goes on in bytes still to come
            if depth == 0:
                return match.end()
        elif token in (b"{", b"["):
            depth += 1
        else:
            depth -= 1
            if depth <= 0:
                return match.end()
    return None


def parse_request(text: bytes) -> AdminRequest | BadRequest:
    """One JSON value as yggdrasil reads a request: field names in any case,
    the last of a repeated field winning."""
    try:
        value = _decode(text)
    except (ValueError, UnicodeDecodeError):
        return BadRequest(NOT_JSON, {"request": ""})
    if not isinstance(value, dict):
        return BadRequest(NOT_A_REQUEST, {"request": ""})
    fields = {key.lower(): item for key, item in value.items()}
    name, arguments = fields.get("request", ""), fields.get("arguments", {})
    keepalive = fields.get("keepalive", False)
    if type(name) is not str or (keepalive is not None and type(keepalive) is not bool):
        return BadRequest(NOT_A_REQUEST, {"request": ""})
    echo: dict[str, Any] = {"request": name, "arguments": arguments}
    if keepalive:
        echo["keepalive"] = True
    if not name:
        return BadRequest(NO_NAME, echo)
    return AdminRequest(name, arguments, bool(keepalive), echo)


def render(request_echo: dict[str, Any], response: Any = None, error: str | None = None) -> bytes:
    """An answer as yggdrasil writes it: `response` (a value for gojson,
    in field order) on success, or `error`."""
    answer: dict[str, Any] = {"status": "error" if error is not None else "success"}
    if error:
        answer["error"] = error
    answer["request"] = request_echo
    answer["response"] = None if error is not None else response
    return (indent(dumps(answer, sort_keys=False)) + "\n").encode()
