"""Chaos, soak and API-fuzz drivers for a local network of real nodes.

The node promises that a message acknowledged by `/send` (HTTP 200) is in the
destination's queue, exactly once and in order, whatever happens to the
relays and links on the way. These drivers check that promise the only
convincing way: real processes on loopback, relays killed with SIGKILL and
restarted, links cut by TCP proxies placed in every peering, while senders
stream numbered messages; then every acknowledged number is looked for.

    python -m axl.chaos chaos --duration 300      # long chaos run (make chaos)
    python -m axl.chaos soak --duration 600       # RSS and fds over time (make soak)
    python -m axl.chaos fuzz-api --max-time 300   # schemathesis on a live bridge (make fuzz-api)

Only loopback is used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from axl.link.framing import FrameDecoder, FrameType, encode_frame
from axl.link.meta import meta_bytes_needed
from axl.testnet import LOOPBACK, Testnet, TestnetNode
from axl.wire import DecodeError

log = logging.getLogger("axl.chaos")

# Relays 0 and 1; endpoints 2..5 each peer with both relays, so every path
# crosses a relay and any single relay or link can fail without a partition.
CHAOS_EDGES = [(0, 1)] + [(relay, endpoint) for endpoint in range(2, 6) for relay in (0, 1)]
CHAOS_RELAYS = (0, 1)
CHAOS_FLOWS = [(2, 4), (3, 5), (4, 2), (5, 3)]
# Short timeouts so that a failed attempt is reported quickly and the next
# numbered message goes out; the long ones suit operators, not a test.
CHAOS_NODE_CONFIG = {"send_timeout_secs": 10, "lookup_timeout_secs": 5}
HANDSHAKE_BYTES_SPARED = 512
PROXY_READ_CHUNK = 64 * 1024


# -- TCP proxies in the peerings -------------------------------------------

Mangler = Callable[[bytes], bytes]
"""Rewrites one chunk flowing through a proxy, in one direction of one connection."""
ManglerFactory = Callable[[], Mangler]
"""Makes a fresh Mangler for each direction of each proxied connection."""


class BitFlipper:
    """Flips one random bit in every `every`-th chunk after the handshake: a relay corrupting ciphertext."""

    def __init__(self, rng: random.Random, every: int = 3) -> None:
        self.rng = rng
        self.every = every
        self.count = 0
        self.passed = 0
        self.mangled = 0

    def __call__(self, chunk: bytes) -> bytes:
        self.passed += len(chunk)
        if self.passed <= HANDSHAKE_BYTES_SPARED:
            return chunk
        self.count += 1
        if not chunk or self.count % self.every:
            return chunk
        data = bytearray(chunk)
        position = self.rng.randrange(len(data))
        data[position] ^= 1 << self.rng.randrange(8)
        self.mangled += 1
        return bytes(data)


class Reorderer:
    """Holds every `every`-th chunk back and releases it after the next one."""

    def __init__(self, every: int = 3) -> None:
        self.every = every
        self.count = 0
        self.passed = 0
        self.held = b""
        self.mangled = 0

    def __call__(self, chunk: bytes) -> bytes:
        self.passed += len(chunk)
        if self.passed <= HANDSHAKE_BYTES_SPARED:
            return chunk
        self.count += 1
        if self.held:
            out, self.held = chunk + self.held, b""
            self.mangled += 1
            return out
        if self.count % self.every == 0:
            self.held = chunk
            return b""
        return chunk


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

    def __init__(self, target_port: int, mangler: ManglerFactory | None = None) -> None:
        self.target_port = target_port
        self.mangler = mangler
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

    def add(self, target_port: int, mangler: ManglerFactory | None = None) -> LinkProxy:
        proxy = LinkProxy(target_port, mangler)
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


# -- HTTP against the bridges ------------------------------------------------

def http(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None,
         timeout: float = 30.0) -> tuple[int, dict[str, str], bytes]:
    """One request; (status, headers, body), with status 0 when nothing answered."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()
    except (OSError, urllib.error.URLError):
        return 0, {}, b""


