"""AXL's application protocol over the userspace TCP stack (asyncio edge).

Every message travels on its own TCP connection to port `tcp_port` of the
destination's overlay address, as u32be length || body. The sender half-closes
after the body and waits for the receiver's FIN: a receiver closes only after
it has read everything, so that FIN is an end-to-end acknowledgement (it works
against Go receivers too, which close on EOF). A receiver that cannot queue a
message resets the connection instead, and the sender reports 503.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

from axl.config import NodeConfig
from axl.errors import (
    DeliveryError,
    DeliveryTimeout,
    MessageTooLarge,
    PeerUnreachable,
    ReceiverFull,
)
from axl.identity import address_for_key, key_for_address_bytes
from axl.tcp import events as tcp_events
from axl.tcp.connection import TcpConfig, TcpConnection
from axl.tcp.framing import MessageDecoder, MessageTooLarge as FrameTooLarge, message_header
from axl.tasks import start_task
from axl.tcp.stack import TcpStack

if TYPE_CHECKING:
    from axl.node.node import Node

log = logging.getLogger("axl.transport")

WRITE_CHUNK = 1 << 20
REFUSAL_CAUSES = ("its receive queue is full, it is at its connection limit, "
                  "or the message exceeds its max_message_size")
MAX_REMEMBERED_SENDERS = 4096


def _key_text(key: bytes | None) -> str:
    return key.hex() if key else "?"


def feed_all(decoder: MessageDecoder, chunks: list[bytes]) -> list[bytes]:
    return [message for chunk in chunks for message in decoder.feed(chunk)]


class OverlayStream:
    """asyncio view of one TcpConnection: awaitable connect, write, read, close."""

    def __init__(self, transport: "Transport", conn: TcpConnection, peer_key: bytes | None) -> None:
        self.transport = transport
        self.conn = conn
        self.peer_key = peer_key
        loop = asyncio.get_running_loop()
        self.connected: asyncio.Future[None] = loop.create_future()
        self.ended: asyncio.Future[str] = loop.create_future()
        self.peer_finished = asyncio.Event()
        self.readable = asyncio.Event()
        self.writable = asyncio.Event()
        self.received: list[bytes] = []

    def on_event(self, event: tcp_events.TcpEvent) -> None:
        match event:
            case tcp_events.Connected() | tcp_events.NewConnection():
                if not self.connected.done():
                    self.connected.set_result(None)
            case tcp_events.DataReceived(data=data):
                self.received.append(data)
                self.readable.set()
            case tcp_events.PeerFinished():
                self.peer_finished.set()
                self.readable.set()
            case tcp_events.Closed():
                self._end("closed")
            case tcp_events.Reset(reason=reason):
                self._end(f"reset: {reason}")
            case tcp_events.TimedOut():
                self._end("timed out")

    def _end(self, how: str) -> None:
        if not self.connected.done():
            self.connected.set_exception(ConnectionError(how))
            self.connected.exception()
        if not self.ended.done():
            self.ended.set_result(how)
        self.peer_finished.set()
        self.readable.set()
        self.writable.set()

    async def write(self, data: bytes | memoryview, deadline: float) -> None:
        view = memoryview(data)
        loop = asyncio.get_running_loop()
        while view:
            if self.ended.done():
                raise ConnectionError(self.ended.result())
            accepted = self.conn.send(view[:WRITE_CHUNK])
            view = view[accepted:]
            self.transport.flush()
            if view and not accepted:
                self.writable.clear()
                await asyncio.wait_for(self.writable.wait(), max(0.0, deadline - loop.time()))

    def take_received(self) -> list[bytes]:
        """The chunks that arrived since the last call, uncopied.

        Only taking them reopens the receive window: while the reader is busy
        (an inbound MCP call can take a minute) the sender is paused once a
        receive buffer of data waits here, instead of filling our memory.
        """
        chunks, self.received = self.received, []
        self.readable.clear()
        if chunks:
            self.conn.consumed(sum(map(len, chunks)))
            self.transport.flush()
        return chunks

    def close(self) -> None:
        if not self.ended.done():
            self.conn.close()
            self.transport.flush()

    def abort(self) -> None:
        if not self.ended.done():
            self.conn.abort()
            self.transport.flush()


class Transport:
    def __init__(self, node: "Node", config: NodeConfig) -> None:
        self.node = node
        self.config = config
        # Every packet reaching this stack came out of an end-to-end session
        # whose Poly1305 tag already proved each byte (or from this node
        # itself), so re-checking the TCP checksum on receive would only
        # cost time. Outgoing checksums are always computed: Go peers check.
        self.stack = TcpStack(node.identity.address, max_connections=config.max_concurrent_conns,
                              config=TcpConfig(hold_until_consumed=True), verify_checksums=False)
        self.streams: dict[TcpConnection, OverlayStream] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_when: float | None = None
        self._tasks: set[asyncio.Task] = set()
        self._stopping = False
        # overlay address -> the full key its packets were last proven to come from
        self._senders: OrderedDict[bytes, bytes] = OrderedDict()

    def start(self) -> None:
        self.stack.listen(self.config.tcp_port)

    async def stop(self) -> None:
        self._stopping = True
        for stream in list(self.streams.values()):
            stream.abort()
        for task in list(self._tasks):
            task.cancel()
        if self._timer is not None:
            self._timer.cancel()

    # -- moving packets and time in and out of the sans-IO stack --------

    def packet_received(self, source_key: bytes, packet: bytes) -> None:
        self._remember_sender(packet[8:24], source_key)
        self.stack.receive(packet, time.monotonic())
        self._process_events()
        self.flush()

    def path_changed(self, key: bytes) -> None:
        """A lookup found a (new) path to `key`: connections to it retry at once."""
        self.stack.path_changed(address_for_key(key), time.monotonic())
        self.flush()

    def flush(self) -> None:
        for packet in self.stack.packets_to_send(time.monotonic()):
            self.node.send_ipv6(packet)
        self._process_events()
        self._arm_timer()

    def _arm_timer(self) -> None:
        """Keep one loop timer at the stack's deadline; most flushes leave the
        deadline where it was, and then the timer is left alone."""
        when = self.stack.get_timer()
        if self._timer is not None:
            if when == self._timer_when:
                return
            self._timer.cancel()
            self._timer = None
        if when is None:
            return
        loop = asyncio.get_running_loop()
        delay = max(0.0, when - time.monotonic())
        self._timer = loop.call_later(delay, self._on_timer)
        self._timer_when = when

    def _on_timer(self) -> None:
        self._timer = None
        self.stack.handle_timer(time.monotonic())
        self.flush()

    def _process_events(self) -> None:
        while (event := self.stack.next_event()) is not None:
            conn = event.connection
            if isinstance(event, tcp_events.NewConnection):
                self._accept(conn)
            stream = self.streams.get(conn)
            if stream is None:
                continue
            stream.on_event(event)
            if stream.ended.done():
                self.streams.pop(conn, None)
        for stream in self.streams.values():
            if stream.conn.send_space:
                stream.writable.set()

    def _remember_sender(self, address: bytes, key: bytes) -> None:
        self._senders[address] = key
        self._senders.move_to_end(address)
        if len(self._senders) > MAX_REMEMBERED_SENDERS:
            self._senders.popitem(last=False)

    def _accept(self, conn: TcpConnection) -> None:
        peer = self._senders.get(conn.remote_address) or key_for_address_bytes(conn.remote_address)
        stream = OverlayStream(self, conn, peer)
        self.streams[conn] = stream
        self._spawn(self._serve_inbound(stream))

    def _spawn(self, coro) -> None:
        task = start_task(coro, log, "inbound connection task")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- the sending side -----------------------------------------------

    async def _open(self, dest_key: bytes, deadline: float, payload: bytes,
                    last: bool) -> tuple[OverlayStream, memoryview]:
        """Connect with one framed message queued before the SYN leaves, as much
        of it as the send buffer takes: it then rides on the handshake's final
        ACK instead of waiting a round trip, and with `last` (nothing follows)
        the FIN rides along too. Returns the stream and the unqueued rest."""
        loop = asyncio.get_running_loop()
        conn = self.stack.connect(address_for_key(dest_key), self.config.tcp_port,
                                  now=time.monotonic())
        stream = OverlayStream(self, conn, dest_key)
        self.streams[conn] = stream
        conn.send(message_header(len(payload)))
        rest = memoryview(payload)[conn.send(payload):]
        if last and not rest:
            conn.close()
        self.flush()
        try:
            await asyncio.wait_for(asyncio.shield(stream.connected), max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:
            stream.abort()
            raise PeerUnreachable(f"no route to {dest_key.hex()}: peer offline or unknown") from None
        except ConnectionError as exc:
            raise PeerUnreachable(f"{dest_key.hex()} refused the connection ({exc})") from None
        return stream, rest

    async def send_message(self, dest_key: bytes, payload: bytes) -> None:
        if len(payload) > self.config.max_message_size:
            raise MessageTooLarge(f"payload of {len(payload)} bytes exceeds max_message_size")
        loop = asyncio.get_running_loop()
        start = loop.time()
        stream, rest = await self._open(dest_key, start + self.config.lookup_timeout_secs,
                                        payload, last=True)
        deadline = loop.time() + self.config.send_timeout_secs
        try:
            if rest:
                await stream.write(rest, deadline)
                stream.close()
            await asyncio.wait_for(stream.peer_finished.wait(), max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:
            stream.abort()
            raise DeliveryTimeout(f"{dest_key.hex()} did not acknowledge within "
                                  f"{self.config.send_timeout_secs}s") from None
        except ConnectionError as exc:
            raise ReceiverFull(f"{dest_key.hex()} refused the message ({exc}): {REFUSAL_CAUSES}") from None
        if stream.ended.done() and stream.ended.result().startswith("reset"):
            raise ReceiverFull(f"{dest_key.hex()} refused the message: {REFUSAL_CAUSES}")
        if stream.conn.unacknowledged:
            # A receiver that read the message acknowledged every byte before
            # its FIN; a FIN without that (a Go node over its connection limit
            # closes at once) is a refusal, not a delivery.
            stream.abort()
            raise ReceiverFull(f"{dest_key.hex()} closed the connection without reading the message: "
                               f"{REFUSAL_CAUSES}")

    async def request(self, dest_key: bytes, payload: bytes, timeout: float) -> bytes:
        """One envelope out, one framed reply back on the same connection."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        stream, rest = await self._open(
            dest_key, min(deadline, loop.time() + self.config.lookup_timeout_secs), payload, last=False)
        decoder = MessageDecoder(self.config.max_message_size)
        try:
            await stream.write(rest, deadline)
            while True:
                await asyncio.wait_for(stream.readable.wait(), max(0.0, deadline - loop.time()))
                replies = feed_all(decoder, stream.take_received())
                if replies:
                    return replies[0]
                if stream.peer_finished.is_set() and not stream.received:
                    raise PeerUnreachable(f"{dest_key.hex()} closed the connection without replying")
        except asyncio.TimeoutError:
            raise DeliveryTimeout(f"no reply from {dest_key.hex()} within {timeout:g}s") from None
        except (ConnectionError, FrameTooLarge) as exc:
            raise DeliveryError(f"request to {dest_key.hex()} failed: {exc}") from None
        finally:
            stream.close()

    # -- the receiving side ---------------------------------------------

    async def _serve_inbound(self, stream: OverlayStream) -> None:
        """Read messages until the peer's FIN, then close: that FIN acknowledges.

        Each message must arrive whole within conn_read_timeout_secs of its
        first byte (a trickling sender cannot hold a connection forever), and
        an idle connection is closed after conn_idle_timeout_secs, as Go does.
        Whatever ends this task, the connection is released with it: a
        connection left open would hold one of max_concurrent_conns for good.
        """
        try:
            await self._read_inbound(stream)
        except asyncio.TimeoutError:
            log.info("inbound connection idle or stalled: closing")
        except FrameTooLarge as exc:
            log.warning("inbound message refused: %s", exc)
        except Exception:
            log.exception("inbound connection from %s failed", _key_text(stream.peer_key))
        finally:
            stream.abort()

    async def _read_inbound(self, stream: OverlayStream) -> None:
        decoder = MessageDecoder(self.config.max_message_size)
        loop = asyncio.get_running_loop()
        message_deadline = None
        while True:
            if decoder.partial and message_deadline is None:
                message_deadline = loop.time() + self.config.conn_read_timeout_secs
            timeout = (message_deadline - loop.time() if message_deadline is not None
                       else self.config.conn_idle_timeout_secs)
            await asyncio.wait_for(stream.readable.wait(), max(0.0, timeout))
            messages = feed_all(decoder, stream.take_received())
            if messages or not decoder.partial:
                message_deadline = None
            for message in messages:
                if not await self._handle_inbound(stream, message):
                    log.warning("receive queue full: refused a message from %s",
                                _key_text(stream.peer_key))
                    return
            if stream.peer_finished.is_set() and not stream.received:
                break
        if decoder.partial:
            log.warning("connection from %s ended mid-message", _key_text(stream.peer_key))
            return
        stream.close()
        await asyncio.wait_for(asyncio.shield(stream.ended), 10)

    async def _handle_inbound(self, stream: OverlayStream, message: bytes) -> bool:
        """Dispatch one message; False means it was refused (queue full)."""
        reply = await self.node.deliver_inbound(stream.peer_key, message)
        if reply is False:
            return False
        if isinstance(reply, bytes):
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.config.conn_read_timeout_secs
            try:
                await stream.write(message_header(len(reply)) + reply, deadline)
            except (ConnectionError, asyncio.TimeoutError) as exc:
                log.info("could not write a reply to %s: %s", stream.peer_key.hex(), exc)
        return True
