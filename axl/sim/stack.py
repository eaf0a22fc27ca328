"""The full node stack in the simulator: the daemon's NodeCore and LinkConnection
objects over virtual links, on a virtual clock.

Every node is a `NodeCore` (router, sessions, core, packet device, TCP
stack and message layer) and every link end a `LinkConnection` (meta
handshake, framing, liveness), exactly the objects the daemon drives; this
module is only their second driver. A link carries bytes one way after a
latency, serialised at its bandwidth, in order. Two kinds of loss:
- `loss`: packets lost on the wire under the link's own TCP, which the
  carrier retransmits: a lost write arrives one retransmission timeout
  late and holds back everything behind it (head-of-line), as on a real
  peering;
- `drop`: frames of types 6-9 dropped at the sender, as ironwood's queues
  drop them under load, so overlay TCP and the sessions have real losses
  to recover from.
Same seed, same run.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from axl.link.protocol import FrameReceived, HandshakeDone, LinkClosed, LinkConnection, LinkPolicy
from axl.node.core import NodeCore
from axl.node.messages import (
    Acknowledged, InboundMessage, MessageEvent, MessageSettings, ReplyReceived, SendFailed,
)
from axl.routing import SendTraffic
from axl.routing.frames import TYPE_BLOOM, TYPE_SIGREQ
from axl.sessions import KeyPair
from axl.sim.network import DEFAULT_LATENCY, DEFAULT_START, FrameTap, random_edges, sim_identity
from axl.wire import DecodeError

# Linux TCP's minimum retransmission timeout: what a lost packet costs a link.
CARRIER_RTO = 0.2


@dataclass(eq=False)
class LinkEnd:
    """One node's end of a virtual link."""

    node: int
    link_id: int
    conn: LinkConnection
    latency: float = DEFAULT_LATENCY
    bandwidth: float | None = None
    loss: float = 0.0
    drop: float = 0.0
    peer: LinkEnd | None = None
    wire_free_at: float = 0.0
    last_arrival: float = 0.0
    timer_at: float | None = None


@dataclass(eq=False)
class StackNode:
    index: int
    core: NodeCore
    ends: list[LinkEnd] = field(default_factory=list)
    by_link: dict[int, LinkEnd] = field(default_factory=dict)
    timer_at: float | None = None
    alive: bool = True

    @property
    def key(self) -> bytes:
        return self.core.identity.public_key


@dataclass
class MessageTally:
    """What happened to the application messages of a run."""

    sent: int = 0
    delivered: Counter[int] = field(default_factory=Counter)
    acknowledged: set[int] = field(default_factory=set)
    failed: Counter[str] = field(default_factory=Counter)
    replies: dict[int, bytes] = field(default_factory=dict)

    @property
    def lost(self) -> int:
        """Acknowledged messages that never arrived: the one thing that must not happen."""
        return len(self.acknowledged - set(self.delivered))

    @property
    def duplicated(self) -> int:
        return sum(count - 1 for count in self.delivered.values())

    def line(self) -> str:
        return (f"delivered {len(self.delivered)}/{self.sent} acknowledged {len(self.acknowledged)} "
                f"lost {self.lost} duplicated {self.duplicated}")