# -- the chaos run -----------------------------------------------------------

@dataclass
class Flow:
    """Numbered messages from one node to another, and what became of each."""

    name: str
    source: TestnetNode
    dest: TestnetNode
    statuses: dict[int, int] = field(default_factory=dict)
    ack_times: list[float] = field(default_factory=list)
    received: list[int] = field(default_factory=list)
    forged: int = 0

    @property
    def acknowledged(self) -> set[int]:
        # A copy first: sender threads keep adding statuses while a report reads them.
        return {seq for seq, status in list(self.statuses.items()) if status == 200}


@dataclass
class ChaosReport:
    sent: int
    acknowledged: int
    received: int
    lost: int
    duplicated: int
    out_of_order: int
    forged_sender: int
    delivered_unacknowledged: int
    longest_outage_secs: float
    status_counts: dict[str, int]
    disruptions: list[str]

    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.out_of_order == 0 and self.forged_sender == 0

    def text(self) -> str:
        lines = [
            f"sent {self.sent}, acknowledged {self.acknowledged}, received {self.received}, "
            f"lost {self.lost}, duplicated {self.duplicated}, out of order {self.out_of_order}, "
            f"forged sender {self.forged_sender}",
            f"delivered but not acknowledged: {self.delivered_unacknowledged}",
            f"longest outage (no acknowledgement on a flow): {self.longest_outage_secs:.1f}s",
            f"/send statuses: {json.dumps(self.status_counts, sort_keys=True)}",
            f"disruptions ({len(self.disruptions)}): " + "; ".join(self.disruptions[:12])
            + (" ..." if len(self.disruptions) > 12 else ""),
        ]
        return "\n".join(lines)


def _payload(flow: Flow, seq: int, rng: random.Random) -> bytes:
    header = f"{flow.name}:{seq}:".encode()
    return header + rng.randbytes(rng.randrange(16, 8192))


def _send_loop(flow: Flow, stop: threading.Event, seed: int, send_timeout: float) -> None:
    rng = random.Random(seed)
    seq = 0
    while not stop.is_set():
        seq += 1
        status, _, _ = http("POST", flow.source.bridge_url + "/send", _payload(flow, seq, rng),
                            {"X-Destination-Peer-Id": flow.dest.peer_id}, timeout=send_timeout)
        flow.statuses[seq] = status
        if status == 200:
            flow.ack_times.append(time.monotonic())
        else:
            time.sleep(0.2)


def _receive_once(node: TestnetNode, flows_by_name: dict[str, Flow], wait: float) -> bool:
    """Take one message from `node`; False when its queue stayed empty."""
    status, headers, body = http("GET", f"{node.bridge_url}/recv?wait={wait:g}", timeout=wait + 10)
    if status != 200:
        return False
    name, seq_text, _ = body.split(b":", 2)
    flow = flows_by_name[name.decode()]
    flow.received.append(int(seq_text))
    if headers.get("X-From-Peer-Id") != flow.source.peer_id:
        flow.forged += 1
    return True


def _receive_loop(node: TestnetNode, flows_by_name: dict[str, Flow], stop: threading.Event) -> None:
    while not stop.is_set():
        _receive_once(node, flows_by_name, 1.0)


def _drain(node: TestnetNode, flows_by_name: dict[str, Flow]) -> None:
    while _receive_once(node, flows_by_name, 0.5):
        pass


def _longest_gap(times: list[float], start: float, end: float) -> float:
    marks = [start, *sorted(times), end]
    return max(b - a for a, b in zip(marks, marks[1:]))


