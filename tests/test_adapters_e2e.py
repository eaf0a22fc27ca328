"""MCP and A2A end to end: official clients -> bridge -> (in-process link) -> dispatcher -> router/A2A -> servers.

Two bridge applications play the calling node; a fake requester hands
each envelope straight to the remote node's InboundDispatcher, standing in
for the overlay. Everything else is real: the MCP router, MCP servers built
with the official SDK in all four modes, the A2A server, and the official
MCP and A2A clients, all on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import mcp
import pytest
import pytest_asyncio
import uvicorn
from a2a.helpers import get_artifact_text
from a2a.types import TaskState
from aiohttp import web
from aiohttp.test_utils import TestServer
from mcp.server.mcpserver import MCPServer

from axl.adapters import DispatchSettings, InboundDispatcher
from axl.adapters.counts import AdapterCounts
from axl.adapters.bridge import AgentBridgeSettings, add_agent_routes
from axl.adapters.a2a_server import RouterClient, create_app
from axl.harness import free_port
from axl.adapters.mcp_router import McpRouter
from axl.errors import DeliveryTimeout, PeerUnreachable
from a2acalls import run_task
from nodes import wait_until_async

pytestmark = pytest.mark.asyncio(loop_scope="module")

CALLER_KEY = bytes(range(32))
REMOTE_KEY = bytes(range(100, 132))
PLAIN_TEXT_KEY = bytes(range(200, 232))
SLOW_KEY = bytes([7]) * 32
UNKNOWN_KEY = bytes([9]) * 32
REMOTE = REMOTE_KEY.hex()

MODES = {
    "stateful-sse": dict(stateless_http=False, json_response=False),
    "stateful-json": dict(stateless_http=False, json_response=True),
    "stateless-sse": dict(stateless_http=True, json_response=False),
    "stateless-json": dict(stateless_http=True, json_response=True),
}


class _Server(uvicorn.Server):
    """uvicorn without signal handling, so pytest keeps Ctrl-C."""

    def capture_signals(self):  # type: ignore[override]
        return contextlib.nullcontext()


async def start_uvicorn(app, port: int) -> tuple[_Server, asyncio.Task]:
    server = _Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    await wait_until_async(lambda: server.started, 15, interval=0.01, what="uvicorn started")
    return server, task


def weather_server() -> MCPServer:
    server = MCPServer("weather")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @server.tool()
    def forecast(city: str) -> str:
        """A fixed forecast for a city."""
        return f"{city}: sunny, 21 C"

    return server


@dataclass
class LoopbackRequester:
    """Stands in for the overlay: delivers the envelope to the destination's dispatcher."""

    own_key: bytes
    nodes: dict[bytes, InboundDispatcher]
    seen: list[bytes] = field(default_factory=list)

    async def request(self, dest_key: bytes, payload: bytes, timeout: float) -> bytes:
        self.seen.append(payload)
        if dest_key == SLOW_KEY:
            raise DeliveryTimeout("no answer in time")
        dispatcher = self.nodes.get(dest_key)
        if dispatcher is None:
            raise PeerUnreachable("no route to peer")
        result = await asyncio.wait_for(dispatcher.dispatch(self.own_key, payload), timeout)
        if not result.handled or result.reply is None:
            raise DeliveryTimeout("no reply")
        return result.reply


@dataclass
class Stack:
    bridge_url: str
    router_url: str
    requester: LoopbackRequester


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack() -> AsyncIterator[Stack]:
    servers = []
    router = McpRouter(timeout=10.0)
    router_server = TestServer(router.app(), host="127.0.0.1")
    await router_server.start_server()
    router_url = f"http://127.0.0.1:{router_server.port}"
    async with httpx.AsyncClient() as http:
        for mode, options in MODES.items():
            port = free_port()
            servers.append(await start_uvicorn(weather_server().streamable_http_app(**options), port))
            await http.post(f"{router_url}/register", json={"service": f"weather-{mode}", "endpoint": f"http://127.0.0.1:{port}/mcp"})
        await http.post(f"{router_url}/register", json={"service": "dead", "endpoint": f"http://127.0.0.1:{free_port()}/mcp"})

    a2a_port = free_port()
    a2a_router = RouterClient(router_url, timeout=10.0)
    a2a_app, _cards = create_app(a2a_router, f"http://127.0.0.1:{a2a_port}/", "test agent")
    servers.append(await start_uvicorn(a2a_app, a2a_port))

    async def not_json(_request: web.Request) -> web.Response:
        return web.Response(status=404, text="404 page not found")

    plain = web.Application()
    plain.router.add_route("*", "/{tail:.*}", not_json)
    plain_server = TestServer(plain, host="127.0.0.1")
    await plain_server.start_server()

    remote = InboundDispatcher(DispatchSettings(
        router_addr="http://127.0.0.1", router_port=router_server.port,
        a2a_addr="http://127.0.0.1", a2a_port=a2a_port, mcp_timeout=10.0, a2a_timeout=10.0,
    ))
    plain_remote = InboundDispatcher(DispatchSettings(a2a_addr="http://127.0.0.1", a2a_port=plain_server.port))
    requester = LoopbackRequester(CALLER_KEY, {REMOTE_KEY: remote, PLAIN_TEXT_KEY: plain_remote})
    bridge = web.Application()
    add_agent_routes(bridge, requester, AgentBridgeSettings(), AdapterCounts())
    bridge_server = TestServer(bridge, host="127.0.0.1")
    await bridge_server.start_server()

    yield Stack(f"http://127.0.0.1:{bridge_server.port}", router_url, requester)

    await bridge_server.close()
    await remote.close()
    await plain_remote.close()
    await a2a_router.close()
    await plain_server.close()
    for server, task in servers:
        server.should_exit = True
        await task
    await router_server.close()


