"""MCP and A2A across real axl-node processes, with the official clients.

caller (no adapters) --- remote (router + A2A server) --- nomcp (no adapters)
The remote's MCP router and A2A server and two MCP servers (stateless JSON,
and the SDK's default stateful SSE) run as separate processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import mcp
import pytest
from a2a.client import ClientConfig, create_client
from a2a.helpers import get_artifact_text, new_text_message
from a2a.types import Role, SendMessageRequest, TaskState

from axl.client import AsyncClient, Client, RpcError
from nodes import Cluster, free_port, metric_samples, wait_until

MCP_SERVER = """
import sys, uvicorn
from mcp.server.mcpserver import MCPServer
server = MCPServer("weather")

@server.tool()
def add(a: int, b: int) -> int:
    \"\"\"Add two numbers.\"\"\"
    return a + b

stateless = sys.argv[2] == "stateless"
app = server.streamable_http_app(stateless_http=stateless, json_response=stateless)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def start(args, log: Path) -> subprocess.Popen:
    return subprocess.Popen(args, stdout=open(log, "ab"), stderr=subprocess.STDOUT)


def http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code < 500
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    base = tmp_path_factory.mktemp("agents")
    router_port, a2a_port = free_port(), free_port()
    procs = [
        start([sys.executable, "-m", "axl.adapters.mcp_router", "--port", str(router_port)],
              base / "router.log"),
        start([sys.executable, "-m", "axl.adapters.a2a_server", "--port", str(a2a_port),
               "--router", f"http://127.0.0.1:{router_port}"], base / "a2a.log"),
    ]
    script = base / "mcp_server.py"
    script.write_text(MCP_SERVER)
    services = {}
    for mode in ("stateless", "stateful"):
        port = free_port()
        procs.append(start([sys.executable, str(script), str(port), mode], base / f"mcp-{mode}.log"))
        services[f"weather-{mode}"] = f"http://127.0.0.1:{port}/mcp"
    cluster = Cluster(base)
    remote = cluster.add("remote", extra={
        "router_addr": "http://127.0.0.1", "router_port": router_port,
        "a2a_addr": "http://127.0.0.1", "a2a_port": a2a_port,
    })
    caller = cluster.add("caller", peers=[remote])
    nomcp = cluster.add("nomcp", peers=[remote])
    dead = cluster.add("deadrouter", peers=[remote], extra={
        "router_addr": "http://127.0.0.1", "router_port": free_port()})
    try:
        cluster.start_all()
        router = f"http://127.0.0.1:{router_port}"
        wait_until(lambda: http_ok(f"{router}/health"), 90, what="MCP router")
        for name, endpoint in services.items():
            wait_until(lambda e=endpoint: http_ok(e.rsplit("/", 1)[0] + "/"), 90, what=name)
            httpx.post(f"{router}/register", json={"service": name, "endpoint": endpoint}).raise_for_status()
        wait_until(lambda: http_ok(f"http://127.0.0.1:{a2a_port}/.well-known/agent-card.json"), 90,
                   what="A2A server")
        for node in (caller, nomcp, dead):
            wait_until(lambda n=node: caller.send(n.peer_id, b"warm-up")[0] == 200, 60, interval=0.5,
                       what="overlay reachability")
        yield {"caller": caller, "remote": remote, "nomcp": nomcp, "dead": dead}
    finally:
        cluster.stop_all()
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)


def mcp_url(net, service, peer="remote") -> str:
    return f"{net['caller'].url}/mcp/{net[peer].peer_id}/{service}"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize("service", ["weather-stateless", "weather-stateful"])
async def test_official_mcp_client_calls_a_remote_tool(net, service, mode):
    async with mcp.Client(mcp_url(net, service), mode=mode) as client:
        tools = await client.list_tools()
        assert "add" in [tool.name for tool in tools.tools]
        result = await client.call_tool("add", {"a": 2, "b": 3})
    assert result.content[0].text == "5"


def rpc(net, service, body, peer="remote", timeout=40):
    response = httpx.post(mcp_url(net, service, peer), content=json.dumps(body),
                          headers={"Content-Type": "application/json"}, timeout=timeout)
    return response


def test_unknown_service_is_an_error_with_the_request_id(net):
    response = rpc(net, "nope", {"jsonrpc": "2.0", "id": 41, "method": "tools/list"})
    assert response.status_code == 200
    body = response.json()
    assert body["id"] == 41 and body["error"]["code"] == -32603


def test_router_down_is_an_error(net):
    response = rpc(net, "weather", {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}, peer="dead")
    body = response.json()
    assert body["id"] == 7 and "router" in body["error"]["message"]


