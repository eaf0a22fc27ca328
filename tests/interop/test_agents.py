"""MCP and A2A across implementations: Go AXL calls the services behind our
node, and our node calls the services behind a Go AXL node.

Each node has its own services on loopback: the bundled MCP router with
the weather example registered under a name that says whose side it is on,
and the bundled A2A agent. The Go node's own inbound dispatch (Go code)
hands its envelopes to them; ours does the same on our side. Our side is
called with the official MCP and A2A clients through our bridge; Go's
bridge is called with the JSON-RPC those clients send.

Go AXL 9cba555 reads `a2a_port` from its config but never applies it (its
applyOverrides skips the field): its A2A agent must be on 9004."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import httpx
import mcp
import pytest
from a2a.helpers import get_artifact_text
from a2a.types import TaskState

from a2acalls import run_task
from axl.harness import free_port, port_bindable, stop_process
from conftest import network_for
from goprocs import REPO, listen_uris
from nodes import wait_until

FORECAST = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "get_forecast", "arguments": {"city": "Lyon"}}}


GO_AXL_A2A_PORT = 9004


def services(folder: Path, service: str, processes: list[subprocess.Popen], agent: int | None = None) -> dict:
    """The MCP router with the weather example registered as `service`, and
    the A2A agent (on `agent`, else a free port), added to `processes`;
    returns the node config fields that point at them."""
    router, weather, agent = free_port(), free_port(), agent or free_port()
    python = sys.executable
    commands = [
        [python, "-m", "axl.adapters.mcp_router", "--port", str(router)],
        [python, str(REPO / "examples" / "mcp" / "weather_server.py"), "--port", str(weather),
         "--router", f"http://127.0.0.1:{router}", "--service", service],
        [python, "-m", "axl.adapters.a2a_server", "--port", str(agent),
         "--router", f"http://127.0.0.1:{router}"],
    ]
    for index, command in enumerate(commands):
        log = open(folder / f"{service}-{index}.log", "ab")
        processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True))
        if index == 0:
            wait_until(lambda: get(f"http://127.0.0.1:{router}/health"), 20, what="the MCP router")
    wait_until(lambda: service in get(f"http://127.0.0.1:{router}/services"), 30, what=f"{service} registered")
    wait_until(lambda: get(f"http://127.0.0.1:{agent}/.well-known/agent-card.json"), 30, what="the A2A agent")
    return {"router_addr": "http://127.0.0.1", "router_port": router,
            "a2a_addr": "http://127.0.0.1", "a2a_port": agent}


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


@pytest.fixture(scope="module")
def pair(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("agents")
    processes: list[subprocess.Popen] = []
    try:
        ours_fields = services(folder, "weather-ours", processes)
        if not port_bindable(GO_AXL_A2A_PORT, reuse_address=True):
            pytest.fail(f"port {GO_AXL_A2A_PORT} is taken: Go AXL's A2A agent must listen there")
        go_fields = services(folder, "weather-go", processes, agent=GO_AXL_A2A_PORT)
        for network in network_for(request, folder):
            go = network.go_axl("go", root=True, extra=go_fields).start()
            ours = network.ours("ours", peers=listen_uris(go), extra=ours_fields)
            ours.start()
            wait_until(lambda: go.up_peer_keys() == {ours.peer_id}, 20, what="peering with Go AXL")
            yield ours, go
    finally:
        for process in processes:
            stop_process(process)


def post_json(url: str, body: dict, headers: dict | None = None) -> tuple[int, dict]:
    response = httpx.post(url, json=body, headers=headers or {}, timeout=40)
    return response.status_code, response.json()


def test_go_axl_calls_an_mcp_tool_behind_our_node(pair):
    ours, go = pair
    status, answer = post_json(f"{go.url}/mcp/{ours.peer_id}/weather-ours", FORECAST)
    assert status == 200, answer
    assert answer["id"] == 7 and "Lyon" in answer["result"]["content"][0]["text"]


def test_go_axl_fetches_our_agent_card_and_runs_a_task(pair):
    ours, go = pair
    card = httpx.get(f"{go.url}/a2a/{ours.peer_id}", timeout=40).json()
    assert "weather-ours" in {skill["id"] for skill in card["skills"]}
    text = json.dumps({"service": "weather-ours", "request": FORECAST})
    status, answer = post_json(f"{go.url}/a2a/{ours.peer_id}", {
        "jsonrpc": "2.0", "id": "t1", "method": "SendMessage",
        "params": {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": text}]}}},
        headers={"A2A-Version": "1.0"})
    assert status == 200 and answer["id"] == "t1", answer
    task = answer["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    artifact = json.loads(task["artifacts"][0]["parts"][0]["text"])
    assert "Lyon" in artifact["result"]["content"][0]["text"]


async def test_our_node_calls_an_mcp_tool_behind_go_axl_with_the_official_client(pair):
    ours, go = pair
    async with mcp.Client(f"{ours.url}/mcp/{go.peer_id}/weather-go") as client:
        tools = await client.list_tools()
        assert "get_forecast" in {tool.name for tool in tools.tools}
        result = await client.call_tool("get_forecast", {"city": "Lyon"})
    assert not result.is_error and "Lyon" in result.content[0].text


async def test_our_node_runs_a_task_on_the_agent_behind_go_axl_with_the_official_client(pair):
    ours, go = pair
    text = json.dumps({"service": "weather-go", "request": FORECAST})
    task = await run_task(f"{ours.url}/a2a/{go.peer_id}", text, timeout=40)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert "Lyon" in json.loads(get_artifact_text(task.artifacts[0]))["result"]["content"][0]["text"]
