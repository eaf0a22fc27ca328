"""Delivery figures for a GossipSub run, the same for the simulator and the testnet.

- delivery ratio: delivered (subscriber, message) pairs / all such pairs,
  the publisher of a message not counted as its subscriber;
- redundancy: full message copies received / unique messages delivered
  (1.0 means nobody received a message twice);
- hops and latency of first deliveries: mean and 95th percentile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gossip_protocol import Delivery


@dataclass
class Report:
    messages: int
    pairs_expected: int
    pairs_delivered: int
    copies_received: int
    mean_hops: float
    p95_hops: float
    mean_latency: float
    p95_latency: float

    @property
    def delivery_ratio(self) -> float:
        return self.pairs_delivered / self.pairs_expected if self.pairs_expected else 1.0

    @property
    def redundancy(self) -> float:
        return self.copies_received / self.pairs_delivered if self.pairs_delivered else 0.0

    def lines(self) -> list[str]:
        return [
            f"messages published     {self.messages}",
            f"delivery ratio         {self.delivery_ratio:.4f}  ({self.pairs_delivered}/{self.pairs_expected})",
            f"redundancy             {self.redundancy:.3f}  ({self.copies_received} copies received)",
            f"hops        mean/p95   {self.mean_hops:.2f} / {self.p95_hops:.0f}",
            f"latency ms  mean/p95   {self.mean_latency * 1000:.1f} / {self.p95_latency * 1000:.1f}",
        ]


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def summarize(
    published: dict[str, str],
    subscribers: set[str],
    deliveries: dict[str, list[Delivery]],
    copies_received: int,
) -> Report:
    """``published`` maps message id to publisher; ``deliveries`` is per node."""
    expected = sum(len(subscribers - {origin}) for origin in published.values())
    firsts = [
        delivery
        for node, items in deliveries.items()
        if node in subscribers
        for delivery in items
        if delivery.message.msg_id in published
    ]
    hops = [float(delivery.message.hops) for delivery in firsts]
    latencies = [delivery.latency for delivery in firsts]
    return Report(
        messages=len(published),
        pairs_expected=expected,
        pairs_delivered=len(firsts),
        copies_received=copies_received,
        mean_hops=sum(hops) / len(hops) if hops else 0.0,
        p95_hops=percentile(hops, 0.95),
        mean_latency=sum(latencies) / len(latencies) if latencies else 0.0,
        p95_latency=percentile(latencies, 0.95),
    )
