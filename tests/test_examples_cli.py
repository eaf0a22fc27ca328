"""The examples' command lines: expected failures end in one line that says what to do."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nodes import Cluster, free_port

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCRIPTS = {
    "convergecast": [EXAMPLES / "convergecast.py"],
    "tensors": [EXAMPLES / "tensors.py", "recv"],
    "gossip_run": [EXAMPLES / "gossipsub" / "gossip_run.py"],
}


def run_example(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *map(str, SCRIPTS[name]), *args],
                          capture_output=True, text=True, timeout=60)


def one_line_failure(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def write_testnet(path: Path, ports: list[int]) -> Path:
    nodes = [{"index": i, "bridge": f"http://127.0.0.1:{port}", "peer_id": "ab" * 32} for i, port in enumerate(ports)]
    path.write_text(json.dumps({"nodes": nodes}))
    return path


@pytest.mark.parametrize("name", SCRIPTS)
def test_missing_testnet_file_says_how_to_start_one(tmp_path, name):
    line = one_line_failure(run_example(name, "--testnet", str(tmp_path / "testnet.json")))
    assert f"no testnet at {tmp_path / 'testnet.json'}" in line and "make testnet" in line


@pytest.mark.parametrize("name", ["convergecast", "tensors"])
def test_a_node_the_testnet_lacks_is_named(tmp_path, name):
    testnet = write_testnet(tmp_path / "testnet.json", [free_port() for _ in range(5)])
    line = one_line_failure(run_example(name, "--testnet", str(testnet), "--node", "9"))
    assert line.endswith("has 5 nodes (0-4); there is no node 9")


def test_a_destination_node_the_testnet_lacks_is_named(tmp_path):
    testnet = write_testnet(tmp_path / "testnet.json", [free_port() for _ in range(2)])
    result = subprocess.run([sys.executable, str(EXAMPLES / "tensors.py"), "send", "--testnet", str(testnet),
                             "--to-node", "7"], capture_output=True, text=True, timeout=60)
    assert one_line_failure(result).endswith("has 2 nodes (0-1); there is no node 7")


@pytest.mark.parametrize("script", [*(args[0] for args in SCRIPTS.values()),
                                    EXAMPLES / "gossipsub" / "gossip_driver.py",
                                    EXAMPLES / "gossipsub" / "gossip_sim.py",
                                    EXAMPLES / "mcp" / "weather_server.py"], ids=lambda path: path.name)
def test_a_python_without_the_projects_packages_says_what_to_run(script):
    """-S -E: no site-packages and no PYTHONPATH, as a system Python outside the virtualenv."""
    relative = script.relative_to(EXAMPLES.parent)
    result = subprocess.run([sys.executable, "-S", "-E", str(relative)], cwd=EXAMPLES.parent,
                            capture_output=True, text=True, timeout=60)
    assert one_line_failure(result) == (
        f"{script.name}: {sys.executable} has no module 'axl': run `.venv/bin/python {relative}` "
        f"(after `make install`), or `. .venv/bin/activate` first")


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_stale_testnet_file_says_the_node_is_gone(tmp_path, name):
    port = free_port()
    testnet = write_testnet(tmp_path / "testnet.json", [port, free_port()])
    line = one_line_failure(run_example(name, "--testnet", str(testnet)))
    assert f"no node answers at http://127.0.0.1:{port}: is it still running?" in line
    assert "make testnet" in line


def test_tensors_recv_says_what_it_waits_for(tmp_path):
    cluster = Cluster(tmp_path)
    node = cluster.add("only")
    try:
        cluster.start_all()
        result = run_example("tensors", "--bridge", node.url, "--count", "0")
    finally:
        cluster.stop_all()
    assert result.returncode == 0, result.stderr
    assert f"receiving on {node.url} as {node.peer_id}; waiting up to 60 s for a tensor" in result.stdout
    assert f"tensors.py send --to {node.peer_id}" in result.stdout


@pytest.mark.parametrize("option, complaint", [
    (["--dtype", "foo"], "'foo' is not a numpy dtype"),
    (["--dtype", "object"], "'object' is not a numeric dtype"),
    (["--shape", "a,b"], "is not sizes separated by commas"),
    (["--shape", "4,0"], "every size must be positive"),
])
def test_tensors_bad_send_options_are_usage_errors(option, complaint):
    result = subprocess.run([sys.executable, str(EXAMPLES / "tensors.py"), "send", "--to", "ab" * 32, *option],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert complaint in result.stderr.strip().splitlines()[-1]


def test_gossip_run_refuses_more_random_peers_than_there_are_nodes(tmp_path):
    testnet = write_testnet(tmp_path / "testnet.json", [free_port() for _ in range(5)])
    result = run_example("gossip_run", "--testnet", str(testnet), "--degree", "6")
    assert result.returncode == 2 and "at most 4 gossip peers among 5 nodes" in result.stderr
