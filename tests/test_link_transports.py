"""Transport details below the link handshake: SOCKS5 bytes against the Go
capture, unix socket files, and the WebSocket listener's plain answers."""

from __future__ import annotations

import asyncio
import logging
import os
import socket

import aiohttp
import pytest

import vectors
from axl.budgets import WS_MAX_MESSAGE
from axl.identity import NodeIdentity
from axl.link import socks
from axl.link.connection import LinkSettings
from axl.link.transports import listen
from axl.link.uri import PeerURI, URIError, parse_listen_uri, parse_peer_uri
from nodes import wait_until_async


def _exchange(case: str) -> dict[str, bytes]:
    steps = vectors.load("links")["socks_dialer"][case]["exchange"]
    return {step["what"].split(" (")[0]: bytes.fromhex(step["hex"])
            for step in steps if step["dir"] == "client->proxy"}


def test_socks_bytes_match_the_go_dialer_with_auth() -> None:
    sent = _exchange("with_auth")
    uri = parse_peer_uri("socks://user:pass@127.0.0.1:29231/127.0.0.1:29241")
    assert socks.greeting(bool(uri.proxy_user)) == sent["greeting"]
    assert socks.password_request(uri.proxy_user, uri.proxy_password) == sent["RFC1929 auth"]
    assert socks.connect_request(*uri.target) == sent["CONNECT"]


def test_socks_bytes_match_the_go_dialer_with_a_name() -> None:
    sent = _exchange("without_auth_hostname_target")
    uri = parse_peer_uri("socks://127.0.0.1:29231/example.invalid:29241")
    assert socks.greeting(bool(uri.proxy_user)) == sent["greeting"]
    assert socks.connect_request(*uri.target) == sent["CONNECT"]


def test_socks_ipv6_target_is_type_4() -> None:
    assert socks.connect_request("::1", 7) == b"\x05\x01\x00\x04" + bytes(15) + b"\x01\x00\x07"


def test_socks_refusal_is_one_clear_error() -> None:
    with pytest.raises(socks.SocksError, match="host unreachable"):
        socks.reply_address_length(bytes.fromhex("05040001"), 0)
    with pytest.raises(socks.SocksError, match="none of our authentication methods"):
        socks.check_method(b"\x05\xff", offered_password=False)
    with pytest.raises(socks.SocksError, match="not SOCKS5"):
        socks.check_method(b"\x04\x00", offered_password=False)


def _settings() -> LinkSettings:
    return LinkSettings(identity=NodeIdentity.generate(), handler=None,  # type: ignore[arg-type]
                        allowed_keys=frozenset(), logger=logging.getLogger("test"),
                        handshake_timeout=6, keepalive_delay=1, peer_timeout=6,
                        queue_byte_cap=1 << 20)


async def test_unix_listener_refuses_a_stale_socket_and_removes_its_own(tmp_path) -> None:
    path = str(tmp_path / "link.sock")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)
    stale.close()
    with pytest.raises(OSError, match="already exists .a stale socket file"):
        await listen(parse_peer_uri(f"unix://{path}"), asyncio.Protocol, _settings())
    os.unlink(path)
    listener = await listen(parse_peer_uri(f"unix://{path}"), asyncio.Protocol, _settings())
    assert os.path.exists(path)
    listener.close()
    await listener.wait_closed()
    assert not os.path.exists(path)


async def test_listen_refuses_wss_with_gos_reason() -> None:
    with pytest.raises(URIError, match="reverse proxy"):
        await listen(PeerURI("wss", "127.0.0.1", 0), asyncio.Protocol, _settings())


async def test_ws_listener_health_and_subprotocol() -> None:
    listener = await listen(parse_listen_uri("ws://127.0.0.1:0"), asyncio.Protocol, _settings())
    base = f"http://127.0.0.1:{listener.port}"
    try:
        async with aiohttp.ClientSession() as http:
            for path in ("/health", "/healthz"):
                async with http.get(base + path) as response:
                    assert (response.status, await response.text()) == (200, "OK")
            async with http.ws_connect(base + "/any/path") as ws:
                message = await asyncio.wait_for(ws.receive(), 5)
                assert message.type is aiohttp.WSMsgType.CLOSE
                assert (message.data, message.extra) == (
                    1008, "client must speak the ygg-ws subprotocol")
    finally:
        listener.close()
        await listener.wait_closed()


