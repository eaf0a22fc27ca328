"""The local testnet launcher, with real axl-node processes and with a stand-in.

Run as a program, this file is the stand-in: a process that takes the same
command line as axl-node and serves the same HTTP bridge, but delivers
/send by posting straight to the destination's stand-in (it reads the other
nodes' configs beside its own) and reports a tree computed from the configs.
The examples' tests use it to check their own logic independently of the
overlay; the same tests also run against real nodes.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import deque
from pathlib import Path

import pytest

from axl.identity import NodeIdentity
from axl.harness import LOOPBACK, ephemeral_port_floor, free_port
from axl.testnet import (
    PrefixedRun,
    Testnet,
    TestnetError,
    TreeView,
    convergence_problems,
    main,
    parse_topology,
    shape_edges,
)

FAKE_NODE_COMMAND = [sys.executable, str(Path(__file__).resolve())]
REAL_NODE = "real"
FAKE_NODE = "fake"


# ----- the stand-in node

def _network_from_configs(config_path: Path) -> tuple[dict[str, int], dict[str, set[str]], str]:
    """Every node's api port and neighbours, and our own id, from the configs beside ours."""
    ports: dict[str, int] = {}
    by_listen: dict[str, str] = {}
    configs: dict[str, dict] = {}
    for path in sorted(config_path.parent.glob("node-*.json")):
        config = json.loads(path.read_text())
        key = NodeIdentity.load_pem(config["PrivateKeyPath"]).peer_id
        ports[key] = config["api_port"]
        by_listen.update({uri: key for uri in config.get("Listen", [])})
        configs[key] = config
    neighbours: dict[str, set[str]] = {key: set() for key in ports}
    for key, config in configs.items():
        for uri in config.get("Peers", []):
            neighbours[key].add(by_listen[uri])
            neighbours[by_listen[uri]].add(key)
    own = NodeIdentity.load_pem(json.loads(config_path.read_text())["PrivateKeyPath"]).peer_id
    return ports, neighbours, own


def _bfs_parents(neighbours: dict[str, set[str]]) -> dict[str, str]:
    root = min(neighbours)
    parents, frontier = {root: ""}, deque([root])
    while frontier:
        key = frontier.popleft()
        for other in sorted(neighbours[key]):
            if other not in parents:
                parents[other] = key
                frontier.append(other)
    return parents


async def _serve_fake(config_path: Path) -> None:
    from aiohttp import ClientSession, web

    ports, neighbours, own = _network_from_configs(config_path)
    parents = _bfs_parents(neighbours)
    inbox: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
    client = ClientSession()

    async def topology(request: web.Request) -> web.Response:
        return web.json_response({
            "our_public_key": own,
            "peers": [{"public_key": key, "up": True} for key in sorted(neighbours[own])],
            "tree": [{"public_key": key, "parent": parent, "sequence": 1} for key, parent in parents.items()],
        })

    async def send(request: web.Request) -> web.Response:
        destination = request.headers.get("X-Destination-Peer-Id", "")
        if destination not in ports:
            return web.Response(status=502, text="unknown destination")
        body = await request.read()
        url = f"http://127.0.0.1:{ports[destination]}/deliver"
        async with client.post(url, data=body, headers={"X-From": own}) as answer:
            return web.Response(status=answer.status, headers={"X-Sent-Bytes": str(len(body))})

    async def deliver(request: web.Request) -> web.Response:
        inbox.put_nowait((request.headers["X-From"], await request.read()))
        return web.Response()

    async def recv(request: web.Request) -> web.Response:
        try:
            sender, body = await asyncio.wait_for(inbox.get(), float(request.query.get("wait", "0")) or 0.001)
        except asyncio.TimeoutError:
            return web.Response(status=204)
        return web.Response(body=body, headers={"X-From-Peer-Id": sender})

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def ws_receive(request: web.Request) -> web.WebSocketResponse:
        """/ws?recv=1 without its window: frames of id, sender key, payload; done frames go unread."""
        receiver = web.WebSocketResponse()
        await receiver.prepare(request)
        for number in itertools.count(1):
            sender, body = await inbox.get()
            await receiver.send_bytes(number.to_bytes(8, "big") + bytes.fromhex(sender) + body)
        return receiver

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.add_routes([web.get("/topology", topology), web.post("/send", send), web.post("/deliver", deliver),
                    web.get("/recv", recv), web.get("/health", health),
                    web.get("/ws", ws_receive)])
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", json.loads(config_path.read_text())["api_port"]).start()
    await asyncio.Event().wait()


