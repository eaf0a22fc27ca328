"""Node statistics, the series ring, the event hub, the log ring and the
per-node metric registries, without a network."""

from __future__ import annotations

import logging

from prometheus_client import generate_latest

from axl.adapters.counts import AdapterCounts
from axl.config import NodeConfig
from axl.identity import NodeIdentity
from axl.link.counters import LinkCounters
from axl.node import Node
from axl.node.stats import Histogram, NodeStats
from axl.observe.events import EventHub
from axl.observe.logring import LogRing
from axl.observe.metrics import HttpStats, build_registry
from axl.observe.series import Reading, SeriesRing
from nodes import metric_samples

KEY_A, KEY_B = b"\x01" * 32, b"\x02" * 32


def samples(registry) -> dict[tuple[str, tuple], float]:
    return metric_samples(generate_latest(registry).decode())


def test_histogram_buckets_are_cumulative_and_end_at_infinity() -> None:
    histogram = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 7.0):
        histogram.observe(value)
    assert histogram.cumulative() == [(0.1, 2), (1.0, 3), (float("inf"), 4)]
    assert histogram.count == 4 and abs(histogram.total - 7.65) < 1e-9


def test_send_outcomes_split_deliveries_from_failures() -> None:
    stats = NodeStats(now=0.0)
    stats.send_finished(KEY_A, 100, 200, 0.02, now=1.0)
    stats.send_finished(KEY_A, 50, 503, None, now=2.0)
    stats.send_finished(None, 0, 400, None, now=3.0)
    assert stats.sent_by_status == {200: 1, 503: 1, 400: 1}
    assert stats.payload_out == 100 and stats.ack_seconds.count == 1
    entry = stats.destinations[KEY_A]
    assert (entry.messages_sent, entry.bytes_sent, entry.failures) == (1, 100, {503: 1})
    assert entry.last_seen == 2.0 and entry.mean_ack_seconds == 0.02


def test_destinations_are_an_lru_of_bounded_size() -> None:
    stats = NodeStats(now=0.0, max_destinations=3)
    keys = [bytes([i]) * 32 for i in range(5)]
    for key in keys:
        stats.message_received(key, 10, now=1.0)
    stats.message_received(keys[2], 10, now=2.0)
    stats.message_received(bytes([9]) * 32, 10, now=3.0)
    assert list(stats.destinations) == [keys[4], keys[2], bytes([9]) * 32]
    assert stats.messages_received == 7 and stats.payload_in == 70


def test_ids_that_never_answered_are_kept_apart_and_few() -> None:
    stats = NodeStats(now=0.0, max_destinations=2, max_unanswered=2)
    stats.send_finished(KEY_A, 10, 200, 0.01, now=1.0)
    made_up = [bytes([0x80 + i]) * 32 for i in range(5)]
    for i, key in enumerate(made_up):
        stats.send_finished(key, 10, 502, None, now=2.0 + i)
    assert list(stats.destinations) == [KEY_A]
    assert list(stats.unanswered) == made_up[-2:]
    stats.send_finished(made_up[-1], 10, 200, 0.01, now=9.0)
    assert list(stats.destinations) == [KEY_A, made_up[-1]] and list(stats.unanswered) == made_up[-2:-1]
    assert stats.destinations[made_up[-1]].failures == {502: 1}
    assert [key for key, _ in stats.destination_entries()] == [made_up[-1], made_up[-2], KEY_A]


def test_peer_totals_survive_reconnects_and_events_are_emitted() -> None:
    stats = NodeStats(now=0.0)
    events = []
    stats.listeners.append(lambda kind, data: events.append((kind, data["state"], data["reason"])))
    first = LinkCounters(bytes_in=10, bytes_out=20, frames_in=1, frames_out=2)
    stats.link_up(KEY_A, 1, first, now=1.0)
    first.bytes_in += 5
    stats.link_down(KEY_A, 1, "peer timeout", now=2.0)
    second = LinkCounters(bytes_in=100)
    stats.link_up(KEY_A, 2, second, now=3.0)
    peer = stats.peers[KEY_A]
    assert peer.reconnects == 1 and peer.up_since == 3.0
    assert peer.totals() == LinkCounters(115, 20, 1, 2)
    assert stats.link_totals().bytes_in == 115
    assert events == [("peer", "up", ""), ("peer", "down", "peer timeout"), ("peer", "up", "")]


