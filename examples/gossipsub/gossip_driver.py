"""Runs a GossipSub router over one AXL node's HTTP bridge.

The router (gossip_protocol.py) decides; this driver only moves bytes and
time: a receiving WebSocket (/ws?recv=1) feeds it, one queue per peer keeps
/send in order per destination while peers are served in parallel, and a
timer task wakes it for heartbeats and IWANT deadlines.

Why /ws and not a /recv loop: /recv hands out one message per request, so a
busy node can be read no faster than one HTTP round trip per message. On 100
nodes sharing two cores that round trip took a tenth of a second and more,
messages queued by the hundred at well-connected nodes and the mean latency
reached 13 s. The WebSocket lets the node push up to RECV_WINDOW messages
ahead of our acknowledgements.

As a program it is a tiny chat on a topic: lines typed are published,
messages from others are printed.

    python examples/gossipsub/gossip_driver.py --node 0 --topic chat
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import add_bridge_arguments, chosen_bridge, run_main  # noqa: E402  (first: see common.py)

import aiohttp  # noqa: E402

from axl.client import AsyncClient, BridgeError  # noqa: E402
from gossip_protocol import Delivery, GossipSub, MalformedRPC, Params  # noqa: E402

log = logging.getLogger("gossipsub")

RECV_WINDOW = 256  # messages the node may push before we mark them done
RECONNECT_SECONDS = 1.0
RECEIVE_START_SECONDS = 30.0  # how long start() waits for the receiving socket
FRAME_HEADER = 8 + 32  # message id, sender key
IDLE_TIMER_SECONDS = 1.0
MAX_BATCH_BYTES = 1 << 20
JOIN_SECONDS = 2.0  # a few heartbeats: learn the peers' subscriptions and graft a mesh before publishing


class GossipNode:
    """One GossipSub participant behind one bridge; use inside ``async with AsyncClient``."""

    def __init__(self, bridge: AsyncClient, params: Params | None = None, rng: random.Random | None = None,
                 on_delivery: Callable[[Delivery], None] | None = None) -> None:
        self.bridge = bridge
        self.params = params or Params()
        self.rng = rng or random.Random()
        self.on_delivery = on_delivery
        self.router: GossipSub | None = None
        self.deliveries: list[Delivery] = []
        self.send_failures = 0
        self._queues: dict[str, asyncio.Queue[bytes]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()
        self._receiving = asyncio.Event()
        self._http: aiohttp.ClientSession | None = None

    @property
    def peer_id(self) -> str:
        return self.gossip.peer_id

    @property
    def gossip(self) -> GossipSub:
        if self.router is None:
            raise RuntimeError("call start() first")
        return self.router

    async def start(self, peers: list[str]) -> None:
        """Learn our id, start the receive and timer loops and greet ``peers``.

        Returns once the receiving socket is open (or after RECEIVE_START_SECONDS,
        with a warning), so that the peers' answers to our greeting are read as
        they come: a node whose receiver attached late would join the meshes
        late and miss what was published meanwhile."""
        self.router = GossipSub(await self.bridge.peer_id(), self.params, self.rng)
        self._http = aiohttp.ClientSession()
        self._tasks = [asyncio.create_task(self._receive_loop()), asyncio.create_task(self._timer_loop())]
        try:
            await asyncio.wait_for(self._receiving.wait(), RECEIVE_START_SECONDS)
        except asyncio.TimeoutError:
            log.warning("no receiving socket after %g s; going on without it", RECEIVE_START_SECONDS)
        for peer in peers:
            self.router.add_peer(peer)
        self._flush()

    async def stop(self, drain_timeout: float = 5.0) -> None:
        """Let queued RPCs go out (up to ``drain_timeout`` seconds), then stop all loops."""
        try:
            await asyncio.wait_for(asyncio.gather(*(queue.join() for queue in self._queues.values())),
                                   timeout=drain_timeout)
        except asyncio.TimeoutError:
            log.warning("stopping with RPCs still queued for %d peers",
                        sum(not queue.empty() for queue in self._queues.values()))
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        self._queues = {}
        if self._http is not None:
            await self._http.close()
            self._http = None

    def subscribe(self, topic: str) -> None:
        self.gossip.subscribe(topic, time.time())
        self._flush()

    def publish(self, topic: str, data: bytes) -> str:
        msg_id = self.gossip.publish(topic, data, time.time())
        self._flush()
        return msg_id

    def _flush(self) -> None:
        """Hand deliveries to the application and queue RPCs per destination peer."""
        for delivery in self.gossip.take_deliveries():
            self.deliveries.append(delivery)
            if self.on_delivery is not None:
                self.on_delivery(delivery)
        for peer, payload in self.gossip.take_outgoing():
            self._queue_for(peer).put_nowait(payload)
        self._wake.set()

    def _queue_for(self, peer: str) -> asyncio.Queue[bytes]:
        queue = self._queues.get(peer)
        if queue is None:
            queue = self._queues[peer] = asyncio.Queue()
            self._tasks.append(asyncio.create_task(self._send_loop(peer, queue)))
        return queue

    async def _send_loop(self, peer: str, queue: asyncio.Queue[bytes]) -> None:
        """Send in order; RPCs that queued up while a /send was running go out together."""
        while True:
            batch = [await queue.get()]
            while not queue.empty() and sum(map(len, batch)) < MAX_BATCH_BYTES:
                batch.append(queue.get_nowait())
            payload = b"".join(batch)
            try:
                await self.bridge.send(peer, payload)
            except (BridgeError, OSError, asyncio.TimeoutError) as error:
                self.send_failures += 1
                log.warning("send %s -> %s failed: %s", self.peer_id[:8], peer[:8], error)
            for _ in batch:
                queue.task_done()

    async def _receive_loop(self) -> None:
        """Receive over /ws?recv=1, reconnecting if the socket drops (undone messages come again)."""
        url = f"{self.bridge.url}/ws?recv=1&window={RECV_WINDOW}"
        while True:
            try:
                async with self._session().ws_connect(url) as socket:
                    self._receiving.set()
                    await self._receive_frames(socket)
                log.warning("the node closed the receiving socket")
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as error:
                log.warning("receiving failed: %s", error)
            await asyncio.sleep(RECONNECT_SECONDS)

    async def _receive_frames(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        """Each binary frame is id, sender key, payload; mark it done once the router has it."""
        async for frame in socket:
            if frame.type is not aiohttp.WSMsgType.BINARY:
                continue
            sender, body = frame.data[8:FRAME_HEADER].hex(), frame.data[FRAME_HEADER:]
            try:
                self.gossip.receive(sender, body, time.time())
            except MalformedRPC as error:
                log.info("ignored a message from %s: %s", sender[:16], error)
            self._flush()
            await socket.send_json({"done": int.from_bytes(frame.data[:8], "big")})

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None:
            raise RuntimeError("call start() first")
        return self._http

    async def _timer_loop(self) -> None:
        while True:
            deadline = self.gossip.next_deadline()
            delay = IDLE_TIMER_SECONDS if deadline is None else max(0.0, deadline - time.time())
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=delay)
            except asyncio.TimeoutError:
                self.gossip.handle_timer(time.time())
                self._flush()


async def overlay_peers(bridge: AsyncClient) -> list[str]:
    """The node's direct overlay peers that are up: the natural gossip neighbours."""
    topology = await bridge.topology()
    return [peer["public_key"] for peer in topology.get("peers", []) if peer.get("up")]


