"""Hostile peers and clients against one real node: its budgets must hold.

Each attack runs against a freshly started `axl-node` on loopback while
two probes watch it: its resident memory (from /proc, every 50 ms) and
`GET /health` on a connection of its own, timed request by request. The
node passes when its memory stays within ATTACK_RSS_BUDGET of what it held
before the attack, and /health keeps answering throughout.

- `ws-message`: one WebSocket connection to a ws:// listener declares a
  4 GiB binary message and streams zeros into it, before any handshake.
- `dispatch-flood`: a peer whose message-stream sender ignores the window
  sends thousands of small MCP envelopes while the local MCP router holds
  every request it gets.
- `pipeline`: a local client pipelines `GET /topology` on one bridge
  connection and never reads the answers; `pipeline-many` does the same on
  64 connections at once.
- `seq-jump`: a peer jumps its message stream's sequence number by 2**31 on
  an open session, then opens a session that starts that far up; a
  well-behaved peer sends after it.

    python -m axl.chaos hostile            # all of them; prints the figures
"""

from __future__ import annotations

import asyncio
import dataclasses
import http.client
import json
import select
import socket
import subprocess
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from axl.adapters.envelopes import encode_mcp_request
from axl.budgets import MiB
from axl.chaos.soak import process_resources
from axl.config import NodeConfig
from axl.errors import DeliveryError, status_for
from axl.harness import LOOPBACK, free_port, spawn_node, stop_process
from axl.identity import NodeIdentity
from axl.node import Node
from axl.node.messages import MessageSettings
from axl.node.msgstream import StreamSender
from axl.node.streams import _Link

# What an attack may add to the node's resident memory (the bound).
ATTACK_RSS_BUDGET = 64 * MiB
RSS_SAMPLE_EVERY = 0.05
HEALTH_EVERY = 0.05
HEALTH_TIMEOUT = 30.0

WS_DECLARED = 4 << 30
WS_SEND_LIMIT = 256 * MiB
PIPELINE_SEND_LIMIT = 256 * MiB
PIPELINE_TIME_LIMIT = 60.0
PIPELINE_CLIENTS = 64
PIPELINE_EACH = 3 * MiB // 2
# A client write that makes no progress for this long means the node stopped reading.
HELD_BACK_AFTER = 3.0
DISPATCH_MESSAGES = 16 * 1024
DISPATCH_TIME_LIMIT = 120.0
# How long the stalled MCP router holds a request at most.
ROUTER_HOLD = 30.0
# How far the hostile sender jumps its sequence numbers (2**31 took a
# receiver from 47 to 593 MiB before the window was enforced), and how long
# its sends wait for an answer.
SEQ_JUMP = 1 << 31
JUMP_SEND_TIMEOUT = 10
START_TIMEOUT = 20.0


# -- the probes ---------------------------------------------------------------

