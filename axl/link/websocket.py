"""`ws://` and `wss://` links on aiohttp.

Yggdrasil runs the link byte stream over binary WebSocket messages with the
mandatory subprotocol `ygg-ws`; message boundaries mean nothing, so every
binary message is fed to the link as more bytes. A text message is an
error. Listening is ws:// only (wss is meant for a TLS-terminating reverse
proxy in front); `/health` and `/healthz` answer 200 "OK" for such proxies.

aiohttp assembles a whole message before the link sees a byte of it, so the
link's frame limit cannot bound one: a message may hold at most
WS_MAX_MESSAGE bytes (a few frames; axl.budgets), and aiohttp closes the
connection (1009) on a larger declared length before buffering its payload.
What we write is cut into messages of at most MAX_FRAME bytes, as a Go node's
are at most one frame.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Callable
from urllib.parse import urlsplit

import aiohttp
import yarl
from aiohttp import WebSocketError, WSCloseCode, web

from axl.budgets import WS_MAX_MESSAGE
from axl.link.adapter import StreamTransport
from axl.link.connection import LinkSettings
from axl.link.contexts import client_tls
from axl.link.uri import PeerURI
from axl.tasks import start_task
from axl.wire import MAX_FRAME

SUBPROTOCOL = "ygg-ws"
POLICY_VIOLATION = 1008
CLOSE_TIMEOUT = 1.0
HEALTH_PATHS = ("/health", "/healthz")
log = logging.getLogger("axl.link")

ProtocolFactory = Callable[[], asyncio.Protocol]
WebSocket = aiohttp.ClientWebSocketResponse | web.WebSocketResponse


@dataclass
class _WebSocketCarrier:
    """The adapter's view of one WebSocket (either side)."""

    ws: WebSocket
    session: aiohttp.ClientSession | None = None
    _closer: asyncio.Task[None] | None = field(default=None, init=False)

    async def send(self, data: bytes) -> None:
        if len(data) <= MAX_FRAME:
            await self.ws.send_bytes(data)
            return
        view = memoryview(data)
        for start in range(0, len(data), MAX_FRAME):
            await self.ws.send_bytes(view[start:start + MAX_FRAME])

    async def finish(self) -> None:
        await self._close()

    def abort(self) -> None:
        if self._closer is None:
            self._closer = asyncio.get_running_loop().create_task(self._close())

    async def _close(self) -> None:
        try:
            await self.ws.close()
        finally:
            if self.session is not None:
                await self.session.close()


async def _pump(ws: WebSocket, transport: StreamTransport, settings: LinkSettings) -> None:
    """Feed binary messages to the link until the socket closes."""
    error: Exception | None = None
    try:
        async for message in ws:
            if message.type is aiohttp.WSMsgType.BINARY:
                transport.feed(message.data)
            elif message.type is aiohttp.WSMsgType.TEXT:
                error = ConnectionError("text message on a ygg-ws link")
                break
            elif message.type is aiohttp.WSMsgType.ERROR:
                error = _read_error(message.data or ws.exception(), settings)
                break
    except Exception as exc:
        error = exc
    if error is not None:
        transport.abort(error)
    transport.carrier_closed(error)


def _read_error(exc: BaseException | None, settings: LinkSettings) -> ConnectionError:
    if isinstance(exc, WebSocketError) and exc.code == WSCloseCode.MESSAGE_TOO_BIG:
        settings.refusals["ws_message_bytes"] += 1
        return ConnectionError(f"websocket message refused: {exc} (the link's budget; "
                               f"its frames are at most {MAX_FRAME} bytes)")
    return ConnectionError(f"websocket error: {exc}")


# --- dialing ---------------------------------------------------------------------

async def dial(uri: PeerURI, factory: ProtocolFactory, settings: LinkSettings) -> asyncio.Protocol:
    """Open the WebSocket with the URI's path and query, offering `ygg-ws`.
    wss verifies no certificate (the meta handshake authenticates) and
    sends the URI's host as SNI."""
    secure = uri.scheme == "wss"
    url = yarl.URL(f"{uri.scheme}://{uri.host_port}{uri.request_target}", encoded=True)
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
    try:
        ws = await session.ws_connect(
            url, protocols=(SUBPROTOCOL,), max_msg_size=WS_MAX_MESSAGE, compress=0, autoping=True,
            timeout=aiohttp.ClientWSTimeout(ws_close=CLOSE_TIMEOUT),
            ssl=client_tls(settings) if secure else True,
            server_hostname=uri.host if secure else None,
        )
    except (aiohttp.ClientError, ValueError) as exc:
        await session.close()
        raise ConnectionError(f"websocket: {exc}") from None
    except BaseException:
        await session.close()
        raise
    if ws.protocol != SUBPROTOCOL:
        await ws.close()
        await session.close()
        raise ConnectionError(f"websocket: server did not accept the {SUBPROTOCOL} subprotocol")
    protocol = factory()
    transport = StreamTransport(_WebSocketCarrier(ws, session), protocol,
                                {"peername": (uri.host, uri.port)})
    start_task(_pump(ws, transport, settings), log, f"websocket link to {uri}")
    return protocol


# --- listening --------------------------------------------------------------------

def origin_allowed(origin: str, host: str, patterns: tuple[str, ...]) -> bool:
    """Go's rule (coder/websocket, with yggdrasil 0.5.14's `?origin=`): no
    Origin (not a browser), an Origin whose host:port is the request's
    Host, or one matching a pattern, case-insensitively; a pattern with
    "://" is matched against scheme://host:port. "*" allows any."""
    if not origin or "*" in patterns:
        return True
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    if parts.netloc.lower() == host.lower():
        return True
    for pattern in patterns:
        target = f"{parts.scheme}://{parts.netloc}" if "://" in pattern else parts.netloc
        if fnmatchcase(target.lower(), pattern.lower()):
            return True
    return False


@dataclass
class WebSocketListener:
    runner: web.AppRunner
    port: int
    _cleanup: asyncio.Task[None] | None = None

    def close(self) -> None:
        if self._cleanup is None:
            self._cleanup = asyncio.get_running_loop().create_task(self.runner.cleanup())

    async def wait_closed(self) -> None:
        if self._cleanup is not None:
            await self._cleanup


def _handler(factory: ProtocolFactory, settings: LinkSettings,
             origins: tuple[str, ...]) -> Callable[[web.Request], Any]:
    async def handle(request: web.Request) -> web.StreamResponse:
        if request.path in HEALTH_PATHS:
            return web.Response(text="OK")
        if not origin_allowed(request.headers.get("Origin", ""), request.host, origins):
            return web.Response(status=403, text="origin does not match host nor ?origin=")
        ws = web.WebSocketResponse(protocols=(SUBPROTOCOL,), max_msg_size=WS_MAX_MESSAGE, compress=False,
                                   timeout=CLOSE_TIMEOUT)
        await ws.prepare(request)
        if ws.ws_protocol != SUBPROTOCOL:
            await ws.close(code=POLICY_VIOLATION,
                           message=b"client must speak the ygg-ws subprotocol")
            return ws
        peer = request.transport.get_extra_info("peername") if request.transport else None
        transport = StreamTransport(_WebSocketCarrier(ws), factory(), {"peername": peer})
        await _pump(ws, transport, settings)
        return ws
    return handle


async def listen(uri: PeerURI, factory: ProtocolFactory, settings: LinkSettings) -> WebSocketListener:
    """Serve any path: WebSocket upgrades become links."""
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", _handler(factory, settings, uri.origins))
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, uri.host, uri.port)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return WebSocketListener(runner, runner.addresses[0][1])
