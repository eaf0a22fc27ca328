"""/metrics and the dashboard's JSON and event stream on three real nodes.

b and c both peer with a only, so every message between them is relayed by
a: counters must move on all three, by the amounts the traffic implies.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import secrets
import time

import aiohttp
import pytest
import uvloop
from prometheus_client import generate_latest

from axl.adapters.counts import AdapterCounts

from axl.budgets import (DISPATCHES_PER_NODE, DISPATCHES_PER_PEER, MAX_DEVICE_ENTRIES, MAX_INFOS_PER_PEER,
                         MAX_READ_AHEAD, MAX_RUMORS, MAX_RUNTIME_PEERS, MAX_SESSION_BUFFERS, MAX_STREAM_SESSIONS,
                         MAX_STREAM_SESSIONS_PER_PEER, STREAM_WINDOW, WS_MAX_IN_FLIGHT,
                         WS_MAX_IN_FLIGHT_BYTES, WS_MAX_MESSAGE)
from axl.config import NodeConfig
from axl.identity import NodeIdentity
from axl.node import Node
from axl.node.stats import MAX_UNANSWERED
from axl.observe import report
from axl.observe.httpstats import HttpStats
from axl.observe.metrics import build_registry
from nodes import Cluster, NodeProcess, free_port, metric_samples, wait_until, wait_until_async

UNKNOWN_PEER = "cd" * 32
MESSAGES = 5
SIZE = 2000


def scrape(node: NodeProcess) -> dict[tuple[str, tuple], float]:
    status, headers, body = node.request("GET", "/metrics", timeout=10)
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    return metric_samples(body.decode())


def value(metrics: dict, name: str, **labels: str) -> float:
    return metrics.get((name, tuple(sorted(labels.items()))), 0.0)


def delta(before: dict, after: dict, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


@pytest.fixture(scope="module")
def trio(tmp_path_factory) -> tuple[NodeProcess, NodeProcess, NodeProcess]:
    cluster = Cluster(tmp_path_factory.mktemp("observe"))
    fast = {"lookup_timeout_secs": 2}
    a = cluster.add("a", extra=fast)
    b = cluster.add("b", peers=[a], extra=fast)
    c = cluster.add("c", peers=[a], extra=fast)
    cluster.start_all()
    try:
        wait_until(lambda: a.get_json("/health")["peers_up"] == 2, 20, what="a peered with b and c")
        wait_until(lambda: b.send(c.peer_id, b"warm-up")[0] == 200, 30, what="a path from b to c")
        assert c.recv(5)[2] == b"warm-up"
        yield a, b, c
    finally:
        cluster.stop_all()


def test_counters_move_with_relayed_traffic(trio) -> None:
    a, b, c = trio
    before = {node.name: scrape(node) for node in trio}
    for i in range(MESSAGES):
        assert b.send(c.peer_id, bytes([i]) * SIZE)[0] == 200
    for i in range(MESSAGES):
        status, headers, body = c.recv(5)
        assert status == 200 and body == bytes([i]) * SIZE
    assert b.send(UNKNOWN_PEER, b"x", timeout=30)[0] == 502
    assert b.request("GET", "/no-such-route", timeout=10)[0] == 404
    after = {node.name: scrape(node) for node in trio}
    sent, got, relay = (before["b"], after["b"]), (before["c"], after["c"]), (before["a"], after["a"])

    assert delta(*sent, "axl_messages_sent_total", status="200") == MESSAGES
    assert delta(*sent, "axl_messages_sent_total", status="502") == 1
    assert delta(*sent, "axl_payload_bytes_total", direction="out") == MESSAGES * SIZE
    assert delta(*sent, "axl_send_ack_seconds_count") == MESSAGES
    assert delta(*sent, "axl_http_requests_total", route="/send", code="200") == MESSAGES
    assert delta(*sent, "axl_http_request_duration_seconds_count", route="/send") == MESSAGES + 1
    assert delta(*sent, "axl_http_requests_total", route="unmatched", code="404") == 1
    assert value(after["b"], "axl_destination_failures_total", peer=UNKNOWN_PEER, status="502") == 1
    assert delta(*sent, "axl_destination_messages_total", peer=c.peer_id, direction="out") == MESSAGES

    assert delta(*got, "axl_messages_received_total") == MESSAGES
    assert delta(*got, "axl_payload_bytes_total", direction="in") == MESSAGES * SIZE
    assert delta(*got, "axl_destination_messages_total", peer=b.peer_id, direction="in") == MESSAGES
    assert delta(*got, "axl_http_requests_total", route="/recv", code="200") == MESSAGES

    payload = MESSAGES * SIZE
    assert delta(*sent, "axl_link_bytes_total", peer=a.peer_id, direction="out") > payload
    assert delta(*relay, "axl_link_bytes_total", peer=b.peer_id, direction="in") > payload
    assert delta(*relay, "axl_link_bytes_total", peer=c.peer_id, direction="out") > payload
    assert delta(*got, "axl_link_bytes_total", peer=a.peer_id, direction="in") > payload
    assert delta(*relay, "axl_link_frames_total", peer=b.peer_id, direction="in") >= MESSAGES
    assert delta(*relay, "axl_messages_sent_total", status="200") == 0

    assert value(after["a"], "axl_peers", state="up") == 2
    assert value(after["b"], "axl_sessions") >= 1
    assert value(after["a"], "axl_link_rtt_seconds", peer=b.peer_id) > 0
    assert value(after["b"], "axl_overlay_rtt_seconds", peer=c.peer_id) > 0
    assert 0 < value(after["b"], "axl_overlay_min_rtt_seconds", peer=c.peer_id) <= value(
        after["b"], "axl_overlay_rtt_seconds", peer=c.peer_id)
    for name in ("axl_overlay_retransmits_total", "axl_overlay_timeouts_total"):
        assert (name, (("peer", c.peer_id),)) in after["b"]
    assert ("axl_peer_queue_bytes", (("peer", a.peer_id),)) in after["b"]
    assert ("axl_peer_queue_bytes", (("peer", c.peer_id),)) in after["a"]
    assert value(after["a"], "process_resident_memory_bytes") > 0
    assert value(after["a"], "process_open_fds") > 0


async def send_over_ws(node: NodeProcess, keys: list[bytes], payload: bytes) -> list[int]:
    """One /ws frame to each key at once; the statuses of their acks."""
    async with aiohttp.ClientSession() as session, session.ws_connect(node.url + "/ws") as ws:
        for key in keys:
            await ws.send_bytes(key + payload)
        acks = [json.loads(await asyncio.wait_for(ws.receive_str(), 60)) for _ in keys]
    return [ack["status"] for ack in acks]


def test_sending_to_many_made_up_ids_keeps_the_metrics_bounded(trio) -> None:
    """Ids that never answered get a small table of their own: 300 of them
    leave at most MAX_UNANSWERED failure series and keep the node that did
    answer, which a single LRU of 256 would have pushed out."""
    _, b, c = trio
    assert b.send(c.peer_id, b"answered")[0] == 200
    assert c.recv(5)[2] == b"answered"
    made_up = [secrets.token_bytes(32) for _ in range(300)]
    assert asyncio.run(send_over_ws(b, made_up, b"anyone?")) == [502] * len(made_up)
    after = scrape(b)
    failing = {dict(labels)["peer"] for name, labels in after if name == "axl_destination_failures_total"}
    made_up_ids = {key.hex() for key in made_up}
    assert len(failing & made_up_ids) == MAX_UNANSWERED
    assert failing - made_up_ids <= {c.peer_id}  # its warm-up may have failed before the path was found
    assert value(after, "axl_destination_messages_total", peer=c.peer_id, direction="out") >= 1
    rows = b.get_json("/dashboard/api/peers")["destinations"]
    assert c.peer_id in {row["public_key"] for row in rows}
    assert len(rows) <= MAX_UNANSWERED + 2


def test_recv_queue_gauges_follow_the_queue(trio) -> None:
    _, b, c = trio
    for size in (300, 500):
        assert b.send(c.peer_id, b"q" * size)[0] == 200
    queued = scrape(c)
    assert value(queued, "axl_recv_queue_messages") == 2
    assert value(queued, "axl_recv_queue_bytes") == 800
    assert value(queued, "axl_inbox_messages") == 2 and value(queued, "axl_inbox_bytes") == 800
    assert value(queued, "axl_inbox_durable") == 1
    assert value(queued, "axl_inbox_commit_seconds_count") >= 2  # each send alone: its own commit
    assert c.recv(5)[0] == 200 and c.recv(5)[0] == 200
    drained = scrape(c)
    assert value(drained, "axl_recv_queue_messages") == 0
    assert value(drained, "axl_recv_queue_bytes") == 0
    assert value(drained, "axl_inbox_messages") == 0 and value(drained, "axl_inbox_bytes") == 0
    inbox = c.get_json("/dashboard/api/snapshot")["inbox"]
    assert inbox["durable"] and inbox["messages"] == 0 and inbox["commits"] >= 2
    assert inbox["commit_mean_ms"] > 0


def test_every_budget_shows_its_limit_use_and_refusals(trio) -> None:
    _, b, c = trio
    assert b.send(c.peer_id, b"q" * 700)[0] == 200
    metrics = scrape(c)
    limits = {labels: sample for (name, labels), sample in metrics.items() if name == "axl_budget_limit"}
    refused = {labels for (name, labels), _ in metrics.items() if name == "axl_budget_refused_total"}
    expected = {
        ("inbound_dispatches", "peer"): DISPATCHES_PER_PEER, ("inbound_dispatches", "node"): DISPATCHES_PER_NODE,
        ("stream_window", "stream"): STREAM_WINDOW, ("overlay_connections", "node"): 128,
        ("stream_seq_window", "stream"): STREAM_WINDOW, ("stream_sessions", "peer"): MAX_STREAM_SESSIONS_PER_PEER,
        ("stream_sessions", "node"): MAX_STREAM_SESSIONS,
        ("recv_queue", "node"): 1024, ("tree_entries", "peer"): MAX_INFOS_PER_PEER,
        ("ws_message_bytes", "link"): WS_MAX_MESSAGE, ("bridge_read_ahead_bytes", "connection"): MAX_READ_AHEAD,
        ("session_buffers", "node"): MAX_SESSION_BUFFERS, ("lookups_under_way", "node"): MAX_RUMORS,
        ("device_keys", "node"): MAX_DEVICE_ENTRIES, ("device_waiting_packets", "node"): MAX_DEVICE_ENTRIES,
        ("ws_in_flight", "connection"): WS_MAX_IN_FLIGHT, ("ws_in_flight_bytes", "connection"): WS_MAX_IN_FLIGHT_BYTES,
        ("runtime_peers", "node"): MAX_RUNTIME_PEERS,
    }
    for (budget, scope), limit in expected.items():
        labels = (("budget", budget), ("scope", scope))
        assert limits[labels] == limit and labels in refused, (budget, scope)
    assert set(limits) == refused
    assert value(metrics, "axl_budget_in_use", budget="recv_queue", scope="node") == 1
    assert value(metrics, "axl_budget_in_use", budget="recv_queue_bytes", scope="node") == 700
    assert value(metrics, "axl_budget_in_use", budget="sessions", scope="node") >= 1
    assert value(metrics, "axl_budget_in_use", budget="stream_sessions", scope="peer") == 1
    assert value(metrics, "axl_budget_in_use", budget="device_keys", scope="node") >= 1
    assert c.recv(5)[2] == b"q" * 700


def test_dashboard_json_describes_the_node(trio) -> None:
    a, b, c = trio
    snapshot = a.get_json("/dashboard/api/snapshot")
    assert snapshot["identity"]["public_key"] == a.peer_id
    assert snapshot["totals"]["peers_up"] == 2 and snapshot["identity"]["uptime_secs"] > 0

    peerings = {p["public_key"]: p for p in a.get_json("/dashboard/api/peers")["peerings"]}
    assert set(peerings) == {b.peer_id, c.peer_id}
    for row in peerings.values():
        assert row["up"] and row["inbound"] and row["bytes_in"] > 0 and row["frames_out"] > 0
        assert row["rtt_ms"] is not None and row["up_since"] is not None

    assert b.send(c.peer_id, b"for the dashboard")[0] == 200
    assert c.recv(5)[0] == 200
    destinations = {d["public_key"]: d for d in b.get_json("/dashboard/api/peers")["destinations"]}
    assert destinations[c.peer_id]["messages_sent"] >= 1
    assert destinations[c.peer_id]["mean_ack_ms"] > 0
    assert destinations[c.peer_id]["overlay_rtt_ms"] > 0
    assert destinations[c.peer_id]["retransmits"] >= 0 and destinations[c.peer_id]["timeouts"] >= 0

    topology = b.get_json("/dashboard/api/topology")
    tree_keys = {entry["public_key"] for entry in topology["tree"]}
    assert topology["root"] in tree_keys and {a.peer_id, b.peer_id} <= tree_keys

    series = wait_until(lambda: len(a.get_json("/dashboard/api/series")["samples"]) >= 2 and
                        a.get_json("/dashboard/api/series"), 15, what="two samples")
    assert series["samples"][-1]["rss_bytes"] > 0

    lines = a.get_json("/dashboard/api/logs?limit=3")["lines"]
    assert 1 <= len(lines) <= 3
    assert any("peering up" in line["message"] for line in a.get_json("/dashboard/api/logs?limit=1000")["lines"])
    for bad in ("0", "1001", "x"):
        assert a.request("GET", f"/dashboard/api/logs?limit={bad}")[0] == 400


def test_dashboard_page_is_self_contained_under_a_strict_policy(trio) -> None:
    a, _, _ = trio
    status, headers, body = a.request("GET", "/dashboard/")
    html = body.decode()
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    policy = headers["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "unsafe-inline" not in policy
    assert "<script>" not in html and "style=" not in html and "http" not in html.split("<body>")[0]
    for asset, kind in (("dashboard.js", "text/javascript"), ("dashboard.css", "text/css")):
        assert f"/dashboard/{asset}" in html
        status, headers, body = a.request("GET", f"/dashboard/{asset}")
        assert status == 200 and headers["Content-Type"].startswith(kind) and body
    assert b"innerHTML" not in a.request("GET", "/dashboard/dashboard.js")[2]


def test_dashboard_says_a_node_draws_only_its_part_of_the_network(trio) -> None:
    """A reader counting 3 of 6 nodes learns why, beside the drawing."""
    a, _, _ = trio
    html = " ".join(a.request("GET", "/dashboard/")[2].decode().split())
    assert ('<p id="graph-scope" class="note">A node knows only its part of the network: itself, its peers, '
            "and each one's path up to the root. Nodes elsewhere are not drawn here; their own dashboards "
            "show them.</p>") in html


def read_events(response: http.client.HTTPResponse, until, deadline: float) -> list[tuple[str, dict]]:
    """Parse Server-Sent Events until `until(events)` holds; fail at the deadline."""
    events, kind, data = [], "", ""
    while time.monotonic() < deadline:
        line = response.readline().decode()
        if not line:
            raise AssertionError("event stream ended")
        line = line.rstrip("\n")
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
        elif line == "" and kind:
            events.append((kind, json.loads(data)))
            kind, data = "", ""
            if until(events):
                return events
    raise AssertionError(f"no such event before the deadline; saw {[k for k, _ in events]}")


def peer_event(events: list, key: str, state: str) -> bool:
    return any(kind == "peer" and data["public_key"] == key and data["state"] == state
               for kind, data in events)


def test_event_stream_reports_a_peer_going_down_and_up(trio) -> None:
    a, _, c = trio
    connection = http.client.HTTPConnection("127.0.0.1", a.api_port, timeout=20)
    try:
        connection.request("GET", "/dashboard/api/events")
        response = connection.getresponse()
        assert response.status == 200
        assert response.getheader("Content-Type") == "text/event-stream"
        read_events(response, lambda seen: any(kind == "sample" for kind, _ in seen),
                    time.monotonic() + 15)
        c.stop()
        seen = read_events(response, lambda seen: peer_event(seen, c.peer_id, "down"),
                           time.monotonic() + 20)
        down = next(data for kind, data in seen if kind == "peer")
        assert down["reason"] == "connection closed by peer"
        c.start()
        read_events(response, lambda seen: peer_event(seen, c.peer_id, "up"), time.monotonic() + 30)
    finally:
        connection.close()
    wait_until(lambda: a.get_json("/health")["peers_up"] == 2, 20, what="c back")


def test_a_send_refused_before_its_body_is_counted(trio) -> None:
    """`Expect: 100-continue` over max_message_size gets 413 without the body
    (curl's way for bodies over 1 MiB): counted like any refused /send."""
    a, b, c = trio
    before = scrape(b)
    conn = http.client.HTTPConnection("127.0.0.1", b.api_port, timeout=10)
    try:
        conn.putrequest("POST", "/send")
        conn.putheader("X-Destination-Peer-Id", c.peer_id)
        conn.putheader("Content-Length", str(64 * 1024 * 1024))
        conn.putheader("Expect", "100-continue")
        conn.endheaders()
        assert conn.getresponse().status == 413
    finally:
        conn.close()
    after = scrape(b)
    assert delta(before, after, "axl_messages_sent_total", status="413") == 1
    assert value(after, "axl_destination_failures_total", peer=c.peer_id, status="413") == 1


def test_a_scrape_alone_does_not_load_the_full_application(tmp_path) -> None:
    """/metrics is answered by the front door: a node that is only scraped
    keeps aiohttp's server and the agent routes unloaded (about 14 MB)."""
    node = Cluster(tmp_path).add("solo")
    node.start()
    try:
        metrics = scrape(node)
        assert value(metrics, "axl_peers", state="up") == 0
        assert any(name == "process_resident_memory_bytes" for name, _ in metrics)
        assert node.request("GET", "/metrics", timeout=10)[1]["Content-Type"].startswith("text/plain")
        assert "full application loaded" not in node.log_path.read_text()
    finally:
        node.stop()


def test_a_scrape_while_a_peering_closes_leaves_its_rtt_out() -> None:
    """Under uvloop a TLS link's socket closes (its descriptor becomes -1)
    a turn before the link hears that the connection is lost. A scrape in
    that turn asked the closed socket for TCP_INFO, got a ValueError, and
    GET /metrics (and the dashboard's peerings) answered 500."""
    uvloop.run(_scrape_while_a_peering_closes())


async def _scrape_while_a_peering_closes() -> None:
    port = free_port()
    a = Node(NodeConfig(listen=[f"tls://127.0.0.1:{port}"], api_port=free_port()), NodeIdentity.generate())
    b = Node(NodeConfig(peers=[f"tls://127.0.0.1:{port}"], api_port=free_port()), NodeIdentity.generate())
    await a.start()
    await b.start()
    try:
        await wait_until_async(lambda: a.links, 15, what="b peered with a")
        link = next(iter(a.links.values()))
        assert link.rtt() is not None
        link._connection._transport.abort()
        await asyncio.sleep(0)  # the socket closes; the link hears of it on the next turn
        assert link in a.links.values() and link._connection.socket.fileno() == -1
        metrics = metric_samples(generate_latest(build_registry(a, HttpStats(), AdapterCounts())).decode())
        assert not any(name == "axl_link_rtt_seconds" for name, _ in metrics)
        assert value(metrics, "axl_peers", state="up") == 1
        assert [row["rtt_ms"] for row in report.peers(a)["peerings"]] == [None]
    finally:
        await b.stop()
        await a.stop()
