"""The node's configuration file: Yggdrasil's overlay keys plus the bridge's
snake_case settings, in one JSON object (docs/operations.md, "The config file").

A config written for the Go AXL node must load unchanged, so numeric fields
follow Go's rule that 0 means "use the default". Anything else that is wrong
stops start-up with a one-line `ConfigError` naming the field.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from axl.build import build_fields
from axl.datagrams import nodeinfo_reply_body
from axl.gojson import read_json
from axl.identity import KeyFileError, KeyFileMissing, NodeIdentity
from axl.link.multicast import MulticastRule

log = logging.getLogger("axl.config")

# Yggdrasil keys a node config may carry that this node does not use.
IGNORED_YGGDRASIL_KEYS = frozenset({
    "InterfacePeers", "IfName", "IfMTU", "LogLookups", "Certificate",
})
# The environment variable that sets (and overrides) bridge_token.
TOKEN_VARIABLE = "AXL_BRIDGE_TOKEN"
UNIX_SCHEME = "unix://"


# The durable inbox's file name when inbox_path is not set: beside the key file.
INBOX_FILE = "axl-inbox.sqlite3"
INBOX_SYNC_MODES = ("normal", "full")
# Earlier names of bridge fields, still read (with a warning).
RENAMED_FIELDS = {"recv_queue_max_messages": "max_inbox_messages",
                  "recv_queue_max_bytes": "max_inbox_bytes"}


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the field or file."""


@dataclass
class NodeConfig:
    private_key_path: str = ""
    private_key_hex: str = ""
    peers: list[str] = field(default_factory=list)
    listen: list[str] = field(default_factory=list)
    allowed_public_keys: list[str] = field(default_factory=list)
    multicast_interfaces: list[MulticastRule] = field(default_factory=list)
    admin_listen: str = "none"
    nodeinfo: dict = field(default_factory=dict)
    nodeinfo_privacy: bool = False
    # yggdrasil 0.5.14's GroupPassword: sessions only with nodes that have
    # the same one; "" is the open network (docs/operations.md).
    group_password: str = ""
    api_port: int = 9002
    bridge_addr: str = "127.0.0.1"
    # Every bridge request must carry `Authorization: Bearer <token>`; "" = off.
    bridge_token: str = ""
    tcp_port: int = 7000
    # The acknowledged message stream between nodes of this project (a local
    # extension, docs/protocol.md). With message_streams false the node
    # neither listens on nor dials that port: toward others it is a Go node.
    message_stream_port: int = 7001
    message_streams: bool = True
    router_addr: str = ""
    router_port: int = 9003
    a2a_addr: str = ""
    a2a_port: int = 9004
    max_message_size: int = 16 * 1024 * 1024
    max_concurrent_conns: int = 128
    conn_read_timeout_secs: int = 60
    conn_idle_timeout_secs: int = 300
    # The receive queue behind /recv: where it is kept (None: INBOX_FILE
    # beside the key file; "": in memory only), whether each commit waits
    # for the disk, and its bounds (docs/operations.md, "The durable inbox").
    inbox_path: str | None = None
    inbox_sync: str = "normal"
    max_inbox_messages: int = 1024
    max_inbox_bytes: int = 256 * 1024 * 1024
    send_timeout_secs: int = 60
    lookup_timeout_secs: int = 10
    mcp_timeout_secs: int = 30
    a2a_timeout_secs: int = 30

    def load_identity(self) -> tuple[NodeIdentity, str]:
        """The node key and a phrase saying where it came from, for the log."""
        if self.private_key_path:
            try:
                return NodeIdentity.load_pem(self.private_key_path), f"key file {self.private_key_path}"
            except KeyFileMissing as exc:
                raise ConfigError(f"PrivateKeyPath: {exc}; make one with: "
                                  f"axl-node genkey {self.private_key_path}") from None
            except KeyFileError as exc:
                raise ConfigError(f"PrivateKeyPath: {exc}") from None
        if self.private_key_hex:
            return _identity_from_hex(self.private_key_hex), "PrivateKey in the config"
        return NodeIdentity.generate(), "ephemeral key (no PrivateKeyPath): the peer id changes every run"

    def inbox_file(self) -> Path | None:
        """Where the durable inbox lives; None keeps it in memory (`inbox_path`
        "", or no key file to put it beside: the key, and with it the
        node's identity, changes every run)."""
        if self.inbox_path is not None:
            return Path(self.inbox_path) if self.inbox_path else None
        if self.private_key_path:
            return Path(self.private_key_path).parent / INBOX_FILE
        return None

    @property
    def bridge_unix_path(self) -> str | None:
        """The socket path when the bridge listens on a UNIX socket (`unix:///path`)."""
        return self.bridge_addr[len(UNIX_SCHEME):] if self.bridge_addr.startswith(UNIX_SCHEME) else None

    def nodeinfo_body(self) -> bytes:
        """The NodeInfo this node answers with, encoded: the configured
        object, plus the build fields unless NodeInfoPrivacy."""
        return nodeinfo_reply_body(self.nodeinfo, {} if self.nodeinfo_privacy else build_fields())

    def take_token_from(self, environ: Mapping[str, str]) -> str:
        """Apply AXL_BRIDGE_TOKEN (it overrides bridge_token); returns where
        the token came from, for the log ("" when there is none)."""
        if environ.get(TOKEN_VARIABLE):
            self.bridge_token = environ[TOKEN_VARIABLE]
            _check_token(TOKEN_VARIABLE, self.bridge_token)
            return TOKEN_VARIABLE
        return "bridge_token" if self.bridge_token else ""

    @property
    def router_url(self) -> str:
        return f"{self.router_addr}:{self.router_port}" if self.router_addr else ""

    @property
    def a2a_url(self) -> str:
        return f"{self.a2a_addr}:{self.a2a_port}" if self.a2a_addr else ""