class RssWatch:
    """The peak resident memory of a process, sampled in a thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.before = self._rss()
        self.peak = self.before
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _rss(self) -> int:
        return process_resources(self.pid)[0] * 1024

    def _run(self) -> None:
        while not self._stop.wait(RSS_SAMPLE_EVERY):
            try:
                self.peak = max(self.peak, self._rss())
            except OSError:
                return

    def stop(self) -> int:
        """Stop sampling; the growth over the start, in bytes."""
        self._stop.set()
        self._thread.join()
        return self.peak - self.before


@dataclass
class HealthProbe:
    """GET /health again and again on one kept-alive connection of its own."""

    port: int
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        connection = http.client.HTTPConnection(LOOPBACK, self.port, timeout=HEALTH_TIMEOUT)
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                connection.request("GET", "/health")
                response = connection.getresponse()
                response.read()
                if response.status != 200:
                    self.failures.append(f"HTTP {response.status}")
            except (OSError, http.client.HTTPException) as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")
                connection.close()
            else:
                self.latencies.append(time.monotonic() - started)
            self._stop.wait(HEALTH_EVERY)
        connection.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def slowest(self) -> float:
        return max(self.latencies, default=0.0)


@dataclass
class AttackReport:
    name: str
    rss_growth: int
    health_answers: int
    health_slowest: float
    health_failures: list[str]
    outcome: str

    @property
    def held(self) -> bool:
        return (self.rss_growth < ATTACK_RSS_BUDGET and not self.health_failures
                and self.health_answers > 0)

    def text(self) -> str:
        return (f"{self.name}: RSS +{self.rss_growth / MiB:.1f} MiB (budget "
                f"{ATTACK_RSS_BUDGET // MiB} MiB); /health answered {self.health_answers} times, "
                f"slowest {self.health_slowest * 1000:.0f} ms, {len(self.health_failures)} failed; "
                f"{self.outcome}")


def watched(name: str, pid: int, bridge_port: int, attack: Callable[[], str]) -> AttackReport:
    """Run `attack` (which returns what it saw) under both probes."""
    rss = RssWatch(pid)
    health = HealthProbe(bridge_port)
    try:
        outcome = attack()
    finally:
        health.stop()
        growth = rss.stop()
    return AttackReport(name, growth, len(health.latencies), health.slowest, health.failures, outcome)


# -- the node under attack -----------------------------------------------------

@dataclass
class Target:
    """The node under attack: a real axl-node process on loopback."""

    peer_id: str
    api_port: int
    tls_port: int
    ws_port: int
    process: subprocess.Popen[bytes]

    @property
    def tls_uri(self) -> str:
        return f"tls://{LOOPBACK}:{self.tls_port}"


@contextmanager
def target_node(base: Path, extra: dict | None = None,
                command: list[str] | None = None) -> Iterator[Target]:
    """Start a node (this build, or `command`) listening on tls:// and ws://,
    wait for its bridge, and stop it after."""
    base.mkdir(parents=True, exist_ok=True)
    identity = NodeIdentity.generate()
    key = base / "target.pem"
    key.write_bytes(identity.pem())
    key.chmod(0o600)
    api_port, tls_port, ws_port = free_port(), free_port(), free_port()
    config = {"PrivateKeyPath": str(key), "api_port": api_port,
              "Listen": [f"tls://{LOOPBACK}:{tls_port}", f"ws://{LOOPBACK}:{ws_port}"], **(extra or {})}
    config_path = base / "target.json"
    config_path.write_text(json.dumps(config))
    log_path = base / "target.log"
    target = Target(identity.peer_id, api_port, tls_port, ws_port,
                    spawn_node(config_path, log_path, command=command))
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not _answers_health(target.api_port):
            if target.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the target node did not start: {log_path.read_text()[-2000:]}")
            time.sleep(0.1)
        yield target
    finally:
        stop_process(target.process)


def _answers_health(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/health", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


# -- ws-message ----------------------------------------------------------------

def _ws_upgrade(sock: socket.socket, port: int) -> None:
    sock.sendall(f"GET / HTTP/1.1\r\nHost: {LOOPBACK}:{port}\r\nUpgrade: websocket\r\n"
                 "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                 "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: ygg-ws\r\n\r\n".encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("the ws listener closed during the upgrade")
        answer += chunk
    if not answer.startswith(b"HTTP/1.1 101"):
        raise ConnectionError(f"no upgrade: {answer[:80]!r}")


def giant_ws_message(port: int, declared: int = WS_DECLARED, limit: int = WS_SEND_LIMIT) -> str:
    """Declare one binary message of `declared` bytes and stream zeros into
    it (masked with a zero key, so they stay zeros) until the node closes
    the connection or `limit` bytes are sent."""
    with socket.create_connection((LOOPBACK, port), timeout=HEALTH_TIMEOUT) as sock:
        _ws_upgrade(sock, port)
        sock.sendall(bytes([0x82, 0x80 | 127]) + declared.to_bytes(8, "big") + bytes(4))
        chunk = bytes(MiB)
        sent = 0
        try:
            while sent < limit:
                sock.sendall(chunk)
                sent += len(chunk)
        except OSError as exc:
            return f"the node closed the connection after {sent / MiB:.0f} MiB ({type(exc).__name__})"
        return f"the node took all {sent / MiB:.0f} MiB sent into the message"


# -- pipeline -------------------------------------------------------------------

def pipeline_without_reading(port: int, limit: int = PIPELINE_SEND_LIMIT,
                             time_limit: float = PIPELINE_TIME_LIMIT) -> str:
    """Write pipelined `GET /topology` requests and never read: stop when the
    node has not taken a byte for HELD_BACK_AFTER seconds (it holds the
    client back), after `limit` bytes, or after `time_limit` seconds."""
    request = f"GET /topology HTTP/1.1\r\nHost: {LOOPBACK}\r\n\r\n".encode()
    chunk = request * (64 * 1024 // len(request))
    with socket.create_connection((LOOPBACK, port)) as sock:
        sock.settimeout(HELD_BACK_AFTER)
        sent = 0
        deadline = time.monotonic() + time_limit
        while sent < limit and time.monotonic() < deadline:
            try:
                sent += sock.send(chunk)
            except TimeoutError:
                return f"the node held the client back after {sent / MiB:.1f} MiB of requests"
        return f"the node read {sent / MiB:.0f} MiB of requests without being read from"


@dataclass
class ReadAheadHeld:
    sent: int  # bytes of requests all connections sent
    read_ahead: float  # what the node then held read ahead, all connections together
    paused_at_node_budget: float

    def text(self) -> str:
        return (f"{self.sent / MiB:.1f} MiB of requests sent; the node held "
                f"{self.read_ahead / MiB:.1f} MiB of them read ahead and paused reading "
                f"{self.paused_at_node_budget:.0f} times at its own budget")


def pipeline_on_many_connections(port: int, clients: int = PIPELINE_CLIENTS,
                                 each: int = PIPELINE_EACH) -> ReadAheadHeld:
    """`pipeline_without_reading` on `clients` connections at once, `each`
    bytes of requests each at most, until the node has taken nothing for
    HELD_BACK_AFTER seconds (or PIPELINE_TIME_LIMIT passed); then, with the
    connections still open, what the node's /metrics say it holds."""
    request = f"GET /topology HTTP/1.1\r\nHost: {LOOPBACK}\r\n\r\n".encode()
    chunk = request * (16 * 1024 // len(request))
    sockets = [socket.create_connection((LOOPBACK, port)) for _ in range(clients)]
    sent = [0] * clients
    try:
        for sock in sockets:
            sock.setblocking(False)
        started = last_progress = time.monotonic()
        while time.monotonic() - last_progress < HELD_BACK_AFTER:
            if time.monotonic() - started > PIPELINE_TIME_LIMIT:
                break
            for index, sock in enumerate(sockets):
                if sent[index] < each:
                    try:
                        sent[index] += sock.send(chunk)
                        last_progress = time.monotonic()
                    except BlockingIOError:
                        pass
            select.select([], sockets, [], 0.05)
        in_use = budget_samples(port, "axl_budget_in_use")
        refused = budget_samples(port, "axl_budget_refused_total")
    finally:
        for sock in sockets:
            sock.close()
    budget = ("bridge_read_ahead_bytes", "node")
    return ReadAheadHeld(sum(sent), in_use[budget], refused[budget])


# -- dispatch-flood -------------------------------------------------------------

class _RouterServer(ThreadingHTTPServer):
    # The node's dispatcher connects up to 100 at once; the default backlog
    # of 5 made the released requests trickle in on SYN retries.
    request_queue_size = 128
    daemon_threads = True


class StalledRouter:
    """An MCP router that holds every /route request until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.arrived = 0
        router = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                router.arrived += 1
                router.release.wait(ROUTER_HOLD)
                body = b'{"response": null, "error": "released"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                return

        self.server = _RouterServer((LOOPBACK, 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@dataclass
class FloodResult:
    statuses: Counter[int]  # the sends' outcomes as /send statuses (0: no answer in time)
    arrived_at_router: int
    # (budget, scope) -> refusals, from the target's /metrics after the flood
    refused: dict[tuple[str, str], float]

    def text(self) -> str:
        counts = ", ".join(f"{count} answered {status}" for status, count in sorted(self.statuses.items()))
        budgets = ", ".join(f"{budget}/{scope} {count:.0f}"
                            for (budget, scope), count in sorted(self.refused.items()) if count)
        return f"{counts}; {self.arrived_at_router} reached the router; refused by budget: {budgets}"


async def window_ignoring_flood(target: Target, router: StalledRouter,
                                count: int = DISPATCH_MESSAGES) -> FloodResult:
    """From a node of our own whose stream window is `count` (the protocol's
    is 256), send `count` small MCP envelopes to the target at once, release
    the router once the sends have their answers, and count the answers."""
    config = NodeConfig(peers=[target.tls_uri], api_port=free_port())
    settings = dataclasses.replace(MessageSettings.from_config(config), stream_window=count + 1)
    attacker = Node(config, NodeIdentity.generate(), message_settings=settings)
    await attacker.start()
    try:
        dest = bytes.fromhex(target.peer_id)
        await asyncio.wait_for(_first_delivery(attacker, dest), DISPATCH_TIME_LIMIT)
        envelope = encode_mcp_request("held", '{"jsonrpc":"2.0","id":1,"method":"ping"}', None)
        sends = [attacker.start_send(dest, envelope) for _ in range(count)]
        statuses: Counter[int] = Counter()
        pending = set(sends)
        deadline = time.monotonic() + DISPATCH_TIME_LIMIT
        while pending and time.monotonic() < deadline:
            done, pending = await asyncio.wait(pending, timeout=1.0)
            statuses.update(_status(send) for send in done)
            if not done:
                router.release.set()  # the held ones answer only once the router does
        if pending:
            statuses[0] += len(pending)
        refused = budget_samples(target.api_port, "axl_budget_refused_total")
        return FloodResult(statuses, router.arrived, refused)
    finally:
        await attacker.stop()


@dataclass
class JumpResult:
    jumped: int  # /send status of the message numbered SEQ_JUMP beyond its session's last
    far_start: list[int]  # of the first two messages of a session starting SEQ_JUMP up
    well_behaved: int  # of a message from another node, after
    refused: dict[tuple[str, str], float]  # the target's budget refusals then

    def text(self) -> str:
        return (f"the jump answered {self.jumped}, the session starting far up {self.far_start}, "
                f"the well-behaved sender {self.well_behaved}; streams reset outside the window: "
                f"{self.refused.get(('stream_seq_window', 'stream'), 0):.0f}")


async def sequence_jumps(target: Target) -> JumpResult:
    """A node of our own playing a sender that breaks the numbering: it
    moves its open session's next number SEQ_JUMP ahead and sends, then
    starts a session at SEQ_JUMP (a receiver takes a session it does not
    know where it finds it) and sends two; then another node sends one."""
    config = NodeConfig(peers=[target.tls_uri], api_port=free_port(), send_timeout_secs=JUMP_SEND_TIMEOUT)
    attacker = Node(config, NodeIdentity.generate())
    await attacker.start()
    try:
        dest = bytes.fromhex(target.peer_id)
        await asyncio.wait_for(_first_delivery(attacker, dest), DISPATCH_TIME_LIMIT)
        streams = attacker.core.messages.streams
        streams._links[dest].sender._next_wire_seq += SEQ_JUMP
        jumped = await _answer(attacker.start_send(dest, b"jumped"))
        far_up = StreamSender(session_id=int.from_bytes(NodeIdentity.generate().public_key[:8], "big"))
        far_up._next_wire_seq = SEQ_JUMP
        streams._links[dest] = _Link(dest, far_up)
        far_start = [await _answer(attacker.start_send(dest, payload)) for payload in (b"far", b"next")]
    finally:
        await attacker.stop()
    well_behaved = Node(NodeConfig(peers=[target.tls_uri], api_port=free_port()), NodeIdentity.generate())
    await well_behaved.start()
    try:
        await asyncio.wait_for(_first_delivery(well_behaved, dest), DISPATCH_TIME_LIMIT)
        status = await _answer(well_behaved.start_send(dest, b"well behaved"))
    finally:
        await well_behaved.stop()
    return JumpResult(jumped, far_start, status, budget_samples(target.api_port, "axl_budget_refused_total"))


async def _answer(send: asyncio.Future) -> int:
    """The send's outcome as a /send status."""
    await asyncio.wait([send])
    return _status(send)


async def _first_delivery(node: Node, dest: bytes) -> None:
    """Send until one message is acknowledged (the peering and the stream are up)."""
    while True:
        try:
            await asyncio.wait_for(node.send(dest, b"hello"), 10)
            return
        except (DeliveryError, TimeoutError):
            await asyncio.sleep(0.2)


def budget_samples(port: int, name: str) -> dict[tuple[str, str], float]:
    """One of a node's axl_budget_* samples (`name`), by (budget, scope)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/metrics", timeout=HEALTH_TIMEOUT) as response:
        text = response.read().decode()
    return {(sample.labels["budget"], sample.labels["scope"]): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name == name}


def _status(send: asyncio.Future) -> int:
    error = send.exception()
    if error is None:
        return 200
    if not isinstance(error, DeliveryError):
        raise error
    return status_for(error)


# -- running them ---------------------------------------------------------------

def attack_ws_message(base: Path, command: list[str] | None = None) -> AttackReport:
    with target_node(base, command=command) as target:
        return watched("ws-message", target.process.pid, target.api_port,
                       lambda: giant_ws_message(target.ws_port))


def attack_pipeline(base: Path, command: list[str] | None = None) -> AttackReport:
    with target_node(base, command=command) as target:
        return watched("pipeline", target.process.pid, target.api_port,
                       lambda: pipeline_without_reading(target.api_port))


def attack_pipeline_many(base: Path, command: list[str] | None = None) -> tuple[AttackReport, ReadAheadHeld]:
    with target_node(base, command=command) as target:
        results: list[ReadAheadHeld] = []

        def pipelines() -> str:
            results.append(pipeline_on_many_connections(target.api_port))
            return results[0].text()

        return watched("pipeline-many", target.process.pid, target.api_port, pipelines), results[0]


def attack_dispatch_flood(base: Path, command: list[str] | None = None) -> tuple[AttackReport, FloodResult]:
    router = StalledRouter()
    extra = {"router_addr": f"http://{LOOPBACK}", "router_port": router.port}
    try:
        with target_node(base, extra, command) as target:
            results: list[FloodResult] = []

            def flood() -> str:
                results.append(asyncio.run(window_ignoring_flood(target, router)))
                return results[0].text()

            return watched("dispatch-flood", target.process.pid, target.api_port, flood), results[0]
    finally:
        router.close()


def attack_sequence_jump(base: Path, command: list[str] | None = None) -> tuple[AttackReport, JumpResult]:
    with target_node(base, command=command) as target:
        results: list[JumpResult] = []

        def jumps() -> str:
            results.append(asyncio.run(sequence_jumps(target)))
            return results[0].text()

        return watched("seq-jump", target.process.pid, target.api_port, jumps), results[0]


def run_hostile(base: Path, command: list[str] | None = None) -> list[AttackReport]:
    """Every attack against a fresh node (this build, or `command`); prints
    each report as it comes."""
    reports = []
    for name, attack in (("ws-message", attack_ws_message), ("dispatch-flood", attack_dispatch_flood),
                         ("pipeline", attack_pipeline), ("pipeline-many", attack_pipeline_many),
                         ("seq-jump", attack_sequence_jump)):
        result = attack(base / name, command)
        report = result[0] if isinstance(result, tuple) else result
        print(report.text(), flush=True)
        reports.append(report)
    return reports


__all__ = ["ATTACK_RSS_BUDGET", "AttackReport", "StalledRouter", "attack_dispatch_flood",
           "attack_pipeline", "attack_pipeline_many", "attack_sequence_jump", "attack_ws_message", "run_hostile"]