def fake_main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args()
    try:
        asyncio.run(_serve_fake(Path(args.config)))
    except KeyboardInterrupt:
        pass


def node_command(kind: str) -> list[str] | None:
    """The command a Testnet should start for ``kind`` (None: the real axl-node)."""
    return FAKE_NODE_COMMAND if kind == FAKE_NODE else None


# ----- tests

def test_shapes_have_the_expected_peerings():
    assert shape_edges(4, "line") == [(0, 1), (1, 2), (2, 3)]
    assert shape_edges(4, "star") == [(0, 1), (0, 2), (0, 3)]
    assert shape_edges(4, "ring") == [(0, 1), (1, 2), (2, 3), (0, 3)]
    assert shape_edges(1, "ring") == []


def test_random_shape_is_connected_seeded_and_bounded():
    edges = shape_edges(30, "random", degree=4, seed=7)
    assert edges == shape_edges(30, "random", degree=4, seed=7)
    reached, frontier = {0}, [0]
    while frontier:
        node = frontier.pop()
        for a, b in edges:
            for x, y in ((a, b), (b, a)):
                if x == node and y not in reached:
                    reached.add(y)
                    frontier.append(y)
    assert reached == set(range(30))
    degrees = [sum(node in edge for edge in edges) for node in range(30)]
    assert max(degrees) <= 4 and sum(degrees) > 2 * 29


def test_unknown_shape_is_refused():
    with pytest.raises(ValueError, match="unknown shape"):
        shape_edges(3, "mesh")


def _view(key: str, parents: dict[str, str], peers: int) -> TreeView:
    return TreeView(key, parents, {f"p{i}" for i in range(peers)})


def test_convergence_requires_one_agreed_root_and_consistent_children():
    tree = {"a": "", "b": "a", "c": "b"}
    views = [_view("a", {"a": "", "b": "a"}, 1), _view("b", tree, 2), _view("c", tree, 1)]
    assert convergence_problems(views, [1, 2, 1]) == []
    split = [_view("a", {"a": ""}, 1), _view("b", {"b": ""}, 1)]
    assert any("disagree" in problem for problem in convergence_problems(split, [1, 1]))
    orphan = [_view("a", {"a": ""}, 1), _view("b", {"a": "", "b": "a"}, 1)]
    assert any("does not list it" in problem for problem in convergence_problems(orphan, [1, 1]))
    assert any("peerings up" in problem for problem in convergence_problems(views, [2, 2, 1]))


def test_parse_topology_reads_root_and_peers():
    view = parse_topology({"our_public_key": "b", "peers": [{"public_key": "a", "up": True},
                                                            {"public_key": "c", "up": False}],
                           "tree": [{"public_key": "a", "parent": ""}, {"public_key": "b", "parent": "a"}]})
    assert view.roots == {"a"} and view.peers_up == {"a"}


def test_chosen_ports_are_distinct_and_below_the_ephemeral_range():
    taken: set[int] = set()
    ports = [free_port(taken, random.Random(4)) for _ in range(50)]
    assert len(set(ports)) == 50 and taken == set(ports)
    assert max(ports) < ephemeral_port_floor()


def test_configs_and_node_list_are_written(tmp_path):
    testnet = Testnet(3, "star", tmp_path, node_command=FAKE_NODE_COMMAND)
    testnet.write_configs()
    testnet.write_json()
    leaf = json.loads((tmp_path / "node-2.json").read_text())
    assert leaf["Peers"] == [testnet.nodes[0].listen_uri]
    assert leaf["Listen"] == [testnet.nodes[2].listen_uri]
    assert leaf["api_port"] == testnet.nodes[2].api_port
    assert NodeIdentity.load_pem(leaf["PrivateKeyPath"]).peer_id == testnet.nodes[2].peer_id
    listing = json.loads((tmp_path / "testnet.json").read_text())
    assert [node["bridge"] for node in listing["nodes"]] == [node.bridge_url for node in testnet.nodes]


def test_fixed_base_port_gives_predictable_ports(tmp_path):
    testnet = Testnet(3, "line", tmp_path, base_port=9300, node_command=FAKE_NODE_COMMAND)
    assert [node.api_port for node in testnet.nodes] == [9300, 9301, 9302]
    assert [node.listen_port for node in testnet.nodes] == [9303, 9304, 9305]