# JSON name -> (attribute, expected kind)
_OVERLAY_FIELDS = {
    "PrivateKeyPath": ("private_key_path", str),
    "PrivateKey": ("private_key_hex", str),
    "Peers": ("peers", list),
    "Listen": ("listen", list),
    "AllowedPublicKeys": ("allowed_public_keys", list),
    "MulticastInterfaces": ("multicast_interfaces", list),
    "AdminListen": ("admin_listen", str),
    "NodeInfo": ("nodeinfo", dict),
    "NodeInfoPrivacy": ("nodeinfo_privacy", bool),
    "GroupPassword": ("group_password", str),
}
# MulticastInterfaces entry key -> (MulticastRule field, kind)
_MULTICAST_FIELDS = {"Regex": ("regex", str), "Beacon": ("beacon", bool), "Listen": ("listen", bool),
                     "Port": ("port", int), "Priority": ("priority", int), "Password": ("password", str)}
_BRIDGE_STR_FIELDS = {"bridge_addr", "router_addr", "a2a_addr", "bridge_token", "inbox_path", "inbox_sync"}
_BRIDGE_BOOL_FIELDS = {"message_streams"}
_PORT_FIELDS = {"api_port", "tcp_port", "message_stream_port", "router_port", "a2a_port"}
# The port field that goes with each base URL field.
_URL_PORTS = {"router_addr": "router_port", "a2a_addr": "a2a_port"}
# Letters, digits, '_', '-' and dots: DNS names, and the service names of
# container networks (which may hold '_').
_HOST_NAME = re.compile(r"[\w-]+(\.[\w-]+)*\.?")


def _bridge_fields() -> dict[str, tuple[str, type]]:
    names = {f.name: f.type for f in fields(NodeConfig)}
    overlay_attrs = {attr for attr, _ in _OVERLAY_FIELDS.values()}
    return {
        name: (name, str if name in _BRIDGE_STR_FIELDS else bool if name in _BRIDGE_BOOL_FIELDS else int)
        for name in names if name not in overlay_attrs
    }


def _identity_from_hex(text: str) -> NodeIdentity:
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raise ConfigError("PrivateKey: not hex") from None
    if len(raw) not in (32, 64):
        raise ConfigError("PrivateKey: expected 32 or 64 bytes of hex")
    identity = NodeIdentity.from_seed(raw[:32])
    if len(raw) == 64 and raw[32:] != identity.public_key:
        raise ConfigError("PrivateKey: the public half does not match the seed")
    return identity


def _check_kind(name: str, value: object, kind: type) -> None:
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        expected = "a JSON object" if kind is dict else kind.__name__
        raise ConfigError(f"{name}: expected {expected}, got {type(value).__name__}")
    if kind is list and not all(isinstance(item, str) for item in value):  # type: ignore[union-attr]
        raise ConfigError(f"{name}: expected a list of strings")


def _check_value(name: str, value: object) -> None:
    if name in _PORT_FIELDS and not 0 <= value <= 65535:  # type: ignore[operator]
        raise ConfigError(f"{name}: {value} is not a port number")
    if isinstance(value, int) and value < 0:
        raise ConfigError(f"{name}: must not be negative")
    if name in _URL_PORTS and value:
        _check_base_url(name, str(value))
    if name == "bridge_addr" and value:
        _check_bridge_addr(str(value))
    if name == "bridge_token" and value:
        _check_token(name, str(value))
    if name == "AdminListen":
        parse_admin_listen(str(value))
    if name == "PrivateKey" and value:
        _identity_from_hex(str(value))
    if name == "inbox_sync" and value not in INBOX_SYNC_MODES:
        raise ConfigError(f'inbox_sync: {value!r} is not "normal" or "full"')
    if name == "AllowedPublicKeys":
        for key in value:  # type: ignore[union-attr]
            if len(key) != 64 or any(c not in "0123456789abcdefABCDEF" for c in key):
                raise ConfigError(f"AllowedPublicKeys: {key!r} is not a 64-char hex key")


