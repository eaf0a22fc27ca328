"""Bridge request counts and durations, kept as plain numbers.

Apart from axl.observe.metrics so that counting requests does not import
prometheus_client: that loads on the first scrape of /metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from axl.node.stats import Histogram

HTTP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0, 60.0)


@dataclass
class HttpStats:
    """Bridge requests by route template (a bounded set) and status code."""

    requests: dict[tuple[str, int], int] = field(default_factory=dict)
    durations: dict[str, Histogram] = field(default_factory=dict)

    def observe(self, route: str, code: int, seconds: float) -> None:
        key = (route, code)
        self.requests[key] = self.requests.get(key, 0) + 1
        histogram = self.durations.get(route)
        if histogram is None:
            histogram = self.durations[route] = Histogram(HTTP_BUCKETS)
        histogram.observe(seconds)
