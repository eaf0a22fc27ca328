"""The node core: every protocol layer of one node composed, sans-IO.

    link frames <-> Router <-> SessionManager <-> DatagramLayer <-> IPv6Device <-> TcpStack <-> MessageLayer

`NodeCore` takes events with a monotonic `now` (a link came up or went down,
a frame arrived, the application sends or answers, the timer fired) and
returns nothing directly: frames to write per link wait in
`frames_to_send()`, application events in `next_event()`, and `get_timer()`
is the one deadline the driver must wake it at. It holds no clock, no
socket and no task, so the asyncio daemon (`axl.node.node`) and the
simulator (`axl.sim`) run exactly the same protocol code.

`now` is monotonic everywhere; only the router and the session manager read
Unix time, through the injected `wall_clock`, to mint the sequence numbers
the wire carries (without one, as in the simulator, `now` serves both).
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Callable
from typing import Any

from axl import routing, sessions
from axl.budgets import LOOKUP_BURST, MAX_INFOS_PER_PEER, MAX_RUMORS, MAX_SESSION_BUFFERS, STREAM_WINDOW, BudgetUse
from axl.build import build_fields
from axl.datagrams import (
    IPV6_HEAD, DatagramLayer, DebugReplyReceived, DeliverIPv6, NodeInfoReceived, SendMessage, nodeinfo_reply_body,
)
from axl.datagrams.layer import CORE_MTU
from axl.errors import PeerUnreachable
from axl.gojson import read_json
from axl.identity import NodeIdentity, address_for_key
from axl.node.events import Acknowledged, ReplyReceived, SendFailed
from axl.node.messages import MessageEvent, MessageLayer, MessageSettings
from axl.packets import DeliverPacket, IPv6Device, Lookup, SendIPv6
from axl.routing import PathFound, Router, SendFrame, SendTraffic
from axl.sessions import KeyPairFactory, SendPacket, SessionManager, random_key_pair
from axl.tcp.connection import TcpConfig
from axl.tcp.stack import DEFAULT_MAX_CONNECTIONS, TcpStack
from axl.wire import DecodeError

log = logging.getLogger("axl.node")

TICK_INTERVAL = 1.0
# A layer whose tick keeps failing is logged again once every this many ticks.
FAILURE_LOG_EVERY = 60
# A direct peer's NodeInfo "name" is asked this long after the peering comes
# up (by then the tree has settled and the request finds a path at once),
# and asked again this often until it answers. Of two nodes of this project,
# the one with the higher key waits twice as long: by then the other's
# question has made the session, so the two never start a handshake at the
# same moment (crossing handshakes can lose the first message each way).
NAME_DELAY = 3.0
NAME_RETRY = 60.0
MAX_NAME = 64

LinkWrite = SendFrame | SendTraffic
ProtocolReply = NodeInfoReceived | DebugReplyReceived


class NodeCore:
    """One node's protocol state, driven by events and one timer."""

    def __init__(self, identity: NodeIdentity, settings: MessageSettings, now: float, *,
                 wall_clock: Callable[[], float] | None = None,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 rng: random.Random | None = None,
                 key_pairs: KeyPairFactory = random_key_pair,
                 nodeinfo: bytes | None = None, ask_peer_names: bool = False,
                 group_password: str = "") -> None:
        """`nodeinfo` is the encoded NodeInfo this node answers with
        (`nodeinfo_reply_body`); by default only the build fields. With
        `ask_peer_names`, each direct peer is asked its NodeInfo, and the
        "name" in it (yggdrasil's convention) lands in `peer_names`.
        `group_password` is yggdrasil's GroupPassword (SessionManager)."""
        self.identity = identity
        self.links: dict[int, bytes] = {}
        self.router = Router(identity, now=now, rng=rng, wall_clock=wall_clock)
        self.sessions = SessionManager(identity, key_pairs=key_pairs, wall_clock=wall_clock,
                                       group_password=group_password)
        self.datagrams = DatagramLayer(
            identity, nodeinfo=nodeinfo if nodeinfo is not None else nodeinfo_reply_body({}, build_fields()),
            peer_keys=lambda: list(self.links.values()),
            tree_keys=lambda: [entry.key for entry in self.router.tree_entries()],
            routing_entries=self.router.info_count,
        )
        self.device = IPv6Device(identity, mtu=CORE_MTU)
        # Every packet reaching this stack came out of an end-to-end session
        # whose Poly1305 tag already proved each byte (or from this node
        # itself), so re-checking the TCP checksum on receive would only
        # cost time. Outgoing checksums are computed for every port but the
        # message-stream port: Go peers check theirs, and only nodes of this
        # project, which never check, speak on that one.
        # Received bytes hold the window until the message layer has them
        # processed (receive back-pressure against a busy application).
        # The message stream also delays its ACKs: the stream acknowledgements
        # flowing back carry them (docs/protocol.md, section 11); and it starts
        # with a large congestion window (TcpConfig.fast_start_window).
        stream_ports = frozenset({settings.stream_port}) if settings.streams else frozenset()
        self.stack = TcpStack(identity.address, max_connections=max_connections,
                              config=TcpConfig(hold_until_consumed=True),
                              verify_checksums=False, rng=rng,
                              unchecksummed_ports=stream_ports, delayed_ack_ports=stream_ports,
                              fast_start_ports=stream_ports)
        self.messages = MessageLayer(self.stack, settings, rng=rng)
        self._pending: deque[Any] = deque()
        self._writes: list[LinkWrite] = []
        self._replies: deque[ProtocolReply] = deque()
        # handle -> destination key, of sends and requests not yet settled
        self._destinations: dict[int, bytes] = {}
        self.peer_names: dict[bytes, str] = {}
        self._ask_names = ask_peer_names
        self._name_due: dict[bytes, float] = {}
        self._next_tick = now + TICK_INTERVAL
        # layer -> maintenance ticks failed in a row
        self.tick_failures: dict[str, int] = {}
        self._handlers = self._action_handlers()

    # -- links ----------------------------------------------------------

    def link_up(self, link_id: int, key: bytes, priority: int, now: float) -> None:
        self.links[link_id] = key
        if self._ask_names and key not in self.peer_names:
            delay = NAME_DELAY if self.identity.public_key < key else 2 * NAME_DELAY
            self._name_due.setdefault(key, now + delay)
        self.apply(self.router.add_link(link_id, key, priority, now), now)

    def link_down(self, link_id: int, now: float) -> None:
        key = self.links.pop(link_id, None)
        if key is not None:
            if key not in self.links.values():
                self.peer_names.pop(key, None)
                self._name_due.pop(key, None)
            self.apply(self.router.remove_link(link_id, now), now)

    def frame_received(self, link_id: int, ftype: int, body: bytes, now: float, *,
                       flush: bool = True) -> None:
        """Raises DecodeError for a malformed frame: the link that carried it must close.

        With `flush` false the TCP stack's segments wait for `flush()`: the
        acknowledgements of every frame read in one event-loop turn then leave
        as one segment, riding on the answers written meanwhile (a message
        stream's acks) instead of going out alone first. Frames to forward
        and the message layer's events are ready at once either way."""
        self.apply(self.router.handle_frame(link_id, ftype, body, now), now, flush=flush)

    def frames_to_send(self) -> list[LinkWrite]:
        """Frames to write since the last call: SendFrame ahead of any queue,
        SendTraffic (types 6-9) through the link's fair queue."""
        writes, self._writes = self._writes, []
        return writes

    # -- the application ------------------------------------------------

    def send_message(self, dest_key: bytes, payload: bytes, now: float, *, flush: bool = True) -> int:
        """Start an acknowledged send; its outcome arrives as Acknowledged or SendFailed.
        With `flush` false nothing leaves until `flush()` (or any other call):
        sends and answers of one event-loop turn then share their segments."""
        handle = self.messages.send(dest_key, payload, now)
        self._destinations[handle] = dest_key
        if flush:
            self.apply([], now)
        return handle

    def open_body(self, dest_key: bytes, length: int, now: float) -> int | None:
        """Start a send whose body follows in parts (`write_body`, then
        `end_body` or `cancel_body`); None when it cannot start before the
        body is whole. Nothing leaves until `flush()` or any other call."""
        handle = self.messages.open_body(dest_key, length, now)
        if handle is not None:
            self._destinations[handle] = dest_key
        return handle

    def write_body(self, handle: int, part: bytes) -> bool:
        """True when the part made output ready: `flush()` then sends it."""
        return self.messages.streams.write_body(handle, part)

    def end_body(self, handle: int, now: float) -> None:
        self.messages.streams.end_body(handle, now)

    def cancel_body(self, handle: int, now: float) -> None:
        self.messages.streams.cancel_body(handle, now)
        self.apply([], now)

    def request(self, dest_key: bytes, payload: bytes, timeout: float, now: float) -> int:
        """Start a request; its outcome arrives as ReplyReceived or SendFailed."""
        handle = self.messages.request(dest_key, payload, timeout, now)
        self._destinations[handle] = dest_key
        self.apply([], now)
        return handle

    def answer_inbound(self, handle: int, accepted: bool, reply: bytes | None, now: float, *,
                       flush: bool = True) -> None:
        self.messages.answer_inbound(handle, accepted, reply, now)
        if flush:
            self.apply([], now)

    def flush(self, now: float) -> None:
        """Send what calls with `flush` false left waiting."""
        self.apply([], now)

    def next_event(self) -> MessageEvent | None:
        event = self.messages.next_event()
        if isinstance(event, (Acknowledged, ReplyReceived, SendFailed)):
            dest_key = self._destinations.pop(event.handle, None)
            if isinstance(event, SendFailed) and dest_key is not None:
                return self._explained(event, dest_key)
        return event

    def _explained(self, event: SendFailed, dest_key: bytes) -> SendFailed:
        """A failure to reach a node that answered our path lookup (signed
        by its key, so it is there) but never our session handshake: the
        one thing that silences a node so is a GroupPassword other than
        ours, and saying so beats "offline or unknown"."""
        if (isinstance(event.error, PeerUnreachable) and self.sessions.awaiting_answer(dest_key)
                and dest_key in self.router.known_paths()):
            return SendFailed(event.handle, PeerUnreachable(
                f"{dest_key.hex()} answered the path lookup but not the session handshake: "
                f"its GroupPassword differs from this node's (or only one of the two has one)"))
        return event

    def budget_use(self) -> list[BudgetUse]:
        """The budgets the protocol layers keep (read at scrape time)."""
        router, sessions, stack, device = self.router, self.sessions, self.stack, self.device
        return [
            BudgetUse("tree_entries", "peer", MAX_INFOS_PER_PEER, router.most_infos_from_one_peer(),
                      router.infos_refused),
            BudgetUse("lookups_burst", "peer", int(LOOKUP_BURST), None, router.lookups_dropped),
            BudgetUse("sessions", "node", sessions.max_sessions, len(sessions.session_keys()),
                      sessions.evicted),
            BudgetUse("session_buffers", "node", MAX_SESSION_BUFFERS, sessions.buffer_count(),
                      sessions.buffers_evicted),
            BudgetUse("lookups_under_way", "node", MAX_RUMORS, router.rumor_count(), router.rumors_refused),
            BudgetUse("device_keys", "node", device.max_entries, device.key_count(), device.evicted["keys"]),
            BudgetUse("device_waiting_packets", "node", device.max_entries, device.waiting_packet_count(),
                      device.evicted["waiting_packets"]),
            BudgetUse("overlay_connections", "node", stack.max_connections, stack.accepted_count(),
                      stack.refused_over_cap),
            BudgetUse("stream_window", "stream", STREAM_WINDOW, self.messages.streams.most_unanswered(),
                      self.messages.streams.window_refused),
            *self.messages.streams.budget_usage(),
        ]

    # -- asking remote nodes (nodeinfo, debug) --------------------------

    def request_nodeinfo(self, key: bytes, now: float) -> None:
        """Ask `key` for its NodeInfo; the answer comes from `next_reply()`."""
        self.apply(self.datagrams.request_nodeinfo(key, now), now)

    def request_debug(self, key: bytes, subtype: int, now: float) -> None:
        """Ask `key` for its self, peers or tree; the answer comes from `next_reply()`."""
        self.apply(self.datagrams.request_debug(key, subtype, now), now)

    def next_reply(self) -> ProtocolReply | None:
        """The next answer to `request_nodeinfo` or `request_debug`."""
        return self._replies.popleft() if self._replies else None

    def abort_all(self, now: float) -> None:
        """Reset every message connection (the node is stopping)."""
        self.messages.abort_all()
        self.apply([], now)

    # -- time -----------------------------------------------------------

    def get_timer(self) -> float:
        """The earliest of the layers' deadlines (the tick is always one)."""
        when = self._next_tick
        for deadline in (self.router.settle_at, self.stack.get_timer(), self.messages.get_timer()):
            if deadline is not None and deadline < when:
                when = deadline
        return when

    def handle_timer(self, now: float) -> None:
        if now >= self._next_tick:
            self._next_tick = max(self._next_tick + TICK_INTERVAL, now)
            self._tick(now)
        if self.router.settle_at is not None and now >= self.router.settle_at:
            self.apply(self.router.settle(now), now)
        self.stack.handle_timer(now)
        self.messages.handle_timer(now)
        self.apply([], now)

    def _tick(self, now: float) -> None:
        """Each layer's maintenance on its own: one that raises must not cost
        the others theirs, tick after tick (expiring sessions, forgetting
        keys). A failure is logged with its traceback when a run of them
        starts, then once every FAILURE_LOG_EVERY ticks while it lasts."""
        for name, tick in (("router", self.router.tick), ("sessions", self.sessions.tick),
                           ("device", self.device.tick), ("datagrams", self.datagrams.expire),
                           ("peer names", self._ask_names_due)):
            try:
                actions = tick(now)
            except Exception:
                self._tick_failed(name)
                continue
            self.tick_failures[name] = 0
            if actions:
                self.apply(actions, now)

    def _tick_failed(self, name: str) -> None:
        failures = self.tick_failures[name] = self.tick_failures.get(name, 0) + 1
        if failures == 1:
            log.exception("%s maintenance tick failed; the other layers' go on", name)
        elif failures % FAILURE_LOG_EVERY == 0:
            log.error("%s maintenance tick still failing (%d ticks in a row)", name, failures)

    def _ask_names_due(self, now: float) -> None:
        for key in [key for key, due in self._name_due.items() if due <= now]:
            self._name_due[key] = now + NAME_RETRY
            self.apply(self.datagrams.request_nodeinfo(key, now), now)

    # -- the action pump ------------------------------------------------

    def apply(self, actions: list[Any], now: float, *, flush: bool = True) -> None:
        """Run actions to completion, breadth first, then the TCP stack's
        output (unless `flush` is false), until nothing is left to do."""
        pending = self._pending
        pending.extend(actions)
        while True:
            while pending:
                action = pending.popleft()
                try:
                    self._dispatch(action, now)
                except DecodeError as exc:
                    # End-to-end content (a TCP segment, an IPv6 packet) that a
                    # remote node got wrong: drop it, never the link it came on.
                    log.debug("dropped malformed %s: %s", type(action).__name__, exc)
                except Exception:
                    # A fault above the router must not travel back into the
                    # link that carried the packet and close it (Go delivers
                    # asynchronously, so a payload can never close a link).
                    log.exception("dropped %s after an internal error", type(action).__name__)
            self.messages.process(now)
            if not flush:
                return
            packets = self.stack.packets_to_send(now)
            if not packets:
                return
            for packet in packets:
                pending.extend(self.device.write(packet, now))

    def _dispatch(self, action: Any, now: float) -> None:
        """One action to the layer it is for. A table on the action's exact
        type, not a `match`: a match tries its cases in turn, and the ones
        every packet takes would sit behind the rest."""
        handler = self._handlers.get(type(action))
        if handler is None:
            log.debug("ignored action %r", action)
        else:
            handler(action, now)

    def _action_handlers(self) -> dict[type, Callable[[Any, float], None]]:
        return {
            SendFrame: self._write_frame,
            SendTraffic: self._write_frame,
            routing.DeliverTraffic: self._traffic_received,
            PathFound: self._path_found,
            sessions.Rekeyed: self._rekeyed,
            SendPacket: self._packet_to_route,
            sessions.DeliverPlaintext: self._plaintext_received,
            SendMessage: self._message_to_seal,
            DeliverIPv6: self._ipv6_received,
            SendIPv6: self._ipv6_to_send,
            Lookup: self._lookup,
            DeliverPacket: self._packet_received,
            NodeInfoReceived: self._reply_received,
            DebugReplyReceived: self._reply_received,
        }

    def _write_frame(self, action: LinkWrite, now: float) -> None:
        self._writes.append(action)

    def _traffic_received(self, action: routing.DeliverTraffic, now: float) -> None:
        self._pending.extend(self.sessions.receive(action.source_key, action.payload, now))

    def _path_found(self, action: PathFound, now: float) -> None:
        self._pending.extend(self.device.path_found(action.key, now))
        self.stack.path_changed(address_for_key(action.key), now)

    def _rekeyed(self, action: sessions.Rekeyed, now: float) -> None:
        self.stack.retransmit_now(address_for_key(action.remote_key), now)

    def _packet_to_route(self, action: SendPacket, now: float) -> None:
        self._pending.extend(self.router.send(action.dest_key, action.packet, now))

    def _plaintext_received(self, action: sessions.DeliverPlaintext, now: float) -> None:
        self._pending.extend(self.datagrams.handle(action.source_key, action.message, now))

    def _message_to_seal(self, action: SendMessage, now: float) -> None:
        self._pending.extend(self.sessions.send(action.dest_key, action.message, now))

    def _ipv6_received(self, action: DeliverIPv6, now: float) -> None:
        self._pending.extend(self.device.read(action.source_key, action.packet, now))

    def _ipv6_to_send(self, action: SendIPv6, now: float) -> None:
        if action.key == self.identity.public_key:
            self._pending.append(DeliverPacket(action.key, action.packet))
        else:
            self._pending.extend(self.sessions.send(action.key, action.packet, now, head=IPV6_HEAD))

    def _lookup(self, action: Lookup, now: float) -> None:
        self._pending.extend(self.router.lookup(action.partial_key, now))

    def _packet_received(self, action: DeliverPacket, now: float) -> None:
        self.messages.packet_received(action.source_key, action.packet, now)

    def _reply_received(self, action: ProtocolReply, now: float) -> None:
        if isinstance(action, NodeInfoReceived) and self._name_due.pop(action.key, None) is not None:
            name = _name_in(action.info)
            if name:
                self.peer_names[action.key] = name[:MAX_NAME]
        self._replies.append(action)


def _name_in(nodeinfo: bytes) -> str:
    """The "name" string of a NodeInfo object ("" when there is none)."""
    try:
        name = read_json(nodeinfo).get("name")
    except (ValueError, AttributeError):
        return ""
    return name if isinstance(name, str) else ""
