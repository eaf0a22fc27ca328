"""The scale benchmark's harness on small networks: the figures must be sane."""

from __future__ import annotations

import json
import math

import pytest

from axl.bench.report import percentile
from axl.sim import Network
from axl.sim.bench import BenchConfig, format_header, format_row, main, run_bench


@pytest.mark.parametrize("shape", ["random-4", "internet"])
def test_hundred_nodes_converge_find_everyone_and_heal(shape):
    result = run_bench(BenchConfig(100, shape, seed=7, pairs=30, steady_window=20))
    assert result.converge_s is not None and result.converge_s <= 30
    assert result.quiet_s is not None and result.quiet_s >= result.converge_s
    assert result.lookup_success == 1.0
    assert result.lookups == 30  # every first-try pair also carried the stretch probe
    assert 1.0 <= result.stretch_median <= result.stretch_p95 < 4.0
    assert result.left == 10
    assert result.reconverge_s is not None
    assert result.lookup_success_after_leave == 1.0
    assert result.startup_frames > 0 and result.startup_bytes > result.startup_frames
    assert result.steady_frames == 0.0  # nothing changes and no refresh is due within 20 s idle
    mean_degree = 2 * result.links / result.nodes
    assert result.infos_mean <= (mean_degree + 1) * (result.depth_max + 1)
    assert result.infos_max < result.nodes / 2
    assert result.entries_max >= result.infos_max


def test_steady_window_over_a_refresh_counts_its_control_traffic():
    result = run_bench(BenchConfig(40, "random-4", seed=8, pairs=10, steady_window=250))
    assert 0 < result.steady_frames < result.startup_frames


def test_internet_shape_is_connected_with_a_meshed_core_and_hubs():
    net = Network(300, seed=9)
    net.internet()
    assert len(net.components()) == 1
    degrees = sorted(len(node.links) for node in net.nodes)
    assert degrees[0] >= 1
    assert degrees[-1] >= 10 * degrees[len(degrees) // 2]  # preferential attachment makes hubs
    assert 299 <= net.link_count() < 2 * 300


def test_percentile_nearest_rank():
    values = [float(v) for v in range(1, 21)]
    assert percentile(values, 0.95) == 19.0
    assert percentile(values, 0.5) == 10.0
    assert percentile([3.0], 0.95) == 3.0
    assert math.isnan(percentile([], 0.95))


def test_cli_prints_one_row_per_run_and_writes_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    args = ["--sizes", "30", "--shapes", "random-8,internet", "--pairs", "5", "--steady", "0",
            "--json", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[:2] == format_header().splitlines()
    assert len(printed) == 2 + 2 + 1
    data = json.loads(out.read_text())
    assert [r["shape"] for r in data["results"]] == ["random-8", "internet"]
    assert data["command"].endswith("--json " + str(out))
    assert all(r["lookup_success"] == 1.0 for r in data["results"])


def test_row_marks_a_departed_root():
    result = run_bench(BenchConfig(30, "random-4", seed=7, pairs=5, steady_window=0))
    row = format_row(result)
    assert row.count("|") == len(format_header().splitlines()[0].split("|")) - 1
    assert ("*" in row) == result.root_left
