"""`python -m axl.bench.wan` (`make wan`): two nodes far apart.

Their peering crosses a relay that paces each direction behind a bounded
queue and delays it (axl.chaos.proxy.PathShape), as a path across an ocean
would. Per profile it measures what an application sees: how soon a message
sent as the peering comes up arrives, the first message after the overlay
has formed, one-way latency, a 16 MiB message after a few small ones, and
1 KiB messages over /ws; and the same for Go AXL (AXL_GO_BIN_DIR) on the
same path when its binary is there, and for our node sending to Go AXL.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from axl import BUILD
from axl.bench.procs import LOOPBACK, BenchNode, GoBenchNode, child_env, go_axl_binary
from axl.bench.report import percentile
from axl.bench.scenarios import MB, MIB, SEND_HEADER, receiving_stream, timed_ws_round, ws_acks
from axl.client.common import Message
from axl.chaos.proxy import LinkProxy, PathShape

RATE = 12.5 * MB
"""Every profile's line: 100 Mbit/s."""
FORMED_WAIT = 5.0
"""How long after the peering comes up "after forming" is."""
SMALL = 1024
LEAD_MESSAGES = 3
"""Small messages sent before the bulk one, as an application would."""
WS_CLIENT_IN_FLIGHT = 4096
"""How many /ws frames the bench's client keeps unacknowledged."""
STEP_DEADLINE = 120.0
GO_RECV_POLL = 0.01
"""Go AXL's /recv answers at once: the bench polls it this often."""


@dataclass(frozen=True)
class Profile:
    name: str
    rtt: float

    @property
    def shape(self) -> PathShape:
        return PathShape.of(self.rtt, RATE)


@dataclass(frozen=True)
class Work:
    """How much each measurement does; --quick shrinks it to a smoke run."""

    profiles: tuple[Profile, ...]
    latency_count: int
    bulk_bytes: int
    ws_count: int
    formed_wait: float

    @classmethod
    def choose(cls, quick: bool) -> "Work":
        if quick:
            return cls((Profile("20 ms RTT", 0.02),), 5, 1 * MIB, 200, 0.5)
        return cls((Profile("50 ms RTT", 0.05), Profile("200 ms RTT", 0.2)), 40, 16 * MIB, 8000,
                   FORMED_WAIT)


@dataclass
class Figures:
    """What one kind of node measured on one profile."""

    node: str
    first_at_peering_s: float = float("nan")
    first_formed_ms: float = float("nan")
    one_way_p50_ms: float = float("nan")
    one_way_p99_ms: float = float("nan")
    bulk_mbps: float = float("nan")
    ws_per_s: float | None = None
    lost: int = 0
    out_of_order: int = 0
    overlay: str = "-"
    """The sender's overlay TCP toward the receiver after the bulk message (/metrics)."""


async def serve_relay(target_port: int, rtt: float) -> None:
    """The relay process: a shaped LinkProxy to `target_port`, its port on stdout."""
    proxy = LinkProxy(target_port, shape=PathShape.of(rtt, RATE))
    await proxy.start()
    print(proxy.port, flush=True)
    await asyncio.Event().wait()


class Relay:
    """The relay in a process of its own, so that the bench's own work never
    delays its timers."""

    def __init__(self, process: asyncio.subprocess.Process, port: int) -> None:
        self.process = process
        self.port = port

    @classmethod
    async def start(cls, target_port: int, rtt: float) -> "Relay":
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "axl.bench.wan", "--relay", str(target_port), str(rtt),
            stdout=asyncio.subprocess.PIPE)
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), STEP_DEADLINE)
        if not line:
            raise RuntimeError("the relay did not start")
        return cls(process, int(line))

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.terminate()
        await self.process.wait()


@dataclass(frozen=True)
class Pairing:
    """Which node sends (near) and which receives (far): Go AXL's binary, or None for ours."""

    near: Path | None
    far: Path | None

    @property
    def label(self) -> str:
        kinds = ["ours" if binary is None else "Go AXL" for binary in (self.near, self.far)]
        return kinds[0] if kinds[0] == kinds[1] else f"{kinds[0]} -> {kinds[1]}"


