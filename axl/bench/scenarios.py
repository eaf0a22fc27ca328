"""The measurements, for one event loop kind, on one line of five nodes.

    n0 - n1 - n2 - n3 - n4

One hop is n0 -> n1; three relays is n0 -> n4 (through n1, n2, n3). n2 and
n3 only ever relay, so their memory shows what relaying costs.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from axl.bench.procs import LOOPBACK, BenchNode, RssSampler, child_env, cpu_seconds, rss_bytes
from axl.bench.report import percentile
from axl.client.common import BridgeError, Message, bridge_at
from axl.client.stream import MessageStream

MB = 1_000_000
MIB = 1 << 20
_SMALL_HEADER = struct.Struct("!I")
SEND_HEADER = "X-Destination-Peer-Id"
RECV_WAIT = 1.0
DRAIN_SECONDS = 10.0
# How often the bench's other client asks a receiver something while bulk
# lands, for the bulk phase done this many times (a p99 of 100 answers or more).
PROBE_INTERVAL = 0.01
# Messages a /ws receiving stream may hold undone (the bridge's most).
WS_RECEIVE_WINDOW = 1024
LANDING_ROUNDS = 3
WARMUP_TIMEOUT = 60.0
PHASE_DEADLINE = 300.0
"""No phase of the bench takes longer on a working node: past it, a message is
lost or a node is stuck, and the bench fails instead of hanging."""
QUIET_SECONDS = 0.25
QUIET_CPU = 0.01
QUIET_MAX = 5.0
BASELINE_TRIES = 3
"""Baselines are ceilings: the best of a few runs, so that a moment of load
from elsewhere on the machine does not flatter the node's ratios."""


# The receiver's inbox in the phases that compare them; the line itself runs
# with the default, a durable inbox with inbox_sync "normal".
INBOX_MODES = {"off": {"inbox_path": ""}, "full": {"inbox_sync": "full"}}


class BenchFailed(Exception):
    """A phase could not produce its figures; the text says which and why."""


@dataclass(frozen=True)
class Sizes:
    """How much work each measurement does; --quick shrinks all of it."""

    bulk_message: int
    bulk_count: int
    small_count: int
    latency_count: int
    # /ws messages per round, and rounds (the median round's rate is the figure:
    # a round of 3,000 lasted a quarter of a second, too short to be steady;
    # single rounds beside the no-op handler's gave ratios from 3.8 to 6.0)
    ws_count: int = 10_000
    ws_rounds: int = 7
    # rounds of bulk to the durable receiver and to one in memory, in turn
    bulk_turns: int = 3
    # /ws rounds to each of those two, in turn, and messages per round: a
    # round of 10,000 took a third of a second, and their ratio ran from 0.84 to 0.99
    ws_turns: int = 5
    ws_turn_count: int = 30_000
    small_size: int = 1024
    small_senders: int = 8
    small_receivers: int = 4

    @classmethod
    def choose(cls, quick: bool) -> "Sizes":
        if quick:
            return cls(bulk_message=1 * MIB, bulk_count=3, small_count=200, latency_count=50,
                       ws_count=200, ws_rounds=1, bulk_turns=1, ws_turns=1, ws_turn_count=200)
        return cls(bulk_message=16 * MIB, bulk_count=6, small_count=3000, latency_count=300)


