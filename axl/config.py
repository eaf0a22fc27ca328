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
from dataclasses import dataclass, field, fields
from pathlib import Path
from urllib.parse import urlsplit

from axl.identity import KeyFileError, KeyFileMissing, NodeIdentity
from axl.link.multicast import MulticastRule

log = logging.getLogger("axl.config")

# Yggdrasil keys a node config may carry that this node does not use.
IGNORED_YGGDRASIL_KEYS = frozenset({
    "InterfacePeers", "AdminListen", "IfName", "IfMTU",
    "LogLookups", "NodeInfoPrivacy", "NodeInfo", "Certificate",
})


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
    api_port: int = 9002
    bridge_addr: str = "127.0.0.1"
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
    recv_queue_max_messages: int = 1024
    recv_queue_max_bytes: int = 256 * 1024 * 1024
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
}
# MulticastInterfaces entry key -> (MulticastRule field, kind)
_MULTICAST_FIELDS = {"Regex": ("regex", str), "Beacon": ("beacon", bool), "Listen": ("listen", bool),
                     "Port": ("port", int), "Priority": ("priority", int), "Password": ("password", str)}
_BRIDGE_STR_FIELDS = {"bridge_addr", "router_addr", "a2a_addr"}
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
        raise ConfigError(f"{name}: expected {kind.__name__}, got {type(value).__name__}")
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
        _check_host(name, str(value))
    if name == "PrivateKey" and value:
        _identity_from_hex(str(value))
    if name == "AllowedPublicKeys":
        for key in value:  # type: ignore[union-attr]
            if len(key) != 64 or any(c not in "0123456789abcdefABCDEF" for c in key):
                raise ConfigError(f"AllowedPublicKeys: {key!r} is not a 64-char hex key")


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
        if value == 0 and kind is int or value == "" and name == "bridge_addr":
            continue  # Go's rule: a zero value keeps the default (never "every interface")
        setattr(config, attr, [v.lower() for v in value] if name == "AllowedPublicKeys" else value)
    if config.message_streams and config.message_stream_port == config.tcp_port:
        raise ConfigError(f"message_stream_port: must differ from tcp_port ({config.tcp_port}), "
                          f"or set message_streams to false")
    return config


def load_config(path: str | Path) -> NodeConfig:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {exc.start} is not)") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    return config_from_dict(raw)
