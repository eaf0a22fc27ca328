"""Peer and listen URI parsing."""

from __future__ import annotations

import pytest

from axl.link.uri import PeerURI, URIError, parse_listen_uri, parse_peer_uri

KEY = "0787642c80824c490c246cf80b88ed44cdfd44ca92586962f551542f8144c019"


def test_plain_tls_and_tcp() -> None:
    assert parse_peer_uri("tls://example.org:9001") == PeerURI("tls", "example.org", 9001)
    uri = parse_peer_uri("tcp://127.0.0.1:9001")
    assert (uri.scheme, uri.host, uri.port, uri.is_tls) == ("tcp", "127.0.0.1", 9001, False)


def test_all_options() -> None:
    uri = parse_peer_uri(f"tls://[::1]:443?key={KEY}&password=s%20ecret&priority=7&sni=peer.example")
    assert uri.host == "::1" and uri.port == 443
    assert uri.pinned_keys == (bytes.fromhex(KEY),)
    assert uri.password == b"s ecret"
    assert uri.priority == 7
    assert uri.server_name == "peer.example"
    assert uri.host_port == "[::1]:443"


def test_several_pinned_keys() -> None:
    other = "ff" * 32
    uri = parse_peer_uri(f"tcp://h:1?key={KEY}&key={other}")
    assert uri.pinned_keys == (bytes.fromhex(KEY), bytes.fromhex(other))


def test_sni_never_an_ip_literal() -> None:
    assert parse_peer_uri("tls://10.0.0.1:1").server_name is None
    assert parse_peer_uri("tls://[fe80::1]:1").server_name is None
    assert parse_peer_uri("tls://node.example:1").server_name == "node.example"


@pytest.mark.parametrize("text", [
    "tls://example.org:9001",
    f"tls://[::1]:443?key={KEY}&password=pw&priority=7&sni=peer.example",
    "tcp://10.1.2.3:7?password=a%26b%3Dc",
])
def test_str_round_trips(text: str) -> None:
    uri = parse_peer_uri(text)
    assert str(uri) == text
    assert parse_peer_uri(str(uri)) == uri


def test_canonical_form_drops_defaults() -> None:
    assert str(parse_peer_uri("TLS://Example.ORG:9001?priority=0")) == "tls://example.org:9001"


@pytest.mark.parametrize("text, message", [
    ("http://h:1", "unknown scheme"),
    ("h:1", "unknown scheme"),
    ("ftp://h:1", "unknown scheme"),
    ("unix://relative/path", "need unix:///absolute/path"),
    ("socks://proxy:1", "missing target host:port"),
    ("socks://proxy:1/h", "missing target host:port"),
    ("socks://proxy:1/h:99999", "missing target host:port"),
    ("quic://h", "missing port"),
    ("ws://:1/x", "missing host"),
    ("tls://h:1?maxbackoff=4.5s", "at least 5s"),
    ("tls://h:1?maxbackoff=5", "bad maxbackoff"),
    ("tls://h:1?maxbackoff=1x", "bad maxbackoff"),
    ("tls://h", "missing port"),
    ("tls://:1", "missing host"),
    ("tls://h:99999", "bad URI"),
    ("tls://h:-5", "port must be a number"),
    ("tls://::1:9001", "IPv6 address goes in brackets"),
    ("tls://h:0", "port 0"),
    ("tls://exa mple:1", "bad host"),
    ("tls://h:1?key=abc", "bad key"),
    ("tls://h:1?key=" + "zz" * 32, "bad key"),
    ("tls://h:1?priority=256", "bad priority"),
    ("tls://h:1?priority=-1", "bad priority"),
    ("tls://h:1?priority=x", "bad priority"),
    ("tls://h:1?password=" + "p" * 65, "password too long"),
    ("tls://h:1?pasword=x", "unknown option"),
])
def test_bad_uris(text: str, message: str) -> None:
    with pytest.raises(URIError, match=message):
        parse_peer_uri(text)
    assert issubclass(URIError, ValueError)


def test_password_of_64_bytes_is_allowed() -> None:
    assert parse_peer_uri("tcp://h:1?password=" + "p" * 64).password == b"p" * 64


@pytest.mark.parametrize("text", [
    "quic://[::1]:9001?priority=2",
    "ws://node.example:80/some/path?key=" + KEY,
    "wss://node.example:443/ygg",
    "unix:///run/ygg/link.sock?password=x",
    "socks://user:pa%3Ass@proxy.example:1080/target.example:9001",
    "sockstls://127.0.0.1:1080/[::1]:9001?sni=peer.example",
    "tls://h:1?maxbackoff=90s",
])
def test_every_scheme_round_trips(text: str) -> None:
    uri = parse_peer_uri(text)
    assert parse_peer_uri(str(uri)) == uri


def test_scheme_specific_parts() -> None:
    unix = parse_peer_uri("unix:///run/ygg.sock")
    assert (unix.path, unix.peer_key) == ("/run/ygg.sock", "unix:/run/ygg.sock")
    socks = parse_peer_uri("socks://u:p@proxy:1080/example.invalid:29241")
    assert (socks.host, socks.port, socks.target) == ("proxy", 1080, ("example.invalid", 29241))
    assert (socks.proxy_user, socks.proxy_password) == ("u", "p")
    assert parse_peer_uri("socks://proxy:1080/[::1]:7").target == ("::1", 7)
    ws = parse_peer_uri("ws://127.0.0.1:29221/some/path?priority=3")
    assert ws.request_target == "/some/path?priority=3"
    assert parse_peer_uri("ws://h:1").request_target == "/"
    assert parse_peer_uri("sockstls://proxy.example:1/t:2").server_name == "proxy.example"


@pytest.mark.parametrize("text, seconds", [
    ("5s", 5), ("10s", 10), ("30s", 30), ("1m", 60), ("1h30m", 5400), ("2.5m", 150), ("4096s", 4096), ("1h0m1.5s", 3601.5),
])
def test_maxbackoff_is_a_go_duration(text: str, seconds: float) -> None:
    assert parse_peer_uri(f"tcp://h:1?maxbackoff={text}").max_backoff == seconds


@pytest.mark.parametrize("scheme, reason", [
    ("wss", "reverse proxy"), ("socks", "SOCKS listener not supported"),
])
def test_listen_refuses_what_go_refuses(scheme: str, reason: str) -> None:
    with pytest.raises(URIError, match=reason):
        parse_listen_uri(f"{scheme}://h:1/t:2")
    assert parse_listen_uri("ws://h:1").scheme == "ws"


def test_listen_port_0_lets_the_system_choose_but_a_peer_needs_a_port() -> None:
    assert parse_listen_uri("tls://127.0.0.1:0").port == 0
    with pytest.raises(URIError, match="port 0"):
        parse_peer_uri("tls://127.0.0.1:0")
    assert parse_peer_uri("unix:///tmp/node.sock").path == "/tmp/node.sock"
