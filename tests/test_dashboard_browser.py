"""The dashboard page in a real browser (headless Chromium) against three real nodes.

Chromium renders /dashboard/ of the hub node a, whose peers are b and c;
the test reads the DOM the page's script built (the node's key, its two
peerings, the graph, a chart with traffic in it) and saves a screenshot.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from nodes import Cluster, NodeProcess, wait_until

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(BROWSER is None, reason="chromium is not installed (apt-get install chromium)")

BROWSER_TIMEOUT = 90
# Keep the browser to loopback: no update checks, sync, or other background requests.
QUIET_FLAGS = ["--headless", "--disable-gpu", "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--disable-default-apps", "--no-pings",
               "--disable-domain-reliability", "--disable-features=Translate,OptimizationHints,MediaRouter",
               "--window-size=1280,1400", "--hide-scrollbars"]


class DomReader(HTMLParser):
    """Collects what the test checks: elements by id, rows and graph nodes by key."""

    def __init__(self) -> None:
        super().__init__()
        self.by_id: dict[str, dict] = {}
        self.text: dict[str, str] = {}
        self.peer_rows: list[dict] = []
        self.graph_keys: set[str] = set()
        self.polylines: dict[str, int] = {}
        self._open: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attributes = dict(attrs)
        ids = [i for _, i in self._open if i]
        if "id" in attributes:
            self.by_id[attributes["id"]] = attributes
        if tag == "tr" and "data-key" in attributes and "peerings" in ids:
            self.peer_rows.append(attributes)
        if tag == "g" and "data-key" in attributes and "graph" in ids:
            self.graph_keys.add(attributes["data-key"])
        if tag == "polyline" and ids:
            self.polylines[ids[-1]] = self.polylines.get(ids[-1], 0) + 1
        if tag not in ("circle", "line", "polyline", "meta", "link", "br", "input", "img"):
            self._open.append((tag, attributes.get("id")))

    def handle_endtag(self, tag: str) -> None:
        if any(open_tag == tag for open_tag, _ in self._open):
            while self._open.pop()[0] != tag:
                pass

    def handle_data(self, data: str) -> None:
        if self._open and self._open[-1][1]:
            key = self._open[-1][1]
            self.text[key] = self.text.get(key, "") + data


def chromium(url: str, profile: Path, *extra: str) -> subprocess.CompletedProcess:
    sandbox = ["--no-sandbox"] if os.geteuid() == 0 else []
    return subprocess.run([BROWSER, *QUIET_FLAGS, *sandbox, f"--user-data-dir={profile}",
                           "--virtual-time-budget=5000", *extra, url],
                          capture_output=True, text=True, timeout=BROWSER_TIMEOUT)


@pytest.fixture(scope="module")
def trio(tmp_path_factory) -> tuple[NodeProcess, NodeProcess, NodeProcess]:
    cluster = Cluster(tmp_path_factory.mktemp("browser"))
    a = cluster.add("a")
    b = cluster.add("b", peers=[a])
    c = cluster.add("c", peers=[a])
    cluster.start_all()
    try:
        wait_until(lambda: a.get_json("/health")["peers_up"] == 2, 20, what="a peered with b and c")
        yield a, b, c
    finally:
        cluster.stop_all()


def test_dashboard_renders_identity_peers_graph_and_traffic(trio, tmp_path: Path) -> None:
    a, b, c = trio
    wait_until(lambda: a.send(c.peer_id, b"warm-up")[0] == 200, 30, what="a path from a to c")
    for i in range(10):
        assert a.send(c.peer_id, b"m" * 4000)[0] == 200
        assert b.send(c.peer_id, b"n" * 1000)[0] == 200
    def charted(samples: list[dict]) -> bool:
        """Two points at least (a line), one of them with a's sends in it."""
        return len(samples) >= 2 and any(s["messages_out_per_sec"] > 0 for s in samples)

    wait_until(lambda: charted(a.get_json("/dashboard/api/series")["samples"]),
               15, what="two samples, one with a's sends in it")

    url = f"{a.url}/dashboard/?live=0"
    result = chromium(url, tmp_path / "profile", "--dump-dom")
    assert "our-key" in result.stdout, result.stderr[-2000:]
    dom = DomReader()
    dom.feed(result.stdout)

    assert dom.text["our-key"].strip() == a.peer_id
    assert {row["data-key"] for row in dom.peer_rows} == {b.peer_id, c.peer_id}
    assert all(row["data-up"] == "true" for row in dom.peer_rows)
    assert {a.peer_id, b.peer_id, c.peer_id} <= dom.graph_keys
    chart = dom.by_id["chart-messages"]
    assert int(chart["data-points"]) >= 2 and float(chart["data-max"]) > 0
    assert dom.polylines.get("chart-messages") == 2
    assert float(dom.by_id["chart-bytes"]["data-max"]) > 0

    screenshot = tmp_path / "dashboard.png"
    result = chromium(url, tmp_path / "profile", f"--screenshot={screenshot}")
    assert screenshot.exists(), result.stderr[-2000:]
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and screenshot.stat().st_size > 20_000
    print(f"screenshot: {screenshot}")