def summarise(flows: list[Flow], disruptions: list[str], start: float, end: float) -> ChaosReport:
    sent = acked = received = lost = duplicated = out_of_order = forged = unacked = 0
    statuses: dict[str, int] = {}
    for flow in flows:
        acknowledged = flow.acknowledged
        counts: dict[int, int] = {}
        for seq in flow.received:
            counts[seq] = counts.get(seq, 0) + 1
        sent += len(flow.statuses)
        acked += len(acknowledged)
        received += len(flow.received)
        lost += sum(1 for seq in acknowledged if seq not in counts)
        duplicated += sum(n - 1 for n in counts.values())
        out_of_order += sum(1 for a, b in zip(flow.received, flow.received[1:]) if b <= a)
        forged += flow.forged
        unacked += sum(1 for seq in counts if seq not in acknowledged)
        for status in flow.statuses.values():
            statuses[str(status)] = statuses.get(str(status), 0) + 1
    outage = max((_longest_gap(flow.ack_times, start, end) for flow in flows), default=0.0)
    return ChaosReport(sent, acked, received, lost, duplicated, out_of_order, forged, unacked,
                       outage, statuses, disruptions)


class MeshUnderChaos:
    """Six nodes (two relays, four endpoints) with a cuttable proxy in every peering."""

    def __init__(self, base_dir: Path, seed: int, log_level: str = "info") -> None:
        self.rng = random.Random(seed)
        self.net = Testnet(6, "line", base_dir, log_level=log_level, extra_config=CHAOS_NODE_CONFIG)
        self.net.edges = list(CHAOS_EDGES)
        for node in self.net.nodes:
            node.dial = [a for a, b in self.net.edges if b == node.index]
        self.hub = ProxyHub()
        self.proxies: dict[tuple[int, int], LinkProxy] = {}
        self.disruptions: list[str] = []

    def start(self, timeout: float = 40.0) -> None:
        self.net.write_configs()
        for a, b in self.net.edges:
            self.proxies[(a, b)] = self.hub.add(self.net.nodes[a].listen_port)
        for node in self.net.nodes:
            config = json.loads(node.config_path.read_text())
            config["Peers"] = [f"tls://{LOOPBACK}:{self.proxies[(a, node.index)].port}" for a in node.dial]
            node.config_path.write_text(json.dumps(config, indent=2) + "\n")
        for node in self.net.nodes:
            self.net.start_node(node.index)
        self.net.write_json()
        self.net.wait_converged(timeout)

    def stop(self) -> None:
        self.net.stop()
        self.hub.close()

    def disrupt(self, down_secs: float, stop: threading.Event) -> None:
        """One failure at a time: a relay killed (SIGKILL) and restarted, or a peering cut."""
        if self.rng.random() < 0.5:
            relay = self.rng.choice(CHAOS_RELAYS)
            self.disruptions.append(f"kill relay {relay} for {down_secs:.1f}s")
            self.net.kill(relay, hard=True)
            stop.wait(down_secs)
            self.net.start_node(relay)
        else:
            edge = self.rng.choice(self.net.edges)
            self.disruptions.append(f"cut link {edge[0]}-{edge[1]} for {down_secs:.1f}s")
            proxy = self.proxies[edge]
            self.hub.cut(proxy)
            stop.wait(down_secs)
            self.hub.restore(proxy)

    def heal(self) -> None:
        for proxy in self.proxies.values():
            self.hub.restore(proxy)
        for relay in CHAOS_RELAYS:
            self.net.start_node(relay)


def run_chaos(base_dir: Path, duration: float, seed: int = 1, log_level: str = "info",
              calm_secs: float = 2.0) -> ChaosReport:
    """Stream numbered messages on four flows while relays die and links drop."""
    mesh = MeshUnderChaos(base_dir, seed, log_level)
    try:
        mesh.start()
        nodes = mesh.net.nodes
        flows = [Flow(f"f{i}", nodes[s], nodes[d]) for i, (s, d) in enumerate(CHAOS_FLOWS)]
        by_name = {flow.name: flow for flow in flows}
        stop_senders, stop_chaos = threading.Event(), threading.Event()
        send_timeout = CHAOS_NODE_CONFIG["send_timeout_secs"] + CHAOS_NODE_CONFIG["lookup_timeout_secs"] + 10
        senders = [threading.Thread(target=_send_loop, args=(flow, stop_senders, seed * 100 + i, send_timeout))
                   for i, flow in enumerate(flows)]
        receivers = [threading.Thread(target=_receive_loop, args=(nodes[d], by_name, stop_senders))
                     for d in sorted({d for _, d in CHAOS_FLOWS})]
        start = time.monotonic()
        for thread in senders + receivers:
            thread.start()
        while time.monotonic() - start < duration and not stop_chaos.is_set():
            stop_chaos.wait(mesh.rng.uniform(0.5, calm_secs))
            mesh.disrupt(mesh.rng.uniform(1.0, 3.0), stop_chaos)
            mesh.heal()
        mesh.heal()
        stop_senders.set()
        for thread in senders + receivers:
            thread.join()
        end = time.monotonic()
        for d in sorted({d for _, d in CHAOS_FLOWS}):
            _drain(nodes[d], by_name)
        return summarise(flows, mesh.disruptions, start, end)
    finally:
        mesh.stop()


