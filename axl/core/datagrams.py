"""The Yggdrasil core's datagram layer on top of sessions (yggdrasil-go
v0.5.12 src/core/proto.go and core.go).

Every session message starts with a type byte: 1 carries an IPv6 packet,
2 a protocol message (nodeinfo or debug). Go answers nodeinfo and debug
requests from anyone, without rate limits, so this does too: the replies
are small and bounded by the core MTU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from axl.identity import NodeIdentity
from axl.wire import KEY_SIZE

TYPE_IPV6 = 0x01
IPV6_HEAD = bytes((TYPE_IPV6,))
"""What precedes an IPv6 packet in a session message (SessionManager.send's
`head`, so a 64 KiB packet is not copied just to put one byte in front)."""
TYPE_PROTO = 0x02

PROTO_NODEINFO_REQUEST = 0x01
PROTO_NODEINFO_RESPONSE = 0x02
PROTO_DEBUG = 0xFF

DEBUG_GET_SELF_REQUEST = 1
DEBUG_GET_SELF_RESPONSE = 2
DEBUG_GET_PEERS_REQUEST = 3
DEBUG_GET_PEERS_RESPONSE = 4
DEBUG_GET_TREE_REQUEST = 5
DEBUG_GET_TREE_RESPONSE = 6
DEBUG_RESPONSES = (DEBUG_GET_SELF_RESPONSE, DEBUG_GET_PEERS_RESPONSE, DEBUG_GET_TREE_RESPONSE)

CORE_MTU = 65535
MAX_NODEINFO_SIZE = 16384
# Go reserves 2 bytes for the key lists although the reply header is 3.
_KEY_LIST_OVERHEAD = 2


@dataclass(frozen=True)
class SendMessage:
    """A plaintext for SessionManager.send to `dest_key`."""

    dest_key: bytes
    message: bytes


@dataclass(frozen=True)
class DeliverIPv6:
    source_key: bytes
    packet: bytes | memoryview


@dataclass(frozen=True)
class NodeInfoReceived:
    """A nodeinfo reply: a dict when it is a JSON object, else the raw bytes."""

    key: bytes
    info: dict | bytes


@dataclass(frozen=True)
class DebugReplyReceived:
    key: bytes
    subtype: int
    payload: bytes


Action = SendMessage | DeliverIPv6 | NodeInfoReceived | DebugReplyReceived


def go_json(value: Any) -> bytes:
    """JSON as Go's encoding/json writes it: sorted map keys, no spaces,
    <, > and & escaped, and U+2028/U+2029 escaped."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                          ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return text.encode()


def nodeinfo_request() -> bytes:
    return bytes((TYPE_PROTO, PROTO_NODEINFO_REQUEST))


def debug_request(subtype: int) -> bytes:
    return _debug_header(subtype)


def _debug_header(subtype: int) -> bytes:
    return bytes((TYPE_PROTO, PROTO_DEBUG, subtype))


def _key_list(keys: list[bytes]) -> bytes:
    """Keys concatenated, cut off as Go cuts them to fit the core MTU."""
    fit = (CORE_MTU - _KEY_LIST_OVERHEAD) // KEY_SIZE
    return b"".join(keys[:fit])


class Core:
    """Sans-IO core: classifies session plaintexts and answers protocol
    requests from the routing state it is given."""

    def __init__(self, identity: NodeIdentity, nodeinfo: dict, *,
                 peer_keys: Callable[[], list[bytes]],
                 tree_keys: Callable[[], list[bytes]],
                 routing_entries: Callable[[], int]) -> None:
        encoded = go_json(nodeinfo)
        if len(encoded) > MAX_NODEINFO_SIZE:
            raise ValueError(f"nodeinfo exceeds {MAX_NODEINFO_SIZE} bytes")
        self.identity = identity
        self._nodeinfo_reply = bytes((TYPE_PROTO, PROTO_NODEINFO_RESPONSE)) + encoded
        self._peer_keys = peer_keys
        self._tree_keys = tree_keys
        self._routing_entries = routing_entries

    def handle(self, source_key: bytes, plaintext: bytes | memoryview, now: float) -> list[Action]:
        """Act on one decrypted session message; unknown types are ignored.

        An IPv6 packet is passed on as a view of `plaintext` (a 64 KiB
        segment is not copied); protocol bodies become bytes.
        `now` is accepted for symmetry with the other sans-IO layers; no
        core reply depends on time.
        """
        if not plaintext:
            return []
        if plaintext[0] == TYPE_IPV6:
            return [DeliverIPv6(source_key, memoryview(plaintext)[1:])]
        if plaintext[0] == TYPE_PROTO and len(plaintext) > 1:
            return self._handle_proto(source_key, plaintext[1], bytes(plaintext[2:]))
        return []

    def _handle_proto(self, source_key: bytes, kind: int, body: bytes) -> list[Action]:
        if kind == PROTO_NODEINFO_REQUEST:
            return [SendMessage(source_key, self._nodeinfo_reply)]
        if kind == PROTO_NODEINFO_RESPONSE:
            return [NodeInfoReceived(source_key, _parse_nodeinfo(body))]
        if kind == PROTO_DEBUG and body:
            return self._handle_debug(source_key, body[0], body[1:])
        return []

    def _handle_debug(self, source_key: bytes, subtype: int, body: bytes) -> list[Action]:
        if subtype in DEBUG_RESPONSES:
            return [DebugReplyReceived(source_key, subtype, body)]
        if subtype == DEBUG_GET_SELF_REQUEST:
            payload = go_json({"key": self.identity.public_key.hex(),
                               "routing_entries": str(self._routing_entries())})
        elif subtype == DEBUG_GET_PEERS_REQUEST:
            payload = _key_list(self._peer_keys())
        elif subtype == DEBUG_GET_TREE_REQUEST:
            payload = _key_list(self._tree_keys())
        else:
            return []
        return [SendMessage(source_key, _debug_header(subtype + 1) + payload)]


def _parse_nodeinfo(body: bytes) -> dict | bytes:
    try:
        info = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        return body
    return info if isinstance(info, dict) else body
