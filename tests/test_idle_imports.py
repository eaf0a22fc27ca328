"""An idle node does not import what only a feature it has not used needs.

The subject runs the real start-up path (axl.cli.main, peered with a real
node) inside a probe process that reports its sys.modules once the peering
is up, then once more after a scrape of /metrics, then stops it with
SIGTERM. The resident memory itself is the bench's figure (idle node RSS).
"""

from __future__ import annotations

import json
import subprocess
import sys

from nodes import Cluster

# What each costs an idle node, and what loads it instead.
HEAVY = (
    "aiohttp",            # about 13 MB with its CA bundle; the first request the front door hands over loads it
                          # (not a /metrics scrape: the front door answers that itself)
    "cryptography",       # about 9 MB (its own OpenSSL); only quic:// links load it
    "prometheus_client",  # about 1 MB with its stdlib servers; the first /metrics scrape loads it
    "aioquic",            # quic:// peers and listeners only
    "mcp", "a2a", "uvicorn", "httpx", "starlette", "pydantic",  # the bundled agent services, other programs
)

PROBE = r"""
import json, os, signal, sys, threading, time, urllib.request

import axl.cli

URL = sys.argv[2]


def get(path):
    with urllib.request.urlopen(URL + path, timeout=5) as response:
        return response.read()


def report(stage):
    names = sorted({name.split(".")[0] for name in list(sys.modules)})
    print(json.dumps({"stage": stage, "modules": names}), flush=True)


def watch():
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if json.loads(get("/health"))["peers_up"] >= 1:
                break
        except OSError:
            pass
        time.sleep(0.1)
    else:
        print("peering did not come up", file=sys.stderr, flush=True)
        os._exit(3)
    report("idle")
    get("/metrics")
    report("scraped")
    os.kill(os.getpid(), signal.SIGTERM)


threading.Thread(target=watch, daemon=True).start()
sys.exit(axl.cli.main(["--config", sys.argv[1], "--log-level", "warning"]))
"""


def run_probe(tmp_path) -> dict[str, set[str]]:
    cluster = Cluster(tmp_path)
    peer = cluster.add("peer")
    subject = cluster.add("subject", peers=[peer])
    peer.start()
    try:
        done = subprocess.run([sys.executable, "-c", PROBE, str(subject.config_path), subject.url],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
    finally:
        cluster.stop_all()
    assert done.returncode == 0, done.stderr[-2000:]
    reports = [json.loads(line) for line in done.stdout.splitlines()]
    return {entry["stage"]: set(entry["modules"]) for entry in reports}


def test_idle_node_leaves_heavy_modules_unimported(tmp_path) -> None:
    stages = run_probe(tmp_path)
    idle = stages["idle"]
    assert {"axl", "nacl"} <= idle  # the probe saw a running node
    assert idle.isdisjoint(HEAVY), sorted(idle & set(HEAVY))
    # /metrics works from the front door: the registry loads, the full application does not
    assert "prometheus_client" in stages["scraped"]
    assert "aiohttp" not in stages["scraped"]
