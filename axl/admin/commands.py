"""The admin socket's commands, answered as yggdrasil-go v0.5.12 answers
them: the same names (matched in any case), arguments, field names,
units, orders and error texts (src/admin/*.go, src/core/api.go,
nodeinfo.go and proto.go, src/multicast/admin.go, src/tun/admin.go).

Units as Go writes them: byte counts as integers, `uptime` in seconds
(a float), `latency` and `last_error_time` in nanoseconds. Fields Go
leaves out when empty (`omitempty`) are left out here too. Where this node
has no figure a Go router reports, the field says so by its absence or
zero, never by an invented value (docs/operations.md, "The admin socket").
"""

from __future__ import annotations

import binascii
import ipaddress
from collections.abc import Awaitable, Callable
from functools import cmp_to_key
from dataclasses import dataclass
from typing import Any, Protocol

from axl.build import BUILD_NAME, BUILD_VERSION
from axl.datagrams.layer import DEBUG_GET_PEERS_REQUEST, DEBUG_GET_SELF_REQUEST, DEBUG_GET_TREE_REQUEST
from axl.errors import PeerChangeRefused
from axl.gojson import Raw, compact
from axl.identity import NodeIdentity, address_for_key, format_address
from axl.link.multicast import InterfaceReport
from axl.node.peers import PeerReport
from axl.routing import PathReport, TreeEntry
from axl.sessions import SessionReport
from axl.wire import KEY_SIZE

# How long getNodeInfo and the debug_remote* commands wait for the remote node, as in Go.
REMOTE_TIMEOUT = 6.0


class AdminNode(Protocol):
    """What the admin socket needs from the node."""

    identity: NodeIdentity

    def routing_entries(self) -> int: ...

    def peer_reports(self) -> list[PeerReport]: ...

    def tree_report(self) -> list[TreeEntry]: ...

    def path_report(self) -> list[PathReport]: ...

    def session_report(self) -> list[SessionReport]: ...

    def multicast_report(self) -> list[InterfaceReport]: ...

    async def ask_nodeinfo(self, key: bytes, timeout: float) -> bytes: ...

    async def ask_debug(self, key: bytes, subtype: int, timeout: float) -> bytes: ...

    def add_peer(self, uri: str) -> str: ...

    def remove_peer(self, uri: str) -> str: ...


class CommandError(Exception):
    """The command failed; the text is what the answer's "error" says."""


class Rates(Protocol):
    """Bytes a link carried in the last second, each way (Go's rate_recvd, rate_sent)."""

    def rates(self, link_id: int) -> tuple[int, int]: ...


Handler = Callable[[AdminNode, Rates, dict[str, Any]], Awaitable[Any]]


@dataclass(frozen=True)
class Command:
    name: str
    description: str
    fields: tuple[str, ...]
    handler: Handler


def _string_argument(arguments: dict[str, Any], name: str) -> str:
    value = arguments.get(name, "")
    if type(value) is not str:
        raise CommandError(f"json: cannot unmarshal {_json_kind(value)} into Go struct field .{name} of type string")
    return value


def _json_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, bool):
        return "bool"
    return "null" if value is None else "number"


def _address(key: bytes) -> str:
    return format_address(address_for_key(key))


def _subnet(identity: NodeIdentity) -> str:
    return str(ipaddress.IPv6Network((identity.subnet + bytes(8), 64)))


# -- this node ---------------------------------------------------------------

async def get_self(node: AdminNode, rates: Rates, arguments: dict[str, Any]) -> dict[str, Any]:
    identity = node.identity
    return {"build_name": BUILD_NAME, "build_version": BUILD_VERSION, "key": identity.peer_id,
            "address": _address(identity.public_key), "routing_entries": node.routing_entries(),
            "subnet": _subnet(identity)}


# getPeers' `sort` (yggdrasil 0.5.13): the entry fields compared in turn.
_PEER_ORDERS = {
    "uptime": ("uptime", "key", "priority", "cost"),
    "cost": ("cost", "key", "priority", "uptime"),
}
_DEFAULT_PEER_ORDER = ("inbound", "key", "priority", "cost", "uptime")


async def get_peers(node: AdminNode, rates: Rates, arguments: dict[str, Any]) -> dict[str, Any]:
    order = _PEER_ORDERS.get(_string_argument(arguments, "sort").lower(), _DEFAULT_PEER_ORDER)
    entries = [_peer_entry(report, rates) for report in node.peer_reports()]
    return {"peers": sorted(entries, key=cmp_to_key(lambda a, b: _compare_peers(a, b, order)))}