@pytest.mark.parametrize("kind", [FAKE_NODE, REAL_NODE])
async def test_testnet_converges_and_survives_restart(tmp_path, kind):
    async with Testnet(4, "ring", tmp_path, node_command=node_command(kind)) as testnet:
        root = await testnet.wait_converged_async(timeout=30)
        assert root in {node.peer_id for node in testnet.nodes}
        victim = 1 if testnet.nodes[1].peer_id != root else 2
        await asyncio.to_thread(testnet.kill, victim)
        assert not testnet.nodes[victim].running
        assert await asyncio.to_thread(testnet.health, 0)
        await asyncio.to_thread(testnet.restart, victim)
        assert await testnet.wait_converged_async(timeout=30) == root
    assert all(not node.running for node in testnet.nodes)


def test_a_node_that_exits_is_reported(tmp_path):
    failing = [sys.executable, "-c", "import sys; sys.exit(3)"]
    with Testnet(2, "line", tmp_path, node_command=failing) as testnet:
        with pytest.raises(TestnetError, match="exited"):
            testnet.wait_converged(timeout=10)


def test_command_line_refuses_an_empty_testnet(capsys):
    assert main(["-n", "0"]) == 2
    assert "at least one node" in capsys.readouterr().err


def test_timeout_message_names_the_problem(tmp_path):
    sleeper = [sys.executable, "-c", "import time; time.sleep(30)"]
    with Testnet(2, "line", tmp_path, node_command=sleeper) as testnet:
        with pytest.raises(TestnetError, match="did not converge within 1s: node 0: /topology not ready"):
            testnet.wait_converged(timeout=1)


def _testnet_files(folder: Path) -> dict[str, bytes]:
    """Everything a testnet writes except the logs its running nodes append to."""
    return {path.name: path.read_bytes() for path in folder.iterdir() if path.suffix in (".json", ".pem")}


def test_second_testnet_in_the_same_folder_is_refused(tmp_path):
    with Testnet(2, "line", tmp_path, node_command=FAKE_NODE_COMMAND) as first:
        first.wait_converged(timeout=30)
        before = _testnet_files(tmp_path)
        second = subprocess.run(
            [sys.executable, "-m", "axl.testnet", "-n", "3", "--dir", str(tmp_path), "--base-port", "0"],
            capture_output=True, text=True, timeout=60,
        )
        assert second.returncode == 1
        assert second.stderr.count("\n") == 1
        assert f"a testnet (pid {os.getpid()}) is already running in {tmp_path}" in second.stderr
        assert _testnet_files(tmp_path) == before
        assert not first.exited_nodes()
        assert first.wait_converged(timeout=30)