def mcp_url(stack: Stack, service: str, peer: str = REMOTE) -> str:
    return f"{stack.bridge_url}/mcp/{peer}/{service}"


@pytest.mark.parametrize("client_mode", ["auto", "legacy"])
@pytest.mark.parametrize("server_mode", list(MODES))
async def test_official_mcp_client_lists_and_calls_tools(stack: Stack, server_mode: str, client_mode: str) -> None:
    async with mcp.Client(mcp_url(stack, f"weather-{server_mode}"), mode=client_mode) as client:
        tools = await client.list_tools()
        assert {tool.name for tool in tools.tools} == {"add", "forecast"}
        result = await client.call_tool("add", {"a": 2, "b": 3})
        assert not result.is_error
        assert result.content[0].text == "5"
        forecast = await client.call_tool("forecast", {"city": "Lyon"})
        assert forecast.content[0].text == "Lyon: sunny, 21 C"
        expected = "2026-07-28" if client_mode == "auto" else "2025-11-25"
        assert client.protocol_version == expected


async def rpc(stack: Stack, service: str, body: object, headers: dict[str, str] | None = None,
              peer: str = REMOTE) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.post(mcp_url(stack, service, peer), content=json.dumps(body), headers=headers or {})


async def test_unknown_service_is_a_jsonrpc_error_with_the_request_id(stack: Stack) -> None:
    resp = await rpc(stack, "nope", {"jsonrpc": "2.0", "id": 41, "method": "tools/list"})
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert body["id"] == 41
    assert body["error"]["code"] == -32603
    assert "Service not found: nope" in body["error"]["message"]


async def test_dead_endpoint_says_so(stack: Stack) -> None:
    body = (await rpc(stack, "dead", {"jsonrpc": "2.0", "id": "x", "method": "tools/list"})).json()
    assert body["id"] == "x"
    assert "unreachable" in body["error"]["message"]
    async with httpx.AsyncClient() as http:
        services = (await http.get(f"{stack.router_url}/services")).json()
    assert services["dead"]["healthy"] is False


async def test_notifications_get_202_and_are_not_forwarded(stack: Stack) -> None:
    before = len(stack.requester.seen)
    for method in ("notifications/initialized", "notifications/cancelled"):
        resp = await rpc(stack, "weather-stateless-json", {"jsonrpc": "2.0", "method": method})
        assert resp.status_code == 202
        assert resp.content == b""
    assert len(stack.requester.seen) == before


