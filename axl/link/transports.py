"""How each URI scheme turns into a byte stream: one dialer and one listener
per scheme, looked up by `dial` and `listen`.

Every transport hands the same `Connection` protocol a plain byte stream
(meta handshake, then frames); nothing above this module knows which one
carried it. tcp, tls, unix and socks(tls) are asyncio sockets; ws(s) and
quic run through the stream adapters of their own modules.
"""

from __future__ import annotations

import asyncio
import os
import stat
from dataclasses import dataclass
from typing import Awaitable, Callable, Protocol

from axl.link.connection import LinkSettings
from axl.link.contexts import client_tls, server_tls
from axl.link.socks import open_tunnel
from axl.link.uri import LISTEN_REFUSALS, PeerURI, URIError

ProtocolFactory = Callable[[], asyncio.Protocol]
SOCKS_CONNECT_TIMEOUT = 5.0


class Listener(Protocol):
    """A bound listener, whatever its scheme."""

    @property
    def port(self) -> int: ...

    def close(self) -> None: ...

    async def wait_closed(self) -> None: ...


@dataclass
class SocketListener:
    """An asyncio server; for unix sockets it also removes its file on close."""

    server: asyncio.AbstractServer
    path: str = ""

    @property
    def port(self) -> int:
        sockets = getattr(self.server, "sockets", None)
        return 0 if self.path or not sockets else sockets[0].getsockname()[1]

    def close(self) -> None:
        self.server.close()
        if self.path:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    async def wait_closed(self) -> None:
        await self.server.wait_closed()


async def _dial_tcp(uri: PeerURI, factory: ProtocolFactory, settings: LinkSettings) -> asyncio.Protocol:
    tls = uri.scheme == "tls"
    _, protocol = await asyncio.get_running_loop().create_connection(
        factory, uri.host, uri.port,
        ssl=client_tls(settings) if tls else None,
        server_hostname=(uri.server_name or "") if tls else None,
    )
    return protocol


async def _dial_unix(uri: PeerURI, factory: ProtocolFactory, settings: LinkSettings) -> asyncio.Protocol:
    _, protocol = await asyncio.get_running_loop().create_unix_connection(factory, uri.path)
    return protocol


async def _dial_socks(uri: PeerURI, factory: ProtocolFactory, settings: LinkSettings) -> asyncio.Protocol:
    """Through the proxy to the target; sockstls then runs TLS with the
    proxy's host name as SNI unless `?sni=` names another, as Go does."""
    sock = await asyncio.wait_for(
        open_tunnel((uri.host, uri.port), uri.target, uri.proxy_user, uri.proxy_password),
        SOCKS_CONNECT_TIMEOUT)
    tls = uri.scheme == "sockstls"
    try:
        _, protocol = await asyncio.get_running_loop().create_connection(
            factory, sock=sock,
            ssl=client_tls(settings) if tls else None,
            server_hostname=(uri.server_name or "") if tls else None,
        )
    except BaseException:
        sock.close()
        raise
    return protocol


async def _listen_tcp(uri: PeerURI, factory: ProtocolFactory, settings: LinkSettings) -> Listener:
    tls = uri.scheme == "tls"
    server = await asyncio.get_running_loop().create_server(
        factory, uri.host, uri.port,
        ssl=server_tls(settings) if tls else None,
        ssl_handshake_timeout=settings.handshake_timeout if tls else None,
    )
    return SocketListener(server)


async def _listen_unix(uri: PeerURI, factory: ProtocolFactory, settings: LinkSettings) -> Listener:
    """A file already at the path fails, as in Go: asyncio would silently
    replace a stale socket, which could steal a running node's address."""
    try:
        mode = os.stat(uri.path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None:
        what = "a stale socket file? remove it" if stat.S_ISSOCK(mode) else "not a socket"
        raise OSError(f"cannot listen on {uri}: {uri.path} already exists ({what})")
    server = await asyncio.get_running_loop().create_unix_server(factory, uri.path)
    return SocketListener(server, uri.path)


async def _dial_ws(uri: PeerURI, factory: ProtocolFactory, settings: LinkSettings) -> asyncio.Protocol:
    from axl.link import websocket  # aiohttp loads only for ws:// and wss:// links
    return await websocket.dial(uri, factory, settings)


async def _listen_ws(uri: PeerURI, factory: ProtocolFactory, settings: LinkSettings) -> Listener:
    from axl.link import websocket
    return await websocket.listen(uri, factory, settings)


async def _dial_quic(uri: PeerURI, factory: ProtocolFactory, settings: LinkSettings) -> asyncio.Protocol:
    from axl.link import quic  # aioquic and x509 load only for quic:// links
    return await quic.dial(uri, factory, settings)


async def _listen_quic(uri: PeerURI, factory: ProtocolFactory, settings: LinkSettings) -> Listener:
    from axl.link import quic
    return await quic.listen(uri, factory, settings)


Dialer = Callable[[PeerURI, ProtocolFactory, LinkSettings], Awaitable[asyncio.Protocol]]
ListenerFactory = Callable[[PeerURI, ProtocolFactory, LinkSettings], Awaitable[Listener]]

DIALERS: dict[str, Dialer] = {
    "tcp": _dial_tcp, "tls": _dial_tcp, "unix": _dial_unix,
    "socks": _dial_socks, "sockstls": _dial_socks,
    "ws": _dial_ws, "wss": _dial_ws, "quic": _dial_quic,
}
LISTENERS: dict[str, ListenerFactory] = {
    "tcp": _listen_tcp, "tls": _listen_tcp, "unix": _listen_unix,
    "ws": _listen_ws, "quic": _listen_quic,
}


async def dial(uri: PeerURI, factory: ProtocolFactory, settings: LinkSettings) -> asyncio.Protocol:
    """Connect to `uri` and return the protocol `factory` made for it."""
    return await DIALERS[uri.scheme](uri, factory, settings)


async def listen(uri: PeerURI, factory: ProtocolFactory, settings: LinkSettings) -> Listener:
    """Bind a listener for `uri`; each accepted stream gets `factory()`."""
    if uri.scheme in LISTEN_REFUSALS:
        raise URIError(LISTEN_REFUSALS[uri.scheme])
    return await LISTENERS[uri.scheme](uri, factory, settings)
