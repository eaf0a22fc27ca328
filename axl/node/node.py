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
from dataclasses import replace
from typing import Protocol

from axl.config import ConfigError, NodeConfig
from axl.errors import DeliveryError
from axl.identity import NodeIdentity, format_address
from axl.link.manager import Link, LinkManager
from axl.link.multicast import Discovery
from axl.link.uri import URIError, parse_listen_uri, parse_peer_uri
from axl.node.core import NodeCore
from axl.node.inbox import Inbox, InboxMessage
from axl.node.stats import ListenerCounts, NodeStats
from axl.node.messages import (
    Acknowledged, InboundMessage, MessageSettings, ReplyReceived, SendFailed,
)
from axl.routing import SendFrame
from axl.tasks import start_task

log = logging.getLogger("axl.node")


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
                 inbound_handler: InboundHandler | None = None) -> None:
        self.config = config
        self.identity = identity
        self.key_origin = key_origin
        self.max_message_size = config.max_message_size
        self.stats = NodeStats(time.time())
        now = time.monotonic()
        self.core = NodeCore(identity, MessageSettings.from_config(config), now,
                             wall_clock=time.time,
                             max_connections=config.max_concurrent_conns)
        self.links: dict[int, Link] = {}
        self.link_manager = LinkManager(
            identity, self,
            allowed_keys={bytes.fromhex(key) for key in config.allowed_public_keys},
        )
        self.inbox = Inbox(config.recv_queue_max_messages, config.recv_queue_max_bytes)
        self.inbound_handler = inbound_handler
        self._waiting: dict[int, asyncio.Future] = {}
        self._tasks: set[asyncio.Task] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_when: float | None = None
        self._started = False
        self._flush_pending = False
        self.discovery: Discovery | None = None

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

    def _settle(self, event: object) -> None:
        if isinstance(event, InboundMessage):
            self._inbound(event)
            return
        future = self._waiting.pop(event.handle, None)
        if future is None or future.done():
            return
        if isinstance(event, Acknowledged):
            future.set_result(None)
        elif isinstance(event, ReplyReceived):
            future.set_result(event.reply)
        elif isinstance(event, SendFailed):
            future.set_exception(event.error)

    def _arm_timer(self) -> None:
        """Keep one loop timer at the core's deadline; most calls leave the
        deadline where it was, and then the timer is left alone."""
        when = self.core.get_timer()
        if self._timer is not None:
            if when == self._timer_when:
                return
            self._timer.cancel()
            self._timer = None
        if when is None:
            return
        delay = max(0.0, when - time.monotonic())
        self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)
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
            self.core.link_down(link.link_id, time.monotonic())
            self._drain()

    # -- API for the bridge ----------------------------------------------

    async def send(self, dest_key: bytes, payload: bytes) -> None:
        await self.start_send(dest_key, payload)

    def start_send(self, dest_key: bytes, payload: bytes) -> asyncio.Future:
        """Start a send now; the future settles with its fate. Sends start in
        the order of these calls, and a caller with many in flight needs no
        task per send. Raises MessageTooLarge at once."""
        handle = self.core.send_message(dest_key, payload, time.monotonic(), flush=False)
        self._flush_soon()
        # The turn's flush drains the core (its frames, events and timer) for every send started in it.
        return self._future_for(handle)

    def open_body(self, dest_key: bytes, length: int) -> tuple[int, asyncio.Future] | None:
        """Start a send of `length` bytes whose body is still arriving: its
        parts go out as `write_body` gives them (64 KiB at a time), so a
        large message crosses the overlay while its client is still
        uploading it. Returns the send's handle and the future of its fate
        (as `start_send`'s), or None when it cannot start before the body is
        whole (no message stream to `dest_key` yet, or one such send already
        under way there)."""
        handle = self.core.open_body(dest_key, length, time.monotonic())
        if handle is None:
            return None
        self._flush_soon()
        return handle, self._future_for(handle)

    def write_body(self, handle: int, part: bytes) -> None:
        if self.core.write_body(handle, part):  # a part that completes no batch needs no flush
            self._flush_soon()

    def end_body(self, handle: int) -> None:
        self.core.end_body(handle, time.monotonic())
        self._flush_soon()

    def cancel_body(self, handle: int) -> None:
        """The body will never be whole: the message is dropped unsent, and
        its future is forgotten unsettled (its caller has answered already)."""
        self._waiting.pop(handle, None)
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

    def give_back(self, messages: list[InboxMessage]) -> None:
        """Messages taken by `recv` that their client never got go back to the front."""
        self.inbox.give_back(messages)

    async def request(self, dest_key: bytes, payload: bytes, timeout: float) -> bytes:
        handle = self.core.request(dest_key, payload, timeout, time.monotonic())
        return await self._outcome(handle)

    def _outcome(self, handle: int) -> asyncio.Future:
        """The future the core's verdict on `handle` settles (its deadlines
        bound the wait), after writing what the call into the core left."""
        future = self._future_for(handle)
        self._drain()
        return future

    def _future_for(self, handle: int) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        self._waiting[handle] = future
        return future

    def _inbound(self, event: InboundMessage) -> None:
        """An envelope the handler claims is dispatched in a task (an MCP
        server may take a minute); any other message goes to the inbox at
        once, with no task per message, so the inbox takes them in the
        order they arrived."""
        self.stats.message_received(event.sender, len(event.payload), time.time())
        handler = self.inbound_handler
        if handler is not None and handler.claims(event.payload):
            self._spawn(self._dispatch_inbound(handler, event))
        else:
            self._answer(event.handle, self._queue_inbound(event.payload, event.sender))

    async def _dispatch_inbound(self, handler: InboundHandler, event: InboundMessage) -> None:
        try:
            outcome = await handler.dispatch(event.sender, event.payload)
            verdict = outcome.reply if outcome.handled else self._queue_inbound(event.payload, event.sender)
        except Exception:
            log.exception("inbound dispatch failed; refusing the message")
            verdict = False
        self._answer(event.handle, verdict)

    def _queue_inbound(self, message: bytes, sender: bytes) -> bytes | None | bool:
        """Into the inbox: the reply to write back (an envelope of a switched-off
        adapter is told so), None for none, or False when the inbox refused it."""
        if not self.inbox.put(sender, message):
            return False
        handler = self.inbound_handler
        return handler.refusal(message) if handler is not None else None

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
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        self.core.flush(time.monotonic())
        self._drain()

    def topology(self) -> dict:
        return {
            "our_ipv6": format_address(self.identity.address),
            "our_public_key": self.identity.peer_id,
            "peers": self._peer_list(),
            "tree": self._tree_list(),
        }

    def session_count(self) -> int:
        return len(self.core.sessions.session_keys())

    def listener_counts(self) -> ListenerCounts:
        return replace(self.core.messages.listener, rejects=self.core.stack.refused_connections)

    def _peer_list(self) -> list[dict]:
        peers = []
        for status in self.link_manager.peers_status():
            entry = {
                "uri": status["uri"], "scheme": status["scheme"],
                "up": status["up"], "inbound": status["inbound"],
                "public_key": status["public_key"], "root": "", "port": 0, "coords": [],
            }
            link = status.get("link")
            if link is not None and link.link_id in self.links:
                view = self.core.router.peer_view(link.link_id)
                if view is not None:
                    entry.update(root=view.root.hex(), port=view.port, coords=list(view.coords))
            peers.append(entry)
        return peers

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
        self.core.abort_all(time.monotonic())
        self._drain()
        # Aborted messages report nothing more: their callers hear it here.
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(DeliveryError("the node is stopping"))
        self._waiting.clear()
        self._started = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for task in list(self._tasks):
            task.cancel()
        if self.discovery is not None:
            await self.discovery.stop()
        await self.link_manager.stop()
