"""TCP proxies placed in every peering, and the manglers they can apply.

A proxy forwards each link byte for byte; a mangler rewrites the stream in
one direction (flips bits, reorders or replays frames) past the meta
handshake, so the node's decoders and end-to-end checks face hostile links.
A proxy given a PathShape instead plays a long path: each direction is paced
behind a bounded queue and delayed (`make wan`).
"""

from __future__ import annotations

import asyncio
import random
import socket
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from axl.link.framing import FrameDecoder, FrameType, encode_frame
from axl.link.meta import meta_bytes_needed
from axl.testnet import LOOPBACK
from axl.wire import DecodeError


HANDSHAKE_BYTES_SPARED = 512
PROXY_READ_CHUNK = 64 * 1024
SHAPED_READ_CHUNK = 16 * 1024
"""A shaped direction paces in chunks of at most this much (1.3 ms at 12.5 MB/s)."""
PACING_SLACK = 0.005
"""How far a shaped direction may fall behind its line's schedule and still catch up."""
SHAPED_SOCKET_BUFFER = 64 * 1024
"""The kernel buffers of a shaped proxy's sockets: small, so that the queue a
sender meets is the PathShape's and not loopback's megabytes."""


Mangler = Callable[[bytes], bytes]
"""Rewrites one chunk flowing through a proxy, in one direction of one connection."""
ManglerFactory = Callable[[], Mangler]
"""Makes a fresh Mangler for each direction of each proxied connection."""


class _ChunkCounter:
    """Counts the chunks past the first HANDSHAKE_BYTES_SPARED bytes of a
    direction: the manglers leave the meta handshake alone so the link comes
    up, and act on every `every`-th chunk after it."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.count = 0
        self.passed = 0
        self.mangled = 0

    def _counted(self, chunk: bytes) -> bool:
        """Whether `chunk` is past the handshake (and so counted)."""
        self.passed += len(chunk)
        if self.passed <= HANDSHAKE_BYTES_SPARED:
            return False
        self.count += 1
        return True


class BitFlipper(_ChunkCounter):
    """Flips one random bit in every `every`-th chunk after the handshake: a relay corrupting ciphertext."""

    def __init__(self, rng: random.Random, every: int = 3) -> None:
        super().__init__(every)
        self.rng = rng

    def __call__(self, chunk: bytes) -> bytes:
        if not self._counted(chunk) or not chunk or self.count % self.every:
            return chunk
        data = bytearray(chunk)
        position = self.rng.randrange(len(data))
        data[position] ^= 1 << self.rng.randrange(8)
        self.mangled += 1
        return bytes(data)


class Reorderer(_ChunkCounter):
    """Holds every `every`-th chunk back and releases it after the next one."""

    def __init__(self, every: int = 3) -> None:
        super().__init__(every)
        self.held = b""

    def __call__(self, chunk: bytes) -> bytes:
        if not self._counted(chunk):
            return chunk
        if self.held:
            out, self.held = chunk + self.held, b""
            self.mangled += 1
            return out
        if self.count % self.every == 0:
            self.held = chunk
            return b""
        return chunk


@dataclass(frozen=True)
class PathShape:
    """A long path between two nodes, the same in both directions: bytes
    leave a queue of at most `queue_bytes` at `rate` bytes/s and arrive
    `one_way` seconds later. A full queue is not read, so the sender feels
    back-pressure as behind a router, and nothing is dropped."""

    one_way: float
    rate: float
    queue_bytes: int

    @classmethod
    def of(cls, rtt: float, rate: float) -> "PathShape":
        """A path of round trip `rtt` whose queue holds one bandwidth-delay product."""
        return cls(rtt / 2, rate, max(SHAPED_READ_CHUNK, int(rate * rtt)))


class _ShapedDirection:
    """One direction of a shaped connection: the router queue, the pacing
    out of it, and the propagation delay after it."""

    def __init__(self, shape: PathShape, writer: asyncio.StreamWriter) -> None:
        self.shape = shape
        self.writer = writer
        self.queue: deque[bytes] = deque()
        self.queued = 0
        self.changed = asyncio.Event()
        self.on_wire: deque[tuple[float, bytes]] = deque()
        self.sent = asyncio.Event()

    async def run(self, reader: asyncio.StreamReader) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                for work in (self._enqueue(reader), self._pace(), self._deliver()):
                    group.create_task(work)
        except* (ConnectionError, OSError):
            pass
        finally:
            self.writer.close()

    async def _enqueue(self, reader: asyncio.StreamReader) -> None:
        while chunk := await reader.read(SHAPED_READ_CHUNK):
            while self.queued >= self.shape.queue_bytes:
                self.changed.clear()
                await self.changed.wait()
            self.queue.append(chunk)
            self.queued += len(chunk)
            self.changed.set()
        self.queue.append(b"")
        self.changed.set()

    async def _pace(self) -> None:
        """Each chunk leaves when the line has carried the ones before it; a
        timer that fires late is caught up (within PACING_SLACK) rather than
        lost, so the line keeps its rate on a busy machine."""
        loop = asyncio.get_running_loop()
        free_at = loop.time()
        while True:
            while not self.queue:
                self.changed.clear()
                await self.changed.wait()
            chunk = self.queue[0]
            free_at = max(free_at, loop.time() - PACING_SLACK) + len(chunk) / self.shape.rate
            await asyncio.sleep(free_at - loop.time())
            self.queue.popleft()
            self.queued -= len(chunk)
            self.changed.set()
            self.on_wire.append((free_at + self.shape.one_way, chunk))
            self.sent.set()
            if not chunk:
                return

    async def _deliver(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self.on_wire:
                self.sent.clear()
                await self.sent.wait()
            due, chunk = self.on_wire.popleft()
            await asyncio.sleep(due - loop.time())
            if not chunk:
                return
            self.writer.write(chunk)


def _small_buffers(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SHAPED_SOCKET_BUFFER)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SHAPED_SOCKET_BUFFER)


@dataclass
class _Pipe:
    writers: list[asyncio.StreamWriter] = field(default_factory=list)


class FrameReplayer:
    """Sends every session (Traffic) frame of a plain tcp:// link twice: a replaying relay."""

    def __init__(self) -> None:
        self.meta = bytearray()
        self.meta_done = False
        self.frames = FrameDecoder()
        self.mangled = 0

    def __call__(self, chunk: bytes) -> bytes:
        out = b""
        if not self.meta_done:
            self.meta += chunk
            needed = meta_bytes_needed(self.meta)
            if len(self.meta) < needed:
                return b""
            out, chunk = bytes(self.meta[:needed]), bytes(self.meta[needed:])
            self.meta_done = True
        for ftype, body in self.frames.feed(chunk):
            frame = encode_frame(ftype, body)
            out += frame
            if ftype == FrameType.TRAFFIC:
                out += frame
                self.mangled += 1
        return out


