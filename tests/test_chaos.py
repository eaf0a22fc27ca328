"""Zero loss under chaos: relays killed and links cut while four flows stream.

The long version is `make chaos` (python -m axl.chaos chaos); this one runs
the same driver for a short while with a fixed seed.
"""

from __future__ import annotations

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