# -- the soak run --------------------------------------------------------------

@dataclass
class ResourceSample:
    elapsed_secs: float
    rss_kib: list[int]
    open_fds: list[int]


def process_resources(pid: int) -> tuple[int, int]:
    """(resident set in KiB, open file descriptors) of a live process, from /proc."""
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def is_flat(samples: list[ResourceSample]) -> tuple[bool, list[str]]:
    """Flat: after the first sample (warm-up), RSS grows < 25 % (or 16 MiB) and fds by < 16."""
    if len(samples) < 2:
        return True, ["too few samples to judge"]
    first, last = samples[0], samples[-1]
    notes, flat = [], True
    for index, (rss0, rss1, fd0, fd1) in enumerate(zip(first.rss_kib, last.rss_kib,
                                                         first.open_fds, last.open_fds)):
        grew_rss = rss1 > max(rss0 * 1.25, rss0 + 16 * 1024)
        grew_fds = fd1 >= fd0 + 16
        flat = flat and not grew_rss and not grew_fds
        notes.append(f"node {index}: RSS {rss0}->{rss1} KiB, fds {fd0}->{fd1}"
                     + (" (growing)" if grew_rss or grew_fds else ""))
    return flat, notes


def run_soak(base_dir: Path, duration: float, interval: float = 60.0, nodes: int = 5,
             seed: int = 1) -> tuple[bool, list[ResourceSample], list[str]]:
    """Steady traffic on a ring; RSS and fds of every node sampled every `interval` seconds."""
    net = Testnet(nodes, "ring", base_dir, extra_config=CHAOS_NODE_CONFIG)
    stop = threading.Event()
    try:
        net.start()
        net.wait_converged(40)
        flows = [Flow(f"f{i}", net.nodes[i], net.nodes[(i + 2) % nodes]) for i in range(nodes)]
        by_name = {flow.name: flow for flow in flows}
        threads = [threading.Thread(target=_send_loop, args=(flow, stop, seed + i, 60.0))
                   for i, flow in enumerate(flows)]
        threads += [threading.Thread(target=_receive_loop, args=(node, by_name, stop)) for node in net.nodes]
        for thread in threads:
            thread.start()
        samples: list[ResourceSample] = []
        start = time.monotonic()
        while True:
            stop.wait(interval)
            usage = [process_resources(node.process.pid) for node in net.nodes]
            samples.append(ResourceSample(time.monotonic() - start, [u[0] for u in usage], [u[1] for u in usage]))
            print(f"t={samples[-1].elapsed_secs:5.0f}s rss_kib={samples[-1].rss_kib} fds={samples[-1].open_fds} "
                  f"acked={sum(len(f.acknowledged) for f in flows)}", flush=True)
            if time.monotonic() - start >= duration:
                break
        stop.set()
        for thread in threads:
            thread.join()
        report = summarise(flows, [], start, time.monotonic())
        flat, notes = is_flat(samples)
        return flat, samples, [report.text(), *notes]
    finally:
        stop.set()
        net.stop()


