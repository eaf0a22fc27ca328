"""Zero loss under chaos: relays killed and links cut while four flows stream.

The long version is `make chaos` (python -m axl.chaos chaos); this one runs
the same driver for a short while with a fixed seed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from axl.chaos import run_chaos


def test_every_acknowledged_message_arrives_once_and_in_order(tmp_path: Path) -> None:
    report = run_chaos(tmp_path, duration=20.0, seed=3)
    print(report.text())
    assert report.disruptions, "the controller never disrupted anything"
    assert any(d.startswith("kill relay") for d in report.disruptions) or \
        any(d.startswith("cut link") for d in report.disruptions)
    assert report.acknowledged > 50
    assert report.lost == 0
    assert report.duplicated == 0
    assert report.out_of_order == 0
    assert report.forged_sender == 0
    assert report.received >= report.acknowledged



def _processes_mentioning(text: str) -> list[int]:
    """The pids whose command line holds `text` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def test_a_chaos_run_stopped_with_sigterm_stops_its_nodes(tmp_path: Path) -> None:
    run = subprocess.Popen([sys.executable, "-m", "axl.chaos", "crash", "--messages", "1000000", "--senders", "2",
                            "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while len(_processes_mentioning(str(tmp_path / "node-"))) < 3:
            assert time.monotonic() < deadline, "the crash run's nodes did not start"
            time.sleep(0.2)
        time.sleep(1.0)
        run.send_signal(signal.SIGTERM)
        _, errors = run.communicate(timeout=60)
    finally:
        run.kill()
    assert run.returncode == 130
    assert b"interrupted: the nodes were stopped" in errors
    assert _processes_mentioning(str(tmp_path / "node-")) == []
