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

from axl.budgets import ADMIN_MAX_REQUEST
from axl.gojson import Raw, dumps, indent, loads
from axl.readbuffer import ReadBuffer

NOT_JSON = "Failed to find request"
NOT_A_REQUEST = "Failed to unmarshal request"
NO_NAME = "No request specified"

# Inside a value: where a string or a bracket begins, and the rest of a string up to its closing quote.
_STRUCTURE = re.compile(rb'["\[\]{}]')
_STRING_REST = re.compile(rb'(?:[^"\\]|\\.)*', re.S)
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
    """Requests out of a byte stream, each as soon as its JSON value is whole.

    The search for a value's end resumes where the last one stopped
    (axl.readbuffer), keeping how deep in brackets it is and whether it is
    inside a string: a request trickled in byte by byte is looked through
    once."""

    def __init__(self) -> None:
        self._buffer = ReadBuffer()
        self._depth = 0
        self._in_string = False

    @property
    def pending(self) -> int:
        """Bytes of a request begun and not yet whole."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[AdminRequest | BadRequest]:
        """The requests `data` completed; after a BadRequest nothing more is read."""
        buffer = self._buffer
        buffer.append(data)
        found: list[AdminRequest | BadRequest] = []
        while True:
            buffer.skip(_SPACE.match(buffer.data, buffer.front).end() - buffer.front)
            end = self._value_end()
            if end is None:
                if len(buffer) > ADMIN_MAX_REQUEST:
                    found.append(BadRequest(NOT_JSON, {"request": ""}))
                    self._forget()
                return found
            request = parse_request(buffer.take(end - buffer.front))
            found.append(request)
            self._depth, self._in_string = 0, False
            if isinstance(request, BadRequest):
                self._forget()
                return found

    def _forget(self) -> None:
        """After a BadRequest the connection closes: nothing more is read."""
        self._buffer.skip(len(self._buffer))
        self._depth, self._in_string = 0, False

    def _value_end(self) -> int | None:
        """Where the JSON value at the front ends (an offset of the buffer's
        data); None when more bytes are needed. A value that is not JSON
        ends where its container closes, or at its first delimiter; parsing
        it then says it is not JSON."""
        buffer = self._buffer
        data, start = buffer.data, buffer.front
        if start >= len(data):
            return None
        if data[start:start + 1] not in (b"{", b"[", b'"'):
            end = _SCALAR.match(data, buffer.resume_at()).end()
            if end == start:
                return start + 1  # a stray delimiter
            buffer.looked_to(end)
            return end if end < len(data) else None
        position = buffer.resume_at()
        while True:
            if self._in_string:
                position = _STRING_REST.match(data, position).end()
                if position >= len(data) or data[position:position + 1] != b'"':
                    buffer.looked_to(position)  # a lone backslash at the end is looked at again
                    return None
                self._in_string = False
                position += 1
                if self._depth == 0:
                    return position
                continue
            bracket = _STRUCTURE.search(data, position)
            if bracket is None:
                buffer.looked_to(len(data))
                return None
            position = bracket.end()
            token = bracket.group()
            if token == b'"':
                self._in_string = True
            elif token in (b"{", b"["):
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth <= 0:
                    return position


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