class LoopBench:
    """Runs every measurement with the children on one event loop kind."""

    def __init__(self, loop: str, sizes: Sizes, workdir: Path) -> None:
        self.loop = loop
        self.sizes = sizes
        self.workdir = workdir
        self.nodes: list[BenchNode] = []
        self.figures: dict[str, float] = {}
        self.http: aiohttp.ClientSession | None = None

    async def run(self) -> dict[str, float]:
        connector = aiohttp.TCPConnector(limit=64, force_close=False)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
            self.http = http
            try:
                await self._phase("start-up", self._start_line())
                await self._phase("warm-up", self._warm_up())
                self._idle_memory()
                await self._phase("idle latency", self._idle_latency())
                await self._phase("bulk", self._bulk())
                await self._phase("durable and in memory in turn", self._in_turn())
                await self._phase("small messages", self._small_messages())
                await self._phase("/ws messages", self._ws_messages(beside_noop=True))
                for mode, settings in INBOX_MODES.items():
                    await self._phase(f"inbox {mode}", self._inbox_mode(mode, settings))
                await self._phase("unknown peer", self._unknown_peer())
            finally:
                for node in self.nodes:
                    node.stop()
        for _ in range(BASELINE_TRIES):
            await self._phase("raw TLS baseline", self._raw_tls())
            await self._phase("no-op HTTP baseline", self._noop_rates())
        self._ratios()
        return self.figures

    async def _phase(self, name: str, work) -> None:
        """Run one phase under PHASE_DEADLINE; any failure names the phase."""
        try:
            await asyncio.wait_for(work, PHASE_DEADLINE)
        except TimeoutError:
            raise BenchFailed(f"{self.loop}: {name}: no result after {PHASE_DEADLINE:.0f} s "
                              f"(a message lost or a node stuck)") from None
        except (RuntimeError, OSError, aiohttp.ClientError) as exc:
            raise BenchFailed(f"{self.loop}: {name}: {exc}") from None

    # -- start-up --------------------------------------------------------

    async def _start_line(self) -> None:
        http = self.http
        for index in range(5):
            peers = self.nodes[-1:]
            node = BenchNode(f"n{index}", self.workdir, self.loop, peers=peers)
            self.nodes.append(node)
            node.spawn()
            bridge = await node.wait_bridge(http)
            if index == 0:
                self.figures["start_bridge_s"] = bridge
            if index == 1:
                self.figures["start_peered_s"] = await node.wait_peers(http, {peers[0].peer_id})
        for left, right in zip(self.nodes, self.nodes[1:]):
            await right.wait_peers(http, {left.peer_id})

    async def _warm_up(self) -> None:
        """Until a small message crosses the whole line, routes are still forming."""
        first, last = self.nodes[0], self.nodes[-1]
        deadline = time.monotonic() + WARMUP_TIMEOUT
        for dest in (self.nodes[1], last):
            while True:
                status = await self._post(first, dest.peer_id, b"warm-up")
                if status == 200:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{dest.name} unreachable after warm-up: HTTP {status}")
                await asyncio.sleep(0.2)
            await self._recv(dest, RECV_WAIT)

    def _idle_memory(self) -> None:
        self.figures["idle_rss_mb"] = rss_bytes(self.nodes[-1].pid) / MB
        self._relay_idle = {node.name: rss_bytes(node.pid) for node in self.nodes[2:4]}

    # -- latency when idle -------------------------------------------------

    async def _idle_latency(self) -> None:
        """One 1 KiB message at a time n0 -> n1, the next sent once the last
        was received: the latency a lone request sees, send start to receipt
        by a waiting long poll."""
        source, dest = self.nodes[0], self.nodes[1]
        filler = bytes(self.sizes.small_size - _SMALL_HEADER.size)
        arrivals: asyncio.Queue[tuple[int, float]] = asyncio.Queue()

        async def receiver() -> None:
            while True:
                body = await self._recv(dest, RECV_WAIT)
                if body is not None:
                    arrivals.put_nowait((_SMALL_HEADER.unpack_from(body)[0], time.perf_counter()))

        receiving = asyncio.create_task(receiver())
        latencies = []
        try:
            for ident in range(self.sizes.latency_count):
                start = time.perf_counter()
                status = await self._post(source, dest.peer_id, _SMALL_HEADER.pack(ident) + filler)
                if status != 200:
                    raise RuntimeError(f"message {ident}: HTTP {status}")
                got, at = await asyncio.wait_for(arrivals.get(), DRAIN_SECONDS)
                if got != ident:
                    raise RuntimeError(f"message {got} arrived while waiting for {ident}")
                latencies.append((at - start) * 1000)
        finally:
            receiving.cancel()
        self.figures["idle_latency_p50_ms"] = percentile(latencies, 0.50)
        self.figures["idle_latency_p99_ms"] = percentile(latencies, 0.99)

    # -- bulk ------------------------------------------------------------

    async def _bulk(self) -> None:
        relays = {node.name: node.pid for node in self.nodes[2:4]}
        async with RssSampler(relays) as sampler:
            self.figures["bulk1_mbps"] = await self._bulk_between(self.nodes[0], self.nodes[1])
            self.figures["bulk3_mbps"] = await self._bulk_between(self.nodes[0], self.nodes[-1])
        growth = {name: sampler.peaks[name] - self._relay_idle[name] for name in relays}
        worst = max(growth, key=growth.get)
        self.figures["relay_peak_rss_mb"] = sampler.peaks[worst] / MB
        self.figures["relay_growth_mib"] = growth[worst] / MIB
        await self._bulk_landing()

    async def _in_turn(self) -> None:
        """The durable inbox's price: n1 (durable) and a receiver with its
        inbox in memory, both peered with n0, in alternating rounds of bulk
        and then of /ws, so that both meet the machine as it is at the time
        (phases a minute apart differed by a third); each one's median round."""
        memory = BenchNode("n1-memory", self.workdir, self.loop, peers=[self.nodes[0]],
                           settings=INBOX_MODES["off"])
        receivers = {"durable": self.nodes[1], "memory": memory}
        bulk: dict[str, list[float]] = {kind: [] for kind in receivers}
        ws: dict[str, list[float]] = {kind: [] for kind in receivers}
        memory.spawn()
        try:
            await memory.wait_bridge(self.http)
            await self._warm_receiver(memory)
            for turn in range(self.sizes.bulk_turns):
                for kind in sorted(receivers, reverse=turn % 2 == 1):
                    bulk[kind].append(await self._bulk_between(self.nodes[0], receivers[kind]))
            for turn in range(self.sizes.ws_turns):
                for kind in sorted(receivers, reverse=turn % 2 == 1):
                    acked, elapsed, lost = await self.ws_round(self.nodes[0], receivers[kind], self.sizes.ws_turn_count)
                    if lost:
                        raise RuntimeError(f"/ws to the {kind} receiver: {lost} acknowledged and never received")
                    ws[kind].append(acked / elapsed)
        finally:
            memory.stop()
        for kind in receivers:
            self.figures[f"bulk1_mbps_in_turn_{kind}"] = percentile(bulk[kind], 0.5)
            self.figures[f"ws_msgs_per_s_in_turn_{kind}"] = percentile(ws[kind], 0.5)

    async def _warm_receiver(self, receiver: BenchNode) -> None:
        """Until `receiver` is peered with n0 and a first message from n0 went through."""
        await receiver.wait_peers(self.http, {self.nodes[0].peer_id})
        while await self._post(self.nodes[0], receiver.peer_id, b"warm-up") != 200:
            await asyncio.sleep(0.2)
        await self._recv(receiver, RECV_WAIT)

    async def _bulk_landing(self, suffix: str = "") -> None:
        """Bulk n0 -> n1 again, LANDING_ROUNDS times, while another client (a
        process of its own) GETs n1's /health every PROBE_INTERVAL: how long
        n1's event loop keeps others waiting while big messages land in its
        inbox (answer times, p99 and the longest)."""
        dest = self.nodes[1]
        prober, _ = await self._child("probe", dest.url + "/health", str(PROBE_INTERVAL))
        latencies: list[float] = []

        async def collect() -> None:
            while line := await prober.stdout.readline():
                latencies.append(json.loads(line))

        collecting = asyncio.create_task(collect())
        try:
            for _ in range(LANDING_ROUNDS):
                await self._bulk_between(self.nodes[0], dest)
        finally:
            prober.terminate()
            await prober.wait()
            await collecting
        self.figures["bulk1_probe_p99_ms" + suffix] = percentile(latencies, 0.99)
        self.figures["bulk1_probe_max_ms" + suffix] = max(latencies, default=math.nan)

    async def _bulk_between(self, source: BenchNode, dest: BenchNode) -> float:
        """MB/s of `bulk_count` messages sent one after another, as received."""
        sizes = self.sizes
        payload = os.urandom(sizes.bulk_message)
        start = time.perf_counter()
        receiver = asyncio.create_task(self._receive_bulk(dest, sizes.bulk_count))
        for _ in range(sizes.bulk_count):
            status = await self._post(source, dest.peer_id, payload)
            if status != 200:
                receiver.cancel()
                raise RuntimeError(f"bulk send {source.name}->{dest.name}: HTTP {status}")
        await receiver
        return sizes.bulk_count * sizes.bulk_message / (time.perf_counter() - start) / MB

    async def _receive_bulk(self, dest: BenchNode, count: int) -> None:
        for _ in range(count):
            while True:
                body = await self._recv(dest, 30.0)
                if body is not None:
                    if len(body) != self.sizes.bulk_message:
                        raise RuntimeError(f"bulk message of {len(body)} bytes arrived")
                    break

    # -- small messages ----------------------------------------------------

    async def _inbox_mode(self, mode: str, settings: dict) -> None:
        """The 1 KiB /send and /ws phases again, n1 started anew with another inbox."""
        receiver = self.nodes[1]
        receiver.stop()
        receiver.settings = settings
        receiver.spawn()
        await receiver.wait_bridge(self.http)
        await self._warm_receiver(receiver)
        self.figures[f"bulk1_mbps_inbox_{mode}"] = await self._bulk_between(self.nodes[0], receiver)
        await self._bulk_landing(f"_inbox_{mode}")
        await self._small_messages(f"_inbox_{mode}")
        await self._ws_messages(f"_inbox_{mode}")

    async def _small_messages(self, suffix: str = "") -> None:
        source, dest = self.nodes[0], self.nodes[1]
        sizes = self.sizes
        sent_at: dict[int, float] = {}
        acked: set[int] = set()
        failed = 0
        received_at: dict[int, float] = {}
        next_id = iter(range(sizes.small_count))
        filler = bytes(sizes.small_size - _SMALL_HEADER.size)

        async def sender() -> None:
            nonlocal failed
            for ident in next_id:
                sent_at[ident] = time.perf_counter()
                status = await self._post(source, dest.peer_id, _SMALL_HEADER.pack(ident) + filler)
                if status == 200:
                    acked.add(ident)
                else:
                    failed += 1

        senders_done = asyncio.Event()

        async def receiver() -> None:
            drain_deadline = None
            while True:
                if senders_done.is_set():
                    drain_deadline = drain_deadline or time.monotonic() + DRAIN_SECONDS
                    if acked <= received_at.keys() or time.monotonic() > drain_deadline:
                        return
                body = await self._recv(dest, RECV_WAIT)
                if body is not None:
                    received_at[_SMALL_HEADER.unpack_from(body)[0]] = time.perf_counter()

        receivers = [asyncio.create_task(receiver()) for _ in range(sizes.small_receivers)]
        cpu_before = (cpu_seconds(source.pid), cpu_seconds(dest.pid), time.process_time())
        start = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(sizes.small_senders)))
        elapsed = time.perf_counter() - start
        cpu_used = [after - before for before, after in zip(
            cpu_before, (cpu_seconds(source.pid), cpu_seconds(dest.pid), time.process_time()))]
        senders_done.set()
        await asyncio.gather(*receivers)
        latencies = [(received_at[i] - sent_at[i]) * 1000 for i in received_at]
        figures = {
            "small_msgs_per_s": len(acked) / elapsed,
            "small_lost": float(len(acked - received_at.keys())),
            "small_failed": float(failed),
            "latency_p50_ms": percentile(latencies, 0.50),
            "latency_p99_ms": percentile(latencies, 0.99),
            "small_cpu_sender_ms": cpu_used[0] / sizes.small_count * 1000,
            "small_cpu_receiver_ms": cpu_used[1] / sizes.small_count * 1000,
            "small_cpu_client_ms": cpu_used[2] / sizes.small_count * 1000,
        }
        self.figures.update({key + suffix: value for key, value in figures.items()})

    # -- the streaming bridge ------------------------------------------------

    async def _ws_messages(self, suffix: str = "", beside_noop: bool = False) -> None:
        """1 KiB messages n0 -> n1 over /ws, in rounds: one sending socket
        (the median round's rate of 200 acks) and one receiving stream on n1
        that marks each batch of deliveries done (`ws_round`); each node's CPU per message until the
        deliveries are done and the nodes are quiet again (the receiver's share includes handing
        them out), and the bench's own (both clients: it shares the two cores with the nodes, so it
        bounds the rate too); and n1's inbox commits meanwhile (their mean time, messages per commit).

        With `beside_noop`, a round of the no-op handler's requests follows each /ws round once the
        nodes are quiet, and the ratio's no-op rate is the median of those rounds: this machine's
        speed drifts by half within a minute, so a baseline measured minutes away says more of the
        drift than of the node (docs/performance.md, "Reading your figures")."""
        source, dest = self.nodes[0], self.nodes[1]
        commits_before = await self._inbox_commits(dest)
        noop = await self._child("noop-http") if beside_noop else None
        rates: list[float] = []
        noop_rates: list[float] = []
        cpu_used = [0.0, 0.0, 0.0]
        acked = lost = sent = 0
        try:
            for _ in range(self.sizes.ws_rounds):
                cpu_before = (cpu_seconds(source.pid), cpu_seconds(dest.pid), time.process_time())
                round_acked, elapsed, round_lost = await self.ws_round(source, dest, self.sizes.ws_count)
                await self._until_quiet(self.nodes)
                cpu_used = [used + after - before for used, before, after in zip(
                    cpu_used, cpu_before, (cpu_seconds(source.pid), cpu_seconds(dest.pid), time.process_time()))]
                rates.append(round_acked / elapsed)
                acked, lost, sent = acked + round_acked, lost + round_lost, sent + self.sizes.ws_count
                if noop is not None:
                    noop_rates.append(await self._noop_round(*noop))
        finally:
            if noop is not None:
                noop[0].terminate()
                await noop[0].wait()
        self.figures["ws_msgs_per_s" + suffix] = percentile(rates, 0.5)
        if noop_rates:
            self.figures["ws_noop_req_per_s" + suffix] = percentile(noop_rates, 0.5)
        self.figures["ws_cpu_sender_ms" + suffix] = cpu_used[0] / sent * 1000
        self.figures["ws_cpu_receiver_ms" + suffix] = cpu_used[1] / sent * 1000
        self.figures["ws_cpu_client_ms" + suffix] = cpu_used[2] / sent * 1000
        self.figures["ws_lost" + suffix] = float(lost)
        self.figures["ws_refused_share" + suffix] = (sent - acked) / sent
        count, seconds = (after - before for after, before in zip(await self._inbox_commits(dest), commits_before))
        self.figures["ws_commit_ms" + suffix] = seconds / count * 1000 if count else math.nan
        self.figures["ws_per_commit" + suffix] = acked / count if count else math.nan

    @staticmethod
    async def _until_quiet(nodes: list[BenchNode]) -> None:
        """Wait until no node uses more than QUIET_CPU of CPU over QUIET_SECONDS
        (a receiver still commits deletions and checkpoints after a round), at
        most QUIET_MAX seconds."""
        deadline = time.monotonic() + QUIET_MAX
        used = [cpu_seconds(node.pid) for node in nodes]
        while time.monotonic() < deadline:
            await asyncio.sleep(QUIET_SECONDS)
            before, used = used, [cpu_seconds(node.pid) for node in nodes]
            if all(after - earlier <= QUIET_CPU for earlier, after in zip(before, used)):
                return

    async def _noop_round(self, server: asyncio.subprocess.Process, port: object) -> float:
        """One round of the no-op handler's requests (`_noop_requests`); its rate."""
        async with aiohttp.ClientSession() as http:
            rate, _ = await self._timed(server.pid, self._noop_requests(http, f"http://{LOOPBACK}:{port}/"))
        return rate

    async def ws_round(self, source: BenchNode, dest: BenchNode, count: int) -> tuple[int, float, int]:
        """One round of `count` messages: how many were acknowledged, in how
        many seconds, and how many of those never reached the receiving
        stream. The receiver is axl.client's MessageStream, as a user's
        program would take them: each batch of arrivals marked done in one
        frame when it asks for the next."""
        frame = bytes.fromhex(dest.peer_id) + bytes(self.sizes.small_size)
        inbound = await receiving_stream(self.http, dest)
        delivered: set[int] = set()

        def took(batch: list[Message]) -> bool:
            delivered.update(message.id for message in batch)
            return len(delivered) < count
        acked, elapsed = await timed_ws_round(
            self.http, source.url, inbound, took,
            lambda outbound: self._ws_write(outbound, frame, count), lambda outbound: ws_acks(outbound, count),
            PHASE_DEADLINE, DRAIN_SECONDS)
        return acked, elapsed, acked - len(delivered)

    async def _inbox_commits(self, node: BenchNode) -> tuple[float, float]:
        """How many inbox commits `node` has made, and their total time (s), from /metrics."""
        async with self.http.get(node.url + "/metrics") as resp:
            text = await resp.text()
        found = dict(line.rsplit(" ", 1) for line in text.splitlines()
                     if line.startswith(("axl_inbox_commit_seconds_count ", "axl_inbox_commit_seconds_sum ")))
        return (float(found.get("axl_inbox_commit_seconds_count", 0)),
                float(found.get("axl_inbox_commit_seconds_sum", 0)))

    @staticmethod
    async def _ws_write(ws: aiohttp.ClientWebSocketResponse, frame: bytes, count: int) -> None:
        for _ in range(count):
            await ws.send_bytes(frame)

    # -- unknown destination -----------------------------------------------

    async def _unknown_peer(self) -> None:
        stranger = os.urandom(32).hex()
        start = time.perf_counter()
        status = await self._post(self.nodes[0], stranger, b"anyone there?")
        self.figures["unknown_peer_s"] = time.perf_counter() - start
        self.figures["unknown_peer_status"] = float(status)

    # -- baselines -----------------------------------------------------------

    async def _raw_tls(self) -> None:
        total = self.sizes.bulk_message * self.sizes.bulk_count
        sink, port = await self._child("tls-sink")
        try:
            source, result = await self._child("tls-source", str(port), str(total))
            await source.wait()
        finally:
            await sink.wait()
        rate = result["bytes"] / result["seconds"] / MB
        self.figures["raw_tls_mbps"] = max(rate, self.figures.get("raw_tls_mbps", 0.0))

    async def _noop_rates(self) -> None:
        """The no-op server's rate for single requests, then for the small
        messages phase's /send + /recv pairs: what the bench's client and
        aiohttp reach when the node's own work costs nothing."""
        server, port = await self._child("noop-http")
        url = f"http://{LOOPBACK}:{port}"
        try:
            async with aiohttp.ClientSession() as http:
                rate, cpu = await self._timed(server.pid, self._noop_requests(http, url + "/"))
                if rate > self.figures.get("noop_req_per_s", 0.0):
                    self.figures.update(noop_req_per_s=rate, noop_cpu_server_ms=cpu[0],
                                        noop_cpu_client_ms=cpu[1])
                rate, _ = await self._timed(server.pid, self._noop_pairs(http, url))
                self.figures["noop_pairs_per_s"] = max(rate, self.figures.get("noop_pairs_per_s", 0.0))
        finally:
            server.terminate()
            await server.wait()

    async def _timed(self, pid: int, work) -> tuple[float, tuple[float, float]]:
        """`small_count` operations per second, and the CPU ms per operation
        of process `pid` and of this one."""
        count = self.sizes.small_count
        cpu_before = (cpu_seconds(pid), time.process_time())
        start = time.perf_counter()
        await work
        rate = count / (time.perf_counter() - start)
        server, client = (after - before for before, after in zip(
            cpu_before, (cpu_seconds(pid), time.process_time())))
        return rate, (server / count * 1000, client / count * 1000)

    async def _noop_requests(self, http: aiohttp.ClientSession, url: str) -> None:
        body = bytes(self.sizes.small_size)
        remaining = iter(range(self.sizes.small_count))

        async def sender() -> None:
            for _ in remaining:
                async with http.post(url, data=body) as resp:
                    await resp.read()

        await asyncio.gather(*(sender() for _ in range(self.sizes.small_senders)))

    async def _noop_pairs(self, http: aiohttp.ClientSession, url: str) -> None:
        """The small messages phase's requests, made the same way, to a server
        that answers /send and /recv at once."""
        body = bytes(self.sizes.small_size)
        sends = iter(range(self.sizes.small_count))
        receipts = iter(range(self.sizes.small_count))
        headers = {SEND_HEADER: "00" * 32}

        async def sender() -> None:
            for _ in sends:
                async with http.post(url + "/send", data=body, headers=headers) as resp:
                    await resp.read()

        async def receiver() -> None:
            for _ in receipts:
                async with http.get(f"{url}/recv?wait={RECV_WAIT:g}") as resp:
                    await resp.read()

        await asyncio.gather(*(sender() for _ in range(self.sizes.small_senders)),
                             *(receiver() for _ in range(self.sizes.small_receivers)))

    async def _child(self, *args: str) -> tuple[asyncio.subprocess.Process, object]:
        """Start a baseline child and read the JSON line it announces."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "axl.bench.baselines", *args,
            stdout=subprocess.PIPE, env=child_env(self.loop))
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if not line:
            raise RuntimeError(f"baseline {args[0]} announced nothing")
        return proc, json.loads(line)

    def _ratios(self) -> None:
        fig = self.figures
        fig["bulk1_ratio_tls"] = fig["bulk1_mbps"] / fig["raw_tls_mbps"]
        fig["bulk3_ratio_1hop"] = fig["bulk3_mbps"] / fig["bulk1_mbps"]
        fig["bulk3_ratio_tls"] = fig["bulk3_mbps"] / fig["raw_tls_mbps"]
        fig["small_ratio_noop"] = fig["small_msgs_per_s"] / fig["noop_req_per_s"]
        fig["noop_pairs_ratio_noop"] = fig["noop_pairs_per_s"] / fig["noop_req_per_s"]
        fig["ws_ratio_noop"] = fig["ws_msgs_per_s"] / fig["ws_noop_req_per_s"]
        fig["ws_ratio_noop_end"] = fig["ws_msgs_per_s"] / fig["noop_req_per_s"]
        for mode in INBOX_MODES:
            fig[f"small_ratio_noop_inbox_{mode}"] = fig[f"small_msgs_per_s_inbox_{mode}"] / fig["noop_req_per_s"]
        # the durable inbox's price: its rates over those of the inbox in memory
        fig["bulk1_ratio_inbox_off"] = fig["bulk1_mbps_in_turn_durable"] / fig["bulk1_mbps_in_turn_memory"]
        fig["ws_ratio_inbox_off"] = fig["ws_msgs_per_s_in_turn_durable"] / fig["ws_msgs_per_s_in_turn_memory"]

    # -- HTTP helpers --------------------------------------------------------

    async def _post(self, node: BenchNode, dest: str, payload: bytes) -> int:
        async with self.http.post(node.url + "/send", data=payload,
                                  headers={SEND_HEADER: dest}) as resp:
            await resp.read()
            return resp.status

    async def _recv(self, node: BenchNode, wait: float) -> bytes | None:
        async with self.http.get(f"{node.url}/recv?wait={wait:g}") as resp:
            body = await resp.read()
            return body if resp.status == 200 else None


async def receiving_stream(http: aiohttp.ClientSession, node: BenchNode) -> MessageStream:
    """A /ws stream receiving `node`'s messages (axl.client's, as a user's
    program takes them), once the node has seen the last one's close (until
    then it answers 409)."""
    deadline = time.monotonic() + DRAIN_SECONDS
    while True:
        stream = MessageStream(http, bridge_at(node.url, ""), DRAIN_SECONDS, receive=True, window=WS_RECEIVE_WINDOW)
        try:
            await stream.open()
            return stream
        except BridgeError as exc:
            if exc.status != 409 or time.monotonic() > deadline:
                raise RuntimeError(f"{node.name}: /ws?recv=1: {exc}") from None
        await asyncio.sleep(0.05)


async def ws_acks(ws: aiohttp.ClientWebSocketResponse, count: int,
                  room: asyncio.Semaphore | None = None) -> int:
    """How many of the next `count` /ws acks said 200; each releases `room`,
    when given, for the writer that keeps frames in flight within it."""
    ok = 0
    for _ in range(count):
        message = await ws.receive()
        if message.type != aiohttp.WSMsgType.TEXT:
            raise RuntimeError(f"/ws sender got {message.type.name} instead of an ack")
        ok += json.loads(message.data)["status"] == 200
        if room is not None:
            room.release()
    return ok


async def take_batches(stream: MessageStream, handled: list[int], took: Callable[[list[Message]], bool]) -> None:
    """Take a /ws stream's arrivals a batch at a time, each given to `took`
    until it says enough (False) or the stream ends. `handled` holds the ids
    of the last batch, not yet marked done: the next `arrivals` marks them,
    and it is emptied first, so that a round cancelled meanwhile does not
    mark them done a second time when it closes the stream."""
    while True:
        marked = handled[:]
        handled.clear()
        batch = await stream.arrivals(marked)
        if not batch:
            return
        handled.extend(message.id for message in batch if message.id is not None)
        if not took(batch):
            return


async def timed_ws_round(http: aiohttp.ClientSession, sender_url: str, inbound: MessageStream,
                         took: Callable[[list[Message]], bool],
                         write: Callable[[aiohttp.ClientWebSocketResponse], Awaitable[None]],
                         acks: Callable[[aiohttp.ClientWebSocketResponse], Awaitable[int]],
                         ack_seconds: float, drain_seconds: float) -> tuple[int, float]:
    """One /ws round: `write` sends through a /ws of the node at `sender_url`
    while `inbound`'s arrivals go to `took` (take_batches; the stream is
    closed at the end, its last batch marked done); how many `acks` said 200
    (within `ack_seconds`), and the seconds from the first write to the last
    ack. The receiver is given `drain_seconds` more to take the rest."""
    handled: list[int] = []
    receiving = asyncio.create_task(take_batches(inbound, handled, took))
    writing: asyncio.Task | None = None
    try:
        async with http.ws_connect(f"{sender_url}/ws") as outbound:
            start = time.perf_counter()
            writing = asyncio.create_task(write(outbound))
            acked = await asyncio.wait_for(acks(outbound), ack_seconds)
            elapsed = time.perf_counter() - start
            await writing
            await asyncio.wait({receiving}, timeout=drain_seconds)
    finally:
        receiving.cancel()
        if writing is not None:
            writing.cancel()
        await inbound.close(finished=False, handled=handled)
    return acked, elapsed


async def run_loop(loop: str, sizes: Sizes) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix=f"axl-bench-{loop}-") as tmp:
        return await LoopBench(loop, sizes, Path(tmp)).run()
