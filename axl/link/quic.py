"""`quic://` links on aioquic.

One bidirectional stream per QUIC connection carries the link byte stream:
the dialer opens it (stream 0) and writes its meta at once, because a Go
listener sends nothing until the stream has carried a byte. TLS 1.3 with
the node's Ed25519 certificate, no ALPN (Go offers none and aborts on
one), idle timeout 60 s and a PING every 20 s, as quic-go is set up in
Yggdrasil. End of stream means link down; the connection is then closed.

aioquic buffers whatever it is given until the peer acknowledges it, with
no limit; a write waits while more than SEND_HIGH_WATER bytes are held, so
the stream adapter pauses the link as a full socket would. aioquic has no
public figure for what it holds: `unacknowledged_bytes` reads two private
offsets of its stream sender, which `missing_private_field` checks before
any quic:// link is dialed or listened for (docs/security.md,
"Dependencies' private surfaces").
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
from typing import Any, Callable

from aioquic.asyncio import QuicConnectionProtocol, connect
from aioquic.asyncio.server import QuicServer
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated, QuicEvent, StreamDataReceived, StreamReset
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from axl.supported import unsupported
from axl.link.adapter import StreamTransport
from axl.link.connection import LinkSettings
from axl.link.tls import make_certificate
from axl.link.uri import PeerURI

IDLE_TIMEOUT = 60.0
KEEPALIVE_PERIOD = 20.0
SEND_HIGH_WATER = 1024 * 1024
PROBE_WRITE = 1000
ProtocolFactory = Callable[[], asyncio.Protocol]


def unacknowledged_bytes(connection: QuicConnection, stream_id: int) -> int:
    """Bytes of the stream aioquic still holds, sent or not, that the peer
    has not acknowledged. aioquic offers no public figure; its stream
    sender keeps them between these two private offsets."""
    stream = connection._streams.get(stream_id)
    if stream is None:
        return 0
    return stream.sender._buffer_stop - stream.sender._buffer_start


@functools.cache
def missing_private_field() -> str | None:
    """What `unacknowledged_bytes` needs that this aioquic lacks, or None.

    Tried on a client connection that has not connected: a write is only
    buffered, so the figure must be exactly the bytes written."""
    connection = QuicConnection(configuration=QuicConfiguration(is_client=True))
    stream_id = connection.get_next_available_stream_id()
    connection.send_stream_data(stream_id, bytes(PROBE_WRITE))
    try:
        held = unacknowledged_bytes(connection, stream_id)
    except AttributeError as exc:
        return f"{type(exc.obj).__name__}.{exc.name}"
    if held != PROBE_WRITE:
        return "the stream sender's buffer offsets (_buffer_start, _buffer_stop)"
    return None


def require_private_fields() -> None:
    """ConnectionError, in one line, when `unacknowledged_bytes` cannot work:
    a link without it would buffer without limit."""
    missing = missing_private_field()
    if missing is not None:
        raise ConnectionError(unsupported("aioquic", missing))


def _configuration(settings: LinkSettings, is_client: bool) -> QuicConfiguration:
    identity = settings.identity
    return QuicConfiguration(
        is_client=is_client, alpn_protocols=None, idle_timeout=IDLE_TIMEOUT,
        certificate=x509.load_der_x509_certificate(make_certificate(identity)),
        private_key=Ed25519PrivateKey.from_private_bytes(identity.seed),
        verify_mode=ssl.CERT_NONE,
    )


class _QuicLink(QuicConnectionProtocol):
    """One QUIC connection carrying one link on its first bidirectional stream."""

    def __init__(self, connection: QuicConnection, *args: Any,
                 link_factory: ProtocolFactory | None = None, **kwargs: Any) -> None:
        super().__init__(connection, *args, **kwargs)
        self.connection = connection
        self.peer_address: Any = None
        self._link_factory = link_factory
        self._stream_id: int | None = None
        self.link_transport: StreamTransport | None = None
        self.closer: asyncio.Task[None] | None = None
        self._keepalive = asyncio.get_running_loop().call_later(KEEPALIVE_PERIOD, self._ping)
        self._progress = asyncio.Event()
        self._ended = False

    def open_link(self, stream_id: int, peername: Any) -> asyncio.Protocol:
        """Attach a link protocol to `stream_id`; it writes its meta at once."""
        assert self._link_factory is not None
        self._stream_id = stream_id
        protocol = self._link_factory()
        self.link_transport = StreamTransport(_StreamCarrier(self, stream_id), protocol,
                                              {"peername": peername})
        return protocol

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, StreamDataReceived):
            self._stream_data(event)
        elif isinstance(event, StreamReset) and event.stream_id == self._stream_id:
            self._lost(ConnectionError("QUIC stream reset by peer"))
        elif isinstance(event, ConnectionTerminated):
            reason = event.reason_phrase or f"error {event.error_code}"
            self._lost(None if event.error_code == 0 else ConnectionError(f"QUIC closed: {reason}"))

    def datagram_received(self, data: bytes | str, addr: Any) -> None:
        """Also notes where the peer's datagrams come from: the server's
        connections share its socket, which has no peer name."""
        self.peer_address = addr
        super().datagram_received(data, addr)
        self._progress.set()

    async def until_acknowledged(self, stream_id: int, limit: int) -> None:
        """Wait until at most `limit` bytes of the stream are unacknowledged;
        ConnectionError when the connection ends or the peer stays silent."""
        while unacknowledged_bytes(self.connection, stream_id) > limit:
            if self._ended:
                raise ConnectionError("QUIC connection closed")
            self._progress.clear()
            try:
                await asyncio.wait_for(self._progress.wait(), IDLE_TIMEOUT)
            except TimeoutError:
                raise ConnectionError(
                    f"QUIC peer acknowledged nothing for {IDLE_TIMEOUT:.0f} s") from None

    def _stream_data(self, event: StreamDataReceived) -> None:
        if self._stream_id is None and self._link_factory is not None and event.stream_id % 4 == 0:
            self.open_link(event.stream_id, self.peer_address)
        if event.stream_id != self._stream_id or self.link_transport is None:
            return
        self.link_transport.feed(event.data)
        if event.end_stream:
            self._lost(None)

    def _lost(self, exc: Exception | None) -> None:
        self._end()
        if self.link_transport is not None:
            self.link_transport.carrier_closed(exc)
            self.close()

    def _ping(self) -> None:
        self.connection.send_ping(0)
        self.transmit()
        self._keepalive = asyncio.get_running_loop().call_later(KEEPALIVE_PERIOD, self._ping)

    def connection_lost(self, exc: Exception | None) -> None:
        self._end()
        super().connection_lost(exc)

    def _end(self) -> None:
        """No more pings, and no writer left waiting for acknowledgements."""
        self._ended = True
        self._keepalive.cancel()
        self._progress.set()


class _StreamCarrier:
    def __init__(self, link: _QuicLink, stream_id: int) -> None:
        self._link = link
        self._stream_id = stream_id

    async def send(self, data: bytes) -> None:
        self._link.connection.send_stream_data(self._stream_id, data)
        self._link.transmit()
        await self._link.until_acknowledged(self._stream_id, SEND_HIGH_WATER)

    async def finish(self) -> None:
        self._link.connection.send_stream_data(self._stream_id, b"", end_stream=True)
        self._link.close()

    def abort(self) -> None:
        self._link.close()


# --- dialing -----------------------------------------------------------------------

async def dial(uri: PeerURI, factory: ProtocolFactory, settings: LinkSettings) -> asyncio.Protocol:
    """Connect, open stream 0 and start the link on it."""
    require_private_fields()
    stack = contextlib.AsyncExitStack()
    configuration = _configuration(settings, is_client=True)
    configuration.server_name = uri.server_name or uri.host
    try:
        quic = await stack.enter_async_context(connect(
            uri.host, uri.port, configuration=configuration,
            create_protocol=lambda *a, **k: _QuicLink(*a, link_factory=factory, **k)))
    except (ConnectionError, OSError):
        await stack.aclose()
        raise
    except Exception as exc:
        await stack.aclose()
        raise ConnectionError(f"QUIC handshake failed: {exc or type(exc).__name__}") from None
    assert isinstance(quic, _QuicLink)
    stream_id = quic.connection.get_next_available_stream_id()
    protocol = quic.open_link(stream_id, (uri.host, uri.port))
    quic.closer = asyncio.get_running_loop().create_task(_close_when_done(quic, stack))
    return protocol


async def _close_when_done(quic: _QuicLink, stack: contextlib.AsyncExitStack) -> None:
    """Release the client's UDP socket once the connection has closed."""
    await quic.wait_closed()
    await stack.aclose()


# --- listening -----------------------------------------------------------------------

class QuicListener:
    def __init__(self, server: QuicServer, transport: asyncio.DatagramTransport) -> None:
        self._server = server
        self._transport = transport

    @property
    def port(self) -> int:
        return self._transport.get_extra_info("sockname")[1]

    def close(self) -> None:
        self._server.close()

    async def wait_closed(self) -> None:
        return None


async def listen(uri: PeerURI, factory: ProtocolFactory, settings: LinkSettings) -> QuicListener:
    """Every connection's first client bidirectional stream becomes a link.

    aioquic's `serve` does just this, but keeps the socket's transport (and
    so the bound port) in a private field."""
    require_private_fields()
    configuration = _configuration(settings, is_client=False)
    transport, server = await asyncio.get_running_loop().create_datagram_endpoint(
        lambda: QuicServer(
            configuration=configuration,
            create_protocol=lambda *a, **k: _QuicLink(*a, link_factory=factory, **k)),
        local_addr=(uri.host, uri.port))
    return QuicListener(server, transport)