def _compare_peers(a: dict[str, Any], b: dict[str, Any], order: tuple[str, ...]) -> int:
    """Go's comparison of two PeerEntry (src/admin/getpeers.go): outbound
    before inbound, keys as strings, numbers by their difference made an
    int, so uptimes less than a second apart are equal and end the
    comparison there, as in Go."""
    for name in order:
        x, y = a.get(name, 0), b.get(name, 0)
        if name in ("inbound", "key"):
            difference = (x > y) - (x < y)
        else:
            difference = x - y
        if difference:
            return int(difference)
    return 0


def _peer_entry(report: PeerReport, rates: Rates) -> dict[str, Any]:
    """One PeerEntry, its omitempty fields left out when zero."""
    entry: dict[str, Any] = {}
    if report.uri:
        entry["remote"] = report.uri
    entry["up"], entry["inbound"] = report.up, report.inbound
    if report.key:
        entry["address"] = _address(report.key)
    entry["key"] = report.key.hex()
    entry.update(port=report.port, priority=report.priority, cost=report.cost)
    rate_in, rate_out = rates.rates(report.link_id) if report.link_id is not None else (0, 0)
    optional = (("bytes_recvd", report.rx_bytes), ("bytes_sent", report.tx_bytes),
                ("rate_recvd", rate_in), ("rate_sent", rate_out), ("uptime", _seconds(report.uptime)),
                ("latency", _round_latency(report.latency_ns)),
                ("last_error_time", int(report.last_error_age * 1e9)), ("last_error", report.last_error))
    entry.update((name, value) for name, value in optional if value)
    return entry


def _seconds(seconds: float) -> float:
    """A duration as Go's Duration.Seconds() gives it: whole nanoseconds."""
    return round(seconds, 9)


def _round_latency(nanoseconds: int) -> int:
    """ironwood rounds a peer's latency to 10 µs."""
    return (nanoseconds + 5_000) // 10_000 * 10_000


async def get_tree(node: AdminNode, rates: Rates, arguments: dict[str, Any]) -> dict[str, Any]:
    entries = sorted(node.tree_report(), key=lambda e: e.key)
    return {"tree": [{"address": _address(e.key), "key": e.key.hex(), "parent": e.parent.hex(),
                      "sequence": e.seq} for e in entries]}


async def get_paths(node: AdminNode, rates: Rates, arguments: dict[str, Any]) -> dict[str, Any]:
    paths = sorted(node.path_report(), key=lambda p: p.key)
    return {"paths": [{"address": _address(p.key), "key": p.key.hex(), "path": list(p.path),
                       "sequence": p.seq} for p in paths]}


async def get_sessions(node: AdminNode, rates: Rates, arguments: dict[str, Any]) -> dict[str, Any]:
    sessions = sorted(node.session_report(), key=lambda s: s.key)
    return {"sessions": [{"address": _address(s.key), "key": s.key.hex(), "bytes_recvd": s.rx_bytes,
                          "bytes_sent": s.tx_bytes, "uptime": _seconds(s.uptime)} for s in sessions]}


async def get_multicast_interfaces(node: AdminNode, rates: Rates, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"multicast_interfaces": [
        {"name": i.name, "address": i.address, "beacon": i.beacon, "listen": i.listen, "password": i.password}
        for i in node.multicast_report()]}


async def get_tun(node: AdminNode, rates: Rates, arguments: dict[str, Any]) -> dict[str, Any]:
    """This node has no TUN interface: its IPv6 stack is in the process."""
    return {"enabled": False}


# -- peers at run time --------------------------------------------------------

async def add_peer(node: AdminNode, rates: Rates, arguments: dict[str, Any]) -> dict[str, Any]:
    return _change_peers(node.add_peer, arguments)


async def remove_peer(node: AdminNode, rates: Rates, arguments: dict[str, Any]) -> dict[str, Any]:
    return _change_peers(node.remove_peer, arguments)


def _change_peers(change: Callable[[str], str], arguments: dict[str, Any]) -> dict[str, Any]:
    """addPeer or removePeer: {} once done, as in Go."""
    uri = _string_argument(arguments, "uri")
    if _string_argument(arguments, "interface"):
        raise CommandError("interface: this node does not bind peerings to a named interface; "
                           "give a link-local address with its zone instead (tls://[fe80::1%eth0]:9001)")
    try:
        change(uri)
    except PeerChangeRefused as exc:
        raise CommandError(str(exc)) from None
    return {}


# -- remote nodes ---------------------------------------------------------------

def _key_argument(arguments: dict[str, Any], prefix: str = "") -> bytes:
    text = _string_argument(arguments, "key")
    try:
        key = binascii.unhexlify(text)
    except (ValueError, binascii.Error):
        raise CommandError(f"{prefix}{_hex_error(text)}") from None
    if len(key) != KEY_SIZE:
        raise CommandError("invalid public key length")
    return key