def chat_company(router: GossipSub, topic: str) -> str:
    """Who hears this chat, or why nobody does: a message travels only through
    nodes that run a chat too, so chats on nodes that are not neighbours stay silent."""
    listening = router.subscribers(topic)
    if listening:
        return f"{len(listening)} gossip peer(s) on {topic!r}: {', '.join(peer[:16] for peer in listening)}"
    return (f"no gossip peer on {topic!r} yet (of {len(router.peers)}): messages go only to chats on this "
            f"node's overlay neighbours; start a chat on one of them, or start another with --peer {router.peer_id}")


async def chat(url: str, topic: str, extra_peers: list[str]) -> None:
    async with AsyncClient(url) as bridge:
        node = GossipNode(bridge, on_delivery=lambda d: print(
            f"[{d.message.origin[:8]} {d.message.hops} hops] {d.message.data.decode(errors='replace')}", flush=True))
        await node.start(await overlay_peers(bridge) + extra_peers)
        node.subscribe(topic)
        await asyncio.sleep(JOIN_SECONDS)
        print(f"{node.peer_id} on topic {topic!r}; type lines to publish, Ctrl-D to quit", flush=True)
        print(chat_company(node.gossip, topic), flush=True)
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            if line.strip():
                node.publish(topic, line.rstrip("\n").encode())
        await node.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="GossipSub chat over an AXL node.")
    add_bridge_arguments(parser)
    parser.add_argument("--topic", default="chat")
    parser.add_argument("--peer", action="append", default=[], help="extra gossip peer id (repeatable)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    run_main(chat(chosen_bridge(args), args.topic, args.peer))


if __name__ == "__main__":
    main()
