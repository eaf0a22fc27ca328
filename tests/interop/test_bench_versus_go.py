"""`make bench-go` in its quick mode: our node and Go AXL on one probe."""

import os
import subprocess
import sys

from goprocs import go_bin_dir


def test_the_side_by_side_probe_measures_both_kinds(figures):
    run = subprocess.run([sys.executable, "-m", "axl.bench.versus_go", "--quick"],
                         env=dict(os.environ, AXL_GO_BIN_DIR=str(go_bin_dir())),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    rounds = [line for line in lines if line.startswith(("ours ", "go "))]
    assert [line.split()[0] for line in rounds] == ["ours", "go"], run.stdout
    assert rounds[0].split(", ")[1].startswith("0 of 200 never read"), rounds[0]
    ratios = {line[:34].strip(): line[34:].split()[2] for line in lines
              if line.startswith(("acknowledged/s", "CPU per message"))}
    assert len(ratios) == 3 and all(float(value) > 0 for value in ratios.values()), run.stdout
    # 200 messages are a few ticks of CPU time: only the rate is worth printing
    figures.append(f"side by side, quick (200 x 1 KiB /send), ours/Go acknowledged/s: {ratios['acknowledged/s']}")
