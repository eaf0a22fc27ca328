"""Budgets: the most of each input from a peer or a local client that a node holds.

Anything another party can make this node buffer, run or remember has its
limit here, per peer (or per link, stream or client connection) and per
node, so that one file answers "how much can they cost us?". The layers
import their limits from this module. docs/security.md lists every input
with its budget, what happens beyond it and the test that shows it; GET
/metrics shows each budget's limit, what is in use and how often it refused
(`axl_budget_limit`, `axl_budget_in_use`, `axl_budget_refused_total`).

What a budget refuses, it refuses visibly: a 503 that the sender reports, a
link closed with a log line, reading paused until the client reads. Nothing
already acknowledged is dropped.

The protocol's own limits (frame and meta lengths, timers) are in
docs/protocol.md, section 13; the config fields that size some budgets
(`max_concurrent_conns`, `max_message_size`, `max_inbox_*`) in
docs/operations.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from axl.wire import MAX_FRAME

KiB: Final = 1 << 10
MiB: Final = 1 << 20

# --- a direct peer, on the link ----------------------------------------------

# One WebSocket message on a ws:// or wss:// link. The link carries a byte
# stream, so message boundaries mean nothing: a Go node writes at most one
# frame (plus its 4 KiB write buffer) per message, and so do we. A larger
# message closes the link (1009) before its payload is buffered.
WS_MAX_MESSAGE = 4 * MAX_FRAME
# Traffic queued on one link under back-pressure: beyond it the oldest
# frames of the longest flow are dropped (ironwood drops too; TCP inside the
# overlay repeats them).
LINK_QUEUE_BYTES = 4 * MiB

# --- a direct peer, in the routing layer --------------------------------------

# A well-behaved peer only gossips its own ancestry and ours (tens of
# entries). Keys first learned from one peer beyond this are dropped, so a
# peer minting signed infos for fresh keys cannot grow our table without bound.
MAX_INFOS_PER_PEER = 1024
# Lookups accepted from one peer: a bucket of LOOKUP_BURST refilled at
# LOOKUP_RATE a second. Each lookup is re-multicast, so a flooding peer would
# otherwise turn its bandwidth into work and traffic for the whole tree.
# Honest traffic stays far below: one lookup a second per destination.
LOOKUP_RATE = 200.0
LOOKUP_BURST = 1000.0

# --- any remote node, end to end ----------------------------------------------

# Sessions and packets buffered for sessions being opened (least recently
# used forgotten first).
MAX_SESSIONS = 4096
MAX_SESSION_BUFFERS = 256
# Keys (and their addresses) the IPv6 device remembers, and packets waiting
# for a lookup (each table; oldest first out).
MAX_DEVICE_ENTRIES = 4096
# One overlay TCP connection's buffers: what a peer's data can hold unread
# (the window closes), and what waits to be sent.
TCP_RECEIVE_BUFFER = 4 * MiB
TCP_SEND_BUFFER = 4 * MiB
# Overlay addresses whose proven sender key is remembered (LRU).
MAX_REMEMBERED_SENDERS: Final = 4096
# The message stream: messages one connection may have unanswered, enough
# for a round trip's worth in flight (a 200 ms path at 12.5 MB/s holds about
# 2,400 of 1 KiB). The receiver tells a version 2 sender this number, and
# answers 503 to each message beyond it; the sender sizes its window to what
# the path carries a round trip, within it (axl.node.msgstream). Its bytes are bounded by the overlay
# TCP's buffers (TCP_SEND_BUFFER, TCP_RECEIVE_BUFFER) and the receive queue.
# The receiver remembers as many answers per session (a byte each, in
# constant memory), which is what lets it repeat each one exactly after a
# reconnection. It is also how far a session's sequence numbers may jump
# ahead of the highest the receiver has seen: a sender numbers its messages
# as they go out, so one further ahead breaks the protocol and the stream
# is reset.
STREAM_WINDOW: Final = 4096
# The window of version 1 of the stream, which every receiver of ours takes:
# a sender's window until the receiver says it takes more, and the least
# it ever keeps.
STREAM_BASE_WINDOW: Final = 256
# Sender sessions a receiver remembers (least recently used forgotten
# first), for the node and for each sender: a sender needs one per
# destination it streams to at a time, and one minting session ids pushes
# out only its own.
MAX_STREAM_SESSIONS = 1024
MAX_STREAM_SESSIONS_PER_PEER = 32
# Destinations remembered as having no message stream port.
MAX_UNSUPPORTED = 4096
# MCP and A2A envelopes being dispatched to the local services at once
# (each holds a task and its payload until the service answers), per sender
# and for the node, counted and in bytes. Beyond them an envelope is answered
# 503 at once: its sender's /send (or /mcp, /a2a call) reports the refusal.
# One envelope always fits when its sender holds none (a single message of
# max_message_size must pass).
DISPATCHES_PER_PEER = 64
DISPATCHES_PER_NODE = 256
DISPATCH_BYTES_PER_PEER = 16 * MiB
DISPATCH_BYTES_PER_NODE = 64 * MiB

# --- a local client, on the bridge --------------------------------------------

# Peers added at run time (POST /peers, the admin socket's addPeer) and not
# removed since: each holds a dialer retrying for good. Beyond it an add is
# refused (503, or the admin error) until one is removed.
MAX_RUNTIME_PEERS = 256

# Lookups under way for destinations without a path (rumors). Only local
# sends make them: this bounds a client sending to ever new keys; beyond it
# a send to a new key waits for its lookup timeout (502).
MAX_RUMORS = 4096

# A request head longer than this without its end is handed to the full
# application, which refuses it (400 or 431).
MAX_HEAD: Final = 16 * KiB
# Bytes read ahead of the request being answered (pipelined requests, or a
# client not reading its answers): beyond it reading pauses until they are
# served. Per connection, and for all connections of the front door together
# (a connection holding a request head's worth then pauses too).
MAX_READ_AHEAD: Final = 1 * MiB
READ_AHEAD_PER_NODE: Final = 16 * MiB
# At most this much of an oversized body is read and discarded before the 413.
DISCARD_MAX = 64 * MiB
# /ws: sends of one connection waiting for their acknowledgement (count and
# bytes; reading the socket pauses beyond them: a stream's window of 1 KiB
# messages to one destination fits), and its receive window.
WS_MAX_IN_FLIGHT = STREAM_WINDOW
WS_MAX_IN_FLIGHT_BYTES = 64 * MiB
WS_MAX_WINDOW = 1024

# --- a local client, on the admin socket ----------------------------------------

# One admin request: larger ones are refused (the biggest real one is an
# addPeer with a long URI), and one begun must be whole within the deadline,
# else the connection closes with a log line.
ADMIN_MAX_REQUEST = 64 * KiB
ADMIN_REQUEST_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class BudgetUse:
    """One budget as /metrics shows it.

    `scope` says whose share `limit` is: "node", or one "peer", "link",
    "stream" or "connection". For a share, `in_use` is the most any one
    holder has now (the one nearest its limit); None when the budget is a
    rate or a size, with nothing held over time.
    """

    budget: str
    scope: str
    limit: int
    in_use: int | None
    refused: int


class PeerBudget:
    """Items held for peers, and their bytes: limits per peer and for the node.

    Sans-IO bookkeeping: `take` says whether one more item of `size` bytes
    fits (and holds it when it does), `give` returns it. An item fits when
    its peer and the node each hold fewer items than their limits and its
    bytes fit under both byte limits; a peer holding nothing always gets
    one item within the node's item limit, whatever its size, so a single
    message of the largest allowed size is never refused for its size.
    Only peers holding something have an entry.
    """

    def __init__(self, name: str, items_per_peer: int, items_per_node: int,
                 bytes_per_peer: int, bytes_per_node: int) -> None:
        self.name = name
        self.items_per_peer = items_per_peer
        self.items_per_node = items_per_node
        self.bytes_per_peer = bytes_per_peer
        self.bytes_per_node = bytes_per_node
        self.items = 0
        self.bytes = 0
        self._held: dict[bytes, list[int]] = {}  # peer -> [items, bytes]
        # (unit, scope) -> refusals that this limit was the first to cause
        self.refused: Counter[tuple[str, str]] = Counter()

    def take(self, peer: bytes, size: int) -> bool:
        held = self._held.get(peer) or [0, 0]
        refusal = self._refusal(held, size)
        if refusal is not None:
            self.refused[refusal] += 1
            return False
        held[0] += 1
        held[1] += size
        self._held[peer] = held
        self.items += 1
        self.bytes += size
        return True

    def _refusal(self, held: list[int], size: int) -> tuple[str, str] | None:
        """The first limit that one more item of `size` bytes would break."""
        if self.items >= self.items_per_node:
            return ("items", "node")
        if held[0] >= self.items_per_peer:
            return ("items", "peer")
        if held[0] == 0:
            return None
        if held[1] + size > self.bytes_per_peer:
            return ("bytes", "peer")
        if self.bytes + size > self.bytes_per_node:
            return ("bytes", "node")
        return None

    def give(self, peer: bytes, size: int) -> None:
        held = self._held[peer]
        held[0] -= 1
        held[1] -= size
        self.items -= 1
        self.bytes -= size
        if not held[0]:
            del self._held[peer]

    def held_by(self, peer: bytes) -> int:
        """Items `peer` holds now."""
        held = self._held.get(peer)
        return held[0] if held else 0

    def usage(self) -> list[BudgetUse]:
        most_items = max((held[0] for held in self._held.values()), default=0)
        most_bytes = max((held[1] for held in self._held.values()), default=0)
        refused = self.refused
        return [
            BudgetUse(self.name, "peer", self.items_per_peer, most_items, refused["items", "peer"]),
            BudgetUse(self.name, "node", self.items_per_node, self.items, refused["items", "node"]),
            BudgetUse(f"{self.name}_bytes", "peer", self.bytes_per_peer, most_bytes,
                      refused["bytes", "peer"]),
            BudgetUse(f"{self.name}_bytes", "node", self.bytes_per_node, self.bytes,
                      refused["bytes", "node"]),
        ]


UsageReader = Callable[[], Iterable[BudgetUse]]


class BudgetBoard:
    """Where /metrics reads every budget of one node: each part that keeps
    budgets (the node core, the node's driver, the bridge) adds a reader of
    its use. Readers run at scrape time only; the hot path just counts."""

    def __init__(self) -> None:
        self._readers: list[UsageReader] = []

    def add(self, reader: UsageReader) -> None:
        self._readers.append(reader)

    def usage(self) -> list[BudgetUse]:
        return [use for reader in self._readers for use in reader()]
