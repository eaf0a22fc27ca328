"""One link's transport edge: TLS, the meta handshake, framing and liveness
wired to an asyncio transport.

`Connection` is the asyncio.Protocol; once the handshake succeeds it
exposes a `Link` to the node. All protocol decisions are delegated to the
sans-IO pieces (meta, framing, liveness, queue); this module only moves
bytes and timers.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from axl.identity import NodeIdentity, peer_id
from axl.link.counters import LinkCounters, smoothed_rtt
from axl.link.framing import KEEPALIVE_FRAME, FrameDecoder, FrameType
from axl.link.liveness import LivenessAction, LivenessMonitor
from axl.link.meta import LinkMeta, decode_meta, encode_meta, meta_bytes_needed
from axl.link.queue import FairQueue
from axl.link.tls import peer_certificate_key
from axl.link.uri import PeerURI
from axl.wire import DecodeError, decode_uvarint

if TYPE_CHECKING:
    from axl.link.manager import LinkHandler

_link_ids = itertools.count(1)
_FIRST_HANDLED_TYPE = FrameType.SIGREQ
CLOSE_GRACE = 1.0
COALESCE_BYTES = 64 * 1024
CERTIFIED_SCHEMES = frozenset({"tls", "sockstls"})
"""Dialed schemes whose server is a node listener with a certificate made from its key
(wss reaches a web server or reverse proxy, whose certificate is its own)."""


class HandshakeRefused(Exception):
    """The peer completed the meta exchange but may not be linked to."""


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


def frame_type_of(frame: bytes) -> int:
    """The type byte of an encoded frame, just past its length prefix."""
    if frame[0] < 0x80:
        return frame[1]
    _, start = decode_uvarint(frame)
    return frame[start]


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
        self._connection = connection

    @property
    def peer_id(self) -> str:
        return peer_id(self.remote_key)

    @property
    def is_up(self) -> bool:
        return not self._connection.closed

    @property
    def queued_bytes(self) -> int:
        return self._connection.queue.bytes

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


class Connection(asyncio.Protocol):
    """Protocol for one TCP connection, from connect to close."""

    def __init__(self, settings: LinkSettings, uri: PeerURI, inbound: bool) -> None:
        self.settings = settings
        self.uri = uri
        self.inbound = inbound
        self.uri_text = str(uri)
        self.remote_addr: tuple[Any, ...] | None = None
        self.link: Link | None = None
        self.closed = False
        self.counters = LinkCounters()
        self.socket: Any = None
        self.queue = FairQueue(byte_cap=settings.queue_byte_cap)
        self.done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._raw_transport: asyncio.Transport | None = None
        self._handshake_buf = bytearray()
        self._handshake_timer: asyncio.TimerHandle | None = None
        self._decoder = FrameDecoder()
        self._monitor = LivenessMonitor(settings.keepalive_delay, settings.peer_timeout)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._paused = False
        self._unwritten: list[bytes] = []
        self._unwritten_bytes = 0

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
        self._raw_transport = transport  # type: ignore[assignment]
        self.remote_addr = transport.get_extra_info("peername")
        self.socket = transport.get_extra_info("socket")
        enable_tcp_keepalive(self.socket)
        if self.inbound:
            self.uri_text = self.who
        self._handshake_timer = self._loop.call_later(
            self.settings.handshake_timeout, self._handshake_expired)
        self._begin_meta(transport)  # type: ignore[arg-type]

    def _begin_meta(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        meta = encode_meta(self.settings.identity, self.uri.priority, self.uri.password)
        transport.write(meta)

    def _handshake_expired(self) -> None:
        self._handshake_timer = None
        self._fail_handshake("handshake timeout")

    def _fail_handshake(self, reason: str) -> None:
        if self.closed:
            return
        self.log.warning("handshake with %s failed: %s", self.who, reason)
        self._close_transport()

    def _receive_meta(self, data: bytes) -> None:
        self._handshake_buf += data
        try:
            needed = meta_bytes_needed(self._handshake_buf)
            if len(self._handshake_buf) < needed:
                return
            meta = decode_meta(self._handshake_buf[:needed], self.uri.password)
            self._check_remote(meta)
        except (DecodeError, HandshakeRefused) as exc:
            self._fail_handshake(str(exc))
            return
        rest = bytes(self._handshake_buf[needed:])
        self._handshake_buf = bytearray()
        self._establish(meta)
        if rest and not self.closed:
            self._receive_frames(rest)

    def _check_remote(self, meta: LinkMeta) -> None:
        """Go's post-handshake checks, in Go's order, after our certificate check."""
        if not self.inbound and self.uri.scheme in CERTIFIED_SCHEMES:
            cert_key = peer_certificate_key(self._raw_transport)
            if cert_key != meta.key:
                raise HandshakeRefused(
                    f"TLS certificate key {cert_key.hex() if cert_key else '(not Ed25519)'} "
                    f"differs from the meta key {meta.key.hex()}")
        pinned = self.uri.pinned_keys
        if not self.inbound and pinned and meta.key not in pinned:
            raise HandshakeRefused(f"key {meta.key.hex()} does not match the pinned key")
        allowed = self.settings.allowed_keys
        if self.inbound and allowed and meta.key not in allowed:
            raise HandshakeRefused(f"key {meta.key.hex()} is not in AllowedPublicKeys")
        if meta.key == self.settings.identity.public_key:
            raise HandshakeRefused("connection to our own key")

    def _establish(self, meta: LinkMeta) -> None:
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
            self._handshake_timer = None
        priority = max(self.uri.priority, meta.priority)
        self.link = Link(self, meta, priority)
        self.log.info("peering up: %s %s inbound=%s priority=%d",
                      self.link.peer_id, self.uri_text, self.inbound, priority)
        try:
            self.settings.handler.link_up(self.link)
        except Exception:
            self.log.exception("link_up handler failed for %s", self.link.peer_id)
            self.shutdown("internal error in link_up")

    # --- receiving -----------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if self.link is None:
            self._receive_meta(data)
        else:
            self._receive_frames(data)

    def _receive_frames(self, data: bytes) -> None:
        link = self.link
        assert link is not None
        handler = self.settings.handler
        monitor = self._monitor
        counters = self.counters
        counters.bytes_in += len(data)
        now = self._loop.time()
        try:
            for ftype, body in self._decoder.feed(data):
                counters.frames_in += 1
                monitor.on_received(ftype, now)
                if ftype >= _FIRST_HANDLED_TYPE:
                    handler.frame_received(link, ftype, body)
                if self.closed:
                    return
        except DecodeError as exc:
            self.shutdown(f"malformed frame: {exc}")
            return
        except Exception:
            self.log.exception("frame handler failed on link %s", link.peer_id)
            self.shutdown("internal error in frame handler")
            return
        self._arm_timer()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            reason = f"connection lost: {exc}"
        elif self._decoder.pending or self._handshake_buf:
            reason = "connection closed mid-frame"
        else:
            reason = "connection closed by peer"
        if self.link is None:
            self._fail_handshake(reason)
        self.shutdown(reason)

    # --- sending -------------------------------------------------------------

    def write_frame(self, frame: bytes) -> None:
        """Frames written in one event-loop turn leave in one transport write:
        one TLS record batch and one system call instead of one per frame.
        Once COALESCE_BYTES are waiting they are written at once, so the
        transport's back-pressure (pause_writing) starts exactly as before."""
        if self.closed or self._transport is None:
            return
        if not self._unwritten:
            self._loop.call_soon(self._write_unwritten)
        self._unwritten.append(frame)
        self._unwritten_bytes += len(frame)
        self.counters.bytes_out += len(frame)
        self.counters.frames_out += 1
        if self._unwritten_bytes >= COALESCE_BYTES:
            self._write_unwritten()
        self._monitor.on_sent(frame_type_of(frame), self._loop.time())
        self._arm_timer()

    def _write_unwritten(self) -> None:
        frames = self._unwritten
        if not frames:
            return
        self._unwritten = []
        self._unwritten_bytes = 0
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(frames[0] if len(frames) == 1 else b"".join(frames))

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
        while not self._paused and not self.closed:
            frame = self.queue.pop()
            if frame is None:
                return
            self.write_frame(frame)

    # --- liveness timer ------------------------------------------------------

    def _arm_timer(self) -> None:
        """Keep one timer at or before the monitor's next deadline; firing
        early is harmless, so later deadlines never reschedule it."""
        due = self._monitor.next_deadline()
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
        action = self._monitor.poll(self._loop.time())
        if action is LivenessAction.TIMEOUT:
            self.shutdown("peer timeout")
            return
        if action is LivenessAction.SEND_KEEPALIVE:
            self.write_frame(KEEPALIVE_FRAME)
        self._arm_timer()

    # --- closing -------------------------------------------------------------

    def shutdown(self, reason: str) -> None:
        """Close once; tell the node if the link had come up."""
        if self.closed:
            return
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
        for timer in (self._timer, self._handshake_timer):
            if timer is not None:
                timer.cancel()
        self._timer = self._handshake_timer = None
        self._write_unwritten()
        transport = self._transport or self._raw_transport
        if transport is not None:
            transport.close()
            self._loop.call_later(CLOSE_GRACE, self.abort)
        if not self.done.done():
            self.done.set_result(self.link is not None)

    def abort(self) -> None:
        """Drop the connection without waiting for buffers or TLS close."""
        for transport in (self._transport, self._raw_transport):
            if transport is not None:
                transport.abort()


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
    host, port = addr[0], addr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