class LinkProxy:
    """A loopback TCP relay placed in one peering so that it can be cut or mangled.

    Lives on the `ProxyHub` loop; use the hub's thread-safe wrappers from
    other threads.
    """

    def __init__(self, target_port: int, mangler: ManglerFactory | None = None,
                 shape: PathShape | None = None) -> None:
        self.target_port = target_port
        self.mangler = mangler
        self.shape = shape
        self.port = 0
        self.is_cut = False
        self.connections = 0
        self._pipes: list[_Pipe] = []
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, LOOPBACK, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.is_cut:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(LOOPBACK, self.target_port)
        except OSError:
            writer.close()
            return
        self.connections += 1
        pipe = _Pipe([writer, up_writer])
        self._pipes.append(pipe)
        try:
            if self.shape is not None:
                for each in (writer, up_writer):
                    _small_buffers(each)
                await asyncio.gather(_ShapedDirection(self.shape, up_writer).run(reader),
                                     _ShapedDirection(self.shape, writer).run(up_reader))
            else:
                await asyncio.gather(self._copy(reader, up_writer, self.mangler and self.mangler()),
                                     self._copy(up_reader, writer, self.mangler and self.mangler()))
        finally:
            self._close(pipe)

    async def _copy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    mangler: Mangler | None) -> None:
        try:
            while chunk := await reader.read(PROXY_READ_CHUNK):
                if mangler is not None:
                    chunk = mangler(chunk)
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, OSError, DecodeError):
            pass
        finally:
            writer.close()

    def _close(self, pipe: _Pipe) -> None:
        for writer in pipe.writers:
            writer.close()
        if pipe in self._pipes:
            self._pipes.remove(pipe)

    def cut(self) -> None:
        """Drop every connection through this proxy and refuse new ones."""
        self.is_cut = True
        for pipe in list(self._pipes):
            for writer in pipe.writers:
                writer.transport.abort()
            self._close(pipe)

    def restore(self) -> None:
        self.is_cut = False

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


class ProxyHub:
    """Runs LinkProxies on an event loop in a background thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.proxies: list[LinkProxy] = []
        self._thread = threading.Thread(target=self.loop.run_forever, name="proxy-hub", daemon=True)
        self._thread.start()

    def _run(self, coro: Any) -> Any:
        future: Future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout=10)

    def add(self, target_port: int, mangler: ManglerFactory | None = None,
            shape: PathShape | None = None) -> LinkProxy:
        proxy = LinkProxy(target_port, mangler, shape)
        self._run(proxy.start())
        self.proxies.append(proxy)
        return proxy

    def cut(self, proxy: LinkProxy) -> None:
        self.loop.call_soon_threadsafe(proxy.cut)

    def restore(self, proxy: LinkProxy) -> None:
        self.loop.call_soon_threadsafe(proxy.restore)

    def close(self) -> None:
        for proxy in self.proxies:
            self._run(proxy.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        self.loop.close()