class StackNetwork:
    """N full nodes, the links between them, and a virtual clock."""

    def __init__(self, size: int, *, seed: int = 0, start: float = DEFAULT_START,
                 settings: MessageSettings | None = None,
                 answer: Callable[[int, bytes, bytes], bytes | None] | None = None) -> None:
        self.seed = seed
        self.now = start
        self.rng = random.Random(seed)
        self.settings = settings or MessageSettings()
        self.answer = answer
        self.tally = MessageTally()
        self.dropped = 0
        self.tap: FrameTap | None = None
        self.inbox: list[list[tuple[bytes, bytes]]] = [[] for _ in range(size)]
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._link_ids = itertools.count(1)
        self._handles: dict[tuple[int, int], int] = {}
        self.nodes = [StackNode(index, self._make_core(index)) for index in range(size)]
        self.by_key = {node.key: node.index for node in self.nodes}
        for node in self.nodes:
            self._arm_node(node)

    def _make_core(self, index: int) -> NodeCore:
        """Node `index`'s core, seeded by the network's seed and the current time
        (a revived node starts with fresh state, as a restarted daemon does)."""
        key_rng = random.Random(f"{self.seed}/{index}/{self.now}/keys")
        return NodeCore(sim_identity(self.seed, index), self.settings, self.now,
                        rng=random.Random(f"{self.seed}/{index}/{self.now}"),
                        key_pairs=lambda: KeyPair.from_private(key_rng.randbytes(32)))

    # -- topology -------------------------------------------------------

    def connect(self, a: int, b: int, *, latency: float = DEFAULT_LATENCY,
                bandwidth: float | None = None, loss: float = 0.0, drop: float = 0.0) -> None:
        """Link a and b; their handshake runs over the link like any bytes."""
        ends = []
        for here in (a, b):
            end = LinkEnd(here, next(self._link_ids), self._new_conn(here, inbound=here == b),
                          latency, bandwidth, loss, drop)
            self.nodes[here].ends.append(end)
            self.nodes[here].by_link[end.link_id] = end
            ends.append(end)
        ends[0].peer, ends[1].peer = ends[1], ends[0]
        for end in ends:
            self._flush(end)
            self._arm_end(end)

    def kill(self, index: int) -> None:
        """Stop a node: its links end (its peers see the streams close), its state is lost."""
        node = self.nodes[index]
        node.alive = False
        node.timer_at = None
        for end in node.ends:
            end.conn.close("node stopped")
            peer = end.peer
            peer.conn.connection_lost()
            self._link_events(peer)

    def revive(self, index: int) -> None:
        """Restart a node with a fresh core; its links redial."""
        node = self.nodes[index]
        node.core = self._make_core(index)
        node.alive = True
        self._arm_node(node)
        for end in node.ends:
            peer = end.peer
            if not self.nodes[peer.node].alive:
                continue
            end.conn = self._new_conn(index, inbound=False)
            peer.conn = self._new_conn(peer.node, inbound=True)
            for each in (end, peer):
                self._flush(each)
                self._arm_end(each)

    def _new_conn(self, index: int, inbound: bool) -> LinkConnection:
        return LinkConnection(LinkPolicy(self.nodes[index].core.identity, inbound), self.now)

    def random_graph(self, degree: int, **link) -> None:
        for a, b in random_edges(len(self.nodes), degree, self.rng):
            self.connect(a, b, **link)

    # -- the application ------------------------------------------------

    def send(self, src: int, dst: int, payload: bytes, number: int) -> None:
        """Send message `number` (its identity in the tally) from src to dst."""
        node = self.nodes[src]
        handle = node.core.send_message(self.nodes[dst].key, payload, self.now)
        self._handles[(src, handle)] = number
        self.tally.sent += 1
        self._after(node)

    def request(self, src: int, dst: int, payload: bytes, number: int, timeout: float) -> None:
        node = self.nodes[src]
        handle = node.core.request(self.nodes[dst].key, payload, timeout, self.now)
        self._handles[(src, handle)] = number
        self.tally.sent += 1
        self._after(node)

    def at(self, when: float, callback: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (when, next(self._seq), callback))

    def run(self, seconds: float) -> None:
        self.run_until(self.now + seconds)

    def run_until(self, when: float, done: Callable[[], bool] | None = None) -> None:
        heap = self._heap
        while heap and heap[0][0] <= when:
            at, _, callback = heapq.heappop(heap)
            self.now = at
            callback()
            if done is not None and done():
                return
        self.now = when

    def linked(self) -> bool:
        """Every link finished its handshake."""
        return all(end.conn.established for node in self.nodes for end in node.ends)

    def one_root(self) -> bool:
        """Every node has chosen the lowest key as its root (the graph is connected)."""
        lowest = min(node.key for node in self.nodes)
        return all(node.core.router.root() == lowest for node in self.nodes)

    def run_until_formed(self, limit: float) -> float | None:
        """Virtual seconds (1 s resolution) until the network has formed, or None
        if it has not within `limit`.

        Formed: every link is up, every node has the same root, and a whole
        second passes without a tree frame (SigReq, SigRes, Announce, Bloom).
        The last condition matters most: a node's key spreads in bloom filters
        a hop per second up to the root and back down, and until it has, a
        lookup for it finds no way and a send to it fails as unreachable.
        """
        tree_frames = 0
        outer = self.tap

        def count(src: int, dst: int, ftype: int, body: bytes) -> None:
            nonlocal tree_frames
            if TYPE_SIGREQ <= ftype <= TYPE_BLOOM:
                tree_frames += 1
            if outer is not None:
                outer(src, dst, ftype, body)

        self.tap = count
        start = self.now
        try:
            while self.now - start < limit:
                before = tree_frames
                self.run(1)
                if tree_frames == before and self.linked() and self.one_root():
                    return self.now - start
            return None
        finally:
            self.tap = outer

    # -- the driver -----------------------------------------------------

    def _after(self, node: StackNode) -> None:
        """Carry out everything a call into `node`'s core produced."""
        core = node.core
        for write in core.frames_to_send():
            end = node.by_link.get(write.link_id)
            if end is None or end.conn.closed:
                continue
            if isinstance(write, SendTraffic) and end.drop and self.rng.random() < end.drop:
                self.dropped += 1
                continue
            end.conn.send_frame(write.frame, self.now)
        while (event := core.next_event()) is not None:
            self._settle(node, event)
        for end in node.ends:
            if end.conn.pending_output:
                self._flush(end)
            self._arm_end(end)
        self._arm_node(node)

    def _settle(self, node: StackNode, event: MessageEvent) -> None:
        tally = self.tally
        if isinstance(event, InboundMessage):
            self.inbox[node.index].append((event.sender, event.payload))
            number = int.from_bytes(event.payload[:8], "big")
            tally.delivered[number] += 1
            reply = self.answer(node.index, event.sender, event.payload) if self.answer else None
            node.core.answer_inbound(event.handle, True, reply, self.now)
            return
        number = self._handles.pop((node.index, event.handle), None)
        if number is None:
            return
        if isinstance(event, Acknowledged):
            tally.acknowledged.add(number)
        elif isinstance(event, ReplyReceived):
            tally.acknowledged.add(number)
            tally.replies[number] = event.reply
        elif isinstance(event, SendFailed):
            tally.failed[event.kind] += 1

    def _flush(self, end: LinkEnd) -> None:
        """Put what the connection wrote on the wire toward its peer."""
        data = end.conn.data_to_send()
        if not data or end.peer is None:
            return
        start = max(self.now, end.wire_free_at)
        end.wire_free_at = start + (len(data) / end.bandwidth if end.bandwidth else 0.0)
        arrival = end.wire_free_at + end.latency
        if end.loss and self.rng.random() < end.loss:
            arrival += max(CARRIER_RTO, 2 * end.latency)
        end.last_arrival = max(arrival, end.last_arrival)
        peer = end.peer
        conn = peer.conn
        self.at(end.last_arrival, lambda: self._arrive(peer, conn, data))

    def _arrive(self, end: LinkEnd, conn: LinkConnection, data: bytes) -> None:
        """Bytes reach the connection they were sent to, unless it was replaced or closed."""
        if end.conn is not conn or conn.closed:
            return
        end.conn.receive_data(data, self.now)
        self._link_events(end)

    def _link_events(self, end: LinkEnd) -> None:
        node = self.nodes[end.node]
        core = node.core
        conn = end.conn
        while (event := conn.next_event()) is not None:
            if isinstance(event, FrameReceived):
                if self.tap is not None:
                    self.tap(end.peer.node, end.node, event.ftype, event.body)
                try:
                    core.frame_received(end.link_id, event.ftype, event.body, self.now)
                except DecodeError as exc:
                    conn.close(f"malformed frame: {exc}")
            elif isinstance(event, HandshakeDone):
                core.link_up(end.link_id, event.meta.key, event.priority, self.now)
            elif isinstance(event, LinkClosed) and event.established:
                core.link_down(end.link_id, self.now)
        self._after(node)

    def _arm_node(self, node: StackNode) -> None:
        when = node.core.get_timer()
        if node.timer_at is None or when < node.timer_at:
            node.timer_at = when
            self.at(when, lambda: self._node_timer(node, when))

    def _node_timer(self, node: StackNode, when: float) -> None:
        if node.timer_at != when or not node.alive:
            return
        node.timer_at = None
        node.core.handle_timer(self.now)
        self._after(node)

    def _arm_end(self, end: LinkEnd) -> None:
        when = end.conn.get_timer()
        if when is not None and (end.timer_at is None or when < end.timer_at):
            end.timer_at = when
            self.at(when, lambda: self._end_timer(end, when))

    def _end_timer(self, end: LinkEnd, when: float) -> None:
        if end.timer_at != when:
            return
        end.timer_at = None
        end.conn.handle_timer(self.now)
        if end.conn.pending_output:
            self._flush(end)
        self._link_events(end)