def _hex_error(text: str) -> str:
    """Go's encoding/hex message for text that is not hex."""
    for char in text:
        if char not in "0123456789abcdefABCDEF":
            return f"encoding/hex: invalid byte: U+{ord(char):04X} {char!r}"
    return "encoding/hex: odd length hex string"


async def get_nodeinfo(node: AdminNode, rates: Rates, arguments: dict[str, Any]) -> dict[str, Any]:
    if not _string_argument(arguments, "key"):
        raise CommandError("No remote public key supplied")
    key = _key_argument(arguments, "Failed to decode public key: ")
    try:
        info = await node.ask_nodeinfo(key, REMOTE_TIMEOUT)
    except TimeoutError:
        raise CommandError("Timed out waiting for response") from None
    return {key.hex(): _remote_json(info)}


def _remote_json(body: bytes) -> Raw:
    try:
        return compact(body)
    except ValueError:
        raise CommandError("Failed to marshal response: the remote node's answer is not JSON") from None


async def _remote_debug(node: AdminNode, arguments: dict[str, Any], subtype: int) -> bytes:
    key = _key_argument(arguments)
    try:
        return await node.ask_debug(key, subtype, REMOTE_TIMEOUT)
    except TimeoutError:
        raise CommandError("timeout") from None


async def remote_get_self(node: AdminNode, rates: Rates, arguments: dict[str, Any]) -> dict[str, Any]:
    body = await _remote_debug(node, arguments, DEBUG_GET_SELF_REQUEST)
    return {_address(_key_argument(arguments)): _remote_json(body)}


async def remote_get_peers(node: AdminNode, rates: Rates, arguments: dict[str, Any]) -> dict[str, Any]:
    body = await _remote_debug(node, arguments, DEBUG_GET_PEERS_REQUEST)
    return {_address(_key_argument(arguments)): _key_list(body)}


async def remote_get_tree(node: AdminNode, rates: Rates, arguments: dict[str, Any]) -> dict[str, Any]:
    body = await _remote_debug(node, arguments, DEBUG_GET_TREE_REQUEST)
    return {_address(_key_argument(arguments)): _key_list(body)}


def _key_list(body: bytes) -> dict[str, list[str]]:
    """Go's {"keys": [...]}, or {} when the answer holds no whole key."""
    keys = [body[i:i + KEY_SIZE].hex() for i in range(0, len(body) - KEY_SIZE + 1, KEY_SIZE)]
    return {"keys": keys} if keys else {}


# -- the table ----------------------------------------------------------------

async def list_commands(node: AdminNode, rates: Rates, arguments: dict[str, Any]) -> dict[str, Any]:
    entries = []
    for command in sorted(COMMANDS.values(), key=lambda c: c.name.lower()):
        entry: dict[str, Any] = {"command": command.name.lower(), "description": command.description}
        if command.fields:
            entry["fields"] = list(command.fields)
        entries.append(entry)
    return {"list": entries}


_TABLE = (
    Command("list", "List available commands", (), list_commands),
    Command("getSelf", "Show details about this node", (), get_self),
    Command("getPeers", "Show directly connected peers", ("sort",), get_peers),
    Command("getTree", "Show known Tree entries", (), get_tree),
    Command("getPaths", "Show established paths through this node", (), get_paths),
    Command("getSessions", "Show established traffic sessions with remote nodes", (), get_sessions),
    Command("addPeer", "Add a peer to the peer list", ("uri", "interface"), add_peer),
    Command("removePeer", "Remove a peer from the peer list", ("uri", "interface"), remove_peer),
    Command("getNodeInfo", "Request nodeinfo from a remote node by its public key", ("key",), get_nodeinfo),
    Command("debug_remoteGetSelf", "Debug use only", ("key",), remote_get_self),
    Command("debug_remoteGetPeers", "Debug use only", ("key",), remote_get_peers),
    Command("debug_remoteGetTree", "Debug use only", ("key",), remote_get_tree),
    Command("getMulticastInterfaces", "Show which interfaces multicast is enabled on", (),
            get_multicast_interfaces),
    Command("getTun", "Show information about the node's TUN interface", (), get_tun),
)
COMMANDS = {command.name.lower(): command for command in _TABLE}


async def run_command(node: AdminNode, rates: Rates, name: str, arguments: Any) -> Any:
    """The response to command `name`; CommandError with yggdrasil's text when it fails."""
    command = COMMANDS.get(name.lower())
    if command is None:
        raise CommandError(f"Unknown action '{name.lower()}', try 'list' for help")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise CommandError(f"json: cannot unmarshal {_json_kind(arguments)} into Go value of type "
                           f"{command.name} arguments")
    return await command.handler(node, rates, arguments)
