"""The Node: the asyncio driver of one NodeCore, and the API the bridge uses.

Every protocol decision lives in the sans-IO `NodeCore` (axl.node.core).
This class only moves things in and out of it: frames between the core and
the link manager's links, one loop timer at `core.get_timer()`, futures
keyed by message handle for `send` and `request`, and the asynchronous
MCP/A2A dispatch of inbound messages, whose verdict goes back to the core.
It also formats the topology for the bridge.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Protocol

from axl.budgets import (DISPATCH_BYTES_PER_NODE, DISPATCH_BYTES_PER_PEER, DISPATCHES_PER_NODE,
                         DISPATCHES_PER_PEER, LINK_QUEUE_BYTES, WS_MAX_MESSAGE, BudgetBoard, BudgetUse,
                         PeerBudget)
from axl.config import ConfigError, NodeConfig
from axl.datagrams.layer import NODEINFO_REPLY, ReplyKind, debug_reply_kind, debug_request, nodeinfo_request
from axl.errors import DeliveryError
from axl.eventloop import running_loop
from axl.identity import NodeIdentity, address_for_key, format_address
from axl.link.manager import Link, LinkManager
from axl.link.multicast import Discovery, InterfaceReport
from axl.link.uri import URIError, parse_listen_uri, parse_peer_uri
from axl.node import peers
from axl.node.core import NodeCore, ProtocolReply
from axl.node.inbox import Inbox, InboxMessage
from axl.node.stats import ListenerCounts, NodeStats
from axl.node.store import InboxStore
from axl.node.messages import (
    InboundMessage, MessageEvent, MessageSettings, ReplyReceived, SendFailed,
)
from axl.routing import PathReport, SendFrame, TreeEntry
from axl.sessions import SessionReport
from axl.tasks import start_task
from axl.tcp.recovery import PathStats

log = logging.getLogger("axl.node")

SendSettled = Callable[[DeliveryError | None], None]
"""Told a send's fate: None once the receiver has it, else why not."""

# Refusals at the dispatch budget are logged at most once in this many seconds.
REFUSAL_LOG_INTERVAL = 10.0


class DispatchOutcome(Protocol):
    handled: bool
    reply: bytes | None


class InboundHandler(Protocol):
    """Who may claim an inbound message before /recv (the MCP/A2A adapters)."""

    def claims(self, message: bytes) -> bool: ...

    async def dispatch(self, sender: bytes, message: bytes) -> DispatchOutcome: ...

    def refusal(self, message: bytes) -> bytes | None: ...


def validate_config(config: NodeConfig) -> None:
    """Check what the config loader cannot: URIs, so bad ones stop start-up."""
    for name, uris, parse in (("Peers", config.peers, parse_peer_uri),
                              ("Listen", config.listen, parse_listen_uri)):
        for index, uri in enumerate(uris):
            try:
                parse(uri)
            except URIError as exc:
                raise ConfigError(f"{name}[{index}]: {exc}") from None


