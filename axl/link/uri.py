"""Peer and listen URIs in Yggdrasil's `scheme://host:port?options` form.

Only `tls://` and `tcp://` are spoken here; the other Yggdrasil link types
are recognised so that a config naming them gets a clear refusal rather
than a confusing parse error.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import parse_qs, quote, urlsplit

SUPPORTED_SCHEMES = ("tls", "tcp")
KNOWN_UNSUPPORTED_SCHEMES = ("quic", "ws", "wss", "unix", "socks", "sockstls")
MAX_PASSWORD_BYTES = 64
# `maxbackoff` is Go's per-peer retry cap; it is accepted so Go peer lists
# load unchanged, and the manager's own backoff limits apply instead.
KNOWN_OPTIONS = ("key", "password", "priority", "sni", "maxbackoff")


class URIError(ValueError):
    """A peer or listen URI cannot be used; the message says why."""


@dataclass(frozen=True)
class PeerURI:
    """A parsed URI. As in Go, a listen URI uses only `password` and
    `priority`; `key` pins apply to outbound peers."""

    scheme: str
    host: str
    port: int
    pinned_keys: tuple[bytes, ...] = ()
    password: bytes = b""
    priority: int = 0
    sni: str = ""

    @property
    def is_tls(self) -> bool:
        return self.scheme == "tls"

    @property
    def host_port(self) -> str:
        """`host:port` with IPv6 literals bracketed, as Go keys duplicates on it."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def server_name(self) -> str | None:
        """SNI to send: `?sni=` or the host, but never an IP literal."""
        name = self.sni or self.host
        return None if _is_ip_literal(name) else name

    def __str__(self) -> str:
        options = [f"key={key.hex()}" for key in self.pinned_keys]
        if self.password:
            options.append("password=" + quote(self.password.decode(), safe=""))
        if self.priority:
            options.append(f"priority={self.priority}")
        if self.sni:
            options.append("sni=" + quote(self.sni, safe=""))
        query = "?" + "&".join(options) if options else ""
        return f"{self.scheme}://{self.host_port}{query}"


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


def _single(query: dict[str, list[str]], name: str) -> str:
    """Go's url.Values.Get: the first value, or empty when absent."""
    return query.get(name, [""])[0]


def parse_peer_uri(text: str) -> PeerURI:
    """Parse a `tls://` or `tcp://` URI with Yggdrasil's query options."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError as exc:
        raise URIError(f"bad URI {text!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme in KNOWN_UNSUPPORTED_SCHEMES:
        raise URIError(f"unsupported scheme {scheme!r}: only tls:// and tcp://")
    if scheme not in SUPPORTED_SCHEMES:
        raise URIError(f"unknown scheme in {text!r}: need tls:// or tcp://")
    host = parts.hostname
    if not host:
        raise URIError(f"missing host in {text!r}")
    if port is None:
        raise URIError(f"missing port in {text!r}")
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
    )
