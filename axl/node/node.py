"""The Node: owns every layer, moves bytes and time between them.

Each protocol layer is a sans-IO object that takes an event and returns a
list of actions. The node's whole job is to hand each action to the layer it
is meant for (`_dispatch`), drive the timers, and expose an asyncio API to
the bridge: `send`, `recv`, `request`, `topology`.

    link frames <-> Router <-> SessionManager <-> Core <-> IPv6Device <-> TcpStack
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any

from typing import Protocol

from axl import routing, sessions
from axl.config import ConfigError, NodeConfig
from axl.core import Core, DeliverIPv6, SendMessage
from axl.identity import NodeIdentity, format_address
from axl.link.manager import Link, LinkManager
from axl.link.uri import URIError, parse_listen_uri, parse_peer_uri
from axl.node.inbox import Inbox, InboxMessage
from axl.node.transport import Transport
from axl.packets import DeliverPacket, IPv6Device, Lookup, SendIPv6
from axl.routing import PathFound, Router, SendFrame, SendTraffic
from axl.sessions import SendPacket, SessionManager
from axl.tasks import start_task
from axl.wire import DecodeError

log = logging.getLogger("axl.node")

TICK_INTERVAL = 1.0
# Yggdrasil's core MTU. Go AXL nodes advertise MSS 1220 and our TCP honours it,
# so only Python peers, which advertise more, ever receive larger packets.
CORE_MTU = 65535


class DispatchOutcome(Protocol):
    handled: bool
    reply: bytes | None


class InboundHandler(Protocol):
    """Who may claim an inbound message before /recv (the MCP/A2A adapters)."""

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
        # Monotonic time drives every timer and duration below; Unix time
        # is read only to mint the sequence numbers the wire carries.
        self.router = Router(identity, now=time.monotonic(), wall_clock=time.time)
        self.sessions = SessionManager(identity, wall_clock=time.time)
        self.core = Core(
            identity,
            nodeinfo={"buildname": "axl-py", "buildversion": "0.1.0"},
            peer_keys=self._connected_peer_keys,
            tree_keys=lambda: [entry.key for entry in self.router.tree_entries()],
            routing_entries=self.router.info_count,
        )
        self.device = IPv6Device(identity, mtu=CORE_MTU)
        self.links: dict[int, Link] = {}
        self.link_manager = LinkManager(
            identity, self,
            allowed_keys={bytes.fromhex(key) for key in config.allowed_public_keys},
        )
        self.inbox = Inbox(config.recv_queue_max_messages, config.recv_queue_max_bytes)
        self.transport = Transport(self, config)
        self.inbound_handler = inbound_handler
        self._pending: deque[Any] = deque()
        self._dispatching = False
        self._tick_task: asyncio.Task | None = None

    # -- the action pump -------------------------------------------------

    def apply(self, actions: list[Any]) -> None:
        """Queue actions and run them to completion, breadth first.

        Re-entrant calls (an action whose handler produces more actions)
        only queue, so the stack never grows with the length of a chain.
        """
        self._pending.extend(actions)
        if self._dispatching:
            return
        self._dispatching = True
        try:
            while self._pending:
                action = self._pending.popleft()
                try:
                    self._dispatch(action)
                except DecodeError as exc:
                    # End-to-end content (a TCP segment, an IPv6 packet) that a
                    # remote node got wrong: drop it, never the link it came on.
                    log.debug("dropped malformed %s: %s", type(action).__name__, exc)
                except Exception:
                    # A fault above the router must not travel back into the
                    # link that carried the packet and close it (Go delivers
                    # asynchronously, so a payload can never close a link).
                    log.exception("dropped %s after an internal error", type(action).__name__)
        finally:
            self._dispatching = False

    def _dispatch(self, action: Any) -> None:
        now = time.monotonic()
        match action:
            case SendFrame(link_id=link_id, frame=frame):
                link = self.links.get(link_id)
                if link is not None:
                    link.send_frame(frame)
            case SendTraffic(link_id=link_id, frame=frame, flow=flow):
                link = self.links.get(link_id)
                if link is not None:
                    link.send_traffic(frame, flow)
            case routing.Deliver(source_key=source, payload=payload):
                self._pending.extend(self.sessions.receive(source, payload, now))
            case PathFound(key=key):
                self._pending.extend(self.device.path_found(key, now))
                self.transport.path_changed(key)
            case SendPacket(dest_key=dest, packet=packet):
                self._pending.extend(self.router.send(dest, packet, now))
            case sessions.Deliver(source_key=source, message=message):
                self._pending.extend(self.core.handle(source, message, now))
            case SendMessage(dest_key=dest, message=message):
                self._pending.extend(self.sessions.send(dest, message, now))
            case DeliverIPv6(source_key=source, packet=packet):
                self._pending.extend(self.device.read(source, packet, now))
            case SendIPv6(key=key, packet=packet):
                if key == self.identity.public_key:
                    asyncio.get_running_loop().call_soon(self.transport.packet_received, key, packet)
                else:
                    self._pending.extend(self.sessions.send(key, self.core.wrap_ipv6(packet), now))
            case Lookup(partial_key=partial):
                self._pending.extend(self.router.lookup(partial, now))
            case DeliverPacket(source_key=source, packet=packet):
                self.transport.packet_received(source, packet)
            case _:
                log.debug("ignored action %r", action)

    def send_ipv6(self, packet: bytes) -> None:
        """Entry point for the TCP stack's outgoing packets."""
        self.apply(self.device.write(packet, time.monotonic()))

    # -- link handler (called by the LinkManager) ------------------------

    def link_up(self, link: Link) -> None:
        self.links[link.link_id] = link
        self.apply(self.router.add_link(link.link_id, link.remote_key, link.priority, time.monotonic()))

    def frame_received(self, link: Link, ftype: int, body: bytes) -> None:
        self.apply(self.router.handle_frame(link.link_id, ftype, body, time.monotonic()))

    def link_down(self, link: Link, reason: str) -> None:
        if self.links.pop(link.link_id, None) is not None:
            self.apply(self.router.remove_link(link.link_id, time.monotonic()))

    def _connected_peer_keys(self) -> list[bytes]:
        return [link.remote_key for link in self.links.values()]

    # -- timers ----------------------------------------------------------

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK_INTERVAL)
            now = time.monotonic()
            try:
                self.apply(self.router.tick(now))
                self.apply(self.sessions.tick(now))
                self.device.tick(now)
            except Exception:
                log.exception("maintenance tick failed")

    # -- API for the bridge ----------------------------------------------

    async def send(self, dest_key: bytes, payload: bytes) -> None:
        await self.transport.send_message(dest_key, payload)

    async def recv(self, wait: float) -> InboxMessage | None:
        return await self.inbox.get(wait)

    def give_back(self, messages: list[InboxMessage]) -> None:
        """Messages taken by `recv` that their client never got go back to the front."""
        self.inbox.give_back(messages)

    async def request(self, dest_key: bytes, payload: bytes, timeout: float) -> bytes:
        return await self.transport.request(dest_key, payload, timeout)

    async def deliver_inbound(self, sender: bytes, message: bytes) -> bytes | None | bool:
        """An application message arrived: MCP/A2A dispatch, else the inbox.

        Returns the reply to write back (bytes), None when nothing is to be
        written, or False when the inbox refused the message.
        """
        handler = self.inbound_handler
        if handler is not None:
            result = await handler.dispatch(sender, message)
            if result.handled:
                return result.reply
        if not self.inbox.put(sender, message):
            return False
        return handler.refusal(message) if handler is not None else None

    def topology(self) -> dict:
        return {
            "our_ipv6": format_address(self.identity.address),
            "our_public_key": self.identity.peer_id,
            "peers": self._peer_list(),
            "tree": self._tree_list(),
        }

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
                view = self.router.peer_view(link.link_id)
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
            for entry in self.router.live_tree_entries()
        ]

    # -- life cycle ------------------------------------------------------

    async def start(self) -> None:
        ident = self.identity
        log.info("peer id %s (%s)", ident.peer_id, self.key_origin)
        log.info("address %s subnet %s/64", format_address(ident.address),
                 format_address(ident.subnet + bytes(8)))
        self.transport.start()
        await self.link_manager.start(self.config.listen)
        for uri in self.config.peers:
            self.link_manager.add_peer(uri)
        if self.config.router_url:
            log.info("MCP requests from peers go to %s/route", self.config.router_url)
        if self.config.a2a_url:
            log.info("A2A requests from peers go to %s", self.config.a2a_url)
        self._tick_task = start_task(self._tick_forever(), log, "maintenance ticks")

    async def stop(self) -> None:
        if self._tick_task is not None:
            self._tick_task.cancel()
        await self.transport.stop()
        await self.link_manager.stop()