class Node:
    def __init__(self, config: NodeConfig, identity: NodeIdentity, key_origin: str = "",
                 inbound_handler: InboundHandler | None = None, inbox_store: InboxStore | None = None,
                 message_settings: MessageSettings | None = None) -> None:
        """`message_settings` default to the config's (a test may set others)."""
        self.config = config
        self.identity = identity
        self.key_origin = key_origin
        self.max_message_size = config.max_message_size
        self.stats = NodeStats(time.time())
        now = time.monotonic()
        self.core = NodeCore(identity, message_settings or MessageSettings.from_config(config), now,
                             wall_clock=time.time,
                             max_connections=config.max_concurrent_conns,
                             nodeinfo=config.nodeinfo_body(), ask_peer_names=True,
                             group_password=config.group_password)
        self.links: dict[int, Link] = {}
        self.link_manager = LinkManager(
            identity, self,
            allowed_keys={bytes.fromhex(key) for key in config.allowed_public_keys},
        )
        self.inbox = Inbox(config.max_inbox_messages, config.max_inbox_bytes, inbox_store)
        self.core.messages.streams.restore_sessions(self.inbox.session_records())
        self.inbound_handler = inbound_handler
        # requests waiting for their reply, and sends for their fate, by handle
        self._waiting: dict[int, asyncio.Future] = {}
        self._sends: dict[int, SendSettled] = {}
        self._fates_due: list[tuple[SendSettled, DeliveryError | None]] = []
        self._tasks: set[asyncio.Task] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_when = 0.0
        # Callers waiting for a remote node's answer, by (reply kind, key).
        self._asking: dict[tuple[ReplyKind, bytes], list[asyncio.Future[bytes]]] = {}
        self._started = False
        self._flush_pending = False
        self.discovery: Discovery | None = None
        self.dispatches = PeerBudget("inbound_dispatches", DISPATCHES_PER_PEER, DISPATCHES_PER_NODE,
                                     DISPATCH_BYTES_PER_PEER, DISPATCH_BYTES_PER_NODE)
        self._dispatch_refusals = 0  # since the last log line about them
        self._next_refusal_log = 0.0
        self.inbox_refused: Counter[str] = Counter()  # by budget: messages or bytes
        self._closed_links_dropped = 0  # frames their queues dropped, of links now down
        self.runtime_peers = peers.RuntimePeers()
        self.budgets = BudgetBoard()
        self.budgets.add(self.core.budget_use)
        self.budgets.add(self._budget_use)
        self.budgets.add(self.runtime_peers.usage)

    # -- moving output out of the core ----------------------------------

    def _drain(self) -> None:
        """After every call into the core: write its frames, settle its
        events, and keep the loop timer at its deadline."""
        self._write_and_settle()
        if self._started:
            self._arm_timer()

    def _write_and_settle(self) -> None:
        """Write the core's frames and settle its events (a drain that leaves
        the timer to a flush coming later in the same loop turn)."""
        core = self.core
        links = self.links
        for write in core.frames_to_send():
            link = links.get(write.link_id)
            if link is None:
                continue
            if isinstance(write, SendFrame):
                link.send_frame(write.frame)
            else:
                link.send_traffic(write.frame, write.flow)
        while (event := core.next_event()) is not None:
            self._settle(event)
        while (reply := core.next_reply()) is not None:
            self._replied(reply)
        if self._fates_due:
            self._tell_fates()

    def _settle(self, event: MessageEvent) -> None:
        if isinstance(event, InboundMessage):
            self._inbound(event)
            return
        settled = self._sends.pop(event.handle, None)
        if settled is not None:
            self._fates_due.append((settled, event.error if isinstance(event, SendFailed) else None))
            return
        future = self._waiting.pop(event.handle, None)
        if future is None or future.done():
            return
        if isinstance(event, ReplyReceived):
            future.set_result(event.reply)
        elif isinstance(event, SendFailed):
            future.set_exception(event.error)

    def _tell_fates(self) -> None:
        """Tell each settled send's caller its fate, with the core drained (a
        caller may start its next send from here). A direct call where a
        future would cost a loop callback per send; a caller's failure is
        logged, as the loop logs a failed callback."""
        due, self._fates_due = self._fates_due, []
        for settled, error in due:
            try:
                settled(error)
            except Exception:
                log.exception("a send's caller failed on its fate")

    def _arm_timer(self) -> None:
        """Keep one loop timer at or before the core's deadline. A timer that
        fires early finds nothing due and is set again, so only an earlier
        deadline replaces it: deadlines move later with most segments (a
        retransmission timer restarted), and replacing the timer each time
        cost a timer handle in three drains of four."""
        when = self.core.get_timer()
        timer = self._timer
        if timer is not None:
            if self._timer_when <= when:
                return
            timer.cancel()
        delay = max(0.0, when - time.monotonic())
        self._timer = running_loop().call_later(delay, self._on_timer)
        self._timer_when = when

    def _on_timer(self) -> None:
        self._timer = None
        self.core.handle_timer(time.monotonic())
        self._drain()

    def _spawn(self, coro) -> None:
        task = start_task(coro, log, "inbound message dispatch")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- link handler (called by the LinkManager) ------------------------

    def link_up(self, link: Link) -> None:
        self.links[link.link_id] = link
        self.stats.link_up(link.remote_key, link.link_id, link.counters, time.time())
        self.core.link_up(link.link_id, link.remote_key, link.priority, time.monotonic())
        self._drain()

    def frame_received(self, link: Link, ftype: int, body: bytes) -> None:
        self.core.frame_received(link.link_id, ftype, body, time.monotonic(), flush=False)
        self._write_and_settle()
        self._flush_soon()  # its drain sets the timer, once for every frame of the turn

    def link_down(self, link: Link, reason: str) -> None:
        self.stats.link_down(link.remote_key, link.link_id, reason, time.time())
        if self.links.pop(link.link_id, None) is not None:
            self._closed_links_dropped += link.dropped_frames
            self.core.link_down(link.link_id, time.monotonic())
            self._drain()

    # -- API for the bridge ----------------------------------------------

    async def send(self, dest_key: bytes, payload: bytes) -> None:
        await self.start_send(dest_key, payload)

    def start_send(self, dest_key: bytes, payload: bytes) -> asyncio.Future:
        """`start_send_then` for a caller that awaits: the future settles with the fate."""
        future = running_loop().create_future()
        self.start_send_then(dest_key, payload, partial(_settle_future, future))
        return future

    def start_send_then(self, dest_key: bytes, payload: bytes, settled: SendSettled) -> None:
        """Start a send now; `settled` is told its fate, never from inside
        this call. Sends start in the order of these calls, and a caller
        with many in flight needs no task per send. Raises MessageTooLarge at once."""
        handle = self.core.send_message(dest_key, payload, time.monotonic(), flush=False)
        self._flush_soon()
        # The turn's flush drains the core (its frames, events and timer) for every send started in it.
        self._sends[handle] = settled

    def open_body(self, dest_key: bytes, length: int, settled: SendSettled) -> int | None:
        """Start a send of `length` bytes whose body is still arriving: its
        parts go out as `write_body` gives them (64 KiB at a time), so a
        large message crosses the overlay while its client is still
        uploading it. Returns the send's handle (`settled` is told its fate,
        as by `start_send_then`), or None when it cannot start before the
        body is whole (no message stream to `dest_key` yet, or one such send
        already under way there)."""
        handle = self.core.open_body(dest_key, length, time.monotonic())
        if handle is None:
            return None
        self._flush_soon()
        self._sends[handle] = settled
        return handle

    def write_body(self, handle: int, part: bytes) -> None:
        if self.core.write_body(handle, part):  # a part that completes no batch needs no flush
            self._flush_soon()

    def end_body(self, handle: int) -> None:
        self.core.end_body(handle, time.monotonic())
        self._flush_soon()

    def cancel_body(self, handle: int) -> None:
        """The body will never be whole: the message is dropped unsent, and
        its caller is never told (it has answered already)."""
        self._sends.pop(handle, None)
        self.core.cancel_body(handle, time.monotonic())
        self._drain()

    def keeps_order(self, dest_key: bytes) -> bool:
        """Whether sends to `dest_key` started now arrive in the order started,
        even while earlier ones are unanswered (see MessageLayer.keeps_order)."""
        return self.core.messages.keeps_order(dest_key)

    async def recv(self, wait: float, until: asyncio.Future | None = None) -> InboxMessage | None:
        """The next queued message, waiting up to `wait` seconds, or None once `until` settles."""
        return await self.inbox.get(wait, until)

    def take(self, wait: float, until: asyncio.Future | None = None) -> asyncio.Future[InboxMessage | None]:
        """`recv` as a future, with no task (see Inbox.take)."""
        return self.inbox.take(wait, until)

    def take_nowait(self) -> InboxMessage | None:
        """The next queued message, or None (see Inbox.get_nowait)."""
        return self.inbox.get_nowait()

    def give_back(self, messages: list[InboxMessage]) -> None:
        """Messages taken by `recv` that their client never got go back to the front."""
        self.inbox.give_back(messages)

    def delivered(self, messages: list[InboxMessage]) -> None:
        """Messages taken by `recv` that reached their client leave the inbox."""
        self.inbox.delivered(messages)

    async def request(self, dest_key: bytes, payload: bytes, timeout: float) -> bytes:
        handle = self.core.request(dest_key, payload, timeout, time.monotonic())
        return await self._outcome(handle)

    def _outcome(self, handle: int) -> asyncio.Future:
        """The future the core's verdict on `handle` settles (its deadlines
        bound the wait), after writing what the call into the core left."""
        future = self._waiting[handle] = running_loop().create_future()
        self._drain()
        return future

    def _inbound(self, event: InboundMessage) -> None:
        """An envelope the handler claims is dispatched in a task (an MCP
        server may take a minute), within the dispatch budget (per sender
        and per node; beyond it the envelope is refused at once, 503 at its
        sender); any other message goes to the inbox at once, with no task
        per message, so the inbox takes them in the order they arrived."""
        self.stats.message_received(event.sender, len(event.payload), time.time())
        handler = self.inbound_handler
        if handler is None or not handler.claims(event.payload):
            self._queue_inbound(event)
        elif self.dispatches.take(event.sender, len(event.payload)):
            self._spawn(self._dispatch_inbound(handler, event))
        else:
            self._refuse_dispatch(event.sender)
            self._answer(event.handle, False)

    async def _dispatch_inbound(self, handler: InboundHandler, event: InboundMessage) -> None:
        try:
            outcome = await handler.dispatch(event.sender, event.payload)
        except Exception:
            log.exception("inbound dispatch failed; refusing the message")
            self._answer(event.handle, False)
            return
        finally:
            self.dispatches.give(event.sender, len(event.payload))
        if outcome.handled:
            self._answer(event.handle, outcome.reply)
        else:
            self._queue_inbound(event)

    def _refuse_dispatch(self, sender: bytes) -> None:
        """Log a refusal beyond the dispatch budget, at most once every
        REFUSAL_LOG_INTERVAL (a flood must not flood the log too)."""
        now = time.monotonic()
        self._dispatch_refusals += 1
        if now < self._next_refusal_log:
            return
        self._next_refusal_log = now + REFUSAL_LOG_INTERVAL
        budget = self.dispatches
        log.warning("refused %d MCP/A2A message(s) (503) at the dispatch budget; the last from %s, "
                    "which has %d in dispatch (%d in all; at most %d per sender, %d per node)",
                    self._dispatch_refusals, sender.hex()[:16], budget.held_by(sender), budget.items,
                    budget.items_per_peer, budget.items_per_node)
        self._dispatch_refusals = 0

    def _queue_inbound(self, event: InboundMessage) -> None:
        """Into the inbox. Its sender is answered once it is stored (with a
        durable inbox: committed): with the reply an envelope of a
        switched-off adapter gets, or none; or refused when it is not."""
        handler = self.inbound_handler
        reply = handler.refusal(event.payload) if handler is not None else None
        self.inbox.put(event.sender, event.payload, partial(self._stored, event, reply), event.origin)

    def _stored(self, event: InboundMessage, reply: bytes | None, stored: bool) -> None:
        if not stored:
            self._inbox_refused(event.sender, len(event.payload))
        self._answer(event.handle, reply if stored else False)

    def _inbox_refused(self, sender: bytes, size: int) -> None:
        """Count and log a message the inbox did not take: no room, or (a
        durable inbox) its commit failed, which the journal logs itself."""
        inbox = self.inbox
        if inbox.held >= inbox.max_messages:
            budget = "recv_queue"
        elif inbox.held_bytes + size > inbox.max_bytes:
            budget = "recv_queue_bytes"
        else:
            return
        self.inbox_refused[budget] += 1
        log.warning("receive queue full: refused a message from %s", sender.hex()[:16])

    def _answer(self, handle: int, verdict: bytes | None | bool) -> None:
        reply = verdict if isinstance(verdict, bytes) else None
        self.core.answer_inbound(handle, verdict is not False, reply, time.monotonic(), flush=False)
        self._flush_soon()

    def _flush_soon(self) -> None:
        """One flush of the core per event-loop turn: the sends and answers
        made meanwhile leave together (many small messages to one
        destination, or their acknowledgements, in one segment)."""
        if not self._flush_pending:
            self._flush_pending = True
            running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        self.core.flush(time.monotonic())
        self._drain()

    # -- asking remote nodes (the admin socket) ----------------------------

    async def ask_nodeinfo(self, key: bytes, timeout: float) -> bytes:
        """`key`'s NodeInfo as it sent it; TimeoutError without an answer.
        This node answers for itself at once (a Go node would time out)."""
        if key == self.identity.public_key:
            return self.core.datagrams.own_reply(nodeinfo_request())
        return await self._ask(NODEINFO_REPLY, key, timeout,
                               lambda now: self.core.request_nodeinfo(key, now))

    async def ask_debug(self, key: bytes, subtype: int, timeout: float) -> bytes:
        """The body of `key`'s answer to debug request `subtype`."""
        if key == self.identity.public_key:
            return self.core.datagrams.own_reply(debug_request(subtype))
        return await self._ask(debug_reply_kind(subtype), key, timeout,
                               lambda now: self.core.request_debug(key, subtype, now))

    async def _ask(self, kind: ReplyKind, key: bytes, timeout: float,
                   request: Callable[[float], None]) -> bytes:
        future: asyncio.Future[bytes] = running_loop().create_future()
        waiting = self._asking.setdefault((kind, key), [])
        waiting.append(future)
        request(time.monotonic())
        self._drain()
        try:
            return await asyncio.wait_for(future, timeout)
        finally:
            if future in waiting:
                waiting.remove(future)
            if not waiting:
                self._asking.pop((kind, key), None)

    def _replied(self, reply: ProtocolReply) -> None:
        for future in self._asking.pop((reply.kind, reply.key), []):
            if not future.done():
                future.set_result(reply.body)

    # -- peers at run time, and reports for the admin socket -----------------

    def add_peer(self, uri: str) -> str:
        """Dial `uri` from now on (not saved in the config); PeerChangeRefused says why not."""
        return peers.add_peer(self.link_manager, self.runtime_peers, uri)

    def remove_peer(self, uri: str) -> str:
        """Close `uri`'s peering and stop dialing it; PeerChangeRefused if it is not a peer."""
        return peers.remove_peer(self.link_manager, self.runtime_peers, uri)

    def peer_reports(self) -> list[peers.PeerReport]:
        return peers.peer_reports(self.link_manager, self.core.router, set(self.links))

    def tree_report(self) -> list[TreeEntry]:
        """Every tree entry this node holds (getTree shows them all, stale ones too)."""
        return self.core.router.tree_entries()

    def path_report(self) -> list[PathReport]:
        return self.core.router.path_report()

    def session_report(self) -> list[SessionReport]:
        return self.core.sessions.session_report(time.monotonic())

    def routing_entries(self) -> int:
        return self.core.router.info_count()

    def multicast_report(self) -> list[InterfaceReport]:
        return self.discovery.interface_report() if self.discovery is not None else []

    def topology(self) -> dict:
        return {
            "our_ipv6": format_address(self.identity.address),
            "our_public_key": self.identity.peer_id,
            "peers": self.peer_list(),
            "tree": self._tree_list(),
        }

    def session_count(self) -> int:
        return len(self.core.sessions.session_keys())

    def _budget_use(self) -> list[BudgetUse]:
        """The budgets this driver keeps: dispatches, the inbox, the links."""
        inbox, links = self.inbox, list(self.links.values())
        return [
            *self.dispatches.usage(),
            BudgetUse("recv_queue", "node", inbox.max_messages, inbox.held, self.inbox_refused["recv_queue"]),
            BudgetUse("recv_queue_bytes", "node", inbox.max_bytes, inbox.held_bytes,
                      self.inbox_refused["recv_queue_bytes"]),
            BudgetUse("link_queue_bytes", "link", LINK_QUEUE_BYTES,
                      max((link.queued_bytes for link in links), default=0),
                      self._closed_links_dropped + sum(link.dropped_frames for link in links)),
            BudgetUse("ws_message_bytes", "link", WS_MAX_MESSAGE, None,
                      self.link_manager.refusals["ws_message_bytes"]),
        ]

    def overlay_paths(self) -> list[tuple[str, PathStats]]:
        """What the overlay TCP saw on its way to each remote node it talked
        to recently: labelled by the node's key when the destination table
        still holds it, else by its overlay address."""
        keys = {address_for_key(key): key.hex() for key, _ in self.stats.destination_entries()}
        return [(keys.get(address) or format_address(address), path)
                for address, path in list(self.core.stack.paths.items())]

    def listener_counts(self) -> ListenerCounts:
        return replace(self.core.messages.listener, rejects=self.core.stack.refused_over_cap)

    def peer_list(self) -> list[dict]:
        """/topology's peers: configured ones (up or not) and inbound ones."""
        entries = []
        for status in self.link_manager.peers_status():
            entry = {
                "uri": status["uri"], "scheme": status["scheme"],
                "up": status["up"], "inbound": status["inbound"],
                "public_key": status["public_key"], "root": "", "port": 0, "coords": [],
            }
            name = self.core.peer_names.get(bytes.fromhex(status["public_key"]))  # b"" while down
            if name:
                entry["name"] = name
            link = status.get("link")
            if link is not None and link.link_id in self.links:
                view = self.core.router.peer_view(link.link_id)
                if view is not None:
                    entry.update(root=view.root.hex(), port=view.port, coords=list(view.coords))
            entries.append(entry)
        return entries

    def _tree_list(self) -> list[dict]:
        return [
            {
                "public_key": entry.key.hex(),
                "parent": "" if entry.is_root else entry.parent.hex(),
                "sequence": entry.seq,
            }
            for entry in self.core.router.live_tree_entries()
        ]

    # -- life cycle ------------------------------------------------------

    async def start(self) -> None:
        ident = self.identity
        log.info("peer id %s (%s)", ident.peer_id, self.key_origin)
        log.info("address %s subnet %s/64", format_address(ident.address),
                 format_address(ident.subnet + bytes(8)))
        if self.config.group_password:
            log.info("GroupPassword set: sessions only with nodes that have the same one "
                     "(peerings and forwarding are open to all)")
        self._started = True
        self._arm_timer()
        await self.link_manager.start(self.config.listen)
        for uri in self.config.peers:
            self.link_manager.add_peer(uri)
        if self.config.multicast_interfaces:
            self.discovery = Discovery(ident, self.config.multicast_interfaces, self.link_manager)
            await self.discovery.start()
        if self.config.router_url:
            log.info("MCP requests from peers go to %s/route", self.config.router_url)
        if self.config.a2a_url:
            log.info("A2A requests from peers go to %s", self.config.a2a_url)

    async def stop(self) -> None:
        await self.inbox.flush()  # what arrived is committed and its senders answered
        self.core.abort_all(time.monotonic())
        self._drain()
        # Aborted messages report nothing more: their callers hear it here.
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(DeliveryError("the node is stopping"))
        self._waiting.clear()
        self._fates_due += [(settled, DeliveryError("the node is stopping")) for settled in self._sends.values()]
        self._sends.clear()
        self._tell_fates()
        self._started = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for task in list(self._tasks):
            task.cancel()
        if self.discovery is not None:
            await self.discovery.stop()
        await self.link_manager.stop()
        self.inbox.close()


def _settle_future(future: asyncio.Future, error: DeliveryError | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
