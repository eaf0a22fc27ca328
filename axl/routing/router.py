"""The ironwood router as a sans-IO state machine: spanning tree, blooms,
pathfinder and greedy forwarding.

Go peers keep routing to us only if everything they can observe matches
ironwood 743fe2f: the merge rule, gossip order and sent-marks, the two-step
root, SigReq/SigRes timing, bloom contents, lookup multicast and notify
acceptance. The structure below therefore follows ironwood's router closely;
what Go leaves to map order is made deterministic here (insertion order).

Nothing in this module does I/O or reads a clock: every entry point takes
`now` and returns the list of actions the driver must carry out. `now` measures
every duration and timer, so a node passes a monotonic clock (a wall clock
stepping back would stall refresh and expiry). Only PathNotify seqs are Unix
seconds on the wire (ironwood signs `time.Now().Unix()`); they come from the
injected `wall_clock`, or from `now` when the driver has a single virtual
clock (the simulator, unit tests).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Final

from axl.budgets import LOOKUP_BURST, LOOKUP_RATE, MAX_INFOS_PER_PEER
from axl.identity import NodeIdentity, bloom_transform, verify
from axl.routing.actions import Action, DeliverTraffic, SendFrame, SendTraffic
from axl.routing.bloom import BloomFilter, key_mask, matches_mask
from axl.routing.frames import (
    MAX_WATERMARK,
    TYPE_ANNOUNCE,
    TYPE_BLOOM,
    TYPE_DUMMY,
    TYPE_KEEPALIVE,
    TYPE_PATH_BROKEN,
    TYPE_PATH_LOOKUP,
    TYPE_PATH_NOTIFY,
    TYPE_SIGREQ,
    TYPE_SIGRES,
    TYPE_TRAFFIC,
    Announce,
    PathBroken,
    PathLookup,
    PathNotify,
    SigReq,
    SigRes,
    Traffic,
    sig_bytes,
    traffic_frame,
)
from axl.routing.pathfinder import Pathfinder, PathReport
from axl.wire import MAX_FRAME, DecodeError, encode_frame

ROUTER_REFRESH = 240.0
ROUTER_TIMEOUT = 300.0
BLOOM_RESEND_TICKS = 3600
SETTLE_DELAY: Final = 0.02
"""How soon after a tree frame (SigRes, Announce, Bloom) the router sends
what it changes, instead of at the next 1-second tick; also the most often
a peer's frames can make it do so."""
TREE_SETTLING_TYPES: Final = frozenset((TYPE_SIGRES, TYPE_ANNOUNCE, TYPE_BLOOM))
UNKNOWN_LAG_NS = (1 << 32) - 1
# Destinations whose next hop is remembered (all forgotten at once past this).
HOP_CACHE_SIZE = 4096


class BadSignature(DecodeError):
    """A frame decoded but carries a signature that does not verify."""


@dataclass(frozen=True)
class TreeEntry:
    key: bytes
    parent: bytes
    seq: int
    is_root: bool


@dataclass(frozen=True)
class PeerView:
    key: bytes
    port: int
    root: bytes
    coords: list[int]
    cost: int = 0
    # The round trip of the link's last signature request and its response,
    # in nanoseconds (0 before the first): ironwood's peer latency.
    latency_ns: int = 0


