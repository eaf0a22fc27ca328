"""The chaos run: relays killed and restarted, links cut, under numbered message
flows; then every acknowledged number is looked for (`make chaos`)."""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request
from http.client import HTTPException
from dataclasses import dataclass, field
from pathlib import Path

from axl.chaos.proxy import LinkProxy, ProxyHub
from axl.testnet import LOOPBACK, Testnet, TestnetNode


# Relays 0 and 1; endpoints 2..5 each peer with both relays, so every path
# crosses a relay and any single relay or link can fail without a partition.
CHAOS_EDGES = [(0, 1)] + [(relay, endpoint) for endpoint in range(2, 6) for relay in (0, 1)]
CHAOS_RELAYS = (0, 1)
CHAOS_FLOWS = [(2, 4), (3, 5), (4, 2), (5, 3)]
# Short timeouts so that a failed attempt is reported quickly and the next
# numbered message goes out; the long ones suit operators, not a test.
CHAOS_NODE_CONFIG = {"send_timeout_secs": 10, "lookup_timeout_secs": 5}


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
    except (OSError, urllib.error.URLError, HTTPException):  # HTTPException: an answer cut short
        return 0, {}, b""


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


def send_loop(flow: Flow, stop: threading.Event, seed: int, send_timeout: float) -> None:
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


def receive_loop(node: TestnetNode, flows_by_name: dict[str, Flow], stop: threading.Event) -> None:
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
        senders = [threading.Thread(target=send_loop, args=(flow, stop_senders, seed * 100 + i, send_timeout))
                   for i, flow in enumerate(flows)]
        receivers = [threading.Thread(target=receive_loop, args=(nodes[d], by_name, stop_senders))
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
