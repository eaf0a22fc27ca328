"""GossipSub as a sans-IO state machine: bytes and time in, bytes out.

The class below never touches a socket or a clock. A driver feeds it what
arrived (``receive``), the current time (``handle_timer``) and local calls
(``subscribe``, ``publish``), then ships ``take_outgoing()`` over the network
and hands ``take_deliveries()`` to the application. The same object therefore
runs over AXL's HTTP bridge (gossip_driver.py) and inside an in-memory
simulator with a virtual clock (gossip_sim.py).

What it implements, in GossipSub terms:
- topics, SUBSCRIBE/UNSUBSCRIBE announcements to every known peer;
- per topic a mesh kept between ``d_low`` and ``d_high`` peers by the
  heartbeat, with GRAFT/PRUNE and a backoff after PRUNE;
- fanout peers for topics we publish to without subscribing;
- a message cache of ``mcache_len`` heartbeat windows, the last
  ``mcache_gossip`` of which are advertised with IHAVE to ``d_lazy`` non-mesh
  peers; IWANT pulls what is missing;
- a seen-set with expiry, so every message is delivered once.

And one extension that keeps duplicates low: CHOKE/UNCHOKE on mesh links
(the idea of the episub and gossipsub choking proposals, and of Plumtree).
A node that receives a message it already has from a mesh peer chokes that
peer: the peer stays in the mesh but sends IHAVE instead of the full message.
When an IHAVE announces a message that does not arrive by eager push within
``iwant_timeout``, the node pulls it with IWANT and unchokes the announcer.
Eager links thus settle into a tree across the mesh, while the mesh itself,
the lazy links and the heartbeat gossip repair any gap.

Wire format: one msgpack map per RPC (see ``encode_rpc``).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import msgpack

MAX_IDS_PER_IHAVE = 500


class MalformedRPC(ValueError):
    """A peer sent bytes that are not a GossipSub RPC of this format."""


@dataclass(frozen=True)
class Params:
    """Tuning knobs; the defaults are the ones README.md reports figures for."""

    d: int = 4
    d_low: int = 3
    d_high: int = 6
    d_lazy: int = 3
    heartbeat_interval: float = 0.5
    mcache_len: int = 120  # 60 s at the default heartbeat: a pull that arrives late is still served
    mcache_gossip: int = 3
    seen_ttl: float = 120.0
    fanout_ttl: float = 60.0
    prune_backoff: float = 10.0
    iwant_timeout: float = 0.3
    choke: bool = True


@dataclass
class Message:
    """A published message. ``hops`` counts the transmissions it took to reach us."""

    topic: str
    data: bytes
    origin: str
    seqno: int
    published_at: float
    hops: int = 0

    @property
    def msg_id(self) -> str:
        """Origin and sequence number; publish() starts sequence numbers from the clock
        (microseconds), so a restarted publisher does not reuse the ids of its last run."""
        return f"{self.origin}:{self.seqno}"

    def to_wire(self) -> dict[str, Any]:
        return {"t": self.topic, "d": self.data, "o": self.origin, "s": self.seqno,
                "p": self.published_at, "h": self.hops}

    @classmethod
    def from_wire(cls, item: Any) -> "Message":
        if not isinstance(item, dict):
            raise MalformedRPC("message is not a map")
        topic, data, origin = item.get("t"), item.get("d"), item.get("o")
        seqno, published, hops = item.get("s"), item.get("p"), item.get("h")
        if not (isinstance(topic, str) and isinstance(data, bytes) and isinstance(origin, str)):
            raise MalformedRPC("message topic/data/origin of the wrong type")
        if not (isinstance(seqno, int) and isinstance(published, (int, float)) and isinstance(hops, int)):
            raise MalformedRPC("message seqno/time/hops of the wrong type")
        return cls(topic, data, origin, seqno, float(published), hops)


@dataclass
class Delivery:
    """A message handed to the local application, with when it arrived."""

    message: Message
    received_at: float

    @property
    def latency(self) -> float:
        return self.received_at - self.message.published_at


@dataclass
class RPC:
    """Everything one peer tells another in one transmission."""

    subscriptions: list[tuple[str, bool]] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    ihave: dict[str, list[str]] = field(default_factory=dict)
    iwant: list[str] = field(default_factory=list)
    graft: list[str] = field(default_factory=list)
    prune: list[str] = field(default_factory=list)
    choke: list[str] = field(default_factory=list)
    unchoke: list[str] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not (self.subscriptions or self.messages or self.ihave or self.iwant
                    or self.graft or self.prune or self.choke or self.unchoke)


def encode_rpc(rpc: RPC) -> bytes:
    document: dict[str, Any] = {"gossipsub": 1}
    if rpc.subscriptions:
        document["sub"] = [[topic, flag] for topic, flag in rpc.subscriptions]
    if rpc.messages:
        document["msg"] = [message.to_wire() for message in rpc.messages]
    for key, value in (("ihave", rpc.ihave), ("iwant", rpc.iwant), ("graft", rpc.graft),
                       ("prune", rpc.prune), ("choke", rpc.choke), ("unchoke", rpc.unchoke)):
        if value:
            document[key] = value
    return msgpack.packb(document, use_bin_type=True)


def _string_list(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise MalformedRPC(f"{what} is not a list of strings")
    return value


def decode_rpcs(payload: bytes) -> list[RPC]:
    """Parse a payload of one or more concatenated RPCs (drivers may batch them).

    Raises MalformedRPC for anything else, other applications' messages too.
    """
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, max_buffer_size=max(len(payload), 1))
    unpacker.feed(payload)
    try:
        documents = list(unpacker)
    except (ValueError, msgpack.UnpackException) as error:
        raise MalformedRPC(f"not msgpack: {error}") from error
    if not documents or unpacker.tell() != len(payload):
        raise MalformedRPC("empty or truncated payload")
    return [_rpc_from_document(document) for document in documents]


def _rpc_from_document(document: Any) -> RPC:
    if not isinstance(document, dict) or document.get("gossipsub") != 1:
        raise MalformedRPC("not a gossipsub RPC")
    rpc = RPC()
    for entry in document.get("sub", []):
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
                and isinstance(entry[1], bool)):
            raise MalformedRPC("subscription entry is not [topic, bool]")
        rpc.subscriptions.append((entry[0], entry[1]))
    messages = document.get("msg", [])
    if not isinstance(messages, list):
        raise MalformedRPC("msg is not a list")
    rpc.messages = [Message.from_wire(item) for item in messages]
    ihave = document.get("ihave", {})
    if not isinstance(ihave, dict):
        raise MalformedRPC("ihave is not a map")
    rpc.ihave = {_string_list([topic], "ihave topic")[0]: _string_list(ids, "ihave ids")[:MAX_IDS_PER_IHAVE]
                 for topic, ids in ihave.items()}
    rpc.iwant = _string_list(document.get("iwant", []), "iwant")[:MAX_IDS_PER_IHAVE]
    rpc.graft = _string_list(document.get("graft", []), "graft")
    rpc.prune = _string_list(document.get("prune", []), "prune")
    rpc.choke = _string_list(document.get("choke", []), "choke")
    rpc.unchoke = _string_list(document.get("unchoke", []), "unchoke")
    return rpc


class MessageCache:
    """Recent messages in heartbeat windows: serves IWANT and feeds IHAVE gossip."""

    def __init__(self, windows: int, gossip_windows: int) -> None:
        self.gossip_windows = gossip_windows
        self.windows: deque[list[str]] = deque([[]], maxlen=windows)
        self.messages: dict[str, Message] = {}

    def put(self, message: Message) -> None:
        self.messages[message.msg_id] = message
        self.windows[0].append(message.msg_id)

    def get(self, msg_id: str) -> Message | None:
        return self.messages.get(msg_id)

    def gossip_ids(self, topic: str) -> list[str]:
        recent = list(self.windows)[: self.gossip_windows]
        return [msg_id for window in recent for msg_id in window if self.messages[msg_id].topic == topic]

    def shift(self) -> None:
        if len(self.windows) == self.windows.maxlen:
            for msg_id in self.windows[-1]:
                self.messages.pop(msg_id, None)
        self.windows.appendleft([])


@dataclass
class PendingWant:
    """A message announced by IHAVE that we do not have yet."""

    topic: str
    deadline: float
    announcers: list[str]


class GossipSub:
    """One node's GossipSub router. All randomness comes from ``rng`` (seedable)."""

    def __init__(self, peer_id: str, params: Params | None = None, rng: random.Random | None = None) -> None:
        self.peer_id = peer_id
        self.params = params or Params()
        self.rng = rng or random.Random()
        self.peers: set[str] = set()
        self.peer_topics: dict[str, set[str]] = {}
        self.subscriptions: set[str] = set()
        self.mesh: dict[str, set[str]] = {}
        self.choked: dict[str, set[str]] = {}
        self.fanout: dict[str, set[str]] = {}
        self.fanout_last_publish: dict[str, float] = {}
        self.backoff: dict[tuple[str, str], float] = {}
        self.mcache = MessageCache(self.params.mcache_len, self.params.mcache_gossip)
        self.seen: dict[str, float] = {}
        self.pending: dict[str, PendingWant] = {}
        self.next_heartbeat: float | None = None
        self.seqno = 0
        self.copies_received = 0  # full copies of messages on our topics, duplicates included
        self._outgoing: dict[str, RPC] = {}
        self._deliveries: list[Delivery] = []

    # ----- outputs

    def take_outgoing(self) -> list[tuple[str, bytes]]:
        """RPCs to send, one per destination peer, in the order they were produced."""
        batch = [(peer, encode_rpc(rpc)) for peer, rpc in self._outgoing.items() if not rpc.is_empty()]
        self._outgoing = {}
        return batch

    def take_deliveries(self) -> list[Delivery]:
        deliveries, self._deliveries = self._deliveries, []
        return deliveries

    def _rpc(self, peer: str) -> RPC:
        return self._outgoing.setdefault(peer, RPC())

    # ----- peers and subscriptions

    def add_peer(self, peer: str) -> None:
        """Start talking to ``peer``: tell it what we subscribe to."""
        if peer == self.peer_id or peer in self.peers:
            return
        self.peers.add(peer)
        self.peer_topics.setdefault(peer, set())
        if self.subscriptions:
            self._rpc(peer).subscriptions.extend((topic, True) for topic in sorted(self.subscriptions))

    def remove_peer(self, peer: str) -> None:
        self.peers.discard(peer)
        self.peer_topics.pop(peer, None)
        for group in (*self.mesh.values(), *self.choked.values(), *self.fanout.values()):
            group.discard(peer)

    def subscribe(self, topic: str, now: float) -> None:
        """Join ``topic``: announce it and graft up to ``d`` subscribed peers."""
        if topic in self.subscriptions:
            return
        self.subscriptions.add(topic)
        for peer in sorted(self.peers):
            self._rpc(peer).subscriptions.append((topic, True))
        mesh = self.fanout.pop(topic, set())
        self.fanout_last_publish.pop(topic, None)
        self.mesh[topic] = mesh
        self.choked[topic] = set()
        self._fill_mesh(topic, now)
        self._schedule_heartbeat(now)

    def unsubscribe(self, topic: str, now: float) -> None:
        if topic not in self.subscriptions:
            return
        self.subscriptions.discard(topic)
        for peer in sorted(self.peers):
            self._rpc(peer).subscriptions.append((topic, False))
        for peer in sorted(self.mesh.pop(topic, set())):
            self._rpc(peer).prune.append(topic)
            self.backoff[(topic, peer)] = now + self.params.prune_backoff
        self.choked.pop(topic, None)

    def subscribers(self, topic: str) -> list[str]:
        """The peers that said they are on ``topic``: the only ones a message on it reaches."""
        return sorted(peer for peer in self.peers if topic in self.peer_topics.get(peer, ()))

    def _schedule_heartbeat(self, now: float) -> None:
        if self.next_heartbeat is None:
            self.next_heartbeat = now + self.params.heartbeat_interval

    # ----- publishing and forwarding

    def publish(self, topic: str, data: bytes, now: float) -> str:
        """Send a new message to the topic's mesh (or fanout) peers; returns its id."""
        self.seqno = max(self.seqno + 1, int(now * 1_000_000))
        message = Message(topic, data, self.peer_id, self.seqno, now, 0)
        self.seen[message.msg_id] = now + self.params.seen_ttl
        self.mcache.put(message)
        if topic in self.subscriptions:
            self._forward(message, self.peer_id)
        else:
            for peer in sorted(self._fanout_peers(topic, now)):
                self._rpc(peer).messages.append(Message(**{**message.__dict__, "hops": 1}))
        self._schedule_heartbeat(now)
        return message.msg_id

    def _fanout_peers(self, topic: str, now: float) -> set[str]:
        fanout = self.fanout.setdefault(topic, set())
        fanout &= set(self.subscribers(topic))
        candidates = [peer for peer in self.subscribers(topic) if peer not in fanout]
        self.rng.shuffle(candidates)
        fanout.update(candidates[: max(0, self.params.d - len(fanout))])
        self.fanout_last_publish[topic] = now
        return fanout

    def _forward(self, message: Message, source: str) -> None:
        """Eager push to unchoked mesh peers, IHAVE to choked ones."""
        mesh = self.mesh.get(message.topic, set())
        choked = self.choked.get(message.topic, set())
        relayed = Message(**{**message.__dict__, "hops": message.hops + 1})
        for peer in sorted(mesh - {source, message.origin}):
            if peer in choked:
                self._rpc(peer).ihave.setdefault(message.topic, []).append(message.msg_id)
            else:
                self._rpc(peer).messages.append(relayed)

    # ----- receiving

    def receive(self, peer: str, payload: bytes, now: float) -> None:
        """Handle the RPCs in ``payload``; raises MalformedRPC without changing state."""
        rpcs = decode_rpcs(payload)
        if peer not in self.peers:
            self.add_peer(peer)
        for rpc in rpcs:
            self._handle_rpc(peer, rpc, now)

    def _handle_rpc(self, peer: str, rpc: RPC, now: float) -> None:
        for topic, subscribed in rpc.subscriptions:
            self._handle_subscription(peer, topic, subscribed)
        for message in rpc.messages:
            self._handle_message(peer, message, now)
        for topic, ids in rpc.ihave.items():
            self._handle_ihave(peer, topic, ids, now)
        if rpc.iwant:
            self._handle_iwant(peer, rpc.iwant)
        for topic in rpc.graft:
            self._handle_graft(peer, topic, now)
        for topic in rpc.prune:
            self._handle_prune(peer, topic, now)
        for topic in rpc.choke:
            if peer in self.mesh.get(topic, ()):
                self.choked.setdefault(topic, set()).add(peer)
        for topic in rpc.unchoke:
            self.choked.get(topic, set()).discard(peer)

    def _handle_subscription(self, peer: str, topic: str, subscribed: bool) -> None:
        topics = self.peer_topics.setdefault(peer, set())
        if subscribed:
            topics.add(topic)
            return
        topics.discard(topic)
        for group in (self.mesh, self.choked, self.fanout):
            group.get(topic, set()).discard(peer)

    def _handle_message(self, peer: str, message: Message, now: float) -> None:
        if message.topic in self.subscriptions:
            self.copies_received += 1
        msg_id = message.msg_id
        if msg_id in self.seen:
            self._choke_duplicate_sender(peer, message.topic)
            return
        self.seen[msg_id] = now + self.params.seen_ttl
        self.pending.pop(msg_id, None)
        self.mcache.put(message)
        if message.topic in self.subscriptions:
            self._deliveries.append(Delivery(message, now))
        self._forward(message, peer)

    def _choke_duplicate_sender(self, peer: str, topic: str) -> None:
        """A mesh peer pushed a message we had: ask it to announce instead of push."""
        if not self.params.choke or peer not in self.mesh.get(topic, ()):
            return
        self.choked.setdefault(topic, set()).add(peer)
        self._rpc(peer).choke.append(topic)

    def _handle_ihave(self, peer: str, topic: str, ids: list[str], now: float) -> None:
        if topic not in self.subscriptions:
            return
        for msg_id in ids:
            if msg_id in self.seen:
                continue
            pending = self.pending.get(msg_id)
            if pending is None:
                self.pending[msg_id] = PendingWant(topic, now + self.params.iwant_timeout, [peer])
            elif peer not in pending.announcers:
                pending.announcers.append(peer)

    def _handle_iwant(self, peer: str, ids: list[str]) -> None:
        for msg_id in ids:
            message = self.mcache.get(msg_id)
            if message is not None:
                self._rpc(peer).messages.append(Message(**{**message.__dict__, "hops": message.hops + 1}))

    def _handle_graft(self, peer: str, topic: str, now: float) -> None:
        if topic not in self.subscriptions or self.backoff.get((topic, peer), 0.0) > now:
            self._rpc(peer).prune.append(topic)
            return
        self.mesh.setdefault(topic, set()).add(peer)

    def _handle_prune(self, peer: str, topic: str, now: float) -> None:
        self.mesh.get(topic, set()).discard(peer)
        self.choked.get(topic, set()).discard(peer)
        self.backoff[(topic, peer)] = now + self.params.prune_backoff

    # ----- time

    def next_deadline(self) -> float | None:
        """When ``handle_timer`` next has work to do (None: nothing scheduled)."""
        deadlines = [pending.deadline for pending in self.pending.values()]
        if self.next_heartbeat is not None:
            deadlines.append(self.next_heartbeat)
        return min(deadlines, default=None)

    def handle_timer(self, now: float) -> None:
        """Pull overdue announced messages; run the heartbeat when it is due."""
        self._pull_overdue(now)
        if self.next_heartbeat is not None and now >= self.next_heartbeat:
            self.heartbeat(now)
            self.next_heartbeat = now + self.params.heartbeat_interval

    def _pull_overdue(self, now: float) -> None:
        for msg_id, pending in list(self.pending.items()):
            if pending.deadline > now:
                continue
            if not pending.announcers:
                del self.pending[msg_id]
                continue
            announcer = pending.announcers.pop(0)
            self._rpc(announcer).iwant.append(msg_id)
            if announcer in self.mesh.get(pending.topic, ()):
                self.choked.setdefault(pending.topic, set()).discard(announcer)
                self._rpc(announcer).unchoke.append(pending.topic)
            pending.deadline = now + self.params.iwant_timeout

    def heartbeat(self, now: float) -> None:
        """Keep meshes within bounds, expire state, gossip IHAVE, shift the cache."""
        for topic in sorted(self.subscriptions):
            self._maintain_mesh(topic, now)
        self._expire(now)
        self._gossip()
        self.mcache.shift()

    def _maintain_mesh(self, topic: str, now: float) -> None:
        mesh = self.mesh.setdefault(topic, set())
        subscribers = set(self.subscribers(topic))
        mesh &= subscribers
        self.choked[topic] = self.choked.get(topic, set()) & mesh
        if len(mesh) < self.params.d_low:
            self._fill_mesh(topic, now)
        elif len(mesh) > self.params.d_high:
            excess = sorted(mesh)
            self.rng.shuffle(excess)
            for peer in excess[: len(mesh) - self.params.d]:
                mesh.discard(peer)
                self.choked[topic].discard(peer)
                self._rpc(peer).prune.append(topic)
                self.backoff[(topic, peer)] = now + self.params.prune_backoff

    def _fill_mesh(self, topic: str, now: float) -> None:
        mesh = self.mesh.setdefault(topic, set())
        candidates = [peer for peer in self.subscribers(topic)
                      if peer not in mesh and self.backoff.get((topic, peer), 0.0) <= now]
        self.rng.shuffle(candidates)
        for peer in candidates[: max(0, self.params.d - len(mesh))]:
            mesh.add(peer)
            self._rpc(peer).graft.append(topic)

    def _expire(self, now: float) -> None:
        self.seen = {msg_id: expiry for msg_id, expiry in self.seen.items() if expiry > now}
        self.backoff = {key: until for key, until in self.backoff.items() if until > now}
        for topic, last in list(self.fanout_last_publish.items()):
            if last + self.params.fanout_ttl <= now:
                self.fanout.pop(topic, None)
                del self.fanout_last_publish[topic]

    def _gossip(self) -> None:
        for topic in sorted(self.mesh.keys() | self.fanout.keys()):
            ids = self.mcache.gossip_ids(topic)
            if not ids:
                continue
            excluded = self.mesh.get(topic, set()) | self.fanout.get(topic, set())
            candidates = [peer for peer in self.subscribers(topic) if peer not in excluded]
            self.rng.shuffle(candidates)
            for peer in candidates[: self.params.d_lazy]:
                self._rpc(peer).ihave.setdefault(topic, []).extend(ids[-MAX_IDS_PER_IHAVE:])