@pytest.mark.parametrize("listen_uri, origin, allowed", [
    ("ws://127.0.0.1:0", None, True),
    ("ws://127.0.0.1:0", "http://evil.example", False),
    ("ws://127.0.0.1:0?origin=*.agents.example", "https://ui.agents.example", True),
    ("ws://127.0.0.1:0?origin=*.agents.example", "https://evil.example", False),
    ("ws://127.0.0.1:0?origin=https://UI.agents.example", "https://ui.agents.example", True),
    ("ws://127.0.0.1:0?origin=https://ui.agents.example", "http://ui.agents.example", False),
    ("ws://127.0.0.1:0?origin=&origin=*", "http://evil.example", True),
])
async def test_ws_listener_origin_patterns(listen_uri: str, origin: str | None, allowed: bool) -> None:
    """yggdrasil 0.5.14's `?origin=` on a ws:// listener: browser origins
    it accepts besides its own host (coder/websocket's rule)."""
    listener = await listen(parse_listen_uri(listen_uri), asyncio.Protocol, _settings())
    headers = {"Origin": origin} if origin else {}
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{listener.port}/", headers={
                    **headers, "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Protocol": "ygg-ws"}) as response:
                assert (response.status == 101) is allowed, response.status
    finally:
        listener.close()
        await listener.wait_closed()


def test_origin_option_round_trips() -> None:
    uri = parse_peer_uri("ws://h:1/p?origin=https%3A%2F%2Fa.example&origin=b.example&origin=")
    assert uri.origins == ("https://a.example", "b.example")
    assert parse_peer_uri(str(uri)) == uri


class _Sink(asyncio.Protocol):
    def __init__(self, received: bytearray) -> None:
        self.received = received

    def data_received(self, data: bytes) -> None:
        self.received.extend(data)


class _Source(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False


async def test_quic_writer_waits_for_acknowledgements_instead_of_buffering() -> None:
    """A peer that stops acknowledging: aioquic holds at most about
    SEND_HIGH_WATER bytes and the link is paused; once acknowledgements flow
    again everything arrives and the link resumes."""
    from axl.link import quic

    received = bytearray()
    listener = await listen(parse_listen_uri("quic://127.0.0.1:0"), lambda: _Sink(received), _settings())
    source = await quic.dial(parse_peer_uri(f"quic://127.0.0.1:{listener.port}"), _Source, _settings())
    link = source.transport._carrier._link  # the QUIC connection under the stream transport
    stream_id = source.transport._carrier._stream_id
    try:
        source.transport.write(b"hello")
        await wait_until_async(lambda: len(received) == 5, 10, what="the first bytes")
        link.datagram_received = lambda data, addr: None  # the peer's acknowledgements go missing
        chunk = os.urandom(64 * 1024)
        for _ in range(128):
            source.transport.write(chunk)

        def held() -> int:
            return quic.unacknowledged_bytes(link.connection, stream_id)

        # The link hands aioquic more only while it holds at most SEND_HIGH_WATER.
        await wait_until_async(lambda: held() > quic.SEND_HIGH_WATER, 10, what="aioquic holding its limit")
        assert held() <= quic.SEND_HIGH_WATER + len(chunk)
        assert source.paused
        del link.datagram_received
        await wait_until_async(lambda: len(received) == 5 + 128 * len(chunk), 30, what="every byte")
        await wait_until_async(lambda: not source.paused, 5, what="the writer resumed")
    finally:
        source.transport.abort()
        listener.close()
        await listener.wait_closed()


async def test_a_ws_write_larger_than_a_message_may_be_arrives_whole() -> None:
    """What our side writes in one go leaves as messages of at most one frame,
    so a listener holding peers to WS_MAX_MESSAGE takes it all."""
    from axl.link import websocket

    received = bytearray()
    listener = await listen(parse_listen_uri("ws://127.0.0.1:0"), lambda: _Sink(received), _settings())
    source = await websocket.dial(parse_peer_uri(f"ws://127.0.0.1:{listener.port}"), _Source, _settings())
    try:
        data = os.urandom(3 * WS_MAX_MESSAGE)
        source.transport.write(data)
        await wait_until_async(lambda: len(received) == len(data), 10, what="every byte")
        assert received == data
    finally:
        source.transport.abort()
        listener.close()
        await listener.wait_closed()
