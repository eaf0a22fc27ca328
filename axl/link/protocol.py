"""One link's protocol, sans-IO: meta handshake, framing and liveness.

`LinkConnection` is what a peering is between two byte streams: it writes
our meta header at once, reads the peer's (with Go's post-handshake checks
and a handshake deadline), then splits the stream into frames and keeps
ironwood's keepalive and read deadlines. It is driven aioquic-style:
`receive_data(data, now)`, `send_frame(frame, now)`, `data_to_send()`,
`get_timer()`, `handle_timer(now)` and `next_event()`, which returns
`HandshakeDone`, `FrameReceived` and finally one `LinkClosed`. The asyncio
protocol in `axl.link.connection` and the simulator both drive it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final

from axl.identity import NodeIdentity
from axl.link.counters import LinkCounters
from axl.link.framing import KEEPALIVE_FRAME, FrameDecoder, FrameType
from axl.link.liveness import KEEPALIVE_DELAY, PEER_TIMEOUT, LivenessAction, LivenessMonitor
from axl.link.meta import LinkMeta, decode_meta, encode_meta, meta_bytes_needed
from axl.wire import DecodeError, decode_uvarint

HANDSHAKE_TIMEOUT = 6.0
# Types 0 and 1 are the link's own (padding and keepalive); the node sees the rest.
FIRST_NODE_TYPE: Final = FrameType.SIGREQ


class HandshakeRefused(Exception):
    """The peer completed the meta exchange but may not be linked to."""


class LinkToSelf(HandshakeRefused):
    """The peer's key is our own: a redial would reach ourselves again, so
    the dialer stops (yggdrasil 0.5.13)."""


@dataclass
class LinkEvent:
    pass


@dataclass
class HandshakeDone(LinkEvent):
    """The peer's meta arrived and passed the checks; frames follow."""

    meta: LinkMeta
    priority: int


@dataclass(init=False)
class FrameReceived(LinkEvent):
    ftype: int
    body: bytes

    def __init__(self, ftype: int, body: bytes) -> None:
        self.ftype = ftype
        self.body = body


@dataclass
class LinkClosed(LinkEvent):
    """The link is over; `established` says whether HandshakeDone came first."""

    reason: str
    established: bool
    to_self: bool = False


@dataclass(frozen=True)
class LinkPolicy:
    """Who we are and whom we accept on this connection."""

    identity: NodeIdentity
    inbound: bool
    priority: int = 0
    password: bytes = b""
    pinned_keys: frozenset[bytes] = frozenset()
    allowed_keys: frozenset[bytes] = frozenset()
    # A dialed node listener's TLS certificate is made from its key: it must match the meta's.
    check_certificate: bool = False
    certificate_key: bytes | None = None


def frame_type_of(frame: bytes) -> int:
    """The type byte of an encoded frame, just past its length prefix."""
    if frame[0] < 0x80:
        return frame[1]
    _, start = decode_uvarint(frame)
    return frame[start]


