"""What a node counts about its own traffic, for metrics and the dashboard.

Plain data: integers bumped on the hot path, no asyncio and no clock of its
own (callers pass `now`, wall-clock seconds). Memory stays bounded whatever
the traffic: remote destinations and direct peers live in LRU tables, so a
node talking to a million keys remembers the most recent few hundred. Ids
that never answered (mistyped, made up, long gone) get a small table of
their own, so that sending to many of them neither pushes out the nodes
that did answer nor fills /metrics.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

from axl.link.counters import LinkCounters

# Send-to-acknowledgement times span a loopback hop (a millisecond) to a
# large message over a slow relay path (the 60 s send timeout).
ACK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
MAX_DESTINATIONS = 256
MAX_UNANSWERED = 32
MAX_PEERS = 256

EventListener = Callable[[str, dict], None]


@dataclass(slots=True)
class Histogram:
    """Counts per bucket (the last one is +Inf) and the sum of observed values."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        """Count `value` in the first bucket whose bound is at or above it
        (a loop that stops early: most values fall in the first few buckets)."""
        index = 0
        for bound in self.bounds:
            if value <= bound:
                break
            index += 1
        self.counts[index] += 1
        self.total += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations at or below it), ending with +Inf."""
        running, out = 0, []
        for bound, count in zip((*self.bounds, float("inf")), self.counts):
            running += count
            out.append((bound, running))
        return out


@dataclass(slots=True)
class DestinationStats:
    """A remote node this node sent messages to or received messages from."""

    messages_sent: int = 0
    bytes_sent: int = 0
    messages_received: int = 0
    bytes_received: int = 0
    last_seen: float = 0.0
    ack_seconds_total: float = 0.0
    last_ack_seconds: float | None = None
    failures: dict[int, int] = field(default_factory=dict)

    @property
    def mean_ack_seconds(self) -> float | None:
        return self.ack_seconds_total / self.messages_sent if self.messages_sent else None


@dataclass(slots=True)
class PeerStats:
    """A direct peer across its reconnects: live links' counters plus closed ones' totals."""

    connects: int = 0
    up_since: float | None = None
    last_change: float = 0.0
    last_reason: str = ""
    live: dict[int, LinkCounters] = field(default_factory=dict)
    closed: LinkCounters = field(default_factory=LinkCounters)

    @property
    def reconnects(self) -> int:
        return max(0, self.connects - 1)

    def totals(self) -> LinkCounters:
        total = LinkCounters(self.closed.bytes_in, self.closed.bytes_out,
                             self.closed.frames_in, self.closed.frames_out)
        for counters in self.live.values():
            _add(total, counters)
        return total


@dataclass(slots=True)
class ListenerCounts:
    """What arrived on the node's application ports (tcp_port and message_stream_port):
    connections taken and refused (at max_concurrent_conns), messages refused
    for their size, and connections that ended, broke the protocol or stalled
    in the middle of a message. The message layer counts; the TCP stack, which
    refuses connections before the layer sees them, fills `rejects` when read
    (Node.listener_counts)."""

    accepts: int = 0
    rejects: int = 0
    oversize: int = 0
    read_errors: int = 0


def _remember(table: OrderedDict[bytes, DestinationStats], key: bytes, entry: DestinationStats,
              capacity: int) -> None:
    """Put `entry` last (most recent) in `table`, forgetting the least recent beyond `capacity`."""
    table[key] = entry
    table.move_to_end(key)
    if len(table) > capacity:
        table.popitem(last=False)


def _add(total: LinkCounters, more: LinkCounters) -> None:
    total.bytes_in += more.bytes_in
    total.bytes_out += more.bytes_out
    total.frames_in += more.frames_in
    total.frames_out += more.frames_out


