"""The Yggdrasil core's datagram layer on top of sessions (yggdrasil-go
v0.5.12 src/core/proto.go, nodeinfo.go and core.go).

Every session message starts with a type byte: 1 carries an IPv6 packet,
2 a protocol message (nodeinfo or debug). Go answers nodeinfo and debug
requests from anyone, without rate limits, so this does too: the replies
are small and bounded by the core MTU.

This node also asks (the admin socket's getNodeInfo and debug_remote*
commands, and the names of direct peers): a reply is passed up only when
a request to that key and of that kind is pending, as Go keeps a callback
per key, and a request unanswered for QUERY_TIMEOUT is forgotten.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Final

from axl.gojson import go_json
from axl.identity import NodeIdentity
from axl.wire import KEY_SIZE

TYPE_IPV6: Final = 0x01
IPV6_HEAD = bytes((TYPE_IPV6,))
"""What precedes an IPv6 packet in a session message (SessionManager.send's
`head`, so a 64 KiB packet is not copied just to put one byte in front)."""
TYPE_PROTO: Final = 0x02

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
# Go drops a request's callback after a minute; so many may be pending here at once.
QUERY_TIMEOUT = 60.0
MAX_PENDING_QUERIES = 1024
# Go reserves 2 bytes for the key lists although the reply header is 3.
_KEY_LIST_OVERHEAD = 2


@dataclass(init=False)
class SendMessage:
    """A plaintext for SessionManager.send to `dest_key`."""

    dest_key: bytes
    message: bytes

    def __init__(self, dest_key: bytes, message: bytes) -> None:
        self.dest_key = dest_key
        self.message = message


@dataclass(init=False)
class DeliverIPv6:
    source_key: bytes
    packet: bytes | memoryview

    def __init__(self, source_key: bytes, packet: bytes | memoryview) -> None:
        self.source_key = source_key
        self.packet = packet


ReplyKind = tuple[int, int]
"""What a reply answers: (PROTO_NODEINFO_RESPONSE, 0) or (PROTO_DEBUG, response subtype)."""
NODEINFO_REPLY: ReplyKind = (PROTO_NODEINFO_RESPONSE, 0)


def debug_reply_kind(request_subtype: int) -> ReplyKind:
    return (PROTO_DEBUG, request_subtype + 1)


@dataclass(frozen=True)
class NodeInfoReceived:
    """The reply to our nodeinfo request: the remote's JSON as it sent it
    (not checked: it may not be JSON at all)."""

    key: bytes
    info: bytes

    @property
    def kind(self) -> ReplyKind:
        return NODEINFO_REPLY

    @property
    def body(self) -> bytes:
        return self.info


@dataclass(frozen=True)
class DebugReplyReceived:
    key: bytes
    subtype: int
    payload: bytes

    @property
    def kind(self) -> ReplyKind:
        return (PROTO_DEBUG, self.subtype)

    @property
    def body(self) -> bytes:
        return self.payload


Action = SendMessage | DeliverIPv6 | NodeInfoReceived | DebugReplyReceived


class NodeInfoTooLarge(ValueError):
    """The NodeInfo object encodes to more than MAX_NODEINFO_SIZE bytes."""


def nodeinfo_reply_body(given: dict[str, Any], build: dict[str, str]) -> bytes:
    """Our NodeInfo as Go encodes it: the configured object with the
    `build` fields over it (none with NodeInfoPrivacy), keys sorted."""
    encoded = go_json({**given, **build})
    if len(encoded) > MAX_NODEINFO_SIZE:
        raise NodeInfoTooLarge(f"{len(encoded)} bytes once encoded, over yggdrasil's limit "
                               f"of {MAX_NODEINFO_SIZE}")
    return encoded


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


class DatagramLayer:
    """Sans-IO core: classifies session plaintexts and answers protocol
    requests from the routing state it is given."""

    def __init__(self, identity: NodeIdentity, nodeinfo: bytes, *,
                 peer_keys: Callable[[], list[bytes]],
                 tree_keys: Callable[[], list[bytes]],
                 routing_entries: Callable[[], int]) -> None:
        """`nodeinfo` is the encoded reply body (`nodeinfo_reply_body`)."""
        if len(nodeinfo) > MAX_NODEINFO_SIZE:
            raise NodeInfoTooLarge(f"NodeInfo exceeds max length of {MAX_NODEINFO_SIZE} bytes")
        self.identity = identity
        self._nodeinfo_reply = bytes((TYPE_PROTO, PROTO_NODEINFO_RESPONSE)) + nodeinfo
        self._peer_keys = peer_keys
        self._tree_keys = tree_keys
        self._routing_entries = routing_entries
        # (reply kind, key) -> when the request is forgotten
        self._pending: dict[tuple[ReplyKind, bytes], float] = {}

    # -- asking ------------------------------------------------------------

    def request_nodeinfo(self, key: bytes, now: float) -> list[Action]:
        self._expect(NODEINFO_REPLY, key, now)
        return [SendMessage(key, nodeinfo_request())]

    def request_debug(self, key: bytes, subtype: int, now: float) -> list[Action]:
        """Ask `key` for its self, peers or tree (a DEBUG_GET_*_REQUEST)."""
        if subtype not in (DEBUG_GET_SELF_REQUEST, DEBUG_GET_PEERS_REQUEST, DEBUG_GET_TREE_REQUEST):
            raise ValueError(f"not a debug request subtype: {subtype}")
        self._expect(debug_reply_kind(subtype), key, now)
        return [SendMessage(key, debug_request(subtype))]

    def _expect(self, kind: ReplyKind, key: bytes, now: float) -> None:
        pending = self._pending
        pending.pop((kind, key), None)
        pending[(kind, key)] = now + QUERY_TIMEOUT
        if len(pending) > MAX_PENDING_QUERIES:
            del pending[next(iter(pending))]

    def _answered(self, kind: ReplyKind, key: bytes, now: float) -> bool:
        expires = self._pending.pop((kind, key), None)
        return expires is not None and now < expires

    def own_reply(self, request: bytes) -> bytes:
        """The body of what this node answers `request` (a nodeinfo or debug
        request): asking oneself needs no session."""
        [reply] = self.handle(self.identity.public_key, request, 0.0)
        assert isinstance(reply, SendMessage)
        header = 2 if request == nodeinfo_request() else 3
        return reply.message[header:]

    def expire(self, now: float) -> None:
        """Forget requests unanswered for QUERY_TIMEOUT."""
        for query in [q for q, expires in self._pending.items() if expires <= now]:
            del self._pending[query]

    def handle(self, source_key: bytes, plaintext: bytes | memoryview, now: float) -> list[Action]:
        """Act on one decrypted session message; unknown types are ignored.

        An IPv6 packet is passed on as a view of `plaintext` (a 64 KiB
        segment is not copied); protocol bodies become bytes. `now` tells
        a reply to a pending request from one to a forgotten request.
        """
        if not plaintext:
            return []
        if plaintext[0] == TYPE_IPV6:
            return [DeliverIPv6(source_key, memoryview(plaintext)[1:])]
        if plaintext[0] == TYPE_PROTO and len(plaintext) > 1:
            return self._handle_proto(source_key, plaintext[1], bytes(plaintext[2:]), now)
        return []

    def _handle_proto(self, source_key: bytes, kind: int, body: bytes, now: float) -> list[Action]:
        if kind == PROTO_NODEINFO_REQUEST:
            return [SendMessage(source_key, self._nodeinfo_reply)]
        if kind == PROTO_NODEINFO_RESPONSE:
            if self._answered(NODEINFO_REPLY, source_key, now):
                return [NodeInfoReceived(source_key, body)]
            return []
        if kind == PROTO_DEBUG and body:
            return self._handle_debug(source_key, body[0], body[1:], now)
        return []

    def _handle_debug(self, source_key: bytes, subtype: int, body: bytes, now: float) -> list[Action]:
        if subtype in DEBUG_RESPONSES:
            if self._answered((PROTO_DEBUG, subtype), source_key, now):
                return [DebugReplyReceived(source_key, subtype, body)]
            return []
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
