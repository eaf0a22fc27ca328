"""`python -m axl.bench --quick` runs real nodes and reports every figure.

Figures are machine-dependent and are not asserted here, except that no
acknowledged message may go missing and an unknown peer answers 502.
"""

import json
import math
import subprocess
import sys

from axl.bench.report import FIGURE_KEYS, render


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


def test_table_marks_missing_figures_and_keeps_columns():
    table = render({"uvloop": {"bulk1_mbps": 12.5}, "asyncio": {}}, "title")
    bulk_line = next(line for line in table.splitlines() if line.startswith("| bulk 1 hop"))
    cells = [cell.strip() for cell in bulk_line.strip("|").split("|")]
    assert cells[1:3] == ["12.5", "-"]
    assert table.splitlines()[0] == "title"