# -- schemathesis against a live bridge ----------------------------------------

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "docs" / "openapi.yaml"
# Not `not_a_server_error`: 502/503/504 are documented answers of a gateway.
# A 500 is still caught, since no operation documents it.
FUZZ_CHECKS = ("status_code_conformance,content_type_conformance,response_headers_conformance,"
               "response_schema_conformance,missing_required_header")
# Unknown peers answer after lookup_timeout_secs, so keep every wait short.
FUZZ_NODE_CONFIG = {"lookup_timeout_secs": 1, "send_timeout_secs": 2, "mcp_timeout_secs": 2,
                    "a2a_timeout_secs": 2}


def fuzz_schema_text(schema_path: Path = SCHEMA_PATH, max_wait: float = 1.0) -> str:
    """The published schema with the long poll capped, so no fuzz case idles for minutes."""
    text = schema_path.read_text()
    capped = text.replace("maximum: 300", f"maximum: {max_wait:g}")
    if capped == text:
        raise ValueError("schema has no `maximum: 300` long-poll bound to cap")
    return capped


def run_fuzz_api(base_dir: Path, max_examples: int, max_time: float | None, seed: int = 1,
                 workers: int = 4, phases: str = "examples,coverage,fuzzing,stateful") -> tuple[int, str]:
    """schemathesis (the checks above) against one live node; (exit code, output)."""
    base_dir.mkdir(parents=True, exist_ok=True)
    schema = base_dir / "openapi-fuzz.yaml"
    schema.write_text(fuzz_schema_text())
    net = Testnet(1, "line", base_dir / "net", extra_config=FUZZ_NODE_CONFIG)
    try:
        net.start()
        net.wait_converged(30)
        command = [sys.executable, "-m", "schemathesis.cli", "run", str(schema),
                   "--url", net.nodes[0].bridge_url, "--checks", FUZZ_CHECKS,
                   "--max-examples", str(max_examples), "--seed", str(seed),
                   "--workers", str(workers), "--request-timeout", "20", "--phases", phases,
                   "--generation-database", "none", "--no-color",
                   "--suppress-health-check", "all"]
        if max_time is not None:
            command += ["--max-time", str(int(max_time))]
        result = subprocess.run(command, capture_output=True, text=True, cwd=base_dir)
        if net.exited_nodes():
            return 1, result.stdout + "\nthe node exited during fuzzing"
        return result.returncode, result.stdout + result.stderr
    finally:
        net.stop()


# -- command line ----------------------------------------------------------------

def _work_dir(given: str | None) -> Path:
    return Path(given) if given else Path(tempfile.mkdtemp(prefix="axl-chaos-"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m axl.chaos", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    chaos = sub.add_parser("chaos", help="kill relays and cut links under load; check zero loss")
    chaos.add_argument("--duration", type=float, default=300.0)
    chaos.add_argument("--seed", type=int, default=1)
    soak = sub.add_parser("soak", help="steady traffic on 5 nodes; RSS and fds each interval")
    soak.add_argument("--duration", type=float, default=600.0)
    soak.add_argument("--interval", type=float, default=60.0)
    fuzz = sub.add_parser("fuzz-api", help="schemathesis against a live bridge")
    fuzz.add_argument("--max-examples", type=int, default=200)
    fuzz.add_argument("--max-time", type=float, default=None)
    fuzz.add_argument("--seed", type=int, default=1)
    for command in (chaos, soak, fuzz):
        command.add_argument("--dir", default=None, help="keys, configs and logs [a new temp dir]")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    base = _work_dir(args.dir)
    print(f"working in {base}", flush=True)
    if args.command == "chaos":
        report = run_chaos(base, args.duration, args.seed)
        print(report.text())
        return 0 if report.ok() else 1
    if args.command == "soak":
        flat, _, notes = run_soak(base, args.duration, args.interval)
        print("\n".join(notes))
        print("resources flat" if flat else "resources GROWING")
        return 0 if flat else 1
    code, output = run_fuzz_api(base, args.max_examples, args.max_time, args.seed)
    print(output)
    return code


if __name__ == "__main__":
    sys.exit(main())
