"""One node's dashboard state: request counts, samples, recent log lines and live events.

Apart from the HTTP handlers (axl.observe.web) so that the bridge can keep
it from start-up, counting every request, while the web framework that
serves the dashboard loads only when someone opens it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from axl.adapters.counts import AdapterCounts
from axl.observe import report
from axl.observe.events import EventHub
from axl.observe.httpstats import HttpStats
from axl.observe.logring import LogRing
from axl.observe.series import SAMPLE_INTERVAL, SeriesRing
from axl.observe.view import ObservedNode
from axl.tasks import start_task

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

log = logging.getLogger("axl.observe")


class Observatory:
    """One node's metrics registry, series, log ring and event hub."""

    def __init__(self, node: ObservedNode, adapters: AdapterCounts,
                 sample_interval: float = SAMPLE_INTERVAL) -> None:
        self.node = node
        self.adapters = adapters
        self.sample_interval = sample_interval
        self.http = HttpStats()
        self.registry: CollectorRegistry | None = None
        self.series = SeriesRing()
        self.events = EventHub()
        self.logs = LogRing(self._log_line)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sampler: asyncio.Task | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        logging.getLogger("axl").addHandler(self.logs)
        self.node.stats.listeners.append(self.events.publish)
        self._sampler = start_task(self._sample_forever(), log, "dashboard sampler")

    def shutdown(self) -> None:
        """End the event streams (their handlers then return)."""
        self.events.close()

    def cleanup(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
        logging.getLogger("axl").removeHandler(self.logs)
        if self.events.publish in self.node.stats.listeners:
            self.node.stats.listeners.remove(self.events.publish)

    def metrics_registry(self) -> CollectorRegistry:
        """The registry is made on the first scrape: prometheus_client and the
        stdlib servers it imports cost about 1 MB resident, which a node nobody
        scrapes need not pay."""
        from axl.observe import metrics
        if self.registry is None:
            self.registry = metrics.build_registry(self.node, self.http, self.adapters)
        return self.registry

    def _log_line(self, line: dict) -> None:
        """Log records may come from any thread: publish on the loop's."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.events.publish, "log", line)

    async def _sample_forever(self) -> None:
        while True:
            sample = self.series.add(report.reading(self.node, time.time()))
            if sample is not None:
                self.events.publish("sample", sample.as_json())
            await asyncio.sleep(self.sample_interval)
