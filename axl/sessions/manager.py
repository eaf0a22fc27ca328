"""End-to-end encrypted sessions, byte-compatible with ironwood's `encrypted`
package (ironwood 743fe2f, encrypted/session.go).

Each side holds three key pairs of its own (recv, send, next) and the
remote's two public keys (current, next). Key sequence numbers in every
Traffic packet tell the receiver which pair of keys sealed it; a packet
sealed to the remote's *next* key means the remote has moved on, so the
receiver ratchets too. Anything the receiver cannot place or decrypt
triggers a fresh Init, which is how two sides that lost state heal.

The state machine mirrors Go's, including its quirks (an Ack with no
session is treated as an Init; traffic from a stranger is answered with an
Init made of keys that are forgotten at once), because convergence with Go
nodes depends on both sides making the same moves. One move is added, which
a Go peer takes as a duplicate: an Init repeated before any traffic came in
its session is answered again with the same Ack (`_handle_init`), so a lost
Ack costs one more Init instead of a minute.

Memory is bounded: at most `max_sessions` sessions (default 4096, a few KiB
each) and `max_buffers` send buffers (default 256, one packet each, so at
most 16 MiB of 64 KiB packets) are kept; the least recently used is evicted
when a new one is needed.

`now` measures expiry and the ratchet interval, so a node passes a
monotonic clock. Handshake seqs are Unix seconds on the wire (as Go's); they
come from the injected `wall_clock`, or from `now` when the driver has one
virtual clock (the simulator, unit tests).
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from axl.budgets import MAX_SESSION_BUFFERS, MAX_SESSIONS
from axl.identity import NodeIdentity
from axl.sessions.crypto import (
    BOX_KEY_SIZE, BOX_OVERHEAD, KeyPair, KeyPairFactory, curve_private_key, open_parts,
    random_key_pair, seal, shared_key,
)
from axl.sessions.handshake import (
    TYPE_ACK, TYPE_INIT, TYPE_TRAFFIC, Handshake, group_secret, open_handshake, seal_handshake,
)
from axl.wire import BYTE, KEY_SIZE, DecodeError, decode_uvarint, encode_uvarint

log = logging.getLogger(__name__)

SESSION_TIMEOUT: Final = 60.0
RATCHET_INTERVAL: Final = 60.0
# A handshake that fails to verify is noted in the log at most this often:
# any node on a path can send them.
UNVERIFIED_LOG_INTERVAL = 60.0
TRAFFIC_OVERHEAD_MIN: Final = 1 + 1 + 1 + 1 + BOX_OVERHEAD + BOX_KEY_SIZE
_U64: Final = 1 << 64


@dataclass(init=False)
class SendPacket:
    """Hand `packet` to the router for delivery to `dest_key` (a sealed
    traffic packet is a read-only view of its buffer)."""

    dest_key: bytes
    packet: bytes | memoryview

    def __init__(self, dest_key: bytes, packet: bytes | memoryview) -> None:
        self.dest_key = dest_key
        self.packet = packet


@dataclass(init=False)
class DeliverPlaintext:
    """A decrypted message from `source_key` for the layer above (a read-only
    view of the decrypted buffer, which nothing else holds)."""

    source_key: bytes
    message: bytes | memoryview

    def __init__(self, source_key: bytes, message: bytes | memoryview) -> None:
        self.source_key = source_key
        self.message = message


@dataclass(frozen=True)
class Rekeyed:
    """An existing session with `remote_key` took new keys from a handshake.

    What was sealed toward it shortly before was most likely dropped by the
    remote (a restarted peer cannot open it), so the layer above should
    retransmit now rather than after its timer.
    """

    remote_key: bytes


Action = SendPacket | DeliverPlaintext | Rekeyed


@dataclass(frozen=True)
class SessionReport:
    key: bytes
    uptime: float
    rx_bytes: int
    tx_bytes: int


@dataclass
class _Buffer:
    """The one packet waiting for a handshake, and the keys the Init offered."""

    init: Handshake
    current: KeyPair
    next: KeyPair
    data: bytes
    expires: float


@dataclass
class _Session:
    """Per-remote session state (ironwood's sessionInfo)."""

    remote: bytes
    seq: int
    current: bytes
    next: bytes
    recv: KeyPair
    send: KeyPair
    next_own: KeyPair
    expires: float
    remote_key_seq: int = 0
    local_key_seq: int = 0
    recv_nonce: int = 0
    send_nonce: int = 0
    next_send_nonce: int = 0
    next_recv_nonce: int = 0
    rotated: float | None = None
    recv_shared: bytes = b""
    send_shared: bytes = b""
    next_send_shared: bytes = b""
    next_recv_shared: bytes = b""
    shared_ok: bool = False
    # What `session_report` shows, as ironwood counts it: when the session
    # began, and the plaintext bytes opened and sealed in it.
    since: float = 0.0
    rx: int = 0
    tx: int = 0
    answered_seq: int | None = None
    """The seq of the Ack we last answered an Init with."""

    def fix_shared(self, recv_nonce: int, send_nonce: int) -> None:
        """Recompute the four shared keys after any key change; the nonces
        for the remote's next key restart because that key is new to us."""
        keys = (
            shared_key(self.current, self.recv.private),
            shared_key(self.current, self.send.private),
            shared_key(self.next, self.send.private),
            shared_key(self.next, self.recv.private),
        )
        self.shared_ok = all(k is not None for k in keys)
        self.recv_shared, self.send_shared, self.next_send_shared, self.next_recv_shared = (
            [k or b"" for k in keys]
        )
        self.next_send_nonce = self.next_recv_nonce = 0
        self.recv_nonce, self.send_nonce = recv_nonce, send_nonce

    def rotate_own(self, fresh: KeyPair) -> None:
        self.recv, self.send, self.next_own = self.send, self.next_own, fresh
        self.local_key_seq += 1


class SessionManager:
    """Sans-IO session layer: feed it sends, received packets and ticks; it
    answers with SendPacket and DeliverPlaintext actions."""

    def __init__(self, identity: NodeIdentity, *, key_pairs: KeyPairFactory = random_key_pair,
                 max_sessions: int = MAX_SESSIONS,
                 max_buffers: int = MAX_SESSION_BUFFERS,
                 wall_clock: Callable[[], float] | None = None,
                 group_password: str = "") -> None:
        """`group_password` is yggdrasil's GroupPassword: sessions form only
        with nodes that have the same one ("" = the open network)."""
        self.identity = identity
        self._group = group_secret(group_password)
        self._unverified_noted: float | None = None
        self._wall_clock = wall_clock
        self._new_keys = key_pairs
        self._curve_private = curve_private_key(identity.seed, identity.public_key)
        self._sessions: OrderedDict[bytes, _Session] = OrderedDict()
        self._buffers: OrderedDict[bytes, _Buffer] = OrderedDict()
        self._max_sessions = max_sessions
        self._max_buffers = max_buffers
        self.dropped: Counter[str] = Counter()
        self.evicted = 0  # sessions forgotten to make room (table at max_sessions)
        self.buffers_evicted = 0  # send buffers forgotten to make room (at max_buffers)

    def buffer_count(self) -> int:
        """Send buffers held for sessions being opened."""
        return len(self._buffers)

    def session_keys(self) -> list[bytes]:
        return list(self._sessions)

    @property
    def max_sessions(self) -> int:
        return self._max_sessions

    def session_report(self, now: float) -> list[SessionReport]:
        """Every session: its remote key, age in seconds and plaintext bytes
        each way (what yggdrasil's getSessions shows)."""
        return [SessionReport(s.remote, now - s.since, s.rx, s.tx) for s in self._sessions.values()]

    def send(self, dest_key: bytes, message: bytes | memoryview, now: float, *, head: bytes = b"") -> list[Action]:
        """Seal `head` + `message` for `dest_key`. A short `head` (the layer
        above's type byte) is laid into the sealed buffer before the message
        instead of being joined to it first: one copy of a 64 KiB packet less."""
        session = self._live_session(dest_key, now)
        if session is not None:
            return self._seal_traffic(session, message, now, head)
        return self._buffer_and_init(dest_key, head + message, now)

    def receive(self, source_key: bytes, packet: bytes | memoryview, now: float) -> list[Action]:
        """Handle one encrypted-layer packet (traffic may be a view of the
        frame it came in); malformed input is dropped."""
        if len(source_key) != KEY_SIZE or not packet:
            self.dropped["malformed"] += 1
            return []
        kind = packet[0]
        if kind in (TYPE_INIT, TYPE_ACK):
            fields = open_handshake(bytes(packet), source_key, self._curve_private, self._group)
            if fields is None:
                self._unverified(source_key, now)
                return []
            if kind == TYPE_INIT:
                return self._handle_init(source_key, fields, now)
            return self._handle_ack(source_key, fields, now)
        if kind == TYPE_TRAFFIC:
            return self._handle_traffic(source_key, packet, now)
        self.dropped["unknown_type"] += 1
        return []

    def awaiting_answer(self, dest_key: bytes) -> bool:
        """True when an Init to `dest_key` went out in the last minute and no
        handshake from it has verified: what a node with another
        GroupPassword leaves us with."""
        return dest_key in self._buffers and dest_key not in self._sessions

    def _unverified(self, source_key: bytes, now: float) -> None:
        """Drop a handshake whose signature does not verify, as Go does
        (silently to the sender), with a rate-limited note in the log."""
        self.dropped["bad_handshake"] += 1
        noted = self._unverified_noted
        if noted is None or now - noted >= UNVERIFIED_LOG_INTERVAL:
            self._unverified_noted = now
            log.info("dropped a session handshake from %s that does not verify (%d so far): "
                     "its GroupPassword differs from this node's, or it was damaged on the way", source_key.hex(),
                     self.dropped["bad_handshake"])

    def tick(self, now: float) -> list[Action]:
        """Forget sessions and buffers whose 60 s timer has run out."""
        for table in (self._sessions, self._buffers):
            for key in [k for k, v in table.items() if v.expires <= now]:
                del table[key]
        return []

    # --- lookup and bounded tables -------------------------------------

    def _live_session(self, key: bytes, now: float) -> _Session | None:
        session = self._sessions.get(key)
        if session is not None and session.expires <= now:
            del self._sessions[key]
            return None
        if session is not None:
            self._sessions.move_to_end(key)
        return session

    def _live_buffer(self, key: bytes, now: float) -> _Buffer | None:
        buffer = self._buffers.get(key)
        if buffer is not None and buffer.expires <= now:
            del self._buffers[key]
            return None
        return buffer

    def _store_session(self, session: _Session) -> None:
        while len(self._sessions) >= self._max_sessions:
            evicted, _ = self._sessions.popitem(last=False)
            self.evicted += 1
            log.debug("session table full, evicting %s", evicted.hex())
        self._sessions[session.remote] = session

    def _store_buffer(self, key: bytes, buffer: _Buffer) -> None:
        while len(self._buffers) >= self._max_buffers:
            self._buffers.popitem(last=False)
            self.buffers_evicted += 1
        self._buffers[key] = buffer

    # --- handshakes -----------------------------------------------------

    def _send_handshake(self, kind: int, dest: bytes, fields: Handshake) -> list[Action]:
        packet = seal_handshake(kind, fields, self.identity, dest, self._new_keys(), self._group)
        if packet is None:
            self.dropped["bad_remote_key"] += 1
            return []
        return [SendPacket(dest, packet)]

    def _handshake_seq(self, now: float) -> int:
        return int(self._wall_clock() if self._wall_clock is not None else now)

    def _own_handshake(self, session: _Session, now: float, seq: int | None = None) -> Handshake:
        return Handshake(current=session.send.public, next=session.next_own.public,
                         key_seq=session.local_key_seq, seq=self._handshake_seq(now) if seq is None else seq)

    def _buffer_and_init(self, dest: bytes, message: bytes, now: float) -> list[Action]:
        buffer = self._live_buffer(dest, now)
        if buffer is None:
            current, next_pair = self._new_keys(), self._new_keys()
            init = Handshake(current=current.public, next=next_pair.public, key_seq=0,
                             seq=self._handshake_seq(now))
            buffer = _Buffer(init=init, current=current, next=next_pair, data=message,
                             expires=now + SESSION_TIMEOUT)
            self._store_buffer(dest, buffer)
        buffer.data = message
        buffer.expires = now + SESSION_TIMEOUT
        return self._send_handshake(TYPE_INIT, dest, buffer.init)

    def _session_for_handshake(self, remote: bytes, fields: Handshake,
                               now: float) -> tuple[_Session, _Buffer | None]:
        """The existing session, or a new one; a new one adopts the keys a
        pending Init already offered, so that Init and this handshake agree."""
        session = self._live_session(remote, now)
        if session is not None:
            return session, None
        buffer = self._buffers.pop(remote, None)
        if buffer is not None and buffer.expires <= now:
            buffer = None
        recv = self._new_keys()
        if buffer is not None:
            send, next_own = buffer.current, buffer.next
        else:
            send, next_own = self._new_keys(), self._new_keys()
        session = _Session(remote=remote, seq=(fields.seq - 1) % _U64, current=fields.current,
                           next=fields.next, recv=recv, send=send, next_own=next_own,
                           expires=now + SESSION_TIMEOUT, since=now)
        session.fix_shared(0, 0)
        self._store_session(session)
        return session, buffer

    def _update(self, session: _Session, fields: Handshake, now: float) -> None:
        session.current, session.next = fields.current, fields.next
        session.seq = fields.seq
        session.remote_key_seq = fields.key_seq
        session.rotate_own(self._new_keys())
        session.fix_shared(0, session.send_nonce)
        session.expires = now + SESSION_TIMEOUT

    def _handle_init(self, remote: bytes, fields: Handshake, now: float) -> list[Action]:
        existed = self._live_session(remote, now) is not None
        session, buffer = self._session_for_handshake(remote, fields, now)
        actions: list[Action] = []
        if fields.seq > session.seq:
            self._update(session, fields, now)
            answer = self._own_handshake(session, now)
            session.answered_seq = answer.seq
            actions += self._send_handshake(TYPE_ACK, remote, answer)
            if existed:
                actions.append(Rekeyed(remote))
        elif self._ack_lost(session, fields):
            actions += self._send_handshake(TYPE_ACK, remote, self._own_handshake(session, now, session.answered_seq))
        return actions + self._flush(session, buffer, now)

    @staticmethod
    def _ack_lost(session: _Session, fields: Handshake) -> bool:
        """Whether `fields` repeat the Init we answered, with no traffic
        since: the remote is still waiting for our Ack, so it was lost.

        Go ignores such a repeat (its seq is not newer), and a remote that
        buffers keeps sending the same Init; both sides then wait until this
        session times out, a minute later. The same Ack again (same keys,
        same seq) is what the remote needed; one that got the first takes
        the second as a duplicate."""
        return (session.answered_seq is not None and session.rx == 0 and fields.seq == session.seq
                and fields.current == session.current)

    def _handle_ack(self, remote: bytes, fields: Handshake, now: float) -> list[Action]:
        session = self._live_session(remote, now)
        if session is None:
            return self._handle_init(remote, fields, now)
        if fields.seq > session.seq:
            self._update(session, fields, now)
            return [Rekeyed(remote)]
        return []

    def _flush(self, session: _Session, buffer: _Buffer | None, now: float) -> list[Action]:
        if buffer is None:
            return []
        return self._seal_traffic(session, buffer.data, now)

    # --- traffic ----------------------------------------------------------

    def _seal_traffic(self, session: _Session, message: bytes | memoryview, now: float,
                      head: bytes = b"") -> list[Action]:
        session.send_nonce += 1
        if session.send_nonce == _U64:
            session.rotate_own(self._new_keys())
            session.fix_shared(0, 0)
        if not session.shared_ok:
            self.dropped["bad_remote_key"] += 1
            return []
        header = (BYTE[TYPE_TRAFFIC] + encode_uvarint(session.local_key_seq)
                  + encode_uvarint(session.remote_key_seq) + encode_uvarint(session.send_nonce))
        packet = seal(message, session.send_nonce, session.send_shared,
                      header=header, prefix=session.next_own.public + head)
        session.expires = now + SESSION_TIMEOUT
        session.tx += len(head) + len(message)
        return [SendPacket(session.remote, packet)]

    def _handle_traffic(self, remote: bytes, packet: bytes | memoryview, now: float) -> list[Action]:
        session = self._live_session(remote, now)
        if session is None:
            # One second below our clock: the Ack we send once the remote
            # answers this Init carries the current second and so outranks
            # it, which heals a restart in one round trip. With equal seqs
            # (Go's choice) the remote ignores that Ack, keeps the forgotten
            # keys, and the next second's Init must repair it.
            throwaway = Handshake(current=self._new_keys().public, next=self._new_keys().public,
                                  key_seq=0, seq=self._handshake_seq(now) - 1)
            return self._send_handshake(TYPE_INIT, remote, throwaway)
        if len(packet) < TRAFFIC_OVERHEAD_MIN:
            self.dropped["short"] += 1
            return []
        try:
            remote_key_seq, offset = decode_uvarint(packet, 1)
            local_key_seq, offset = decode_uvarint(packet, offset)
            nonce, offset = decode_uvarint(packet, offset)
        except DecodeError:
            self.dropped["malformed"] += 1
            return []
        return self._open_traffic(session, remote_key_seq, local_key_seq, nonce,
                                  memoryview(packet)[offset:], now)

    def _open_traffic(self, session: _Session, remote_key_seq: int, local_key_seq: int,
                      nonce: int, boxed: memoryview, now: float) -> list[Action]:
        from_current = remote_key_seq == session.remote_key_seq
        from_next = remote_key_seq == session.remote_key_seq + 1
        to_recv = local_key_seq + 1 == session.local_key_seq
        to_send = local_key_seq == session.local_key_seq
        if from_current and to_recv:
            last, key = session.recv_nonce, session.recv_shared
        elif from_next and to_send:
            last, key = session.next_send_nonce, session.next_send_shared
        elif from_next and to_recv:
            last, key = session.next_recv_nonce, session.next_recv_shared
        else:
            return self._send_handshake(TYPE_INIT, session.remote,
                                        self._own_handshake(session, now))
        if nonce <= last:
            self.dropped["replay"] += 1
            return []
        parts = open_parts(boxed, nonce, key, BOX_KEY_SIZE) if session.shared_ok else None
        if parts is None:
            return self._send_handshake(TYPE_INIT, session.remote,
                                        self._own_handshake(session, now))
        inner_next, message = parts
        if len(inner_next) < BOX_KEY_SIZE:
            self.dropped["short"] += 1
            return []
        self._after_decrypt(session, from_current, to_send, nonce, inner_next, now)
        session.rx += len(message)
        return [DeliverPlaintext(session.remote, message)]

    def _after_decrypt(self, session: _Session, from_current: bool, to_send: bool,
                       nonce: int, inner_next: bytes, now: float) -> None:
        """Advance the nonce of the key used and, if it was the remote's next
        key and the last ratchet is over a minute old, ratchet both sides."""
        if from_current:
            session.recv_nonce = nonce
        elif to_send:
            session.next_send_nonce = nonce
        else:
            session.next_recv_nonce = nonce
        ratchet_due = session.rotated is None or now - session.rotated > RATCHET_INTERVAL
        if not from_current and ratchet_due:
            session.current, session.next = session.next, inner_next
            session.remote_key_seq += 1
            session.rotate_own(self._new_keys())
            session.fix_shared(nonce, 0)
            session.rotated = now
        session.expires = now + SESSION_TIMEOUT