def _check_bridge_addr(value: str) -> None:
    if value.startswith(UNIX_SCHEME):
        if not value[len(UNIX_SCHEME):].startswith("/"):
            raise ConfigError(f"bridge_addr: {value!r} needs an absolute socket path, e.g. unix:///run/axl/bridge.sock")
        return
    _check_host("bridge_addr", value)


def _check_token(name: str, token: str) -> None:
    """A token travels in a header: visible ASCII only, no spaces."""
    if not all("!" <= char <= "~" for char in token):
        raise ConfigError(f"{name}: must be visible ASCII characters without spaces")


@dataclass(frozen=True)
class AdminAddress:
    """Where the admin socket listens: a UNIX socket path, or a TCP host and port."""

    unix_path: str = ""
    host: str = ""
    port: int = 0

    def __str__(self) -> str:
        if self.unix_path:
            return UNIX_SCHEME + self.unix_path
        return f"tcp://[{self.host}]:{self.port}" if ":" in self.host else f"tcp://{self.host}:{self.port}"


def parse_admin_listen(value: str) -> AdminAddress | None:
    """AdminListen as yggdrasil reads it: "none" (or "") for off,
    `unix:///path`, `tcp://host:port`, or a bare `host:port` (TCP)."""
    if value in ("", "none"):
        return None
    if value.startswith(UNIX_SCHEME):
        path = value[len(UNIX_SCHEME):]
        if not path:
            raise ConfigError("AdminListen: unix:// needs a socket path, e.g. unix:///var/run/axl-admin.sock")
        return AdminAddress(unix_path=path)
    text = value[len("tcp://"):] if value.startswith("tcp://") else value
    example = 'e.g. "unix:///var/run/axl-admin.sock" or "tcp://127.0.0.1:9001"'
    try:
        parts = urlsplit("//" + text)
        host, port = parts.hostname, parts.port
    except ValueError:
        raise ConfigError(f"AdminListen: {value!r} is not an address; {example}") from None
    if not host or port is None or parts.path or parts.query:
        raise ConfigError(f"AdminListen: {value!r} is not an address; {example}")
    _check_host("AdminListen", host)
    return AdminAddress(host=host, port=port)


def _check_base_url(name: str, value: str) -> None:
    """Scheme and host only: the node appends `:{port}` (and `/route`) itself,
    so a port, path or query here would make a URL that cannot work."""
    example = f"e.g. http://127.0.0.1 (the port goes in {_URL_PORTS[name]})"
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        raise ConfigError(f"{name}: {value!r} is not a URL; expected scheme and host, {example}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{name}: expected a URL with scheme, {example}")
    if port is not None or parts.path or parts.query or parts.fragment or parts.username is not None:
        raise ConfigError(f"{name}: {value!r} has more than scheme and host; expected {example}")
    _check_host(name, parts.hostname)


def _check_host(name: str, host: str) -> None:
    """An IP address or a DNS host name; anything else fails only when the
    node binds or connects, with an error that no longer names the field."""
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    if not _HOST_NAME.fullmatch(host):
        raise ConfigError(f"{name}: {host!r} is not an IP address or host name (e.g. 127.0.0.1)")