def test_remote_without_mcp_answers_at_once(net):
    started = time.monotonic()
    response = rpc(net, "weather", {"jsonrpc": "2.0", "id": 8, "method": "tools/list"}, peer="nomcp")
    body = response.json()
    assert body["id"] == 8 and "not enabled" in body["error"]["message"]
    assert time.monotonic() - started < 10


def test_offline_peer_is_an_error_within_the_timeout(net):
    started = time.monotonic()
    response = httpx.post(f"{net['caller'].url}/mcp/{'cd' * 32}/weather",
                          content=b'{"jsonrpc":"2.0","id":9,"method":"tools/list"}', timeout=40)
    body = response.json()
    assert body["id"] == 9 and body["error"]["code"] == -32603
    assert time.monotonic() - started < 15


def test_notification_202_and_get_405(net):
    response = rpc(net, "weather-stateless", {"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert response.status_code == 202 and response.content == b""
    assert httpx.get(mcp_url(net, "weather-stateless")).status_code == 405


async def test_official_a2a_client_gets_the_tool_result(net):
    text = json.dumps({"service": "weather-stateless",
                       "request": {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                   "params": {"name": "add", "arguments": {"a": 20, "b": 22}}}})
    async with httpx.AsyncClient(timeout=40) as http:
        base = f"{net['caller'].url}/a2a/{net['remote'].peer_id}"
        client = await create_client(base, ClientConfig(httpx_client=http))
        message = new_text_message(text, role=Role.ROLE_USER)
        events = [event async for event in client.send_message(SendMessageRequest(message=message))]
    task = events[-1].task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert json.loads(get_artifact_text(task.artifacts[0]))["result"]["content"][0]["text"] == "42"


def test_blocking_client_calls_a_remote_tool_and_sees_rpc_errors(net):
    with Client(net["caller"].url, timeout=40) as client:
        peer = net["remote"].peer_id
        assert "add" in [tool["name"] for tool in client.list_tools(peer, "weather-stateless")]
        assert client.call_tool(peer, "weather-stateless", "add", {"a": 4, "b": 5})["content"][0]["text"] == "9"
        with pytest.raises(RpcError) as caught:
            client.list_tools(peer, "nope")
    assert caught.value.code == -32603 and caught.value.status == 200


async def test_async_client_talks_to_the_remote_a2a_agent(net):
    text = json.dumps({"service": "weather-stateless",
                       "request": {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                   "params": {"name": "add", "arguments": {"a": 1, "b": 2}}}})
    async with AsyncClient(net["caller"].url, timeout=40) as client:
        peer = net["remote"].peer_id
        card = await client.a2a_card(peer)
        assert peer in card["supportedInterfaces"][0]["url"]
        task = await client.a2a_send(peer, text)
        assert (await client.call_tool(peer, "weather-stateless", "add", {"a": 1, "b": 1}))["content"][0]["text"] == "2"
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    artifact = json.loads(task["artifacts"][0]["parts"][0]["text"])
    assert artifact["result"]["content"][0]["text"] == "3"


def adapter_samples(node) -> dict[tuple[str, str, str], float]:
    """axl_adapter_{requests,errors}_total as {(kind, adapter, direction): count}."""
    _, _, body = node.request("GET", "/metrics", timeout=10)
    return {(name.removeprefix("axl_adapter_").removesuffix("_total"), dict(labels)["adapter"],
             dict(labels)["direction"]): value
            for (name, labels), value in metric_samples(body.decode()).items()
            if name in ("axl_adapter_requests_total", "axl_adapter_errors_total")}


def test_adapter_requests_and_errors_are_counted_at_both_ends(net):
    caller, remote = net["caller"], net["remote"]
    before = {node.name: adapter_samples(node) for node in (caller, remote)}
    assert "result" in rpc(net, "weather-stateless", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).json()
    assert "error" in rpc(net, "nope", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).json()
    assert httpx.get(f"{caller.url}/a2a/{remote.peer_id}", timeout=40).status_code == 200

    def changes(node) -> dict[tuple[str, str, str], float]:
        after = adapter_samples(node)
        return {key: value - before[node.name][key] for key, value in after.items() if value != before[node.name][key]}

    assert changes(caller) == {("requests", "mcp", "out"): 2, ("errors", "mcp", "out"): 1, ("requests", "a2a", "out"): 1}
    assert changes(remote) == {("requests", "mcp", "in"): 2, ("errors", "mcp", "in"): 1, ("requests", "a2a", "in"): 1}
