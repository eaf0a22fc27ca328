"""JSON-RPC and MCP header rules shared by the bridge and the MCP router.

The official MCP clients correlate answers by ``id`` and hang on a mismatch,
and the modern (2026-07-28) MCP servers insist that a few HTTP headers agree
with the body. These helpers keep both rules in one place.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

INTERNAL_ERROR = -32603

PROTOCOL_VERSION_HEADER = "MCP-Protocol-Version"
METHOD_HEADER = "Mcp-Method"
NAME_HEADER = "Mcp-Name"
SESSION_HEADER = "Mcp-Session-Id"
PARAM_HEADER_PREFIX = "Mcp-Param-"
META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"

# Methods whose target is named by params.name (or params.uri) in the Mcp-Name header.
_NAMED_METHODS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
_CANONICAL_NAMES = {name.lower(): name for name in (PROTOCOL_VERSION_HEADER, METHOD_HEADER, NAME_HEADER)}


def error_response(request_id: Any, message: str, code: int = INTERNAL_ERROR) -> dict[str, Any]:
    """A JSON-RPC error answer for ``request_id``."""
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def is_error_response(message: Any) -> bool:
    return isinstance(message, dict) and isinstance(message.get("error"), dict) and "result" not in message


def is_response(message: Any) -> bool:
    """A JSON-RPC answer (result or error), as opposed to a request or notification."""
    return isinstance(message, dict) and "method" not in message and ("result" in message or "error" in message)


def rekeyed(message: dict[str, Any], request_id: Any) -> dict[str, Any]:
    """``message`` carrying ``request_id``: transport-level rejections arrive with a null or foreign id."""
    if message.get("id") == request_id and "id" in message:
        return message
    return {**message, "id": request_id}


def request_id_of(message: Any) -> Any:
    return message.get("id") if isinstance(message, dict) else None


def clean_header_value(value: str) -> str | None:
    """Header values from the network must not smuggle line breaks."""
    if any(ch in value for ch in "\r\n\0"):
        return None
    return value


def carried_mcp_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The request headers an MCP server needs to see, under their canonical names."""
    carried: dict[str, str] = {}
    for name, value in headers.items():
        lower = name.lower()
        canonical = _CANONICAL_NAMES.get(lower)
        if canonical is None and lower.startswith(PARAM_HEADER_PREFIX.lower()) and len(lower) > len(PARAM_HEADER_PREFIX):
            canonical = PARAM_HEADER_PREFIX + name[len(PARAM_HEADER_PREFIX):]
        clean = clean_header_value(value)
        if canonical is not None and clean is not None:
            carried[canonical] = clean
    return carried


def _header_safe(text: str) -> str:
    """Header-encode a name: plain when printable ASCII, else the ``=?base64?…?=`` form MCP uses."""
    if text.isascii() and text.isprintable():
        return text
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


def derived_mcp_headers(request: Any) -> dict[str, str]:
    """Rebuild the modern-era headers from the body, for callers (Go nodes) that dropped them.

    Only a request that declares its protocol version in ``params._meta`` is
    modern; ``Mcp-Param-*`` cannot be rebuilt without the tool's schema.
    """
    if not isinstance(request, dict):
        return {}
    params = request.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    version = meta.get(META_PROTOCOL_VERSION) if isinstance(meta, dict) else None
    method = request.get("method")
    if not isinstance(version, str) or not isinstance(method, str):
        return {}
    derived = {PROTOCOL_VERSION_HEADER: _header_safe(version), METHOD_HEADER: _header_safe(method)}
    name_field = _NAMED_METHODS.get(method)
    name = params.get(name_field) if name_field else None
    if isinstance(name, str):
        derived[NAME_HEADER] = _header_safe(name)
    return derived


def session_header(headers: Mapping[str, str]) -> str | None:
    """The carried bridge session id, matched case-insensitively."""
    for name, value in headers.items():
        if name.lower() == SESSION_HEADER.lower():
            return clean_header_value(value)
    return None