def _edit_distance(a: str, b: str) -> int:
    """Insertions, deletions, substitutions and swaps of neighbours turning ``a`` into ``b``."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        current = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[len(b)]


def _known_names(bridge: dict[str, tuple[str, type]]) -> list[str]:
    return [*_OVERLAY_FIELDS, *bridge, *IGNORED_YGGDRASIL_KEYS]


def _canonical_name(name: str, bridge: dict[str, tuple[str, type]]) -> str:
    """The known field ``name`` spells in another case, as Go's encoding/json reads it.

    Go matches JSON keys to fields case-insensitively, so a Go config with
    "peers" does set Peers there; it must here too.
    """
    for known in _known_names(bridge):
        if name != known and name.lower() == known.lower():
            log.warning('config: "%s" read as "%s" (field names match in any case, as in Go)', name, known)
            return known
    return name


def _refuse_near_miss(name: str, bridge: dict[str, tuple[str, type]]) -> None:
    """An unknown key that is almost a known one is a typo, not a Go setting we skip.

    Go AXL configs may carry keys this node does not know, so unknown keys
    are accepted; but "Peer" for "Peers" or "api_prot" for "api_port" would
    otherwise leave a node silently without peers or on the default port.
    """
    limit = 1 if len(name) <= 5 else 2
    distance, closest = min((_edit_distance(name.lower(), key.lower()), key) for key in _known_names(bridge))
    if distance <= limit:
        raise ConfigError(f'unknown field "{name}" — did you mean "{closest}"?')


def _multicast_rule(index: int, entry: object) -> MulticastRule:
    """One MulticastInterfaces entry; unlike yggdrasil-go, nothing is on by default."""
    where = f"MulticastInterfaces[{index}]"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected an object")
    values: dict[str, object] = {}
    for name, value in entry.items():
        if name not in _MULTICAST_FIELDS:
            raise ConfigError(f"{where}: unknown field {name}")
        attr, kind = _MULTICAST_FIELDS[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(f"{where}.{name}: expected {kind.__name__}")
        values[attr] = value
    rule = MulticastRule(**values)  # type: ignore[arg-type]
    try:
        re.compile(rule.regex)
    except re.error as exc:
        raise ConfigError(f"{where}.Regex: {exc}") from None
    if not 0 <= rule.port <= 65535 or not 0 <= rule.priority <= 255:
        raise ConfigError(f"{where}: Port must be 0..65535 and Priority 0..255")
    if len(rule.password.encode()) > 64:
        raise ConfigError(f"{where}.Password: at most 64 bytes")
    return rule


def config_from_dict(raw: dict) -> NodeConfig:
    if not isinstance(raw, dict):
        raise ConfigError("config: the top level must be a JSON object")
    config = NodeConfig()
    bridge = _bridge_fields()
    for raw_name, value in raw.items():
        name = _canonical_name(raw_name, bridge)
        if name in RENAMED_FIELDS:
            log.warning("config: %s is now called %s; read as that", name, RENAMED_FIELDS[name])
            name = RENAMED_FIELDS[name]
        if name in _OVERLAY_FIELDS:
            attr, kind = _OVERLAY_FIELDS[name]
        elif name in bridge:
            attr, kind = bridge[name]
        elif name in IGNORED_YGGDRASIL_KEYS:
            log.warning("config: %s is a Yggdrasil setting this node does not use; ignored", name)
            continue
        else:
            _refuse_near_miss(name, bridge)
            log.warning("config: unknown field %s ignored", name)
            continue
        if value is None:
            continue
        if name == "MulticastInterfaces":
            if not isinstance(value, list):
                raise ConfigError(f"{name}: expected a list of objects")
            config.multicast_interfaces = [_multicast_rule(i, e) for i, e in enumerate(value)]
            continue
        _check_kind(name, value, kind)
        _check_value(name, value)
        if name == "NodeInfo":
            value = _nodeinfo_as_go_reads_it(value)
        if value == 0 and kind is int or value == "" and name == "bridge_addr":
            continue  # Go's rule: a zero value keeps the default (never "every interface")
        setattr(config, attr, [v.lower() for v in value] if name == "AllowedPublicKeys" else value)
    try:
        config.nodeinfo_body()
    except ValueError as exc:  # NodeInfoTooLarge, or a NaN that JSON cannot carry
        raise ConfigError(f"NodeInfo: {exc}") from None
    if config.message_streams and config.message_stream_port == config.tcp_port:
        raise ConfigError(f"message_stream_port: must differ from tcp_port ({config.tcp_port}), "
                          f"or set message_streams to false")
    return config


def _nodeinfo_as_go_reads_it(value: Any) -> Any:
    """NodeInfo with Go's numbers, or a ConfigError where Go's reader would
    fail too (a number beyond float64) or Python's stack gives out first."""
    try:
        return _as_go_numbers(value)
    except OverflowError:
        raise ConfigError("NodeInfo: a number is beyond the range of a 64-bit float") from None
    except RecursionError:
        raise ConfigError("NodeInfo: arrays or objects nested too deep") from None


def _as_go_numbers(value: Any) -> Any:
    """Numbers as Go reads them from JSON into an interface{}: float64 (so
    that NodeInfo's 1 and 1.0 are both answered as Go answers them, 1)."""
    if isinstance(value, dict):
        return {key: _as_go_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_go_numbers(item) for item in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def load_config(path: str | Path) -> NodeConfig:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {exc.start} is not)") from None
    try:
        raw = read_json(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid JSON: {exc.msg} "
                          f"at line {exc.lineno} column {exc.colno}") from None
    except ValueError as exc:  # nested too deep, or an integer of more digits than Python reads
        raise ConfigError(f"config file {path} is not valid JSON: {exc}") from None
    return config_from_dict(raw)
