"""One link's asyncio edge: the sans-IO LinkConnection wired to a transport.

`Connection` is the asyncio.Protocol (any transport fits: TCP, TLS, or the
adapter over WebSocket and QUIC streams). Every protocol decision (meta
handshake, framing, liveness) is the `LinkConnection`'s in
`axl.link.protocol`; this module moves bytes into it, writes what it
produces, keeps one timer at its deadline, queues traffic fairly under the
transport's back-pressure and, once the handshake succeeds, exposes a
`Link` to the node.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import ssl
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

from axl.eventloop import running_loop
from axl.identity import NodeIdentity, peer_id
from axl.link.counters import LinkCounters, smoothed_rtt
from axl.link.protocol import (
    FrameReceived, HandshakeDone, LinkClosed, LinkConnection, LinkEvent, LinkPolicy,
)
from axl.link.queue import FairQueue
from axl.link.tls import peer_certificate_key
from axl.link.uri import PeerURI
from axl.wire import DecodeError

if TYPE_CHECKING:
    from axl.link.meta import LinkMeta

_link_ids = itertools.count(1)
CLOSE_GRACE = 1.0
COALESCE_BYTES = 64 * 1024
READ_BUFFER_BYTES: Final = 128 * 1024
"""The read buffer the link connections of a thread share: room for two
64 KiB frames, so that half of a bulk transfer's frames lie whole inside one
read and the frame decoder copies them once (a 64 KiB buffer split nearly
every frame). 256 KiB cost the receiver less CPU still, but its transfers
ran slower (docs/performance-log.md, "Bulk: where a one-hop transfer goes")."""
CERTIFIED_SCHEMES = frozenset({"tls", "sockstls"})
"""Dialed schemes whose server is a node listener with a certificate made from its key
(wss reaches a web server or reverse proxy, whose certificate is its own)."""


class LinkHandler(Protocol):
    """What the node implements to hear about links and their frames.

    Defined here, beside the settings that hold one, and not under
    TYPE_CHECKING: a compiled dataclass resolves its field types at import."""

    def link_up(self, link: Link) -> None: ...

    def frame_received(self, link: Link, ftype: int, body: bytes) -> None: ...

    def link_down(self, link: Link, reason: str) -> None: ...


@dataclass
class LinkSettings:
    """Everything a connection needs from its manager, fixed per manager."""

    identity: NodeIdentity
    handler: LinkHandler
    allowed_keys: frozenset[bytes]
    logger: logging.Logger
    handshake_timeout: float
    keepalive_delay: float
    peer_timeout: float
    queue_byte_cap: int
    server_tls: ssl.SSLContext | None = None
    client_tls: ssl.SSLContext | None = None
    # budget name -> links closed for going beyond it (axl.budgets), for /metrics
    refusals: Counter[str] = field(default_factory=Counter)


class Link:
    """An established link as the node sees it."""

    def __init__(self, connection: Connection, meta: LinkMeta, priority: int) -> None:
        self.link_id = next(_link_ids)
        self.remote_key = meta.key
        self.priority = priority
        self.uri = connection.uri_text
        self.inbound = connection.inbound
        self.remote_addr = connection.remote_addr
        self.counters = connection.counters
        # When the handshake finished (monotonic): the peering's uptime.
        self.since = time.monotonic()
        self._connection = connection

    @property
    def peer_id(self) -> str:
        return peer_id(self.remote_key)

    @property
    def is_up(self) -> bool:
        return not self._connection.closed

    @property
    def queued_bytes(self) -> int:
        return self._connection.queue.byte_count

    @property
    def dropped_frames(self) -> int:
        return self._connection.queue.dropped

    def rtt(self) -> float | None:
        """The kernel's smoothed round-trip time on this link's socket, in seconds."""
        return smoothed_rtt(self._connection.socket)

    def send_frame(self, frame: bytes) -> None:
        """Write a tree frame or keepalive now, ahead of any queued traffic."""
        self._connection.write_frame(frame)

    def send_traffic(self, frame: bytes, flow: bytes) -> None:
        """Write a frame of type 6-9, queueing it fairly under back-pressure."""
        self._connection.send_traffic(frame, flow)

    def close(self, reason: str) -> None:
        self._connection.shutdown(reason)

    def __repr__(self) -> str:
        direction = "in" if self.inbound else "out"
        return f"<Link {self.link_id} {self.peer_id[:16]} {direction} {self.uri}>"


class Connection(asyncio.BufferedProtocol):
    """Protocol for one byte-stream connection, from connect to close.

    A buffered protocol: the transport reads into the read buffer the links
    of its thread share (`get_buffer`), and TLS decrypts as many records
    into it as have come in. As a plain protocol, every TLS read allocated a 256 KiB object to
    return at most one 16 KiB record, and the records of one read were
    joined again. Adapters over WebSocket and QUIC streams still hand their
    bytes to `data_received`.
    """

    def __init__(self, settings: LinkSettings, uri: PeerURI, inbound: bool) -> None:
        self.settings = settings
        self.uri = uri
        self.inbound = inbound
        self.uri_text = str(uri)
        self.remote_addr: tuple[Any, ...] | None = None
        self.link: Link | None = None
        self.closed = False
        # Why it closed, for the link manager's last error ("" while open).
        self.close_reason = ""
        # The handshake found our own key: redialing would find it again.
        self.to_self = False
        self.counters = LinkCounters()
        self.socket: Any = None
        self.queue = FairQueue(byte_cap=settings.queue_byte_cap)
        self._loop = running_loop()
        self.done: asyncio.Future[bool] = self._loop.create_future()
        self._transport: asyncio.Transport | None = None
        self._protocol: LinkConnection | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._flush_scheduled = False
        self._paused = False

    @property
    def log(self) -> logging.Logger:
        return self.settings.logger

    @property
    def who(self) -> str:
        """How logs name the other end before its key is known."""
        if self.inbound and self.remote_addr:
            return f"{self.uri.scheme}://{_format_addr(self.remote_addr)}"
        return self.uri_text

    # --- connection set-up -------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; both fit.
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        # A UNIX socket's peer is a path (most often ""), not (host, port).
        self.remote_addr = peer if isinstance(peer, tuple) else None
        self.socket = transport.get_extra_info("socket")
        enable_tcp_keepalive(self.socket)
        if self.inbound:
            self.uri_text = self.who
        settings = self.settings
        certified = not self.inbound and self.uri.scheme in CERTIFIED_SCHEMES
        policy = LinkPolicy(settings.identity, self.inbound, self.uri.priority, self.uri.password,
                            frozenset(self.uri.pinned_keys), settings.allowed_keys,
                            certified, peer_certificate_key(transport) if certified else None)
        self._protocol = LinkConnection(policy, self._loop.time(), counters=self.counters,
                                        handshake_timeout=settings.handshake_timeout,
                                        keepalive_delay=settings.keepalive_delay,
                                        peer_timeout=settings.peer_timeout)
        self._flush()
        self._arm_timer(self._protocol)

    # --- receiving -----------------------------------------------------------

    def get_buffer(self, sizehint: int) -> memoryview:
        """One buffer for every link: a transport fills it and calls
        buffer_updated at once, within one callback of the single-threaded
        loop, and the link protocol keeps nothing of it past that call."""
        return _shared_read_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        """The view is handed on as it is: the link protocol copies what it
        keeps (its handshake and frame buffers) before the next read."""
        self.data_received(_shared_read_buffer()[:nbytes])

    def data_received(self, data: bytes | memoryview) -> None:
        protocol = self._protocol
        if self.closed or protocol is None:
            return
        protocol.receive_data(data, self._loop.time())
        self._handle_events(protocol)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        protocol = self._protocol
        if protocol is None:
            self._close_transport()
            return
        protocol.connection_lost(None if exc is None else str(exc))
        self._handle_events(protocol)

    def _handle_events(self, protocol: LinkConnection) -> None:
        while not self.closed and (event := protocol.next_event()) is not None:
            self._handle(event)
        if not self.closed:
            self._arm_timer(protocol)
            if protocol.pending_output:
                self._schedule_flush()

    def _handle(self, event: LinkEvent) -> None:
        if isinstance(event, FrameReceived):
            link = self.link
            assert link is not None  # frames come only after HandshakeDone set it
            try:
                self.settings.handler.frame_received(link, event.ftype, event.body)
            except DecodeError as exc:
                self.shutdown(f"malformed frame: {exc}")
            except Exception:
                self.log.exception("frame handler failed on link %s", link.peer_id)
                self.shutdown("internal error in frame handler")
        elif isinstance(event, HandshakeDone):
            self._establish(event.meta, event.priority)
        elif isinstance(event, LinkClosed):
            if event.established:
                self.shutdown(event.reason)
            else:
                self.log.warning("handshake with %s failed: %s", self.who, event.reason)
                self.close_reason = f"handshake failed: {event.reason}"
                self.to_self = event.to_self
                self._close_transport()

    def _establish(self, meta: LinkMeta, priority: int) -> None:
        self.link = Link(self, meta, priority)
        self.log.info("peering up: %s %s inbound=%s priority=%d",
                      self.link.peer_id, self.uri_text, self.inbound, priority)
        try:
            self.settings.handler.link_up(self.link)
        except Exception:
            self.log.exception("link_up handler failed for %s", self.link.peer_id)
            self.shutdown("internal error in link_up")

    # --- sending -------------------------------------------------------------

    def write_frame(self, frame: bytes) -> None:
        """Frames written in one event-loop turn leave in one transport write:
        one TLS record batch and one system call instead of one per frame.
        Once COALESCE_BYTES are waiting they are written at once, so the
        transport's back-pressure (pause_writing) starts exactly as before."""
        protocol = self._protocol
        if self.closed or protocol is None:
            return
        protocol.send_frame(frame, self._loop.time())
        if protocol.pending_output >= COALESCE_BYTES:
            self._flush()
        else:
            self._schedule_flush()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Write the waiting frames, then move the liveness timer (once per
        write, not once per frame: sending a frame can start a deadline)."""
        self._flush_scheduled = False
        protocol = self._protocol
        if protocol is None:
            return
        data = protocol.data_to_send()
        if data and self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)
        if not self.closed:
            self._arm_timer(protocol)

    def send_traffic(self, frame: bytes, flow: bytes) -> None:
        if self.closed:
            return
        if self._paused or len(self.queue):
            self.queue.push(frame, flow, self._loop.time())
        else:
            self.write_frame(frame)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        while self._writable() and (frame := self.queue.pop()) is not None:
            self.write_frame(frame)

    def _writable(self) -> bool:
        """Asked again after each write: a write may pause the transport or close the link.
        (A method, so that no compiler takes `_paused` as the False set above.)"""
        return not self._paused and not self.closed

    # --- the protocol's timer -----------------------------------------------

    def _arm_timer(self, protocol: LinkConnection) -> None:
        """Keep one timer at or before the protocol's next deadline; firing
        early is harmless, so later deadlines never reschedule it."""
        due = protocol.get_timer()
        if due is None or (self._timer is not None and self._timer_at <= due):
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = due
        self._timer = self._loop.call_at(due, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self.closed:
            return
        protocol = self._protocol
        assert protocol is not None  # armed only once connection_made set it
        protocol.handle_timer(self._loop.time())
        self._handle_events(protocol)

    # --- closing -------------------------------------------------------------

    def shutdown(self, reason: str) -> None:
        """Close once; tell the node if the link had come up."""
        if self.closed:
            return
        self.close_reason = reason
        if self._protocol is not None:
            self._protocol.close(reason)
        self._close_transport()
        if self.link is not None:
            self.log.info("peering down: %s: %s", self.link.peer_id, reason)
            try:
                self.settings.handler.link_down(self.link, reason)
            except Exception:
                self.log.exception("link_down handler failed for %s", self.link.peer_id)

    def _close_transport(self) -> None:
        self.closed = True
        self.queue.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._flush()
        transport = self._transport
        if transport is not None:
            transport.close()
            self._loop.call_later(CLOSE_GRACE, self.abort)
        if not self.done.done():
            self.done.set_result(self.link is not None)

    def abort(self) -> None:
        """Drop the connection without waiting for buffers or TLS close."""
        if self._transport is not None:
            self._transport.abort()


# Kernel liveness on link sockets: keepalive probes after 10 s of silence (3,
# 3 s apart), and at most 20 s for written bytes to go unacknowledged.
# Ironwood's own deadline is armed only by frames other than keepalives, so a
# node that last wrote just a keepalive (a child whose parent's wire went
# dead) would otherwise keep a dead link, and the tree would route into it,
# until its 4-minute refresh. Both are TCP's, invisible to ironwood.
KEEPALIVE_OPTIONS = (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 3), ("TCP_KEEPCNT", 3),
                     ("TCP_USER_TIMEOUT", 20_000))


def enable_tcp_keepalive(sock: Any) -> None:
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in KEEPALIVE_OPTIONS:
            if hasattr(socket, name):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
    except OSError as exc:
        logging.getLogger("axl.link").debug("TCP keepalive not enabled: %s", exc)


def _format_addr(addr: tuple[Any, ...]) -> str:
    """`host:port`; a link-local IPv6 peer keeps its interface (`%eth0`),
    which some event loops leave out of the host and give as a scope id."""
    host, port = addr[0], addr[1]
    if len(addr) == 4 and addr[3] and "%" not in host:
        try:
            host = f"{host}%{socket.if_indextoname(addr[3])}"
        except OSError:
            host = f"{host}%{addr[3]}"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


_per_thread: Final = threading.local()


def _shared_read_buffer() -> memoryview:
    """The read buffer of this thread's links (a loop runs in one thread)."""
    buffer = getattr(_per_thread, "read_buffer", None)
    if buffer is None:
        buffer = _per_thread.read_buffer = memoryview(bytearray(READ_BUFFER_BYTES))
    return buffer