async def test_initialize_mints_a_session_and_unknown_sessions_get_404(stack: Stack) -> None:
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    resp = await rpc(stack, "weather-stateful-sse", init)
    assert resp.status_code == 200
    session = resp.headers["mcp-session-id"]
    assert resp.json()["result"]["serverInfo"]["name"] == "weather"
    listed = await rpc(stack, "weather-stateful-sse", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                       {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"})
    assert {t["name"] for t in listed.json()["result"]["tools"]} == {"add", "forecast"}
    assert listed.headers["mcp-session-id"] == session
    stale = await rpc(stack, "weather-stateful-sse", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                      {"Mcp-Session-Id": "mcp-made-up"})
    assert stale.status_code == 404
    async with httpx.AsyncClient() as http:
        deleted = await http.delete(mcp_url(stack, "weather-stateful-sse"), headers={"Mcp-Session-Id": session})
    assert deleted.status_code == 204
    gone = await rpc(stack, "weather-stateful-sse", {"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
                     {"Mcp-Session-Id": session})
    assert gone.status_code == 404


async def test_mcp_headers_travel_in_the_envelope(stack: Stack) -> None:
    await rpc(stack, "weather-stateless-json", {"jsonrpc": "2.0", "id": 5, "method": "tools/list"},
              {"MCP-Protocol-Version": "2025-11-25", "Mcp-Param-Region": "eu-west", "X-Other": "no"})
    envelope = json.loads(stack.requester.seen[-1])
    assert envelope["service"] == "weather-stateless-json"
    assert envelope["headers"] == {"MCP-Protocol-Version": "2025-11-25", "Mcp-Param-Region": "eu-west"}


async def test_get_405_delete_204_bad_json_400_bad_peer_400(stack: Stack) -> None:
    async with httpx.AsyncClient() as http:
        assert (await http.get(mcp_url(stack, "weather-stateless-json"))).status_code == 405
        assert (await http.delete(mcp_url(stack, "weather-stateless-json"))).status_code == 204
        bad = await http.post(mcp_url(stack, "weather-stateless-json"), content=b"{not json")
        assert bad.status_code == 400
        bad_peer = await http.post(mcp_url(stack, "x", peer="abc"), content=b"{}")
        assert bad_peer.status_code == 400


async def test_unreachable_peer_and_timeout_are_jsonrpc_errors(stack: Stack) -> None:
    request = {"jsonrpc": "2.0", "id": 8, "method": "tools/list"}
    unreachable = await rpc(stack, "weather", request, peer=UNKNOWN_KEY.hex())
    assert unreachable.status_code == 200
    assert unreachable.json()["error"] == {"code": -32603, "message": "no route to peer"}
    slow = await rpc(stack, "weather", request, peer=SLOW_KEY.hex())
    assert slow.json() == {"jsonrpc": "2.0", "id": 8, "error": {"code": -32603, "message": "timeout"}}


async def test_card_is_rewritten_to_this_bridge(stack: Stack) -> None:
    async with httpx.AsyncClient() as http:
        for suffix in ("", "/", "/.well-known/agent-card.json", "/.well-known/agent.json"):
            resp = await http.get(f"{stack.bridge_url}/a2a/{REMOTE}{suffix}")
            assert resp.status_code == 200, suffix
            card = resp.json()
            local = f"{stack.bridge_url}/a2a/{REMOTE}"
            assert [i["url"] for i in card["supportedInterfaces"]] == [local]
            assert card["capabilities"]["streaming"] is False
            assert {"weather-stateless-json", "dead"} <= {skill["id"] for skill in card["skills"]}


async def test_official_a2a_client_runs_a_tool_through_the_bridge(stack: Stack) -> None:
    text = json.dumps({"service": "weather-stateless-json",
                       "request": {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                   "params": {"name": "add", "arguments": {"a": 20, "b": 22}}}})
    task = await run_task(f"{stack.bridge_url}/a2a/{REMOTE}", text)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    mcp_response = json.loads(get_artifact_text(task.artifacts[0]))
    assert mcp_response["result"]["content"][0]["text"] == "42"


async def test_a2a_failure_is_a_failed_task_with_the_reason(stack: Stack) -> None:
    text = json.dumps({"service": "nope", "request": {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}})
    task = await run_task(f"{stack.bridge_url}/a2a/{REMOTE}", text)
    assert task.status.state == TaskState.TASK_STATE_FAILED
    assert "Service not found: nope" in task.status.message.parts[0].text


async def test_legacy_a2a_method_gets_no_forced_version(stack: Stack) -> None:
    body = {"jsonrpc": "2.0", "id": "q", "method": "message/send",
            "params": {"message": {"messageId": "m1", "role": "user", "kind": "message",
                                   "parts": [{"kind": "text", "text": json.dumps(
                                       {"service": "weather-stateless-json",
                                        "request": {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}})}]}}}
    async with httpx.AsyncClient(timeout=20) as http:
        resp = await http.post(f"{stack.bridge_url}/a2a/{REMOTE}", json=body)
    assert resp.status_code == 200
    answer = resp.json()
    assert answer["id"] == "q"
    assert "error" not in answer, answer
    assert answer["result"]["status"]["state"] == "completed"


async def test_non_json_remote_is_502_at_once(stack: Stack) -> None:
    async with httpx.AsyncClient() as http:
        card = await http.get(f"{stack.bridge_url}/a2a/{PLAIN_TEXT_KEY.hex()}")
        post = await http.post(f"{stack.bridge_url}/a2a/{PLAIN_TEXT_KEY.hex()}", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask"})
    assert card.status_code == 502 and "non-JSON" in card.text
    assert post.status_code == 502


async def test_a2a_delivery_failures_map_to_statuses(stack: Stack) -> None:
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{stack.bridge_url}/a2a/{UNKNOWN_KEY.hex()}")).status_code == 502
        assert (await http.get(f"{stack.bridge_url}/a2a/{SLOW_KEY.hex()}")).status_code == 504
        assert (await http.get(f"{stack.bridge_url}/a2a/zz")).status_code == 400
        assert (await http.post(f"{stack.bridge_url}/a2a/{REMOTE}", content=b"nope")).status_code == 400
