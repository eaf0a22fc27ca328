"""What a receiver remembers per message stream session, bounded.

Both the stream's receiver (axl.node.msgstream, answers per session) and the
durable inbox (axl.node.store, what it committed per session) keep one entry
per (sender key, session id), least recently used first out, within two
limits: MAX_STREAM_SESSIONS for the node and MAX_STREAM_SESSIONS_PER_PEER for
each sender. The per-sender share means one remote node minting session ids
pushes out only its own entries, never another sender's (whose resend after
a reconnection would then be delivered twice).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

from axl.budgets import MAX_STREAM_SESSIONS, MAX_STREAM_SESSIONS_PER_PEER

# (sender key, session id)
SessionKey = tuple[bytes, int]

Entry = TypeVar("Entry")


class SessionLru(Generic[Entry]):
    """Entries per session, least recently used first out beyond `capacity`
    for the node or `per_peer` for one sender. `pushed_out` counts the
    entries forgotten for each limit ("peer", "node")."""

    def __init__(self, capacity: int = MAX_STREAM_SESSIONS, per_peer: int = MAX_STREAM_SESSIONS_PER_PEER) -> None:
        self.capacity = capacity
        self.per_peer = per_peer
        self._entries: OrderedDict[SessionKey, Entry] = OrderedDict()
        # sender -> its session ids, least recently used first
        self._by_peer: dict[bytes, OrderedDict[int, None]] = {}
        self.pushed_out = {"peer": 0, "node": 0}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: SessionKey) -> Entry | None:
        """The session's entry, made the most recently used."""
        entry = self._entries.get(key)
        if entry is not None:
            self._touch(key)
        return entry

    def items(self) -> list[tuple[SessionKey, Entry]]:
        """Every entry, least recently used first."""
        return list(self._entries.items())

    def put(self, key: SessionKey, entry: Entry) -> list[SessionKey]:
        """Hold `entry` as the session's, the most recently used; returns the
        sessions pushed out to make room (at most one per limit)."""
        peer, session_id = key
        self._entries[key] = entry
        self._by_peer.setdefault(peer, OrderedDict())[session_id] = None
        self._touch(key)
        pushed: list[SessionKey] = []
        sessions = self._by_peer[peer]
        if len(sessions) > self.per_peer:
            oldest = (peer, next(iter(sessions)))
            self._forget(oldest)
            self.pushed_out["peer"] += 1
            pushed.append(oldest)
        if len(self._entries) > self.capacity:
            oldest = next(iter(self._entries))
            self._forget(oldest)
            self.pushed_out["node"] += 1
            pushed.append(oldest)
        return pushed

    def most_held_by_one_peer(self) -> int:
        """Sessions of the sender that has the most (its share in use)."""
        return max(map(len, self._by_peer.values()), default=0)

    def _touch(self, key: SessionKey) -> None:
        self._entries.move_to_end(key)
        self._by_peer[key[0]].move_to_end(key[1])

    def _forget(self, key: SessionKey) -> None:
        peer, session_id = key
        del self._entries[key]
        sessions = self._by_peer[peer]
        del sessions[session_id]
        if not sessions:
            del self._by_peer[peer]