class PathBench:
    """Two nodes, each ours or Go AXL, across one shaped path."""

    def __init__(self, http: aiohttp.ClientSession, profile: Profile, work: Work,
                 workdir: Path, pairing: Pairing) -> None:
        self.http = http
        self.profile = profile
        self.work = work
        self.workdir = workdir
        self.pairing = pairing
        self.nodes: list[BenchNode] = []

    def _node(self, name: str, binary: Path | None, relay_port: int | None = None) -> BenchNode:
        settings = {"Peers": [f"tls://{LOOPBACK}:{relay_port}"]} if relay_port else {}
        node: BenchNode
        if binary is not None:
            node = GoBenchNode(name, self.workdir, "asyncio", settings=settings, binary=binary)
        else:
            node = BenchNode(name, self.workdir, "uvloop", settings=settings)
        self.nodes.append(node)
        return node

    async def run(self) -> Figures:
        figures = Figures(self.pairing.label)
        relay = None
        try:
            far = self._node("far", self.pairing.far)
            far.spawn()
            await far.wait_bridge(self.http)
            relay = await Relay.start(far.listen_port, self.profile.rtt)
            figures.first_at_peering_s = await self._first_at_peering(far, relay.port, "near0")
            near = await self._peered(far, relay.port, "near")
            await asyncio.sleep(self.work.formed_wait)
            figures.first_formed_ms = await self._one_message(near, far) * 1000
            latencies = [await self._one_message(near, far) * 1000 for _ in range(self.work.latency_count)]
            figures.one_way_p50_ms = percentile(latencies, 0.50)
            figures.one_way_p99_ms = percentile(latencies, 0.99)
            figures.bulk_mbps = await self._bulk(near, far)
            if self.pairing.near is None:
                figures.overlay = await self._overlay(near, far)
            if self.pairing == Pairing(None, None):
                await self._ws(near, far, figures)
        finally:
            for node in self.nodes:
                node.stop()
            if relay is not None:
                await relay.stop()
        return figures

    async def _peered(self, far: BenchNode, relay_port: int, name: str) -> BenchNode:
        near = self._node(name, self.pairing.near, relay_port)
        near.spawn()
        await near.wait_bridge(self.http)
        await near.wait_peers(self.http, {far.peer_id})
        return near

    async def _first_at_peering(self, far: BenchNode, relay_port: int, name: str) -> float:
        """Seconds from the moment the near node lists the peering as up until
        a message sent then (and again while refused) is received."""
        near = await self._peered(far, relay_port, name)
        up_at = time.perf_counter()
        receiving = asyncio.create_task(self._receive(far))
        try:
            while await self._post(near, far.peer_id, b"first") != 200:
                if time.perf_counter() - up_at > STEP_DEADLINE:
                    raise RuntimeError(f"{far.name} unreachable from {name}")
                await asyncio.sleep(0.05)
            await asyncio.wait_for(receiving, STEP_DEADLINE)
        finally:
            receiving.cancel()
        near.stop()
        return time.perf_counter() - up_at

    async def _one_message(self, near: BenchNode, far: BenchNode) -> float:
        """Seconds from a small message's send until its receipt, which may
        come before the sender's 200."""
        start = time.perf_counter()
        receiving = asyncio.create_task(self._receive_at(far))
        try:
            status = await self._post(near, far.peer_id, bytes(SMALL))
            if status != 200:
                raise RuntimeError(f"small message: HTTP {status}")
            body, received_at = await asyncio.wait_for(receiving, STEP_DEADLINE)
        finally:
            receiving.cancel()
        if len(body) != SMALL:
            raise RuntimeError(f"a message of {len(body)} bytes arrived instead of {SMALL}")
        return received_at - start

    async def _receive_at(self, node: BenchNode) -> tuple[bytes, float]:
        body = await self._receive(node, SMALL)
        return body, time.perf_counter()

    async def _bulk(self, near: BenchNode, far: BenchNode) -> float:
        """MB/s of one large message sent after a few small ones, send to receipt."""
        for _ in range(LEAD_MESSAGES):
            await self._one_message(near, far)
        payload = os.urandom(self.work.bulk_bytes)
        start = time.perf_counter()
        receiving = asyncio.create_task(self._receive(far, len(payload)))
        try:
            status = await self._post(near, far.peer_id, payload)
            if status != 200:
                raise RuntimeError(f"bulk message: HTTP {status}")
            body = await asyncio.wait_for(receiving, STEP_DEADLINE)
        finally:
            receiving.cancel()
        if body != payload:
            raise RuntimeError(f"the bulk message arrived as {len(body)} other bytes")
        return len(payload) / (time.perf_counter() - start) / MB

    async def _ws(self, near: BenchNode, far: BenchNode, figures: Figures) -> None:
        """1 KiB frames near -> far over /ws, the client keeping up to
        WS_CLIENT_IN_FLIGHT unacknowledged; each carries its number, so the
        receiver (axl.client's MessageStream, marking each batch of arrivals
        done in one frame) counts what is missing and what came out of order."""
        count = self.work.ws_count
        destination = bytes.fromhex(far.peer_id)
        inbound = await receiving_stream(self.http, far)
        order: list[int] = []

        def took(batch: list[Message]) -> bool:
            order.extend(int.from_bytes(message.body[:8], "big") for message in batch)
            return len(order) < count
        room = asyncio.Semaphore(WS_CLIENT_IN_FLIGHT)
        acked, elapsed = await timed_ws_round(
            self.http, near.url, inbound, took,
            lambda outbound: _ws_write(outbound, destination, count, room),
            lambda outbound: ws_acks(outbound, count, room), STEP_DEADLINE, STEP_DEADLINE)
        figures.ws_per_s = acked / elapsed
        figures.lost = acked - len(set(order))
        figures.out_of_order = sum(1 for before, after in zip(order, order[1:]) if after <= before)

    async def _overlay(self, near: BenchNode, far: BenchNode) -> str:
        """Smoothed RTT, retransmitted segments and timeouts of `near`'s overlay TCP toward `far`."""
        async with self.http.get(near.url + "/metrics") as resp:
            text = await resp.text()
        label = f'{{peer="{far.peer_id}"}} '
        found = {line.split("{")[0]: float(line.rsplit(" ", 1)[1])
                 for line in text.splitlines() if label in line}
        srtt = found.get("axl_overlay_rtt_seconds", float("nan")) * 1000
        return (f"{srtt:.0f} ms, {found.get('axl_overlay_retransmits_total', 0):.0f} resent, "
                f"{found.get('axl_overlay_timeouts_total', 0):.0f} timeouts")

    async def _post(self, node: BenchNode, dest: str, payload: bytes) -> int:
        async with self.http.post(node.url + "/send", data=payload, headers={SEND_HEADER: dest}) as resp:
            await resp.read()
            return resp.status

    async def _receive(self, node: BenchNode, size: int | None = None) -> bytes:
        """The next message `node` receives (a long poll, or Go's /recv
        polled) of `size` bytes: a retried first message that arrives late
        is not taken for the next measurement's."""
        wait = "" if isinstance(node, GoBenchNode) else "?wait=5"
        while True:
            async with self.http.get(f"{node.url}/recv{wait}") as resp:
                body = await resp.read()
                if resp.status == 200 and size in (None, len(body)):
                    return body
            if wait == "":
                await asyncio.sleep(GO_RECV_POLL)


