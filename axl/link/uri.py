"""Peer and listen URIs in Yggdrasil's `scheme://host:port?options` form.

Every Yggdrasil link type is parsed here: tcp, tls, quic, ws, wss, unix,
socks and sockstls. The options (`key`, `password`, `priority`, `sni`,
`maxbackoff`, and ws's `origin`) mean the same for all of them; what differs is where the
address lives (a socket path for unix, a proxy plus a target for socks).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import parse_qs, quote, unquote, urlsplit

SUPPORTED_SCHEMES = ("tls", "tcp", "quic", "ws", "wss", "unix", "socks", "sockstls")
# Go refuses the other two listeners with these reasons.
LISTEN_REFUSALS = {
    "wss": "wss:// cannot listen: use a ws:// listener behind a reverse proxy",
    "socks": "socks:// cannot listen: SOCKS listener not supported",
    "sockstls": "sockstls:// cannot listen: SOCKS listener not supported",
}
MAX_PASSWORD_BYTES = 64
MIN_MAX_BACKOFF = 5.0  # yggdrasil 0.5.13 (30 s before)
KNOWN_OPTIONS = ("key", "password", "priority", "sni", "maxbackoff", "origin")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3,
                   "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


class URIError(ValueError):
    """A peer or listen URI cannot be used; the message says why."""


@dataclass(frozen=True)
class PeerURI:
    """A parsed URI. As in Go, a listen URI uses only `password` and
    `priority`; `key` pins apply to outbound peers.

    `path` is the socket path for unix://, the request path for ws(s)://
    and `target-host:port` for socks(tls)://; `proxy_user`/`proxy_password`
    are the SOCKS5 credentials from the URI's user part."""

    scheme: str
    host: str
    port: int
    pinned_keys: tuple[bytes, ...] = ()
    password: bytes = b""
    priority: int = 0
    sni: str = ""
    path: str = ""
    max_backoff: float | None = None
    # A ws:// listener's `?origin=` (yggdrasil 0.5.14): browser origins it
    # accepts besides its own host, as host patterns ("*": any).
    origins: tuple[str, ...] = ()
    proxy_user: str = ""
    proxy_password: str = ""

    @property
    def is_tls(self) -> bool:
        return self.scheme == "tls"

    @property
    def host_port(self) -> str:
        """`host:port` with IPv6 literals bracketed, as Go keys duplicates on it."""
        return _join_host_port(self.host, self.port)

    @property
    def peer_key(self) -> str:
        """What makes two configured peers the same one."""
        if self.scheme == "unix":
            return "unix:" + self.path
        if self.scheme in ("socks", "sockstls"):
            return f"{self.host_port}/{self.path}"
        return self.host_port

    @property
    def target(self) -> tuple[str, int]:
        """A socks URI's target, handed to the proxy unresolved."""
        host, _, port = self.path.rpartition(":")
        return host.strip("[]"), int(port)

    @property
    def server_name(self) -> str | None:
        """SNI to send: `?sni=` or the host, but never an IP literal."""
        name = self.sni or self.host
        return None if _is_ip_literal(name) else name

    @property
    def query(self) -> str:
        options = [f"key={key.hex()}" for key in self.pinned_keys]
        if self.password:
            options.append("password=" + quote(self.password.decode(), safe=""))
        if self.priority:
            options.append(f"priority={self.priority}")
        if self.sni:
            options.append("sni=" + quote(self.sni, safe=""))
        if self.max_backoff is not None:
            options.append(f"maxbackoff={self.max_backoff:g}s")
        options += ["origin=" + quote(origin, safe="") for origin in self.origins]
        return "&".join(options)

    @property
    def request_target(self) -> str:
        """What a ws(s) dialer puts in its request line: path and query, as Go does."""
        query = self.query
        return (self.path or "/") + ("?" + query if query else "")

    def __str__(self) -> str:
        query = "?" + self.query if self.query else ""
        if self.scheme == "unix":
            return f"unix://{self.path}{query}"
        user = ""
        if self.proxy_user:
            user = quote(self.proxy_user, safe="")
            if self.proxy_password:
                user += ":" + quote(self.proxy_password, safe="")
            user += "@"
        path = "/" + self.path if self.scheme in ("socks", "sockstls") else self.path
        return f"{self.scheme}://{user}{self.host_port}{path}{query}"


