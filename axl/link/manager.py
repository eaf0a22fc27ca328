"""The link manager: listeners, persistent dialers and the set of live links.

This is the asyncio edge of the link layer. The node plugs in through
`LinkHandler` and sees only `Link` objects; how bytes reach them (TLS or
not, reconnects, keepalives) stays in here.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from axl.budgets import LINK_QUEUE_BYTES
from axl.errors import PeerAlreadyConfigured, PeerNotConfigured
from axl.identity import NodeIdentity
from axl.link.connection import Connection, Link, LinkHandler, LinkSettings
from axl.link.liveness import KEEPALIVE_DELAY, PEER_TIMEOUT
from axl.link.protocol import HANDSHAKE_TIMEOUT
from axl.link.transports import Listener, dial, listen
from axl.link.uri import PeerURI, parse_listen_uri, parse_peer_uri
from axl.tasks import start_task

__all__ = ["Link", "LinkHandler", "LinkManager", "ListenFailed"]

BACKOFF_MIN = 1.0
BACKOFF_MAX = 60.0
BACKOFF_JITTER = 0.2
STOP_TIMEOUT = 1.0
# A peer's dial failures are logged once a PEER_LOG_INTERVAL while the
# error stays the same, and the node's at most NODE_LOG_LINES a
# NODE_LOG_WINDOW: 3,000 peers added at run time wrote 1.6 MB of them in 12 s.
PEER_LOG_INTERVAL = 300.0
NODE_LOG_LINES = 10
NODE_LOG_WINDOW = 10.0


class ListenFailed(OSError):
    """A `Listen` URI could not be bound; the errno is the OS's, `uri` says which entry."""

    def __init__(self, uri: PeerURI, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.uri = uri


@dataclass
class _Peer:
    """A configured outbound peer, its dialer task, and why its last
    connection attempt or peering ended (and when, monotonic)."""

    uri: PeerURI
    task: asyncio.Task[None] | None = None
    connection: Connection | None = None
    last_error: str = ""
    last_error_at: float = 0.0
    to_self: bool = False  # its last handshake found our own key

    def failed(self, error: str) -> None:
        self.last_error = error
        self.last_error_at = time.monotonic()


@dataclass
class _Backoff:
    """Exponential retry delay with jitter, reset by a successful handshake."""

    minimum: float
    maximum: float
    rng: random.Random
    failures: int = field(default=0)

    def next_delay(self) -> float:
        base = min(self.maximum, self.minimum * 2 ** self.failures)
        self.failures += 1
        return base * (1 + self.rng.uniform(-BACKOFF_JITTER, BACKOFF_JITTER))

    def reset(self) -> None:
        self.failures = 0


@dataclass
class _PeerNotes:
    """What was last logged of one peer's dial failures, and what since."""

    error: str
    logged_at: float
    unlogged: int = 0


@dataclass
class DialFailureLog:
    """Which dial failures get a log line, sans-IO: a peer's first one, a
    changed error, or the same one again after PEER_LOG_INTERVAL (saying
    how many were not logged in between); and never more than
    NODE_LOG_LINES lines a NODE_LOG_WINDOW for the whole node, the rest
    counted in one line when the next window opens."""

    peer_interval: float = PEER_LOG_INTERVAL
    node_lines: int = NODE_LOG_LINES
    node_window: float = NODE_LOG_WINDOW
    _peers: dict[str, _PeerNotes] = field(default_factory=dict)
    _window_start: float = float("-inf")
    _window_lines: int = 0
    _window_unlogged: int = 0

    def lines(self, uri: str, error: str, retry: float | None, now: float) -> list[str]:
        """The log lines that a failure to dial `uri` calls for (often none);
        `retry`: the seconds until the next attempt, None when there is none."""
        lines = self._window_opened(now)
        notes = self._peers.get(uri)
        if notes is not None and notes.error == error and now - notes.logged_at < self.peer_interval:
            notes.unlogged += 1
            return lines
        if self._window_lines >= self.node_lines:
            self._window_unlogged += 1
            if notes is not None:
                notes.unlogged += 1
            return lines
        self._window_lines += 1
        line = f"dial {uri} failed: {error}"
        if retry is not None:
            line += f" (retrying in {retry:.0f} s)" if retry >= 1 else f" (retrying in {retry:.1f} s)"
        if notes is not None and notes.unlogged:
            line += f"; {notes.unlogged} more failure(s) of this peer since its last line"
        self._peers[uri] = _PeerNotes(error, now)
        return [*lines, line]

    def forget(self, uri: str) -> None:
        """`uri` is no longer dialed."""
        self._peers.pop(uri, None)

    def _window_opened(self, now: float) -> list[str]:
        if now - self._window_start < self.node_window:
            return []
        unlogged = self._window_unlogged
        self._window_start, self._window_lines, self._window_unlogged = now, 0, 0
        if not unlogged:
            return []
        return [f"{unlogged} more dial failure(s) not logged in the last {self.node_window:.0f} s "
                f"(at most {self.node_lines} lines a {self.node_window:.0f} s)"]


def _as_uri(uri: str | PeerURI, parse: Callable[[str], PeerURI] = parse_peer_uri) -> PeerURI:
    return uri if isinstance(uri, PeerURI) else parse(uri)


class LinkManager:
    def __init__(
        self,
        identity: NodeIdentity,
        handler: LinkHandler,
        *,
        allowed_keys: set[bytes] | frozenset[bytes] = frozenset(),
        logger: logging.Logger | None = None,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
        keepalive_delay: float = KEEPALIVE_DELAY,
        peer_timeout: float = PEER_TIMEOUT,
        backoff_min: float = BACKOFF_MIN,
        backoff_max: float = BACKOFF_MAX,
        queue_byte_cap: int = LINK_QUEUE_BYTES,
        rng: random.Random | None = None,
    ) -> None:
        self.log = logger or logging.getLogger("axl.link")
        self._settings = LinkSettings(
            identity=identity,
            handler=handler,
            allowed_keys=frozenset(allowed_keys),
            logger=self.log,
            handshake_timeout=handshake_timeout,
            keepalive_delay=keepalive_delay,
            peer_timeout=peer_timeout,
            queue_byte_cap=queue_byte_cap,
        )
        self._backoff_min = backoff_min
        self._backoff_max = backoff_max
        self._rng = rng or random.Random()
        self._servers: list[tuple[PeerURI, Listener]] = []
        self._peers: dict[str, _Peer] = {}
        self._inbound: set[Connection] = set()
        self._discovered: dict[str, _Peer] = {}
        self._discovery_settings = replace(self._settings, allowed_keys=frozenset())
        self._stopping = False
        self._dial_failures = DialFailureLog()

    @property
    def refusals(self) -> Counter[str]:
        """Links closed for going beyond a budget, by budget name."""
        return self._settings.refusals

    # --- listening -----------------------------------------------------------

    async def start(self, listen_uris: Sequence[str | PeerURI]) -> None:
        """Bind every listener; a bind failure raises ListenFailed to the caller."""
        for uri in (_as_uri(text, parse_listen_uri) for text in listen_uris):
            try:
                server = await listen(uri, lambda uri=uri: self._accept(uri), self._settings)
            except OSError as exc:
                raise ListenFailed(uri, exc) from None
            self._servers.append((uri, server))
            self.log.info("listening on %s", self._bound_uri(uri, server))

    def listen_uris(self) -> list[PeerURI]:
        """The listeners with their actual ports (useful after binding port 0)."""
        return [self._bound_uri(uri, server) for uri, server in self._servers]

    @staticmethod
    def _bound_uri(uri: PeerURI, server: Listener) -> PeerURI:
        return replace(uri, port=server.port or uri.port)

    async def listen_discovered(self, uri: PeerURI) -> Listener:
        """A listener for LAN discovery; the caller closes it. As in Go,
        AllowedPublicKeys does not apply to multicast links."""
        settings = self._discovery_settings
        return await listen(uri, lambda: self._accept(uri, settings), settings)

    def _accept(self, uri: PeerURI, settings: LinkSettings | None = None) -> Connection:
        connection = Connection(settings or self._settings, uri, inbound=True)
        self._inbound.add(connection)
        connection.done.add_done_callback(lambda _: self._inbound.discard(connection))
        return connection

    # --- dialing -------------------------------------------------------------

    def add_peer(self, uri: str | PeerURI) -> PeerURI:
        """Dial `uri` now and keep it connected until removed or stopped.

        Like Go, a second peer with the same address is refused.
        """
        peer_uri = _as_uri(uri)
        if peer_uri.peer_key in self._peers:
            raise PeerAlreadyConfigured(f"peer {peer_uri.peer_key} is already configured")
        peer = _Peer(peer_uri)
        self._peers[peer_uri.peer_key] = peer
        peer.task = start_task(self._dial_forever(peer), self.log, f"dialer for {peer_uri}")
        return peer_uri

    def remove_peer(self, uri: str | PeerURI) -> None:
        """Stop dialing `uri` and close its link, if any."""
        peer = self._peers.pop(_as_uri(uri).peer_key, None)
        if peer is None:
            raise PeerNotConfigured(f"peer {uri} is not configured")
        if peer.task is not None:
            peer.task.cancel()
        if peer.connection is not None:
            peer.connection.shutdown("peer removed")
        self._dial_failures.forget(str(peer.uri))

    async def _dial_forever(self, peer: _Peer) -> None:
        """Dial, wait for the link to end, back off, dial again: until removed or stopped.

        An unexpected error in one attempt is logged and counts as a failed
        attempt; it must never end the loop, or the peer stays down for good.
        """
        backoff = self._backoff_for(peer.uri)
        while not self._stopping:
            dial_error = None
            try:
                connection = await self._connect(peer)
                if isinstance(connection, str):
                    dial_error = connection
                elif await self._run_link(peer, connection):
                    backoff.reset()
            except Exception:
                self.log.exception("dialing %s failed unexpectedly", peer.uri)
            if peer.to_self:
                self.log.warning("%s reaches this node itself: not redialed (remove it from Peers)", peer.uri)
                return
            delay = backoff.next_delay()
            if dial_error is not None:
                self._log_dial_failure(peer.uri, dial_error, delay)
            self.log.debug("redialing %s in %.1fs", peer.uri, delay)
            await asyncio.sleep(delay)

    def _log_dial_failure(self, uri: PeerURI, error: str, retry: float | None) -> None:
        for line in self._dial_failures.lines(str(uri), error, retry, time.monotonic()):
            self.log.info("%s", line)

    def _backoff_for(self, uri: PeerURI) -> _Backoff:
        """A URI's `maxbackoff` lowers the ceiling of its redial delay (the
        parser refuses less than 30 s); it never raises it above the node's."""
        maximum = min(self._backoff_max, uri.max_backoff or self._backoff_max)
        return _Backoff(self._backoff_min, maximum, self._rng)

    async def dial_discovered(self, uri: PeerURI) -> bool:
        """Dial a peer found by LAN discovery once, not retried; returns when
        the link ends (True if it had come up)."""
        peer = _Peer(uri)
        self._discovered[str(uri)] = peer
        try:
            connection = await self._connect(peer, self._discovery_settings)
            if isinstance(connection, str):
                self._log_dial_failure(uri, connection, None)
                return False
            return await self._run_link(peer, connection)
        finally:
            self._discovered.pop(str(uri), None)

    async def _connect(self, peer: _Peer, settings: LinkSettings | None = None) -> Connection | str:
        """One connection attempt: the connection, or why it failed."""
        uri = peer.uri
        settings = settings or self._settings
        try:
            connection = await asyncio.wait_for(
                dial(uri, lambda: Connection(settings, uri, inbound=False), settings),
                self._settings.handshake_timeout,
            )
        except OSError as exc:
            error = _dial_failure(uri, exc)
            peer.failed(error)
            return error
        assert isinstance(connection, Connection)
        return connection

    async def _run_link(self, peer: _Peer, connection: Connection) -> bool:
        """Wait for a dialed connection to end; True if its handshake succeeded."""
        peer.connection = connection
        try:
            return await connection.done
        finally:
            peer.connection = None
            peer.to_self = connection.to_self
            peer.failed(connection.close_reason or "remote side closed the connection")

    # --- status and shutdown ---------------------------------------------------

    def _outbound(self) -> list[_Peer]:
        return [*self._peers.values(), *self._discovered.values()]

    def links(self) -> list[Link]:
        connections = [p.connection for p in self._outbound()] + list(self._inbound)
        return [c.link for c in connections
                if c is not None and c.link is not None and not c.closed]

    def peers_status(self) -> list[dict[str, Any]]:
        """One entry per configured peer (up or not) and per inbound link.

        `last_error` and `last_error_at` (monotonic) say why a configured
        peer's last attempt or peering ended; "" and 0.0 before any."""
        status = [self._status(str(p.uri), False, p.connection, p.uri, p)
                  for p in self._peers.values()]
        status += [self._status(str(p.uri), False, p.connection, p.uri, p)
                   for p in self._discovered.values() if p.connection is not None]
        status += [self._status(c.uri_text, True, c, c.uri)
                   for c in self._inbound if c.link is not None and not c.closed]
        return status

    @staticmethod
    def _status(uri: str, inbound: bool, connection: Connection | None,
                configured: PeerURI, peer: _Peer | None = None) -> dict[str, Any]:
        link = connection.link if connection is not None and not connection.closed else None
        return {
            "uri": uri,
            "scheme": configured.scheme,
            "up": link is not None,
            "inbound": inbound,
            "public_key": link.remote_key.hex() if link else "",
            "priority": link.priority if link else configured.priority,
            "link": link,
            "last_error": peer.last_error if peer is not None else "",
            "last_error_at": peer.last_error_at if peer is not None else 0.0,
        }

    async def stop(self) -> None:
        """Close listeners, dialers and links; returns within about a second."""
        self._stopping = True
        for _, server in self._servers:
            server.close()
        tasks = [p.task for p in self._peers.values() if p.task is not None]
        for task in tasks:
            task.cancel()
        connections = [p.connection for p in self._outbound() if p.connection]
        connections += list(self._inbound)
        for connection in connections:
            connection.shutdown("shutting down")
            connection.abort()
        waits = tasks + [asyncio.ensure_future(s.wait_closed()) for _, s in self._servers]
        if waits:
            await asyncio.wait(waits, timeout=STOP_TIMEOUT)
        self._servers.clear()
        self._peers.clear()
        self._discovered.clear()
        self._inbound.clear()


def _dial_failure(uri: PeerURI, exc: OSError) -> str:
    """A dial error for the log; a TLS server that drops our hello is most often pre-1.3."""
    detail = str(exc) or type(exc).__name__
    if uri.scheme in ("tls", "sockstls", "wss") and isinstance(exc, (ssl.SSLError, ConnectionResetError)):
        detail += " (TLS handshake failed; our dialers require TLS 1.3)"
    return detail