async def _ws_write(ws: aiohttp.ClientWebSocketResponse, destination: bytes, count: int,
                    room: asyncio.Semaphore) -> None:
    filler = bytes(SMALL - 8)
    for number in range(count):
        await room.acquire()
        await ws.send_bytes(destination + number.to_bytes(8, "big") + filler)


def render(profile: Profile, rows: list[Figures]) -> str:
    path_messages = RATE / SMALL
    lines = [f"{profile.name}, {RATE / MB:g} MB/s each way, a queue of "
             f"{profile.shape.queue_bytes / MB:.2f} MB",
             "| node | sent at peering: arrives | first after forming | one-way p50 / p99 "
             "| bulk (share of path) | overlay TCP after bulk | /ws 1 KiB (share) | lost | out of order |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        ws = (f"{row.ws_per_s:,.0f}/s ({row.ws_per_s / path_messages:.2f})"
              if row.ws_per_s is not None else "none (no /ws)")
        lines.append(f"| {row.node} | {row.first_at_peering_s:.2f} s | {row.first_formed_ms:.0f} ms "
                     f"| {row.one_way_p50_ms:.1f} / {row.one_way_p99_ms:.1f} ms "
                     f"| {row.bulk_mbps:.2f} MB/s ({row.bulk_mbps * MB / RATE:.2f}) | {row.overlay} | {ws} "
                     f"| {row.lost} | {row.out_of_order} |")
    return "\n".join(lines)


async def run(work: Work, with_go: bool, only: str | None = None) -> list[str]:
    profiles = [profile for profile in work.profiles if only is None or profile.name.startswith(only + " ")]
    go_binary = go_axl_binary() if with_go else None
    tables = []
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    print(f"ours: {BUILD.describe()}", flush=True)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        for profile in profiles:
            rows = []
            pairings = [Pairing(None, None)]
            if go_binary:
                pairings += [Pairing(go_binary, go_binary), Pairing(None, go_binary)]
            for pairing in pairings:
                with tempfile.TemporaryDirectory(prefix="axl-wan-") as tmp:
                    rows.append(await PathBench(http, profile, work, Path(tmp), pairing).run())
            tables.append(render(profile, rows))
            print(tables[-1] + "\n", flush=True)
    if with_go and go_binary is None:
        print("Go AXL: skipped (no axl-node in AXL_GO_BIN_DIR)")
    return tables


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m axl.bench.wan",
        description="Two nodes whose peering crosses a paced, delayed relay (50 and 200 ms RTT "
                    "at 12.5 MB/s): first messages, latency, bulk and /ws, beside Go AXL.")
    parser.add_argument("--quick", action="store_true", help="one short profile, small sizes")
    parser.add_argument("--no-go", action="store_true", help="leave Go AXL out")
    parser.add_argument("--rtt", choices=("50", "200"), help="only the profile of this RTT (ms)")
    parser.add_argument("--relay", nargs=2, metavar=("PORT", "RTT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.relay:
        asyncio.run(serve_relay(int(args.relay[0]), float(args.relay[1])))
        return 0
    try:
        asyncio.run(run(Work.choose(args.quick), not args.no_go, args.rtt))
    except (RuntimeError, OSError, aiohttp.ClientError, TimeoutError) as exc:
        print(f"axl.bench.wan: failed: {exc or type(exc).__name__}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