@dataclass
class _Link:
    link_id: int
    key: bytes
    priority: int
    order: int
    lag_ns: int = UNKNOWN_LAG_NS
    responded: bool = False
    req_sent_at: float = 0.0
    rtt_ns: int = 0

    def cost(self) -> int:
        """Link cost in whole milliseconds of latency, never 0 (it multiplies the distance left)."""
        return max(1, self.lag_ns // 1_000_000)


@dataclass
class _Peer:
    """Per-key state; it lives while at least one link to the key is up."""

    key: bytes
    port: int
    links: dict[int, _Link] = field(default_factory=dict)
    sent: set[bytes] = field(default_factory=set)
    request: SigReq | None = None
    response: SigRes | None = None
    response_order: int = 0
    bloom_sent: BloomFilter = field(default_factory=BloomFilter)
    bloom_recv: BloomFilter = field(default_factory=BloomFilter)
    on_tree: bool = False
    bloom_ticks: int = 0
    lookup_tokens: float = LOOKUP_BURST
    lookup_refilled: float = 0.0

    def take_lookup_token(self, now: float) -> bool:
        elapsed = max(0.0, now - self.lookup_refilled)
        self.lookup_tokens = min(LOOKUP_BURST, self.lookup_tokens + elapsed * LOOKUP_RATE)
        self.lookup_refilled = now
        if self.lookup_tokens < 1.0:
            return False
        self.lookup_tokens -= 1.0
        return True

    def best_link(self) -> _Link:
        """Lowest priority value; the earliest link wins a tie."""
        return min(self.links.values(), key=lambda link: link.priority)


class Router:
    """One node's routing state. Drive it with add_link/remove_link/handle_frame/tick/send."""

    def __init__(self, identity: NodeIdentity, *, now: float, rng: random.Random | None = None,
                 wall_clock: Callable[[], float] | None = None):
        self.identity = identity
        self.key = identity.public_key
        self.xform = bloom_transform(self.key)
        self._xform_mask = key_mask(self.xform)
        self._rng = rng if rng is not None else random.SystemRandom()
        self._now = now
        self._out: list[Action] = []
        self.infos: dict[bytes, Announce] = {}
        self._info_times: dict[bytes, float] = {}
        self._info_origin: dict[bytes, bytes] = {}
        self._origin_counts: Counter[bytes] = Counter()
        self._peers: dict[bytes, _Peer] = {}
        self._links: dict[int, _Link] = {}
        self._link_counter = 0
        self._response_counter = 0
        self._coords_cache: dict[bytes, tuple[bytes, list[int]]] = {}
        self._ancestry_cache: dict[bytes, list[bytes]] = {}
        # destination coordinates -> (best next hop or None, our distance to them)
        self._hops: dict[tuple[int, ...], tuple[_Link | None, int]] = {}
        self._refresh = False
        self._do_root1 = False
        self._do_root2 = False
        self.settle_at: float | None = None
        """When `settle` is due: a tree frame arrived since the last one."""
        self.lookups_dropped = 0  # over a peer's LOOKUP_RATE budget
        self.infos_refused = 0  # new keys from a peer at its MAX_INFOS_PER_PEER
        self.oversized_dropped = 0  # frames we built over MAX_FRAME
        self._pathfinder = Pathfinder(self, wall_clock)
        self._become_root()

    # ------------------------------------------------------------------ entry points

    def add_link(self, link_id: int, key: bytes, priority: int, now: float) -> list[Action]:
        """A link came up: replay gossip to a known key, then SigReq and our stored bloom."""
        if key == self.key:
            raise ValueError("a link to our own key cannot join the tree")
        if link_id in self._links:
            raise ValueError(f"link {link_id} already added")
        self._now = now
        peer = self._peers.get(key)
        if peer is None:
            peer = _Peer(key=key, port=self._free_port())
            self._peers[key] = peer
        link = _Link(link_id, key, priority, self._link_counter)
        self._link_counter += 1
        for info_key in peer.sent:
            self._send_tree(link, TYPE_ANNOUNCE, self.infos[info_key].encode())
        peer.links[link_id] = link
        self._links[link_id] = link
        self._hops.clear()
        if peer.request is None:
            peer.request = self._new_request()
        self._send_request(link, peer.request)
        self._send_tree(link, TYPE_BLOOM, peer.bloom_sent.encode())
        return self._flush()

    def remove_link(self, link_id: int, now: float) -> list[Action]:
        """A link went down; per-key state goes with the last link, infos stay until expiry."""
        self._now = now
        link = self._links.pop(link_id, None)
        if link is None:
            return []
        self._hops.clear()
        peer = self._peers[link.key]
        del peer.links[link_id]
        if not peer.links:
            del self._peers[link.key]
        else:
            for other in peer.links.values():
                self._send_tree(other, TYPE_BLOOM, peer.bloom_sent.encode())
        return self._flush()

    def handle_frame(self, link_id: int, ftype: int, body: bytes, now: float) -> list[Action]:
        """One received frame; DecodeError (incl. BadSignature) means: close this link."""
        self._now = now
        link = self._links.get(link_id)
        if link is None or ftype in (TYPE_DUMMY, TYPE_KEEPALIVE):
            return []
        handler = _FRAME_HANDLERS.get(ftype)
        if handler is None:
            raise DecodeError(f"unknown frame type {ftype}")
        handler(self, link, body)
        if ftype in TREE_SETTLING_TYPES and self.settle_at is None:
            self.settle_at = now + SETTLE_DELAY
        return self._flush()

    def tick(self, now: float) -> list[Action]:
        """The 1-second maintenance, in ironwood's order."""
        self._now = now
        self._expire_infos()
        self._pathfinder.expire()
        if now - self._info_times.get(self.key, now) >= ROUTER_REFRESH:
            self._refresh = True
        self._do_root2 = self._do_root2 or self._do_root1
        self._fix()
        self._send_announces()
        self._fix_on_tree()
        self._send_all_blooms()
        self._pathfinder.retry_waiting_rumors()
        return self._flush()

    def settle(self, now: float) -> list[Action]:
        """The tick's tree steps, run SETTLE_DELAY after tree frames arrived
        instead of waiting for the tick: a better parent is taken, and the
        announces and bloom filters that follow go out, then the lookups
        that no peer has seen yet (the filters matched nobody) go again.

        A peering's tree then forms in a few round trips, not in one step
        per tick (3-4 s). Peers see the same frames as from the tick, only
        sooner; self-rooting keeps its two ticks, and the tick's resends
        and retries keep their pace."""
        self._now = now
        self.settle_at = None
        self._fix(prompt=True)
        self._send_announces()
        self._fix_on_tree()
        self._send_all_blooms(tick=False)
        self._pathfinder.retry_unheard_rumors()
        return self._flush()

    def send(self, dest_key: bytes, payload: bytes | memoryview, now: float) -> list[Action]:
        """Local traffic to a full key: routed if a path is known, else looked up and buffered."""
        self._now = now
        traffic = Traffic([], [], self.key, dest_key, MAX_WATERMARK, payload)
        self._pathfinder.send_local_traffic(traffic)
        return self._flush()

    def lookup(self, partial_key: bytes, now: float) -> list[Action]:
        """Look up whoever owns xform(partial_key) (the IPv6 layer's SendLookup)."""
        self._now = now
        self._pathfinder.rumor_send_lookup(partial_key)
        return self._flush()

    # ------------------------------------------------------------------ queries

    def root(self) -> bytes:
        return self._root_and_path(self.key)[0]

    def coords(self) -> list[int]:
        return list(self._root_and_path(self.key)[1])

    def tree_entries(self) -> list[TreeEntry]:
        return [
            TreeEntry(key, info.parent, info.seq, info.parent == key)
            for key, info in self.infos.items()
        ]

    def live_tree_entries(self) -> list[TreeEntry]:
        """Entries still backed by a live peering: our ancestry and each peer's.

        Infos of departed nodes linger until their 5-minute expiry (Go keeps
        them too); applications reading the tree must not wait for them.
        """
        keys: dict[bytes, None] = dict.fromkeys(self._ancestry(self.key))
        for peer_key in self._peers:
            keys.update(dict.fromkeys(self._ancestry(peer_key)))
        return [
            TreeEntry(key, info.parent, info.seq, info.parent == key)
            for key in keys if (info := self.infos.get(key)) is not None
        ]

    def coords_of(self, key: bytes) -> list[int]:
        """Coordinates of any key we hold an info for ([] when unknown or broken)."""
        return list(self._root_and_path(key)[1])

    def link_port(self, link_id: int) -> int:
        return self._peers[self._links[link_id].key].port

    def peer_view(self, link_id: int) -> PeerView:
        link = self._links[link_id]
        root, coords = self._root_and_path(link.key)
        return PeerView(link.key, self._peers[link.key].port, root, list(coords),
                        link.cost(), max(0, link.rtt_ns))

    def info_count(self) -> int:
        return len(self.infos)

    def most_infos_from_one_peer(self) -> int:
        """Infos first learned from the peer that gave us the most (its
        MAX_INFOS_PER_PEER budget in use)."""
        return max(self._origin_counts.values(), default=0)

    def peer_keys(self) -> list[bytes]:
        return list(self._peers)

    def known_paths(self) -> dict[bytes, list[int]]:
        """Destinations with a path from a notify, and their coordinates."""
        return self._pathfinder.known_paths()

    def path_report(self) -> list[PathReport]:
        return self._pathfinder.path_report()

    def rumor_count(self) -> int:
        return len(self._pathfinder.rumors)

    @property
    def rumors_refused(self) -> int:
        """Lookups not started because MAX_RUMORS were already under way."""
        return self._pathfinder.rumors_refused

    def is_on_tree(self, key: bytes) -> bool:
        peer = self._peers.get(key)
        return peer is not None and peer.on_tree

    # ------------------------------------------------------------------ for the pathfinder

    @property
    def now(self) -> float:
        """The time of the event being handled."""
        return self._now

    def emit(self, action: Action) -> None:
        """An action for the caller of the event being handled."""
        self._out.append(action)

    def send_to_tree_peers(self, ftype: int, body: bytes, mask: int, exclude: bytes,
                           dest: bytes, source: bytes) -> int:
        """Queue a frame to every on-tree peer but `exclude` whose bloom filter
        matches `mask`; how many that was."""
        sent = 0
        for peer in self._peers.values():
            if peer.on_tree and peer.key != exclude and matches_mask(peer.bloom_recv, mask):
                self._send_queued(peer.best_link(), ftype, body, dest, source)
                sent += 1
        return sent

    def forward(self, message: PathNotify | PathBroken, ftype: int) -> bool:
        """Send `message` one greedy hop along its path, with the watermark
        lowered; False when no peer is closer (the message is for us)."""
        link, watermark = self._next_hop(message.path, message.watermark)
        if link is None:
            return False
        body = replace(message, watermark=watermark).encode()
        self._send_queued(link, ftype, body, message.dest, message.source)
        return True

    # ------------------------------------------------------------------ output

    def _flush(self) -> list[Action]:
        out, self._out = self._out, []
        return out

    def _send_tree(self, link: _Link, ftype: int, body: bytes) -> None:
        if self._fits(len(body)):
            self._out.append(SendFrame(link.link_id, encode_frame(ftype, body)))

    def _send_queued(self, link: _Link, ftype: int, body: bytes, dest: bytes, source: bytes) -> None:
        if self._fits(len(body)):
            self._out.append(SendTraffic(link.link_id, encode_frame(ftype, body), dest + source))

    def _fits(self, body_size: int) -> bool:
        """Drop, as Go does, a frame over the link limit: a peer would close the link on it.

        Answers can outgrow what they answer (a PathNotify carries our path
        beside the lookup's, a PathBroken a full watermark), so a remote node
        could otherwise make us send one.
        """
        if body_size + 1 <= MAX_FRAME:
            return True
        self.oversized_dropped += 1
        return False

    def _send_request(self, link: _Link, request: SigReq) -> None:
        link.req_sent_at = self._now
        self._send_tree(link, TYPE_SIGREQ, request.encode())

    def _free_port(self) -> int:
        used = {peer.port for peer in self._peers.values()}
        port = 1
        while port in used:
            port += 1
        return port

    # ------------------------------------------------------------------ frame handlers

    def _on_sigreq(self, link: _Link, body: bytes) -> None:
        request = SigReq.decode(body)
        port = self._peers[link.key].port
        psig = self.identity.sign(sig_bytes(link.key, self.key, request.seq, request.nonce, port))
        self._send_tree(link, TYPE_SIGRES, SigRes(request.seq, request.nonce, port, psig).encode())

    def _on_sigres(self, link: _Link, body: bytes) -> None:
        res = SigRes.decode(body)
        if not verify(link.key, res.psig, sig_bytes(self.key, link.key, res.seq, res.nonce, res.port)):
            raise BadSignature("SigRes parent signature does not verify")
        peer = self._peers[link.key]
        if peer.request != res.request:
            return
        if peer.response is None:
            self._response_counter += 1
            peer.response_order = self._response_counter
        # Go keeps the first answer; a later one differs only in a port the
        # peer reassigned (restarted, or all links dropped), so it is the one to sign.
        peer.response = res
        self._check_parent_port(link.key, res.port)
        if not link.responded:
            link.responded = True
            link.rtt_ns = int(round((self._now - link.req_sent_at) * 1e9))
            self._update_lag(link, link.rtt_ns)
            self._hops.clear()  # the link's cost changed

    def _check_parent_port(self, key: bytes, port: int) -> None:
        """Re-sign our info at the next tick if our parent now gives us another port.

        A parent hands out ports afresh when all its links to us drop, and
        forgets them all when it restarts, so our port may since have gone
        to a sibling: both would claim the same coordinates and greedy
        routing would feed one the other's traffic. Go re-signs only when a
        tick falls while the parent is away, else at its 4-minute refresh.
        """
        own = self.infos[self.key]
        if own.parent == key and own.port != port:
            self._refresh = True

    @staticmethod
    def _update_lag(link: _Link, rtt_ns: int) -> None:
        """Latency EWMA: a new link starts at 2*RTT, a penalty that favours stable links."""
        rtt_ns = max(0, rtt_ns)
        if link.lag_ns == UNKNOWN_LAG_NS:
            link.lag_ns = 2 * rtt_ns
        else:
            prev = link.lag_ns
            link.lag_ns = prev * 7 // 8 + min(rtt_ns, prev * 2) // 8

    def _on_announce(self, link: _Link, body: bytes) -> None:
        ann = Announce.decode(body)
        if not ann.check():
            raise BadSignature("Announce signature does not verify")
        peer = self._peers[link.key]
        if ann.key not in self.infos and self._origin_counts[peer.key] >= MAX_INFOS_PER_PEER:
            self.infos_refused += 1
            return
        if self._update(ann, origin=peer.key):
            if ann.key == self.key:
                self._refresh = True
            peer.sent.add(ann.key)
            return
        peer.sent.add(ann.key)
        stored = self.infos[ann.key]
        if stored != ann:
            self._send_tree(link, TYPE_ANNOUNCE, stored.encode())

    def _on_bloom(self, link: _Link, body: bytes) -> None:
        self._peers[link.key].bloom_recv = BloomFilter.decode(body)

    def _on_lookup(self, link: _Link, body: bytes) -> None:
        lookup = PathLookup.decode(body)
        peer = self._peers[link.key]
        if not peer.on_tree:
            return
        if not peer.take_lookup_token(self._now):
            self.lookups_dropped += 1
            return
        self._pathfinder.handle_lookup(link.key, lookup)

    def _on_notify(self, link: _Link, body: bytes) -> None:
        self._pathfinder.handle_notify(PathNotify.decode(body))

    def _on_broken(self, link: _Link, body: bytes) -> None:
        self._pathfinder.handle_broken(PathBroken.decode(body))

    def _on_traffic(self, link: _Link, body: bytes) -> None:
        self.route_traffic(Traffic.decode(body))

    # ------------------------------------------------------------------ tree state

    def _update(self, ann: Announce, origin: bytes | None = None) -> bool:
        """The CRDT merge rule; it must be identical on every node or gossip never settles."""
        old = self.infos.get(ann.key)
        if old is not None and not _wins(ann, old):
            return False
        for peer in self._peers.values():
            peer.sent.discard(ann.key)
        self._forget_derived()
        if old is None and origin is not None and ann.key != self.key:
            self._info_origin[ann.key] = origin
            self._origin_counts[origin] += 1
        self.infos[ann.key] = ann
        self._info_times[ann.key] = self._now
        return True

    def _expire_infos(self) -> None:
        if self._now - min(self._info_times.values()) < ROUTER_TIMEOUT:
            return
        expired = [
            key for key, when in self._info_times.items()
            if key != self.key and self._now - when >= ROUTER_TIMEOUT
        ]
        for key in expired:
            del self.infos[key]
            del self._info_times[key]
            origin = self._info_origin.pop(key, None)
            if origin is not None:
                self._origin_counts[origin] -= 1
                if self._origin_counts[origin] <= 0:
                    del self._origin_counts[origin]
            for peer in self._peers.values():
                peer.sent.discard(key)
        if expired:
            self._forget_derived()

    def _forget_derived(self) -> None:
        """Coordinates and ancestries depend on `infos` alone, so they are
        cached until an info is stored or expires (the only two changes)."""
        self._coords_cache.clear()
        self._ancestry_cache.clear()
        self._hops.clear()

    def _new_request(self) -> SigReq:
        own = self.infos.get(self.key)
        return SigReq((own.seq if own else 0) + 1, self._rng.getrandbits(64))

    def _send_requests(self) -> None:
        """After every adoption or re-root: one fresh request per peer key, to all its links."""
        for peer in self._peers.values():
            peer.response = None
            peer.request = self._new_request()
            for link in peer.links.values():
                link.responded = False
                self._send_request(link, peer.request)

    def _become_root(self) -> None:
        request = self._new_request()
        psig = self.identity.sign(sig_bytes(self.key, self.key, request.seq, request.nonce, 0))
        self._update(Announce(self.key, self.key, request.seq, request.nonce, 0, psig, psig))

    def _use_response(self, parent: bytes, res: SigRes) -> bool:
        sig = self.identity.sign(sig_bytes(self.key, parent, res.seq, res.nonce, res.port))
        return self._update(Announce(self.key, parent, res.seq, res.nonce, res.port, res.psig, sig))

    def _peer_cost(self, peer: _Peer, depth: int) -> int:
        return min(depth * link.cost() for link in peer.links.values())

    def _fix(self, prompt: bool = False) -> None:
        """Parent selection: lower root first, then cost; two-step self-rooting
        (only at ticks). A `prompt` fix only takes a better parent, and only
        once every peer has answered and announced itself: choosing among
        some would keep the first to answer where the tick picks the cheapest."""
        if prompt and any(peer.response is None or peer.key not in self.infos
                          for peer in self._peers.values()):
            return
        me = self.infos[self.key]
        best_root, best_parent, best_cost = self.key, self.key, MAX_WATERMARK
        current = self._peers.get(me.parent)
        if current is not None:
            chain = self._ancestry(self.key)
            if chain[0] < best_root:
                best_root, best_parent = chain[0], me.parent
                best_cost = self._peer_cost(current, len(chain) - 1)
        candidates = sorted(
            (peer for peer in self._peers.values() if peer.response is not None),
            key=lambda peer: peer.response_order,
        )
        for peer in candidates:
            if peer.key not in self.infos:
                continue
            chain = self._ancestry(peer.key)
            if self.key in chain:
                continue
            root = chain[0]
            cost = self._peer_cost(peer, len(chain) - 1)
            if root < best_root:
                best_root, best_parent, best_cost = root, peer.key, cost
            elif root != best_root:
                continue
            if (self._refresh and cost * 2 < best_cost) or (best_parent != me.parent and cost < best_cost):
                best_root, best_parent, best_cost = root, peer.key, cost
        if not (self._refresh or self._do_root1 or self._do_root2 or me.parent != best_parent):
            return
        if prompt and (best_parent == me.parent or best_root == self.key):
            return
        best = self._peers.get(best_parent)
        response = best.response if best is not None else None
        if response is not None and best_root != self.key and self._use_response(best_parent, response):
            self._clear_flags()
            self._send_requests()
        elif self._do_root2:
            self._become_root()
            self._clear_flags()
            self._send_requests()
        elif not self._do_root1:
            self._do_root1 = True

    def _clear_flags(self) -> None:
        self._refresh = self._do_root1 = self._do_root2 = False

    def _send_announces(self) -> None:
        """Gossip: each peer gets the unsent infos of our ancestry, then of its own."""
        own = self._ancestry(self.key)
        for peer in self._peers.values():
            theirs = self._ancestry(peer.key)
            if peer.sent.issuperset(own) and peer.sent.issuperset(theirs):
                continue
            batch = []
            for key in own + theirs:
                if key not in peer.sent:
                    peer.sent.add(key)
                    batch.append(self.infos[key].encode())
            for link in peer.links.values():
                for body in batch:
                    self._send_tree(link, TYPE_ANNOUNCE, body)

    def _ancestry(self, key: bytes) -> list[bytes]:
        """Root-first chain of keys above (and including) key; stops at loops and gaps.

        The first entry is the root as far as key can tell, and the chain's
        length less one is key's depth below it. Callers must not mutate it.
        """
        cached = self._ancestry_cache.get(key)
        if cached is not None:
            return cached
        chain: list[bytes] = []
        seen: set[bytes] = set()
        here = key
        while here not in seen and here in self.infos:
            chain.append(here)
            seen.add(here)
            here = self.infos[here].parent
        chain.reverse()
        self._ancestry_cache[key] = chain
        return chain

    def _root_and_path(self, key: bytes) -> tuple[bytes, list[int]]:
        """Root and coordinates; a loop or a missing info gives (key, []) as in Go."""
        cached = self._coords_cache.get(key)
        if cached is not None:
            return cached
        ports: list[int] = []
        visited: set[bytes] = set()
        here = key
        result: tuple[bytes, list[int]] | None = None
        while result is None:
            info = self.infos.get(here)
            if here in visited or info is None:
                result = (key, [])
            elif info.parent == here:
                ports.reverse()
                result = (here, ports)
            else:
                visited.add(here)
                ports.append(info.port)
                here = info.parent
        self._coords_cache[key] = result
        return result

    # ------------------------------------------------------------------ blooms

    def _fix_on_tree(self) -> None:
        """On-tree = our parent or a peer whose info names us; a peer leaving gets an empty filter."""
        me = self.infos[self.key]
        for peer in self._peers.values():
            was_on = peer.on_tree
            info = self.infos.get(peer.key)
            peer.on_tree = me.parent == peer.key or (info is not None and info.parent == self.key)
            if was_on and not peer.on_tree:
                peer.bloom_sent = BloomFilter()
                for link in peer.links.values():
                    self._send_tree(link, TYPE_BLOOM, peer.bloom_sent.encode())

    def _send_all_blooms(self, tick: bool = True) -> None:
        """Exact filters: {xform(self)} plus what the other on-tree peers told
        us; each is resent unchanged every BLOOM_RESEND_TICKS ticks."""
        on_tree = [peer for peer in self._peers.values() if peer.on_tree]
        for peer in on_tree:
            fresh = BloomFilter(self._xform_mask)
            for other in on_tree:
                if other is not peer:
                    fresh.update(other.bloom_recv)
            peer.bloom_ticks += tick
            if fresh != peer.bloom_sent or peer.bloom_ticks >= BLOOM_RESEND_TICKS:
                peer.bloom_sent = fresh
                peer.bloom_ticks = 0
                body = fresh.encode()
                for link in peer.links.values():
                    self._send_tree(link, TYPE_BLOOM, body)

    # ------------------------------------------------------------------ greedy routing

    def _dist(self, path: list[int], key: bytes) -> int:
        return tree_distance(self._root_and_path(key)[1], path)

    def _next_hop(self, path: list[int], watermark: int) -> tuple[_Link | None, int]:
        """Greedy next hop under the watermark; returns (link or None, lowered watermark).

        The choice depends on the destination's coordinates and on the tree,
        the peers and the links' costs, not on the packet: it is remembered
        per coordinates until one of those changes (every packet of a flow
        would otherwise measure its distance through every peer again)."""
        key = tuple(path)
        hop = self._hops.get(key)
        if hop is None:
            hop = self._best_hop(path)
            if len(self._hops) >= HOP_CACHE_SIZE:
                self._hops.clear()
            self._hops[key] = hop
        best, self_dist = hop
        if self_dist >= watermark:
            return None, watermark
        return best, self_dist

    def _best_hop(self, path: list[int]) -> tuple[_Link | None, int]:
        """The best link of a peer closer to `path` than we are (None when
        there is none), and our own distance to it. Closer peers only, so
        the hops never loop; among them the lowest link cost times the
        distance left (yggdrasil 0.5.13, ironwood 7017dbc): a peer that is
        the destination wins over any detour."""
        self_dist = self._dist(path, self.key)
        best: _Link | None = None
        best_dist = 0
        for peer in self._peers.values():
            dist = self._dist(path, peer.key)
            if dist >= self_dist:
                continue
            for link in peer.links.values():
                if best is None or _better_hop(link, dist, best, best_dist):
                    best, best_dist = link, dist
        return best, self_dist

    def route_traffic(self, traffic: Traffic) -> None:
        """Forward `traffic` one greedy hop, deliver it when it is ours, or report the path broken."""
        link, watermark = self._next_hop(traffic.path, traffic.watermark)
        if link is not None:
            head = traffic.head(watermark)
            if self._fits(len(head) + len(traffic.payload)):
                frame = traffic_frame(head, traffic.payload)
                self._out.append(SendTraffic(link.link_id, frame, traffic.dest + traffic.source))
        elif traffic.dest == self.key:
            self._pathfinder.reset_timeout(traffic.source)
            self._out.append(DeliverTraffic(traffic.source, traffic.payload))
        else:
            broken = PathBroken(list(traffic.from_path), MAX_WATERMARK, traffic.source, traffic.dest)
            self._pathfinder.handle_broken(broken)

# By frame type, the Router method that takes it. At module level, not in the
# class body: a compiled build makes Router a native class, whose body holds
# only methods and attributes.
_FRAME_HANDLERS: Final[dict[int, Callable[[Router, _Link, bytes], None]]] = {
    TYPE_SIGREQ: Router._on_sigreq,
    TYPE_SIGRES: Router._on_sigres,
    TYPE_ANNOUNCE: Router._on_announce,
    TYPE_BLOOM: Router._on_bloom,
    TYPE_PATH_LOOKUP: Router._on_lookup,
    TYPE_PATH_NOTIFY: Router._on_notify,
    TYPE_PATH_BROKEN: Router._on_broken,
    TYPE_TRAFFIC: Router._on_traffic,
}

def tree_distance(a: list[int], b: list[int]) -> int:
    """Hops between two coordinates through their deepest common ancestor."""
    common = 0
    for mine, theirs in zip(a, b):
        if mine != theirs:
            break
        common += 1
    return len(a) + len(b) - 2 * common


def _wins(new: Announce, old: Announce) -> bool:
    """Merge rule: higher seq, then lower parent key, then lower nonce."""
    if new.seq != old.seq:
        return new.seq > old.seq
    if new.parent != old.parent:
        return new.parent < old.parent
    return new.nonce < old.nonce


def _better_hop(link: _Link, dist: int, best: _Link, best_dist: int) -> bool:
    """ironwood d50055b's candidate order: same-key priority, cost times
    distance left, distance, cost, age."""
    if link.key == best.key and link.priority != best.priority:
        return link.priority < best.priority
    cost, best_cost = link.cost(), best.cost()
    if cost * dist != best_cost * best_dist:
        return cost * dist < best_cost * best_dist
    if dist != best_dist:
        return dist < best_dist
    if cost != best_cost:
        return cost < best_cost
    return link.order < best.order