class LinkConnection:
    """The state of one link from its first byte to its close."""

    def __init__(self, policy: LinkPolicy, now: float, *, counters: LinkCounters | None = None,
                 handshake_timeout: float = HANDSHAKE_TIMEOUT,
                 keepalive_delay: float = KEEPALIVE_DELAY,
                 peer_timeout: float = PEER_TIMEOUT) -> None:
        self.policy = policy
        self.meta: LinkMeta | None = None
        self.closed = False
        self.counters = counters if counters is not None else LinkCounters()
        self._handshake_buf = bytearray()
        self._handshake_deadline: float | None = now + handshake_timeout
        self._decoder = FrameDecoder()
        self._monitor = LivenessMonitor(keepalive_delay, peer_timeout)
        self._events: deque[LinkEvent] = deque()
        self._out: list[bytes] = [encode_meta(policy.identity, policy.priority, policy.password)]
        self._out_bytes = len(self._out[0])

    @property
    def established(self) -> bool:
        return self.meta is not None

    @property
    def pending_input(self) -> int:
        """Bytes of an unfinished meta header or frame."""
        return len(self._handshake_buf) + self._decoder.pending

    @property
    def pending_output(self) -> int:
        return self._out_bytes

    # -- input ----------------------------------------------------------

    def receive_data(self, data: bytes | memoryview, now: float) -> None:
        """Take bytes from the stream; `data` is not kept (a view into the
        transport's read buffer is reused by the next read)."""
        if self.closed:
            return
        if self.meta is None:
            data = self._receive_meta(data)
            if not data:
                return
        self._receive_frames(data, now)

    def _receive_meta(self, data: bytes | memoryview) -> bytes:
        """Buffer until the peer's meta is whole; returns the bytes past it."""
        buf = self._handshake_buf
        buf += data
        try:
            needed = meta_bytes_needed(buf)
            if len(buf) < needed:
                return b""
            meta = decode_meta(bytes(buf[:needed]), self.policy.password)
            self._check_remote(meta)
        except (DecodeError, HandshakeRefused) as exc:
            self._close(str(exc), to_self=isinstance(exc, LinkToSelf))
            return b""
        rest = bytes(buf[needed:])
        self._handshake_buf = bytearray()
        self._handshake_deadline = None
        self.meta = meta
        self._events.append(HandshakeDone(meta, max(self.policy.priority, meta.priority)))
        return rest

    def _check_remote(self, meta: LinkMeta) -> None:
        """Go's post-handshake checks, in Go's order, after our certificate check."""
        policy = self.policy
        if policy.check_certificate and policy.certificate_key != meta.key:
            cert_key = policy.certificate_key
            raise HandshakeRefused(
                f"TLS certificate key {cert_key.hex() if cert_key else '(not Ed25519)'} "
                f"differs from the meta key {meta.key.hex()}")
        if meta.key == policy.identity.public_key:
            raise LinkToSelf("connection to our own key")
        if not policy.inbound and policy.pinned_keys and meta.key not in policy.pinned_keys:
            raise HandshakeRefused(f"key {meta.key.hex()} does not match the pinned key")
        if policy.inbound and policy.allowed_keys and meta.key not in policy.allowed_keys:
            raise HandshakeRefused(f"key {meta.key.hex()} is not in AllowedPublicKeys")

    def _receive_frames(self, data: bytes | memoryview, now: float) -> None:
        monitor = self._monitor
        events = self._events
        counters = self.counters
        counters.bytes_in += len(data)
        try:
            for ftype, body in self._decoder.feed(data):
                counters.frames_in += 1
                monitor.on_received(ftype, now)
                if ftype >= FIRST_NODE_TYPE:
                    events.append(FrameReceived(ftype, body))
        except DecodeError as exc:
            self._close(f"malformed frame: {exc}")

    def connection_lost(self, error: str | None = None) -> None:
        """The byte stream ended under us."""
        if self.closed:
            return
        if error is not None:
            self._close(f"connection lost: {error}")
        elif self.pending_input:
            self._close("connection closed mid-frame")
        else:
            self._close("connection closed by peer")

    # -- output ---------------------------------------------------------

    def send_frame(self, frame: bytes, now: float) -> None:
        """Queue one encoded frame (it counts for liveness now)."""
        if self.closed:
            return
        self._out.append(frame)
        self._out_bytes += len(frame)
        self.counters.bytes_out += len(frame)
        self.counters.frames_out += 1
        self._monitor.on_sent(frame_type_of(frame), now)

    def data_to_send(self) -> bytes:
        out = self._out
        if not out:
            return b""
        self._out = []
        self._out_bytes = 0
        return out[0] if len(out) == 1 else b"".join(out)

    def close(self, reason: str) -> None:
        """Close from our side (the node asked, or an error above)."""
        if not self.closed:
            self._close(reason)

    def next_event(self) -> LinkEvent | None:
        return self._events.popleft() if self._events else None

    # -- time -----------------------------------------------------------

    def get_timer(self) -> float | None:
        if self.closed:
            return None
        if self._handshake_deadline is not None:
            return self._handshake_deadline
        return self._monitor.next_deadline()

    def handle_timer(self, now: float) -> None:
        if self.closed:
            return
        if self._handshake_deadline is not None:
            if now >= self._handshake_deadline:
                self._close("handshake timeout")
            return
        action = self._monitor.poll(now)
        if action is LivenessAction.TIMEOUT:
            self._close("peer timeout")
        elif action is LivenessAction.SEND_KEEPALIVE:
            self.send_frame(KEEPALIVE_FRAME, now)

    def _close(self, reason: str, *, to_self: bool = False) -> None:
        self.closed = True
        self._handshake_deadline = None
        self._events.append(LinkClosed(reason, self.meta is not None, to_self))
