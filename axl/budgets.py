"""Budgets: the most of each input from a peer or a local client that a node holds.

Anything another party can make this node buffer, run or remember has its
limit here, per peer (or per link, stream or client connection) and per
node, so that one file answers "how much can they cost us?". The layers
import their limits from this module.

The protocol's own limits (frame and meta lengths, timers) are in
docs/protocol.md, section 13; the config fields that size some budgets
(`max_concurrent_conns`, `max_message_size`, `recv_queue_max_*`) in
docs/operations.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from axl.wire import MAX_FRAME

KiB = 1 << 10
MiB = 1 << 20

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
MAX_REMEMBERED_SENDERS = 4096
# The message stream: messages one connection may have unanswered (the
# sender keeps to it). The receiver remembers as many answers per session,
# which is what lets it repeat each one exactly after a reconnection.
STREAM_WINDOW = 256
# Sender sessions a receiver remembers (least recently used forgotten first).
MAX_STREAM_SESSIONS = 1024
# Destinations remembered as having no message stream port.
MAX_UNSUPPORTED = 4096

# --- a local client, on the bridge --------------------------------------------

# Lookups under way for destinations without a path (rumors). Only local
# sends make them: this bounds a client sending to ever new keys; beyond it
# a send to a new key waits for its lookup timeout (502).
MAX_RUMORS = 4096

# A request head longer than this without its end is handed to the full
# application, which refuses it (400 or 431).
MAX_HEAD = 16 * KiB
# Bytes read ahead of the request being answered (pipelined requests, or a
# client not reading its answers): beyond it reading pauses until they are
# served. Per connection, and for all connections of the front door together
# (a connection holding a request head's worth then pauses too).
MAX_READ_AHEAD = 1 * MiB
READ_AHEAD_PER_NODE = 16 * MiB
# At most this much of an oversized body is read and discarded before the 413.
DISCARD_MAX = 64 * MiB
# /ws: sends of one connection waiting for their acknowledgement (count and
# bytes; reading the socket pauses beyond them), and its receive window.
WS_MAX_IN_FLIGHT = 256
WS_MAX_IN_FLIGHT_BYTES = 64 * MiB
WS_MAX_WINDOW = 1024


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
