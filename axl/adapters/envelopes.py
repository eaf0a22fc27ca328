"""The JSON envelopes that carry MCP and A2A traffic between nodes.

Sans-IO: decoding, classification and encoding only. The Go node decodes
envelopes with ``encoding/json`` into structs, so classification mirrors
that decoder where a peer could tell the difference: field names match
case-insensitively (with Go's rune folding), a later duplicate key wins,
``null`` leaves a field untouched, and a value of the wrong type makes the
whole message "not an envelope". Raw JSON values (the inner request) are
kept as the exact text the sender wrote, as Go's ``json.RawMessage`` does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from json.decoder import scanstring  # type: ignore[attr-defined]  # not in typeshed
from typing import Any, Final

from axl.wire import DecodeError

_WHITESPACE = " \t\n\r"
# Non-ASCII runes that Go's encoding/json folds onto an ASCII letter.
_GO_FOLDS_TO_ASCII = {"\u017f": "S", "\u212a": "K", "\u0131": "I"}


def _reject_constant(name: str) -> Any:
    raise DecodeError(f"invalid JSON value {name}")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_STRING_OR_SPACE = re.compile(r'("(?:[^"\\]|\\.)*")|[ \t\n\r]+')


def compact(text: str) -> str:
    """Valid JSON text without insignificant whitespace, as Go re-encodes a RawMessage."""
    return _STRING_OR_SPACE.sub(lambda match: match.group(1) or "", text)


def go_fold(name: str) -> str:
    """Fold a JSON key the way Go's encoding/json does before matching a field."""
    out = []
    for char in name:
        if char.isascii():
            out.append(char.upper())
        else:
            out.append(_GO_FOLDS_TO_ASCII.get(char, char.lower()))
    return "".join(out)


@dataclass(frozen=True)
class RawValue:
    """One JSON value: its exact text and its decoded form."""

    text: str
    value: Any


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WHITESPACE:
        pos += 1
    return pos


def _decode_value(text: str, pos: int) -> tuple[RawValue, int]:
    try:
        value, end = _DECODER.raw_decode(text, pos)
    except (ValueError, RecursionError) as exc:
        # ValueError covers JSONDecodeError and Python's limit on the digits
        # of an integer (a hostile peer's 4,301-digit number).
        raise DecodeError(f"invalid JSON: {exc}") from None
    return RawValue(text[pos:end], value), end


def _expect(text: str, pos: int, char: str) -> int:
    if pos >= len(text) or text[pos] != char:
        raise DecodeError(f"invalid JSON: expected {char!r} at offset {pos}")
    return pos + 1


def _object_members(text: str) -> list[tuple[str, RawValue]]:
    """Top-level object members in order, each value with its raw text."""
    pos = _expect(text, _skip_ws(text, 0), "{")
    members: list[tuple[str, RawValue]] = []
    pos = _skip_ws(text, pos)
    if pos < len(text) and text[pos] == "}":
        pos += 1
    else:
        while True:
            pos = _expect(text, _skip_ws(text, pos), '"')
            try:
                key, pos = scanstring(text, pos, True)
            except json.JSONDecodeError as exc:
                raise DecodeError(f"invalid JSON key: {exc}") from None
            pos = _expect(text, _skip_ws(text, pos), ":")
            raw, pos = _decode_value(text, _skip_ws(text, pos))
            members.append((key, raw))
            pos = _skip_ws(text, pos)
            if pos < len(text) and text[pos] == ",":
                pos += 1
                continue
            pos = _expect(text, pos, "}")
            break
    if _skip_ws(text, pos) != len(text):
        raise DecodeError("invalid JSON: trailing data after the object")
    return members


def parse_json(payload: bytes) -> RawValue:
    """One complete JSON document, strictly (no NaN/Infinity, no trailing data)."""
    text = payload.decode("utf-8", errors="replace")
    raw, end = _decode_value(text, _skip_ws(text, 0))
    if _skip_ws(text, end) != len(text):
        raise DecodeError("invalid JSON: trailing data")
    return raw


def go_struct_fields(payload: bytes, fields: dict[str, type]) -> dict[str, RawValue]:
    """Decode ``payload`` into named fields as Go's json.Unmarshal into a struct would.

    ``fields`` maps each field's JSON name to the Python type its value must
    have (``object`` accepts any JSON value). Unknown keys are ignored, a
    ``null`` leaves the field unset, and a wrong type raises DecodeError.
    """
    text = payload.decode("utf-8", errors="replace")
    by_exact = {name: name for name in fields}
    by_folded = {go_fold(name): name for name in fields}
    found: dict[str, RawValue] = {}
    for key, raw in _object_members(text):
        name = by_exact.get(key) or by_folded.get(go_fold(key))
        if name is None or raw.value is None:
            continue
        wanted = fields[name]
        if wanted is not object and type(raw.value) is not wanted:
            raise DecodeError(f"field {name!r} has the wrong JSON type")
        found[name] = raw
    return found


@dataclass(frozen=True)
class McpEnvelope:
    """``{"service", "request", "headers"?}``: one MCP JSON-RPC message for a named service."""

    service: str
    request: RawValue | None
    headers: dict[str, str] | None = None

    @property
    def request_text(self) -> str:
        return self.request.text if self.request is not None else "null"

    @property
    def is_notification(self) -> bool:
        """True when the inner message expects no answer (no ``id`` or no ``method``)."""
        inner = self.request.value if self.request is not None else None
        return not (isinstance(inner, dict) and "id" in inner and "method" in inner)


