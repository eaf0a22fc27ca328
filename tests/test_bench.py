"""`python -m axl.bench --quick` runs real nodes and reports every figure.

Figures are machine-dependent and are not asserted here, except that no
acknowledged message may go missing and an unknown peer answers 502.
"""

import asyncio
import json
import math
import os
import subprocess
import sys

import pytest

from axl.bench import scenarios
from axl.bench.report import BEFORE_FILE, FIGURE_KEYS, EarlierRun, render
from axl.bench.scenarios import BenchFailed, LoopBench, Sizes


def test_quick_bench_reports_every_figure(tmp_path):
    out = tmp_path / "bench.json"
    run = subprocess.run(
        [sys.executable, "-m", "axl.bench", "--quick", "--loop", "asyncio", "--json", str(out)],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    figures = json.loads(out.read_text())["loops"]["asyncio"]
    missing = [key for key in FIGURE_KEYS if key not in figures or math.isnan(figures[key])]
    assert missing == []
    assert figures["small_lost"] == 0 and figures["ws_lost"] == 0
    assert figures["unknown_peer_status"] == 502
    assert figures["bulk1_mbps"] > 0 and figures["raw_tls_mbps"] > 0
    assert "ratio to raw TLS" in run.stdout and "asyncio" in run.stdout
    assert "4937a85 asyncio" in run.stdout and "target" in run.stdout
    written = json.loads(out.read_text())
    assert written["source"].startswith("python -m axl.bench --quick at ")
    assert EarlierRun.load(out, "asyncio").figures == figures
    assert _ws_cpu_cells(run.stdout) == [
        ["CPU per message: sending node, ms", f"{figures['ws_cpu_sender_ms']:.3f}"],
        ["CPU per message: receiving node, ms", f"{figures['ws_cpu_receiver_ms']:.3f}"],
        ["CPU per message: the bench's clients (sending and receiving), ms", f"{figures['ws_cpu_client_ms']:.3f}"],
    ]
    assert figures["ws_cpu_client_ms"] > 0


def _ws_cpu_cells(table: str) -> list[list[str]]:
    """The label and first figure of the CPU rows under the table's /ws row."""
    lines = table.splitlines()
    ws_at = next(at for at, line in enumerate(lines) if line.startswith("| 1 KiB over one /ws socket (durable"))
    section = []
    for line in lines[ws_at + 1:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if not line.startswith("|   "):
            break
        section.append(cells[:2])
    return [cells for cells in section if cells[0].startswith("CPU per message")]


def test_shipped_earlier_run_names_its_source_and_known_figures():
    for loop in ("uvloop", "asyncio"):
        earlier = EarlierRun.load(BEFORE_FILE, loop)
        assert earlier.heading == f"4937a85 {loop}"
        assert "4937a85" in earlier.source
        assert set(earlier.figures) <= set(FIGURE_KEYS)


def test_unreadable_earlier_run_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"loops": {}}')
    run = subprocess.run(
        [sys.executable, "-m", "axl.bench", "--quick", "--loop", "asyncio", "--before", str(bad)],
        capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert run.stderr.strip() == f"axl.bench: {bad} is not a `python -m axl.bench --json` file with asyncio figures"


def test_a_phase_that_never_ends_fails_the_bench(tmp_path, monkeypatch):
    monkeypatch.setattr(scenarios, "PHASE_DEADLINE", 0.2)
    bench = LoopBench("asyncio", Sizes.choose(True), tmp_path)
    with pytest.raises(BenchFailed, match=r"^asyncio: small messages: no result after 0 s"):
        asyncio.run(bench._phase("small messages", asyncio.sleep(30)))


def test_table_marks_missing_figures_and_keeps_columns():
    table = render({"uvloop": {"bulk1_mbps": 12.5}, "asyncio": {}}, "title")
    bulk_line = next(line for line in table.splitlines() if line.startswith("| bulk 1 hop"))
    cells = [cell.strip() for cell in bulk_line.strip("|").split("|")]
    assert cells[1:3] == ["12.5", "-"]
    assert table.splitlines()[0] == "title"


def test_table_shows_the_earlier_run_before_the_target():
    earlier = EarlierRun("abc1234 uvloop", {"bulk1_mbps": 9.0}, "an earlier run")
    table = render({"uvloop": {"bulk1_mbps": 12.5}}, "title", earlier)
    header = [cell.strip() for cell in table.splitlines()[2].strip("|").split("|")]
    assert header == ["figure", "uvloop", "abc1234 uvloop", "target"]
    bulk_line = next(line for line in table.splitlines() if line.startswith("| bulk 1 hop"))
    assert [cell.strip() for cell in bulk_line.strip("|").split("|")][1:3] == ["12.5", "9.0"]
    assert table.splitlines()[-1] == "abc1234 uvloop: an earlier run"


def test_quick_wan_bench_measures_every_figure_across_a_shaped_relay():
    """`make wan` in its quick mode: two nodes across the paced, delayed relay."""
    run = subprocess.run([sys.executable, "-m", "axl.bench.wan", "--quick", "--no-go"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    row = next(line for line in run.stdout.splitlines() if line.startswith("| ours |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert len(cells) == 9 and "nan" not in row
    assert cells[-2:] == ["0", "0"], row


def test_the_side_by_side_probe_says_it_is_skipped_without_go():
    run = subprocess.run([sys.executable, "-m", "axl.bench.versus_go", "--quick"],
                         env=dict(os.environ, AXL_GO_BIN_DIR=""), capture_output=True, text=True, timeout=60)
    assert (run.returncode, run.stdout.strip()) == (0, "versus Go: skipped (no axl-node in AXL_GO_BIN_DIR)")


def test_the_side_by_side_probe_refuses_a_round_count_of_zero_in_one_line():
    run = subprocess.run([sys.executable, "-m", "axl.bench.versus_go", "--rounds", "0"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1].endswith("argument --rounds: '0' is not a whole number above 0")
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("workload", ["core", "wsframes", "ws-nodes"])
def test_the_instruction_workloads_check_what_they_count(workload):
    """Each workload checks its own messages arrived (acknowledged, or read
    back whole) and fails otherwise; what valgrind counts is that run
    (ws-nodes: two real nodes, here started without valgrind)."""
    done = subprocess.run([sys.executable, "-m", "axl.bench.instructions", "--run", workload, "200"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]


def test_instruction_counts_without_valgrind_are_one_line_and_exit_2(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "axl.bench.instructions"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2
    assert done.stderr == "axl.bench.instructions: valgrind not found (Debian: apt install valgrind)\n"