class NodeStats:
    def __init__(self, now: float, max_destinations: int = MAX_DESTINATIONS,
                 max_peers: int = MAX_PEERS, max_unanswered: int = MAX_UNANSWERED) -> None:
        self.started_at = now
        self.max_destinations = max_destinations
        self.max_unanswered = max_unanswered
        self.max_peers = max_peers
        self.sent_by_status: dict[int, int] = {}
        self.messages_received = 0
        self.payload_in = 0
        self.payload_out = 0
        self.ack_seconds = Histogram(ACK_BUCKETS)
        # Remote nodes that delivered or acknowledged at least one message,
        # and, apart, those that only ever failed; both least recent first.
        self.destinations: OrderedDict[bytes, DestinationStats] = OrderedDict()
        self.unanswered: OrderedDict[bytes, DestinationStats] = OrderedDict()
        self.peers: OrderedDict[bytes, PeerStats] = OrderedDict()
        self.listeners: list[EventListener] = []

    # -- messages --------------------------------------------------------

    def send_finished(self, dest: bytes | None, size: int, status: int,
                      ack_seconds: float | None, now: float) -> None:
        """One /send answered with `status`; `ack_seconds` is set when it was delivered."""
        self.sent_by_status[status] = self.sent_by_status.get(status, 0) + 1
        if dest is None:
            return
        if status != 200 or ack_seconds is None:
            entry = self._failed_destination(dest, now)
            entry.failures[status] = entry.failures.get(status, 0) + 1
            return
        entry = self._destination(dest, now)
        self.payload_out += size
        self.ack_seconds.observe(ack_seconds)
        entry.messages_sent += 1
        entry.bytes_sent += size
        entry.ack_seconds_total += ack_seconds
        entry.last_ack_seconds = ack_seconds

    def message_received(self, sender: bytes, size: int, now: float) -> None:
        self.messages_received += 1
        self.payload_in += size
        entry = self._destination(sender, now)
        entry.messages_received += 1
        entry.bytes_received += size

    def _destination(self, key: bytes, now: float) -> DestinationStats:
        """The entry of a node that answered; its failures so far come along."""
        entry = self.destinations.get(key)
        if entry is None:
            entry = self.unanswered.pop(key, None) or DestinationStats()
            _remember(self.destinations, key, entry, self.max_destinations)
        else:
            self.destinations.move_to_end(key)
        entry.last_seen = now
        return entry

    def _failed_destination(self, key: bytes, now: float) -> DestinationStats:
        if key in self.destinations:
            return self._destination(key, now)
        entry = self.unanswered.get(key) or DestinationStats()
        _remember(self.unanswered, key, entry, self.max_unanswered)
        entry.last_seen = now
        return entry

    def destination_entries(self) -> list[tuple[bytes, DestinationStats]]:
        """Every remembered destination, answered or not, most recent first."""
        entries = [*self.destinations.items(), *self.unanswered.items()]
        return sorted(entries, key=lambda item: item[1].last_seen, reverse=True)

    # -- direct peerings -------------------------------------------------

    def link_up(self, key: bytes, link_id: int, counters: LinkCounters, now: float) -> None:
        peer = self.peers.get(key) or PeerStats()
        self.peers[key] = peer
        self.peers.move_to_end(key)
        peer.connects += 1
        peer.live[link_id] = counters
        if peer.up_since is None:
            peer.up_since = now
        peer.last_change = now
        self._evict_down_peers()
        self._emit("peer", {"public_key": key.hex(), "state": "up", "reason": "", "time": now})

    def link_down(self, key: bytes, link_id: int, reason: str, now: float) -> None:
        peer = self.peers.get(key)
        if peer is None or link_id not in peer.live:
            return
        _add(peer.closed, peer.live.pop(link_id))
        peer.last_reason = reason
        peer.last_change = now
        if not peer.live:
            peer.up_since = None
        self._emit("peer", {"public_key": key.hex(), "state": "down", "reason": reason, "time": now})

    def _evict_down_peers(self) -> None:
        """Forget the least recently changed peers that are down; up ones stay."""
        surplus = max(0, len(self.peers) - self.max_peers)
        for key in [k for k, p in self.peers.items() if not p.live][:surplus]:
            del self.peers[key]

    def link_totals(self) -> LinkCounters:
        total = LinkCounters()
        for peer in self.peers.values():
            _add(total, peer.totals())
        return total

    # -- events ----------------------------------------------------------

    def _emit(self, kind: str, data: dict) -> None:
        for listener in self.listeners:
            listener(kind, data)
