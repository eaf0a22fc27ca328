"""The cycle collector's settings (axl/gctuning.py): checked in a process of
their own, since a freeze cannot be undone for what later ends in a cycle,
and on a real node, which sets aside what is alive at start and again once
the full application has loaded."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import textwrap

import aiohttp

from nodes import Cluster, wait_until

SET_ASIDE = re.compile(r"(started|full application loaded): (\d+) objects set aside from the cycle collector")


def run_python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_a_young_pass_waits_for_the_raised_threshold() -> None:
    out = run_python("""
        import gc
        from axl.gctuning import YOUNG_THRESHOLD, collect_less_often
        middle, old = gc.get_threshold()[1:]
        collect_less_often()
        gc.collect()
        passes = []
        gc.callbacks.append(lambda phase, info: passes.append(info["generation"]) if phase == "stop" else None)
        kept = [[] for _ in range(YOUNG_THRESHOLD // 2)]
        print(gc.get_threshold() == (YOUNG_THRESHOLD, middle, old), len(passes))
    """)
    assert out == "True 0", "a young pass ran before YOUNG_THRESHOLD allocations"


def test_frozen_objects_stay_out_and_later_cycles_are_still_collected() -> None:
    out = run_python("""
        import gc
        from axl.gctuning import freeze_survivors
        alive = [{"n": i} for i in range(1000)]
        frozen = freeze_survivors()
        tracked = len(gc.get_objects())
        cycle = []
        cycle.append(cycle)
        del cycle
        print(frozen >= 1000, frozen == gc.get_freeze_count(), tracked < 1000, gc.collect() >= 1)
    """)
    assert out == "True True True True"


def test_a_node_sets_aside_its_start_up_heap_and_the_full_applications(tmp_path) -> None:
    node = Cluster(tmp_path).add("solo")
    node.extra_args = ["--log-level", "debug"]
    node.start()
    try:
        wait_until(lambda: SET_ASIDE.search(node.log_path.read_text()), 10, what="the start-up freeze")

        async def open_dashboard() -> None:
            async with aiohttp.ClientSession() as http, http.get(f"{node.url}/dashboard/") as resp:
                await resp.read()
        asyncio.run(open_dashboard())
        wait_until(lambda: len(SET_ASIDE.findall(node.log_path.read_text())) == 2, 10,
                   what="the freeze after the full application loaded")
    finally:
        node.stop()
    (first, at_start), (second, after_load) = SET_ASIDE.findall(node.log_path.read_text())
    assert (first, second) == ("started", "full application loaded")
    # aiohttp's server and the agent routes are tens of thousands of objects more
    assert int(after_load) > int(at_start) > 10_000
