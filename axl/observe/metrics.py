"""Prometheus exposition of a node's counters.

The hot path only bumps plain integers (axl.node.stats, axl.link.counters);
this collector turns them into metric families when someone scrapes, so a
message costs no prometheus_client call. Each node gets its own registry:
two nodes in one process never share a metric. The bridge imports this
module on the first scrape (axl.observe.web), so prometheus_client stays out
of a node nobody scrapes.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from axl import __version__
from axl.adapters.counts import AdapterCounts
from axl.node.stats import Histogram, NodeStats
from axl.observe.httpstats import HttpStats
from axl.observe.report import queued_by_peer
from axl.observe.view import ObservedNode

def _buckets(histogram: Histogram) -> list[tuple[str, float]]:
    return [("+Inf" if bound == float("inf") else repr(bound), count)
            for bound, count in histogram.cumulative()]


class NodeCollector:
    """Reads the node's numbers at scrape time."""

    def __init__(self, node: ObservedNode, http: HttpStats, adapters: AdapterCounts) -> None:
        self.node = node
        self.http = http
        self.adapters = adapters

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        yield from self._identity()
        yield from self._messages(self.node.stats)
        yield from self._peerings()
        yield from self._destinations(self.node.stats)
        yield from self._queues()
        yield from self._budgets()
        yield from self._inbox()
        yield from self._listener()
        yield from self._adapters()
        yield from self._http()

    def _identity(self) -> Iterator[Metric]:
        info = GaugeMetricFamily("axl_build_info", "Version of this node; the value is always 1.",
                                 labels=["version", "public_key"])
        info.add_metric([__version__, self.node.identity.peer_id], 1)
        yield info
        yield GaugeMetricFamily("axl_start_time_seconds", "When the node started (Unix time).",
                                value=self.node.stats.started_at)

    def _messages(self, stats: NodeStats) -> Iterator[Metric]:
        sent = CounterMetricFamily("axl_messages_sent",
                                   "Messages sent through the bridge (POST /send and /ws), by the "
                                   "HTTP status of their answer or ack.", labels=["status"])
        for status, count in sorted(stats.sent_by_status.items()):
            sent.add_metric([str(status)], count)
        yield sent
        yield CounterMetricFamily("axl_messages_received",
                                  "Messages that arrived whole from the overlay.",
                                  value=stats.messages_received)
        payload = CounterMetricFamily("axl_payload_bytes",
                                      "Application payload bytes delivered (out) and arrived (in).",
                                      labels=["direction"])
        payload.add_metric(["in"], stats.payload_in)
        payload.add_metric(["out"], stats.payload_out)
        yield payload
        ack = HistogramMetricFamily("axl_send_ack_seconds",
                                    "Time from handing a message to the overlay to its acknowledgement.")
        ack.add_metric([], _buckets(stats.ack_seconds), stats.ack_seconds.total)
        yield ack

    def _peerings(self) -> Iterator[Metric]:
        peers = self.node.topology()["peers"]
        up = sum(1 for peer in peers if peer["up"])
        state = GaugeMetricFamily("axl_peers", "Configured and inbound peerings by state.",
                                  labels=["state"])
        state.add_metric(["up"], up)
        state.add_metric(["down"], len(peers) - up)
        yield state
        link_bytes = CounterMetricFamily("axl_link_bytes", "Bytes on direct peerings, framing included.",
                                         labels=["peer", "direction"])
        link_frames = CounterMetricFamily("axl_link_frames", "Frames on direct peerings.",
                                          labels=["peer", "direction"])
        reconnects = CounterMetricFamily("axl_peer_reconnects",
                                         "Times a peering came up again after the first time.",
                                         labels=["peer"])
        for key, peer in self.node.stats.peers.items():
            label, totals = key.hex(), peer.totals()
            link_bytes.add_metric([label, "in"], totals.bytes_in)
            link_bytes.add_metric([label, "out"], totals.bytes_out)
            link_frames.add_metric([label, "in"], totals.frames_in)
            link_frames.add_metric([label, "out"], totals.frames_out)
            reconnects.add_metric([label], peer.reconnects)
        rtt = GaugeMetricFamily("axl_link_rtt_seconds",
                                "Kernel smoothed round-trip time of each live peering's socket.",
                                labels=["peer"])
        for link in list(self.node.links.values()):
            seconds = link.rtt()
            if seconds is not None:
                rtt.add_metric([link.remote_key.hex()], seconds)
        yield from (link_bytes, link_frames, reconnects, rtt)

    def _destinations(self, stats: NodeStats) -> Iterator[Metric]:
        messages = CounterMetricFamily("axl_destination_messages",
                                       "Messages delivered to (out) and from (in) each remote node "
                                       f"(the {stats.max_destinations} most recent).",
                                       labels=["peer", "direction"])
        failures = CounterMetricFamily("axl_destination_failures",
                                       "Failed sends to each remote node, by HTTP status (also to "
                                       f"the {stats.max_unanswered} most recent ids that never answered).",
                                       labels=["peer", "status"])
        for key, entry in stats.destinations.items():
            messages.add_metric([key.hex(), "out"], entry.messages_sent)
            messages.add_metric([key.hex(), "in"], entry.messages_received)
        for key, entry in [*stats.destinations.items(), *stats.unanswered.items()]:
            for status, count in sorted(entry.failures.items()):
                failures.add_metric([key.hex(), str(status)], count)
        yield from (messages, failures)
        rtt = GaugeMetricFamily("axl_overlay_rtt_seconds",
                                "Smoothed round-trip time the overlay TCP measured to each remote node.",
                                labels=["peer"])
        least = GaugeMetricFamily("axl_overlay_min_rtt_seconds",
                                  "Least round-trip time the overlay TCP sampled to each remote node: "
                                  "the path's own delay, without its queues.",
                                  labels=["peer"])
        retransmits = CounterMetricFamily("axl_overlay_retransmits",
                                          "Overlay TCP segments sent again to each remote node.",
                                          labels=["peer"])
        timeouts = CounterMetricFamily("axl_overlay_timeouts",
                                       "Overlay TCP retransmission timeouts toward each remote node.",
                                       labels=["peer"])
        for label, path in self.node.overlay_paths():
            if path.srtt is not None:
                rtt.add_metric([label], path.srtt)
            if path.min_rtt is not None:
                least.add_metric([label], path.min_rtt)
            retransmits.add_metric([label], path.retransmits)
            timeouts.add_metric([label], path.timeouts)
        yield from (rtt, least, retransmits, timeouts)

    def _queues(self) -> Iterator[Metric]:
        node = self.node
        yield GaugeMetricFamily("axl_recv_queue_messages", "Messages waiting for GET /recv.",
                                value=len(node.inbox))
        yield GaugeMetricFamily("axl_recv_queue_bytes", "Bytes waiting for GET /recv.",
                                value=node.inbox.queued_bytes)
        yield GaugeMetricFamily("axl_recv_polls_waiting",
                                "GET /recv long polls (and a /ws receiver's) waiting for a message.",
                                value=node.inbox.waiting_polls)
        yield GaugeMetricFamily("axl_link_queue_bytes",
                                "Traffic bytes queued on peerings under back-pressure.",
                                value=sum(link.queued_bytes for link in list(node.links.values())))
        per_peer = GaugeMetricFamily("axl_peer_queue_bytes",
                                     "Traffic bytes queued under back-pressure on each peering.",
                                     labels=["peer"])
        for key, value in queued_by_peer(node).items():
            per_peer.add_metric([key.hex()], value)
        yield per_peer
        yield GaugeMetricFamily("axl_sessions", "End-to-end encrypted sessions held.",
                                value=node.session_count())

    def _budgets(self) -> Iterator[Metric]:
        labels = ["budget", "scope"]
        limit = GaugeMetricFamily("axl_budget_limit", "The most of an input from peers or clients the node "
                                  "holds, per scope: the node, or one peer, link, stream or connection "
                                  "(axl/budgets.py).", labels=labels)
        in_use = GaugeMetricFamily("axl_budget_in_use", "What the node holds of a budget now; for a "
                                   "per-peer (link, stream, connection) budget, the most any one holds.",
                                   labels=labels)
        refused = CounterMetricFamily("axl_budget_refused", "Inputs refused, dropped or held back "
                                      "because they went beyond the budget.", labels=labels)
        for use in self.node.budgets.usage():
            scope = [use.budget, use.scope]
            limit.add_metric(scope, use.limit)
            if use.in_use is not None:
                in_use.add_metric(scope, use.in_use)
            refused.add_metric(scope, use.refused)
        yield from (limit, in_use, refused)

    def _inbox(self) -> Iterator[Metric]:
        inbox = self.node.inbox
        yield GaugeMetricFamily("axl_inbox_messages", "Messages the inbox holds: taken from senders and not "
                                "yet delivered to a client (what max_inbox_messages bounds).", value=inbox.held)
        yield GaugeMetricFamily("axl_inbox_bytes", "Payload bytes the inbox holds (what max_inbox_bytes bounds).",
                                value=inbox.held_bytes)
        yield GaugeMetricFamily("axl_inbox_durable", "1 when the inbox is kept in its SQLite file "
                                "(inbox_path), 0 when in memory only.", value=int(inbox.durable))
        commits = HistogramMetricFamily("axl_inbox_commit_seconds", "Time from starting an inbox commit "
                                        "(a batch of arrivals and deliveries) to its end.")
        commits.add_metric([], _buckets(inbox.commit_seconds), inbox.commit_seconds.total)
        yield commits
        yield GaugeMetricFamily("axl_inbox_waiting_for_room", "Messages that found the inbox full, "
                                "waiting (their senders unanswered) for a client to take one.",
                                value=inbox.waiting_for_room)
        yield CounterMetricFamily("axl_inbox_waited_for_room", "Messages that found the inbox full and "
                                  "waited for room (those refused in the end are in ..._refused_after_wait).",
                                  value=inbox.waited_for_room)
        yield CounterMetricFamily("axl_inbox_refused_after_wait", "Messages refused (503 at their "
                                  "senders) because no room opened in the inbox within the wait.",
                                  value=inbox.refused_after_wait)

    def _listener(self) -> Iterator[Metric]:
        counts = self.node.listener_counts()
        for name, value, help_text in [
            ("accepts", counts.accepts, "Overlay connections accepted on tcp_port and message_stream_port."),
            ("rejects", counts.rejects, "Overlay connections refused at max_concurrent_conns."),
            ("oversize", counts.oversize, "Inbound messages refused for exceeding max_message_size."),
            ("read_errors", counts.read_errors,
             "Inbound connections that ended, broke the protocol or stalled in the middle of a message."),
        ]:
            yield CounterMetricFamily(f"axl_listener_{name}", help_text, value=value)

    def _adapters(self) -> Iterator[Metric]:
        requests = CounterMetricFamily("axl_adapter_requests",
                                       "MCP and A2A requests: this bridge's calls to peers (out) and "
                                       "peers' calls forwarded to the local services (in).",
                                       labels=["adapter", "direction"])
        errors = CounterMetricFamily("axl_adapter_errors",
                                     "Those requests that got no answer from the service at the other end.",
                                     labels=["adapter", "direction"])
        for adapter, direction, counts in self.adapters.as_rows():
            requests.add_metric([adapter, direction], counts.requests)
            errors.add_metric([adapter, direction], counts.errors)
        yield from (requests, errors)

    def _http(self) -> Iterator[Metric]:
        requests = CounterMetricFamily("axl_http_requests", "Bridge HTTP requests by route and status.",
                                       labels=["route", "code"])
        for (route, code), count in sorted(self.http.requests.items()):
            requests.add_metric([route, str(code)], count)
        yield requests
        durations = HistogramMetricFamily("axl_http_request_duration_seconds",
                                          "Bridge HTTP request handling time by route.",
                                          labels=["route"])
        for route, histogram in sorted(self.http.durations.items()):
            durations.add_metric([route], _buckets(histogram), histogram.total)
        yield durations


def build_registry(node: ObservedNode, http: HttpStats, adapters: AdapterCounts) -> CollectorRegistry:
    """A registry of this node's metrics plus the standard process metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(node, http, adapters))
    ProcessCollector(registry=registry)
    return registry


def exposition(registry: CollectorRegistry) -> tuple[bytes, str]:
    """The text a scrape answers with, and its Content-Type."""
    return generate_latest(registry), CONTENT_TYPE_LATEST