def test_only_peers_that_are_down_are_forgotten() -> None:
    stats = NodeStats(now=0.0, max_peers=1)
    stats.link_up(KEY_A, 1, LinkCounters(), now=1.0)
    stats.link_up(KEY_B, 2, LinkCounters(), now=2.0)
    assert set(stats.peers) == {KEY_A, KEY_B}
    stats.link_down(KEY_A, 1, "gone", now=3.0)
    stats.link_up(b"\x03" * 32, 3, LinkCounters(), now=4.0)
    assert KEY_A not in stats.peers and KEY_B in stats.peers


def test_series_ring_stores_rates_and_keeps_its_capacity() -> None:
    ring = SeriesRing(capacity=2)

    def reading(t: float, messages: int) -> Reading:
        return Reading(t, messages, 2 * messages, 1000 * messages, 0, 3, 0, 4096)

    assert ring.add(reading(0.0, 0)) is None
    sample = ring.add(reading(2.0, 10))
    assert sample is not None and sample.messages_in_per_sec == 5.0
    assert sample.messages_out_per_sec == 10.0 and sample.bytes_in_per_sec == 5000.0
    assert sample.recv_queue_messages == 3
    ring.add(reading(4.0, 10))
    ring.add(reading(6.0, 30))
    assert [s.time for s in ring.samples] == [4.0, 6.0]
    assert ring.samples[-1].messages_in_per_sec == 10.0


async def test_event_hub_drops_a_subscriber_that_falls_behind() -> None:
    hub = EventHub(max_subscribers=2, queue_limit=3)
    slow, fast = hub.subscribe(), hub.subscribe()
    assert hub.subscribe() is None
    for i in range(3):
        hub.publish("sample", {"i": i})
        assert fast.get_nowait() == ("sample", {"i": i})
    hub.publish("sample", {"i": 3})
    assert [slow.get_nowait() for _ in range(4)] == [("sample", {"i": i}) for i in range(3)] + [None]
    assert fast.get_nowait() == ("sample", {"i": 3})
    assert hub.subscribe() is not None
    hub.close()
    assert fast.get_nowait() is None


def test_log_ring_keeps_the_newest_lines() -> None:
    seen = []
    ring = LogRing(seen.append, capacity=3)
    logger = logging.getLogger("axl.test-log-ring")
    logger.addHandler(ring)
    logger.setLevel(logging.INFO)
    try:
        for i in range(5):
            logger.info("line %d", i)
    finally:
        logger.removeHandler(ring)
    assert [line["message"] for line in ring.recent(2)] == ["line 3", "line 4"]
    assert len(ring.recent(100)) == 3 and len(seen) == 5
    assert seen[0]["level"] == "INFO" and seen[0]["logger"] == "axl.test-log-ring"


async def test_each_node_has_its_own_registry() -> None:
    nodes = [Node(NodeConfig(), NodeIdentity.generate()) for _ in range(2)]
    registries = [build_registry(node, HttpStats(), AdapterCounts()) for node in nodes]
    nodes[0].stats.send_finished(KEY_A, 7, 200, 0.01, now=1.0)
    nodes[0].stats.message_received(KEY_B, 3, now=1.0)
    first, second = samples(registries[0]), samples(registries[1])
    assert first[("axl_messages_sent_total", (("status", "200"),))] == 1
    assert ("axl_messages_sent_total", (("status", "200"),)) not in second
    assert first[("axl_messages_received_total", ())] == 1
    assert second[("axl_messages_received_total", ())] == 0
    assert first[("axl_payload_bytes_total", (("direction", "out"),))] == 7
    assert first[("axl_send_ack_seconds_count", ())] == 1
    assert first[("process_resident_memory_bytes", ())] > 0