def _join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _is_ip_literal(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _parse_key(text: str) -> bytes:
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise URIError(f"bad key {text!r}: not hex") from None
    if len(key) != 32:
        raise URIError(f"bad key {text!r}: need 64 hex digits")
    return key


def _parse_priority(text: str) -> int:
    if not text.isdigit() or int(text) > 255:
        raise URIError(f"bad priority {text!r}: need an integer 0..255")
    return int(text)


def _parse_password(text: str) -> bytes:
    password = text.encode()
    if len(password) > MAX_PASSWORD_BYTES:
        raise URIError(f"password too long: {len(password)} bytes, at most {MAX_PASSWORD_BYTES}")
    return password


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string such as `90s`, `1h30m` or `2.5m`."""
    position, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            break
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        position = match.end()
    if not text or position != len(text):
        raise URIError(f"bad maxbackoff {text!r}: need a duration such as 90s, 10m or 1h")
    return total


def _parse_max_backoff(text: str) -> float | None:
    if not text:
        return None
    seconds = parse_duration(text)
    if seconds < MIN_MAX_BACKOFF:
        raise URIError(f"bad maxbackoff {text!r}: at least {MIN_MAX_BACKOFF:g}s")
    return seconds


def _single(query: dict[str, list[str]], name: str) -> str:
    """Go's url.Values.Get: the first value, or empty when absent."""
    return query.get(name, [""])[0]


def _socks_target(text: str, path: str) -> str:
    """The first path segment, which must be `host:port`."""
    target = unquote(path.strip("/").split("/")[0])
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise URIError(f"missing target host:port in {text!r}: need socks://proxy:port/host:port")
    return target


def _address(text: str, scheme: str, parts) -> tuple[str, int, str]:  # type: ignore[no-untyped-def]
    """(host, port, path) of a URI, by scheme."""
    if scheme == "unix":
        if not parts.path.startswith("/") or parts.netloc:
            raise URIError(f"bad unix URI {text!r}: need unix:///absolute/path")
        return "", 0, unquote(parts.path)
    try:
        port = parts.port
    except ValueError:
        host_port = parts.netloc.rpartition("@")[2]
        if host_port.count(":") > 1 and "[" not in host_port:
            raise URIError(f"bad URI {text!r}: an IPv6 address goes in brackets, "
                           f"e.g. {scheme}://[::1]:9001") from None
        raise URIError(f"bad URI {text!r}: the port must be a number 0..65535") from None
    if not parts.hostname:
        raise URIError(f"missing host in {text!r}")
    if any(c.isspace() or not c.isprintable() for c in parts.hostname):
        raise URIError(f"bad host {parts.hostname!r} in {text!r}")
    if port is None:
        raise URIError(f"missing port in {text!r}")
    if scheme in ("socks", "sockstls"):
        return parts.hostname, port, _socks_target(text, parts.path)
    return parts.hostname, port, parts.path if scheme in ("ws", "wss") else ""


def parse_peer_uri(text: str) -> PeerURI:
    """Parse any Yggdrasil link URI with its query options, to dial."""
    uri = _parse_uri(text)
    if uri.port == 0 and uri.scheme != "unix":
        raise URIError(f"port 0 in {text!r}: a peer is dialled on its real port")
    return uri


def _parse_uri(text: str) -> PeerURI:
    try:
        parts = urlsplit(text.strip())
    except ValueError as exc:
        raise URIError(f"bad URI {text!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in SUPPORTED_SCHEMES:
        raise URIError(f"unknown scheme in {text!r}: need one of "
                       + ", ".join(s + "://" for s in SUPPORTED_SCHEMES))
    host, port, path = _address(text, scheme, parts)
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - set(KNOWN_OPTIONS))
    if unknown:
        raise URIError(f"unknown option {unknown[0]!r} in {text!r}")
    priority_text = _single(query, "priority")
    return PeerURI(
        scheme=scheme,
        host=host,
        port=port,
        pinned_keys=tuple(_parse_key(k) for k in query.get("key", [])),
        password=_parse_password(_single(query, "password")),
        priority=_parse_priority(priority_text) if priority_text else 0,
        sni=_single(query, "sni"),
        path=path,
        max_backoff=_parse_max_backoff(_single(query, "maxbackoff")),
        origins=tuple(origin for origin in query.get("origin", []) if origin),
        proxy_user=unquote(parts.username or "") if scheme in ("socks", "sockstls") else "",
        proxy_password=unquote(parts.password or "") if scheme in ("socks", "sockstls") else "",
    )


def parse_listen_uri(text: str) -> PeerURI:
    """A listen URI: any scheme a node can listen on (port 0: the system picks one)."""
    uri = _parse_uri(text)
    if uri.scheme in LISTEN_REFUSALS:
        raise URIError(LISTEN_REFUSALS[uri.scheme])
    return uri
