"""The dashboard page in a real browser (headless Chromium) against real nodes.

Chromium renders /dashboard/ of the hub node a, whose peers are b and c;
the test reads the DOM the page's script built (the node's key, its two
peerings, the graph, a chart with traffic in it, the MCP/A2A and listener
counts) and saves a screenshot. Then a lone node, and the hub of twenty:
every node drawn in both layouts, and the key-prefix filter.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path

import aiohttp
import pytest

from nodes import Cluster, NodeProcess, lone_node, wait_until, wait_until_async

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
        self.graph_classes: dict[str, set[str]] = {}
        self.rows: dict[str, int] = {}
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
            self.graph_classes[attributes["data-key"]] = set(attributes.get("class", "").split())
        if tag in ("tr", "dt") and ids:
            self.rows[ids[-1]] = self.rows.get(ids[-1], 0) + 1
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
    assert dom.rows["adapters"] == 3 and dom.rows["listener"] == 4  # a header row and MCP, A2A

    screenshot = tmp_path / "dashboard.png"
    result = chromium(url, tmp_path / "profile", f"--screenshot={screenshot}")
    assert screenshot.exists(), result.stderr[-2000:]
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and screenshot.stat().st_size > 20_000
    print(f"screenshot: {screenshot}")


def rendered(url: str, profile: Path) -> DomReader:
    result = chromium(url, profile, "--dump-dom")
    assert 'id="graph"' in result.stdout, result.stderr[-2000:]
    dom = DomReader()
    dom.feed(result.stdout)
    return dom


@pytest.mark.parametrize("layout", ["tree", "force"])
def test_a_lone_node_draws_itself(tmp_path: Path, layout: str) -> None:
    with lone_node(tmp_path) as node:
        dom = rendered(f"{node.url}/dashboard/?live=0&layout={layout}", tmp_path / "profile")
    assert dom.graph_keys == {node.peer_id}
    assert {"self", "root"} <= dom.graph_classes[node.peer_id]
    assert dom.by_id["graph"]["data-layout"] == layout
    assert dom.text["graph-stats"].startswith("1 node known · 0 direct peers")


@pytest.fixture(scope="module")
def hub_of_twenty(tmp_path_factory) -> tuple[NodeProcess, list[NodeProcess]]:
    cluster = Cluster(tmp_path_factory.mktemp("twenty"))
    hub = cluster.add("hub")
    spokes = [cluster.add(f"spoke{i}", listen=False, peers=[hub]) for i in range(19)]
    try:
        hub.start()
        with ThreadPoolExecutor(4) as starting:  # each start waits for its bridge: wait for several at once
            list(starting.map(NodeProcess.start, spokes))
        wait_until(lambda: hub.get_json("/health")["peers_up"] == 19, 60, what="19 peerings at the hub")
        yield hub, spokes
    finally:
        cluster.stop_all()


@pytest.mark.parametrize("layout", ["tree", "force"])
def test_the_hub_of_twenty_draws_every_node_and_filters_by_key_prefix(hub_of_twenty, tmp_path: Path,
                                                                        layout: str) -> None:
    hub, spokes = hub_of_twenty
    everyone = {hub.peer_id} | {spoke.peer_id for spoke in spokes}
    wait_until(lambda: {e["public_key"] for e in hub.get_json("/topology")["tree"]} == everyone, 30,
               what="the hub's tree holding all twenty")
    prefix = spokes[0].peer_id[:6]
    dom = rendered(f"{hub.url}/dashboard/?live=0&layout={layout}&filter={prefix}", tmp_path / "profile")
    assert dom.graph_keys == everyone and dom.by_id["graph"]["data-nodes"] == "20"
    matching = {key for key in everyone if key.startswith(prefix)}
    assert {key for key, classes in dom.graph_classes.items() if "match" in classes} == matching
    assert {key for key, classes in dom.graph_classes.items() if "dim" in classes} == everyone - matching
    assert "peer" in dom.graph_classes[spokes[0].peer_id]
    assert "20 nodes known · 19 direct peers" in dom.text["graph-stats"]
    assert f"{len(matching)} match" in dom.text["graph-stats"]
    screenshot = tmp_path / f"hub-of-twenty-{layout}.png"
    chromium(f"{hub.url}/dashboard/?live=0&layout={layout}", tmp_path / "profile", f"--screenshot={screenshot}")
    assert screenshot.exists()
    print(f"screenshot: {screenshot}")


class DevToolsPage:
    """One page in headless Chromium, driven over the DevTools protocol on loopback:
    what a person does (clicks, typing) as script run in the page."""

    def __init__(self, process: subprocess.Popen, http: aiohttp.ClientSession,
                 socket: aiohttp.ClientWebSocketResponse) -> None:
        self.process, self.http, self.socket = process, http, socket
        self.calls = 0

    @classmethod
    async def open(cls, url: str, profile: Path) -> "DevToolsPage":
        sandbox = ["--no-sandbox"] if os.geteuid() == 0 else []
        process = subprocess.Popen([BROWSER, *QUIET_FLAGS, *sandbox, f"--user-data-dir={profile}",
                                    "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", url],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = profile / "DevToolsActivePort"
        await wait_until_async(lambda: port_file.exists() and port_file.read_text().strip(), 30,
                               what="Chromium's DevTools port")
        port = int(port_file.read_text().split()[0])
        http = aiohttp.ClientSession()
        async with http.get(f"http://127.0.0.1:{port}/json/list") as answer:
            [target] = [t for t in await answer.json() if t["type"] == "page"]
        return cls(process, http, await http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0))

    async def evaluate(self, expression: str):
        self.calls += 1
        await self.socket.send_json({"id": self.calls, "method": "Runtime.evaluate",
                                     "params": {"expression": expression, "returnByValue": True}})
        while (reply := await asyncio.wait_for(self.socket.receive_json(), BROWSER_TIMEOUT)).get("id") != self.calls:
            pass
        assert "exceptionDetails" not in reply["result"], reply
        return reply["result"]["result"].get("value")

    async def until(self, expression: str, what: str) -> None:
        await wait_until_async(lambda: self.evaluate(expression), 30, interval=0.1, what=what)

    async def close(self) -> None:
        await self.socket.close()
        await self.http.close()
        self.process.terminate()
        self.process.wait(10)


DRAWN = "document.querySelectorAll('#graph g.node').length"
STATS = "document.getElementById('graph-stats').textContent"


async def test_freeze_holds_the_drawing_while_the_network_changes(hub_of_twenty, tmp_path: Path) -> None:
    hub, spokes = hub_of_twenty
    leaving = spokes[-1]
    page = await DevToolsPage.open(f"{hub.url}/dashboard/", tmp_path / "profile")
    try:
        await page.until(f"{DRAWN} === 20 && document.getElementById('live').textContent === 'live'",
                         "twenty nodes drawn and the event stream live")
        await page.evaluate("document.getElementById('freeze').click()")
        assert await page.evaluate("document.getElementById('freeze').getAttribute('aria-pressed')") == "true"
        await asyncio.to_thread(leaving.stop)
        await page.until(f"{STATS}.includes('newer topology held back')", "the new topology held back")
        assert await page.evaluate(DRAWN) == 20
        await page.evaluate("document.getElementById('layout-force').click()")
        assert await page.evaluate("document.getElementById('graph').dataset.layout") == "force"
        assert await page.evaluate(DRAWN) == 20
        await page.evaluate("document.getElementById('freeze').click()")
        # the topology held back may be one the leaver's tree entry had not
        # yet left; the next one the page gets, unfrozen, is drawn at once
        await page.until(f"{DRAWN} === 19", "the leaver gone from the drawing once unfrozen")
        filter_by = spokes[0].peer_id[:8]
        await page.evaluate(f"const box = document.getElementById('key-filter'); box.value = '{filter_by.upper()}';"
                            " box.dispatchEvent(new Event('input'))")
        assert await page.evaluate("[...document.querySelectorAll('#graph g.match')].map(g => g.dataset.key)") == [
            spokes[0].peer_id]
    finally:
        await page.close()
        await asyncio.to_thread(leaving.start)