@dataclass(frozen=True)
class A2aEnvelope:
    """``{"a2a": true, "agent_card"?, "request", "headers"?}``: an A2A call or card fetch."""

    agent_card: bool
    request: RawValue | None
    headers: dict[str, str] | None = None

    @property
    def request_text(self) -> str:
        return self.request.text if self.request is not None else "null"


def _string_headers(raw: RawValue | None) -> dict[str, str] | None:
    """The optional ``headers`` member: only string values survive; None when absent."""
    if raw is None:
        return None
    if not isinstance(raw.value, dict):
        return {}
    return {k: v for k, v in raw.value.items() if isinstance(k, str) and isinstance(v, str)}


def parse_mcp_envelope(payload: bytes) -> McpEnvelope | None:
    """The MCP envelope in ``payload``, or None if Go would not route it to MCP."""
    try:
        found = go_struct_fields(payload, {"service": str, "request": object, "headers": object})
    except DecodeError:
        return None
    service = found.get("service")
    if service is None or service.value == "":
        return None
    return McpEnvelope(service.value, found.get("request"), _string_headers(found.get("headers")))


def parse_a2a_envelope(payload: bytes) -> A2aEnvelope | None:
    """The A2A envelope in ``payload``, or None unless it decodes with ``"a2a": true``."""
    try:
        found = go_struct_fields(
            payload, {"a2a": bool, "agent_card": bool, "request": object, "headers": object}
        )
    except DecodeError:
        return None
    flag = found.get("a2a")
    if flag is None or flag.value is not True:
        return None
    card = found.get("agent_card")
    return A2aEnvelope(
        agent_card=bool(card and card.value),
        request=found.get("request"),
        headers=_string_headers(found.get("headers")),
    )


_OBJECT_START: Final = re.compile(rb"[ \t\r\n]*\{")
# The bytes that may open a JSON object: "{" itself, or JSON's white space before it.
_OBJECT_OPENERS: Final = frozenset(b" \t\r\n{")


def classify(payload: bytes, *, mcp_enabled: bool, a2a_enabled: bool) -> McpEnvelope | A2aEnvelope | None:
    """Which adapter owns an inbound message, checked in the Go node's order (MCP, then A2A).

    Only a JSON object can be an envelope: anything else (a tensor, a file)
    is refused on its first bytes instead of being decoded whole.
    """
    if not (mcp_enabled or a2a_enabled) or not _opens_object(payload):
        return None
    lowered = _lowered_if_plain(payload)
    if mcp_enabled and (lowered is None or b"service" in lowered):
        mcp = parse_mcp_envelope(payload)
        if mcp is not None:
            return mcp
    if a2a_enabled and (lowered is None or b"a2a" in lowered):
        return parse_a2a_envelope(payload)
    return None


def _opens_object(payload: bytes) -> bool:
    """Whether `payload` starts a JSON object; its first byte settles most
    (a tensor, a file), without a regular expression's call per message."""
    if not payload or payload[0] not in _OBJECT_OPENERS:
        return False
    return payload[0] == 0x7B or _OBJECT_START.match(payload) is not None


def _lowered_if_plain(payload: bytes) -> bytes | None:
    """`payload` in lower case when a key could only match a field name by
    spelling it out in ASCII: no \\u escape, no non-ASCII rune (Go folds
    some onto ASCII letters). A JSON message that is not an envelope (a
    gossip message, say) is then refused without decoding it; else None."""
    if not payload.isascii() or b"\\u" in payload:
        return None
    return payload.lower()


def dumps(value: Any) -> str:
    """Compact JSON text that refuses NaN/Infinity (Go cannot read them)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode_mcp_request(service: str, request_text: str, headers: dict[str, str] | None) -> bytes:
    """The envelope a bridge sends for ``/mcp``; ``request_text`` must be valid JSON."""
    parts = [f'{{"service":{dumps(service)},"request":{compact(request_text)}']
    if headers:
        parts.append(f',"headers":{dumps(headers)}')
    parts.append("}")
    return "".join(parts).encode()


def encode_a2a_request(request_text: str | None, headers: dict[str, str] | None) -> bytes:
    """The envelope a bridge sends for ``/a2a``; None as request means "fetch the agent card"."""
    if request_text is None:
        body = '{"a2a":true,"agent_card":true,"request":null'
    else:
        body = f'{{"a2a":true,"request":{compact(request_text)}'
    if headers:
        body += f',"headers":{dumps(headers)}'
    return (body + "}").encode()


def encode_mcp_reply(service: str, response_text: str | None, error: str | None = None) -> bytes:
    """``{"service","response","error"?}`` exactly as a Go node writes it back."""
    body = f'{{"service":{dumps(service)},"response":{compact(response_text or "null")}'
    if error:
        body += f',"error":{dumps(error)}'
    return (body + "}").encode()


def encode_a2a_reply(response_text: str | None, error: str | None = None) -> bytes:
    """``{"a2a":true,"response","error"?}`` exactly as a Go node writes it back."""
    body = f'{{"a2a":true,"response":{compact(response_text or "null")}'
    if error:
        body += f',"error":{dumps(error)}'
    return (body + "}").encode()


@dataclass(frozen=True)
class Reply:
    """A decoded reply envelope: the raw inner response and the remote's error text."""

    response: RawValue | None
    error: str = ""


def parse_reply(payload: bytes) -> Reply:
    """Decode an MCP or A2A reply envelope; DecodeError if it is not a JSON object."""
    found = go_struct_fields(payload, {"response": object, "error": str})
    error = found.get("error")
    response = found.get("response")
    return Reply(response=response, error=error.value if error is not None else "")
