"""A userspace TCP endpoint on one IPv6 address: listeners, dialer, demultiplexing.

The stack takes whole IPv6 packets from the packet layer and returns whole
IPv6 packets for it. It owns the connections (keyed by the 4-tuple), answers
segments nobody wants with RST as RFC 9293 says, and enforces the cap on
accepted connections the way the Go node's listener does (over the cap the
dialer is refused at once).
"""

from __future__ import annotations

import hashlib
import random
import struct
from collections import OrderedDict, deque
from collections.abc import Callable

from axl.tcp.connection import State, TcpConfig, TcpConnection
from axl.tcp.events import TcpEvent
from axl.tcp.recovery import PathStats
from axl.tcp.segment import ACK, RST, SYN, TcpSegment, decode_packet, encode_packet

EPHEMERAL_PORTS = range(49152, 65536)
DEFAULT_MAX_CONNECTIONS = 128
MAX_PATHS = 256
"""Remote addresses whose PathStats the stack keeps (more only while that
many have live connections)."""

ConnectionKey = tuple[bytes, int, int]
"""(remote address, remote port, local port); the local address is the stack's."""


class TcpStack:
    """Every TCP connection of one local address, driven sans-IO like its connections.

    `mss_for_remote` lets the owner choose the MSS we advertise per peer
    address (1220 toward Go nodes, large toward Python nodes) when `listen`
    or `connect` does not fix one; the peer's own MSS is always honoured.
    """

    def __init__(self, local_address: bytes, *, config: TcpConfig | None = None,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 mss_for_remote: Callable[[bytes], int | None] | None = None,
                 rng: random.Random | None = None, hop_limit: int = 64,
                 verify_checksums: bool = True,
                 unchecksummed_ports: frozenset[int] = frozenset(),
                 delayed_ack_ports: frozenset[int] = frozenset(),
                 fast_start_ports: frozenset[int] = frozenset()) -> None:
        if len(local_address) != 16:
            raise ValueError("local address must be 16 bytes")
        self.local_address = local_address
        self.config = config or TcpConfig()
        self.max_connections = max_connections
        self.mss_for_remote = mss_for_remote
        self.hop_limit = hop_limit
        self.verify_checksums = verify_checksums
        # Connections to or from these ports send checksum 0 once the peer has
        # answered their handshake on that port (see docs/protocol.md, 11): a
        # node that does not speak there, a Go node say, only ever gets a SYN
        # with a valid checksum, which it can answer with RST.
        self.unchecksummed_ports = unchecksummed_ports
        # Connections to or from these ports delay their ACKs (TcpConfig.ack_delay).
        self.delayed_ack_ports = delayed_ack_ports
        # Connections to or from these ports start with TcpConfig.fast_start_window.
        self.fast_start_ports = fast_start_ports
        self._rng = rng or random.SystemRandom()
        self._iss_secret = self._rng.getrandbits(128).to_bytes(16, "big")
        self._connections: dict[ConnectionKey, TcpConnection] = {}
        self._listeners: dict[int, int | None] = {}
        self._events: deque[TcpEvent] = deque()
        self._replies: list[bytes] = []
        # Connections touched since they were last polled, and each
        # connection's deadline as of its last poll: per packet the stack
        # only looks at what changed, not at every connection it holds.
        self._touched: dict[TcpConnection, None] = {}
        self._deadlines: dict[TcpConnection, float] = {}
        self.refused_over_cap = 0  # SYNs reset because max_connections were accepted
        # What the connections to each remote address saw of the path, for
        # the most recent MAX_PATHS addresses (kept after their connections end).
        self.paths: OrderedDict[bytes, PathStats] = OrderedDict()

    # ------------------------------------------------------------- application

    def listen(self, port: int, mss: int | None = None) -> None:
        """Accept connections on `port`; `mss` fixes what accepted ones advertise."""
        self._listeners[port] = mss

    def stop_listening(self, port: int) -> None:
        self._listeners.pop(port, None)

    def connect(self, remote_address: bytes, remote_port: int,
                mss: int | None = None, now: float | None = None) -> TcpConnection:
        """Open a connection from an ephemeral port; its SYN leaves with packets_to_send.

        With `now`, the initial sequence number follows RFC 6528 (a 4 us clock
        plus a keyed hash of the 4-tuple), so a reused port's new SYN lies above
        the old connection's sequence numbers and a peer still in TIME-WAIT for
        that tuple (gVisor keeps it 60 s) accepts it. Without, it is random.
        """
        local_port = self._free_port(remote_address, remote_port)
        iss = (self._rng.getrandbits(32) if now is None
               else self._clock_iss(remote_address, remote_port, local_port, now))
        conn = TcpConnection(local_port, remote_address, remote_port, iss,
                             self.config, self._choose_mss(remote_address, mss), self._events,
                             self._touched)
        conn.delays_acks = remote_port in self.delayed_ack_ports
        conn.fast_start = remote_port in self.fast_start_ports
        conn.path = self._path_to(remote_address)
        conn.open_active()
        self._connections[(remote_address, remote_port, local_port)] = conn
        return conn

    def _clock_iss(self, remote_address: bytes, remote_port: int, local_port: int, now: float) -> int:
        four_tuple = self.local_address + remote_address + struct.pack("!HH", local_port, remote_port)
        offset = hashlib.blake2b(four_tuple, key=self._iss_secret, digest_size=4).digest()
        return (int(now * 250_000) + int.from_bytes(offset, "big")) & 0xFFFFFFFF

    def path_changed(self, remote_address: bytes, now: float) -> None:
        """Tell every connection to `remote_address` that its route changed."""
        for conn in self._connections.values():
            if conn.remote_address == remote_address:
                conn.path_changed(now)

    def retransmit_now(self, remote_address: bytes, now: float) -> None:
        """Every connection to `remote_address` resends what is unacknowledged now."""
        for conn in self._connections.values():
            if conn.remote_address == remote_address:
                conn.retransmit_now(now)

    def _path_to(self, remote_address: bytes) -> PathStats:
        """The shared PathStats of `remote_address`, made the most recent.
        Past MAX_PATHS the least recent address without a live connection
        is forgotten: one with a connection keeps counting where it is shown."""
        path = self.paths.pop(remote_address, None) or PathStats()
        self.paths[remote_address] = path
        if len(self.paths) > MAX_PATHS:
            live = {conn.remote_address for conn in self._connections.values()}
            idle = next((address for address in self.paths if address not in live), None)
            if idle is not None:
                del self.paths[idle]
        return path

    @property
    def connections(self) -> list[TcpConnection]:
        return list(self._connections.values())

    def accepted_count(self) -> int:
        """Accepted connections that still count against max_connections."""
        return sum(1 for conn in self._connections.values()
                   if conn.passive and conn.state not in (State.CLOSED, State.TIME_WAIT))

    def next_event(self) -> TcpEvent | None:
        return self._events.popleft() if self._events else None

    # ---------------------------------------------------------------- network

    def receive(self, packet: bytes | memoryview, now: float) -> None:
        """Handle one IPv6 packet; raises DecodeError (TcpDecodeError) if malformed."""
        decoded = decode_packet(packet, self.verify_checksums)
        if decoded.dst != self.local_address:
            return
        segment = decoded.segment
        key = (decoded.src, segment.src_port, segment.dst_port)
        conn = self._connections.get(key)
        if conn is not None and self._replaced_by_new_syn(conn, segment):
            self._forget(key)
            conn = None
        if conn is not None:
            conn.receive_segment(segment, now)
        elif segment.flags & (SYN | ACK | RST) == SYN and segment.dst_port in self._listeners:
            self._accept(decoded.src, segment)
        else:
            self._refuse(decoded.src, segment)

    def packets_to_send(self, now: float) -> list[bytes]:
        """Every packet due now; finished connections are dropped after their last segments.

        Only connections touched since their last poll can have anything due:
        the others have neither new input nor an expired timer.
        """
        packets = self._replies
        self._replies = []
        touched = list(self._touched)
        self._touched.clear()
        unchecksummed = self.unchecksummed_ports
        for conn in touched:
            key = self._key_of(conn)
            if self._connections.get(key) is not conn:
                continue
            checksum = not (conn.synchronized and (conn.local_port in unchecksummed
                                                    or conn.remote_port in unchecksummed))
            for segment in conn.segments_to_send(now):
                packets.append(encode_packet(self.local_address, conn.remote_address,
                                             segment, self.hop_limit, checksum))
            if conn.is_closed:
                self._forget(key)
            else:
                self._note_deadline(conn)
        return packets

    def get_timer(self) -> float | None:
        for conn in self._touched:
            self._note_deadline(conn)
        return min(self._deadlines.values()) if self._deadlines else None

    def handle_timer(self, now: float) -> None:
        for conn in list(self._touched):
            self._note_deadline(conn)
        for conn, deadline in list(self._deadlines.items()):
            if deadline <= now:
                conn.handle_timer(now)

    # ---------------------------------------------------------------- internals

    @staticmethod
    def _key_of(conn: TcpConnection) -> ConnectionKey:
        return (conn.remote_address, conn.remote_port, conn.local_port)

    def _note_deadline(self, conn: TcpConnection) -> None:
        if self._connections.get(self._key_of(conn)) is not conn:
            return
        deadline = conn.get_timer()
        if deadline is None:
            self._deadlines.pop(conn, None)
        else:
            self._deadlines[conn] = deadline

    def _forget(self, key: ConnectionKey) -> None:
        conn = self._connections.pop(key)
        self._deadlines.pop(conn, None)
        self._touched.pop(conn, None)

    def _choose_mss(self, remote_address: bytes, mss: int | None) -> int:
        if mss is None and self.mss_for_remote is not None:
            mss = self.mss_for_remote(remote_address)
        return mss if mss is not None else self.config.mss

    def _free_port(self, remote_address: bytes, remote_port: int) -> int:
        used = {key[2] for key in self._connections if key[0] == remote_address
                and key[1] == remote_port}
        for _ in range(64):
            port = self._rng.choice(EPHEMERAL_PORTS)
            if port not in used and port not in self._listeners:
                return port
        for port in EPHEMERAL_PORTS:
            if port not in used and port not in self._listeners:
                return port
        raise OSError("no free ephemeral port toward this destination")

    @staticmethod
    def _replaced_by_new_syn(conn: TcpConnection, segment: TcpSegment) -> bool:
        """A fresh SYN may reuse the 4-tuple of a connection lingering in TIME-WAIT."""
        return (conn.state in (State.TIME_WAIT, State.CLOSED)
                and segment.flags & (SYN | ACK | RST) == SYN)

    def _accept(self, remote_address: bytes, syn: TcpSegment) -> None:
        if self.accepted_count() >= self.max_connections:
            self.refused_over_cap += 1
            self._refuse(remote_address, syn)
            return
        conn = TcpConnection(syn.dst_port, remote_address, syn.src_port, self._rng.getrandbits(32),
                             self.config,
                             self._choose_mss(remote_address, self._listeners[syn.dst_port]),
                             self._events, self._touched)
        conn.delays_acks = syn.dst_port in self.delayed_ack_ports
        conn.fast_start = syn.dst_port in self.fast_start_ports
        conn.path = self._path_to(remote_address)
        conn.open_passive(syn)
        self._connections[(remote_address, syn.src_port, syn.dst_port)] = conn

    def _refuse(self, remote_address: bytes, segment: TcpSegment) -> None:
        """RFC 9293 reset generation for a segment no connection owns; never answer a RST."""
        if segment.flags & RST:
            return
        if segment.flags & ACK:
            reply = TcpSegment(segment.dst_port, segment.src_port, segment.ack, 0, RST, 0)
        else:
            reply = TcpSegment(segment.dst_port, segment.src_port, 0,
                               segment.seq + segment.seq_length, RST | ACK, 0)
        self._replies.append(encode_packet(self.local_address, remote_address, reply,
                                           self.hop_limit))