def test_a_taken_fixed_port_is_refused_before_any_file_is_written(tmp_path):
    with socket.socket() as squatter:
        squatter.bind((LOOPBACK, 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        testnet = Testnet(1, "line", tmp_path / "net", base_port=port, node_command=FAKE_NODE_COMMAND)
        with pytest.raises(TestnetError, match=f"port {port} on 127.0.0.1 is in use"):
            testnet.start()
        assert not (tmp_path / "net").exists()
        (tmp_path / "mine").mkdir()
        testnet = Testnet(1, "line", tmp_path / "mine", base_port=port, node_command=FAKE_NODE_COMMAND)
        with pytest.raises(TestnetError, match="is in use"):
            testnet.start()
        assert list((tmp_path / "mine").iterdir()) == []  # a folder it did not make stays


def test_a_testnet_in_a_relative_folder_starts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with Testnet(2, "line", "relative", node_command=FAKE_NODE_COMMAND) as testnet:
        assert testnet.wait_converged(timeout=30)


def test_a_new_testnet_starts_with_empty_logs(tmp_path):
    (tmp_path / "node-0.log").write_text("a line from an older testnet\n")
    with Testnet(1, "line", tmp_path, node_command=FAKE_NODE_COMMAND) as testnet:
        testnet.wait_converged(timeout=30)
    assert "older testnet" not in (tmp_path / "node-0.log").read_text()


def test_run_prefixes_every_node_line_with_its_name(tmp_path):
    planned = Testnet(2, "line", tmp_path)
    planned.write_configs()
    configs = [str(node.config_path) for node in planned.nodes]
    runner = subprocess.Popen([sys.executable, "-m", "axl.testnet", "--run", *configs],
                              stdout=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        for line in _lines_until(runner, lambda line: "peer id" in line, want=2):
            lines.append(line)
    finally:
        runner.send_signal(signal.SIGINT)
        rest, _ = runner.communicate(timeout=30)
    lines += rest.splitlines()
    assert runner.returncode == 0
    assert lines and all(line.split(" | ")[0].strip() in ("node-0", "node-1") for line in lines)
    seen = {line.split(" | ")[0].strip() for line in lines if "peer id" in line}
    assert seen == {"node-0", "node-1"}


def test_run_starts_the_dialers_once_the_listener_listens(tmp_path, capsys):
    """`make run3`'s shape, with a hub slow to start: none of the dialers logs a
    refused dial of it, which a newcomer reads as an error."""
    hub_uri = f"tls://{LOOPBACK}:{free_port()}"
    configs = []
    for name, listen, peers in (("dialer1", [], [hub_uri]), ("dialer2", [], [hub_uri]), ("hub", [hub_uri], [])):
        key = tmp_path / f"{name}.pem"
        key.write_bytes(NodeIdentity.generate().pem())
        config = tmp_path / f"{name}.json"
        config.write_text(json.dumps({"PrivateKeyPath": str(key), "inbox_path": "", "Listen": listen,
                                      "Peers": peers, "api_port": free_port()}))
        configs.append(config)
    slow_hub = ["sh", "-c", 'case "$2" in *hub*) sleep 1;; esac; exec "$0" -m axl.cli "$@"', sys.executable]
    runner = PrefixedRun(configs, node_command=slow_hub)
    output = ""
    try:
        runner.start()
        deadline = time.monotonic() + 30
        while output.count("peering up") < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
            output += capsys.readouterr().out
    finally:
        runner.stop()
    output += capsys.readouterr().out
    assert output.count("peering up") >= 4, output
    assert "failed" not in output, output


def _lines_until(process: subprocess.Popen, match, want: int, timeout: float = 30.0):
    """Lines of ``process`` until ``want`` of them matched; every read is bounded by a timer."""
    timer = threading.Timer(timeout, process.kill)
    timer.start()
    try:
        matched = 0
        while matched < want:
            line = process.stdout.readline()
            if not line:
                raise AssertionError(f"output ended after {matched} matching lines")
            matched += bool(match(line))
            yield line.rstrip("\n")
    finally:
        timer.cancel()


if __name__ == "__main__":
    fake_main()


def test_links_cycle_over_the_edges_in_the_configs(tmp_path):
    testnet = Testnet(4, "ring", tmp_path, links=["tls", "quic", "ws", "unix"],
                      node_command=FAKE_NODE_COMMAND)
    testnet.write_configs()
    peers = [uri for node in testnet.nodes
             for uri in json.loads(node.config_path.read_text())["Peers"]]
    assert sorted(uri.split(":")[0] for uri in peers) == ["quic", "tls", "unix", "ws"]
    listens = {uri for node in testnet.nodes
               for uri in json.loads(node.config_path.read_text())["Listen"]}
    assert set(peers) <= listens
    with pytest.raises(ValueError, match="unknown link type 'socks'"):
        Testnet(2, "line", tmp_path, links=["tls", "socks"])


async def test_mixed_link_testnet_converges_and_routes(tmp_path):
    """Five real nodes in a ring whose edges are quic, ws and tls in turn."""
    async with Testnet(5, "ring", tmp_path, links=["quic", "ws", "tls"],
                       node_command=node_command(REAL_NODE)) as testnet:
        root = await testnet.wait_converged_async(timeout=45)
        assert root in {node.peer_id for node in testnet.nodes}
        schemes = {peer["scheme"] for node in testnet.nodes
                   for peer in testnet.topology(node.index)["peers"] if peer["up"]}
        assert schemes == {"quic", "ws", "tls"}
        source, dest = testnet.nodes[0], testnet.nodes[2]
        request = urllib.request.Request(
            source.bridge_url + "/send", data=b"across mixed links", method="POST",
            headers={"X-Destination-Peer-Id": dest.peer_id})
        with await asyncio.to_thread(urllib.request.urlopen, request, timeout=60) as response:
            assert response.status == 200
        with await asyncio.to_thread(urllib.request.urlopen,
                                     dest.bridge_url + "/recv?wait=10", timeout=30) as response:
            assert response.read() == b"across mixed links"
