"""Unit tests for the adapters' sans-IO parts: envelope classification (Go's matching), encodings, SSE, headers."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from axl.adapters.bridge import McpSessions, rewrite_agent_card
from axl.adapters.counts import AdapterCounts, ForwardCounts
from axl.adapters.envelopes import (
    A2aEnvelope,
    McpEnvelope,
    classify,
    encode_a2a_reply,
    encode_a2a_request,
    encode_mcp_reply,
    encode_mcp_request,
    go_fold,
    parse_reply,
)
from axl.adapters.inbound import DispatchSettings, InboundDispatcher, a2a_version_for
from axl.adapters.jsonrpc import carried_mcp_headers, derived_mcp_headers, rekeyed
from axl.adapters.mcp_router import UpstreamSessions
from axl.adapters.sse import SseDecoder
from axl.wire import DecodeError

BOTH = dict(mcp_enabled=True, a2a_enabled=True)


def mcp(payload: bytes | str) -> McpEnvelope | A2aEnvelope | None:
    return classify(payload.encode() if isinstance(payload, str) else payload, **BOTH)


@pytest.mark.parametrize("key", ["service", "SERVICE", "Service", "sErViCe", "\u017fervice", "serv\u0131ce"])
def test_service_field_matches_case_insensitively_like_go(key: str) -> None:
    envelope = mcp(json.dumps({key: "weather", "request": {"id": 1, "method": "x"}}))
    assert isinstance(envelope, McpEnvelope)
    assert envelope.service == "weather"


@pytest.mark.parametrize("text", [
    '{"\\u0073ervice": "weather", "request": {"id": 1, "method": "x"}}',   # an escaped ASCII letter
    '{"\u017fervice": "weather", "request": {"id": 1, "method": "x"}}',     # a raw long s, as UTF-8
])
def test_keys_spelled_other_than_in_ascii_still_match(text: str) -> None:
    envelope = mcp(text)
    assert isinstance(envelope, McpEnvelope) and envelope.service == "weather"


@pytest.mark.parametrize("space", ["", " ", "\t", "\r\n", " \n\t "])
def test_json_white_space_before_the_object_is_still_an_envelope(space: str) -> None:
    envelope = mcp(space + json.dumps({"service": "weather", "request": {"id": 1, "method": "x"}}))
    assert isinstance(envelope, McpEnvelope) and envelope.service == "weather"


@pytest.mark.parametrize("payload", [b"\x00" * 1024, b"\x0b{}", b" [", b"  ", b"}"])
def test_bytes_that_open_no_json_object_are_no_envelope(payload: bytes) -> None:
    assert classify(payload, **BOTH) is None


def test_a_json_message_naming_no_field_is_not_an_envelope() -> None:
    assert mcp(json.dumps({"topic": "votes", "data": "x" * 900})) is None
    assert isinstance(mcp('{"A2\\u0041": true, "request": {"method": "m"}}'), A2aEnvelope)


def test_go_fold_maps_kelvin_long_s_and_dotless_i_but_not_dotted_capital_i() -> None:
    assert go_fold("\u212a") == go_fold("k")
    assert go_fold("\u017f") == go_fold("s")
    assert go_fold("\u0131") == go_fold("i")
    assert go_fold("\u0130") != go_fold("i")


@pytest.mark.parametrize("payload", [
    '{"service": ""}',
    '{"service": 5, "request": {}}',
    '{"service": null}',
    '["service", "x"]',
    '{"service": "x"} trailing',
    '{"service": "x", "request": NaN}',
    '{"service": "x",}',
    '\ufeff{"service": "x"}',
    "not json",
    "",
])
def test_not_an_mcp_envelope(payload: str) -> None:
    assert classify(payload.encode(), mcp_enabled=True, a2a_enabled=False) is None


def test_duplicate_keys_last_wins_and_null_keeps_the_earlier_value() -> None:
    envelope = mcp('{"service": "a", "SERVICE": "b", "service": null, "request": 1}')
    assert isinstance(envelope, McpEnvelope) and envelope.service == "b"


def test_request_is_kept_verbatim() -> None:
    envelope = mcp('{"service":"s","request":{"id":1e400,"method":"m","x":[1.50]}}')
    assert isinstance(envelope, McpEnvelope)
    assert envelope.request_text == '{"id":1e400,"method":"m","x":[1.50]}'
    assert envelope.headers is None


def test_notification_detection() -> None:
    assert mcp('{"service":"s","request":{"jsonrpc":"2.0","method":"notifications/x"}}').is_notification
    assert not mcp('{"service":"s","request":{"jsonrpc":"2.0","id":0,"method":"m"}}').is_notification
    assert mcp('{"service":"s"}').is_notification


def test_a2a_classification() -> None:
    envelope = mcp('{"A2A": true, "Agent_Card": true, "request": null}')
    assert isinstance(envelope, A2aEnvelope) and envelope.agent_card
    post = mcp('{"a2a": true, "request": {"method": "SendMessage"}, "headers": {"A2A-Version": "1.0", "n": 3}}')
    assert isinstance(post, A2aEnvelope) and not post.agent_card
    assert post.headers == {"A2A-Version": "1.0"}
    for payload in ('{"a2a": false}', '{"a2a": "true"}', '{"a2a": 1}', '{"a2a": true, "agent_card": "yes"}'):
        assert mcp(payload) is None


def test_mcp_is_checked_before_a2a_and_disabled_adapters_see_nothing() -> None:
    both = b'{"service": "s", "a2a": true}'
    assert isinstance(classify(both, **BOTH), McpEnvelope)
    assert isinstance(classify(both, mcp_enabled=False, a2a_enabled=True), A2aEnvelope)
    assert classify(both, mcp_enabled=False, a2a_enabled=False) is None


def test_envelope_encodings_are_go_shaped() -> None:
    assert encode_mcp_request("w", '{"id":1}', None) == b'{"service":"w","request":{"id":1}}'
    assert encode_mcp_request("w", "{}", {"Mcp-Method": "m"}) == b'{"service":"w","request":{},"headers":{"Mcp-Method":"m"}}'
    assert encode_a2a_request(None, None) == b'{"a2a":true,"agent_card":true,"request":null}'
    assert encode_a2a_request('{"x":1}', {}) == b'{"a2a":true,"request":{"x":1}}'
    assert encode_mcp_reply("w", '{"id":1}') == b'{"service":"w","response":{"id":1}}'
    assert encode_mcp_reply("w", None, "boom") == b'{"service":"w","response":null,"error":"boom"}'
    assert encode_a2a_reply("[1]") == b'{"a2a":true,"response":[1]}'
    assert encode_a2a_reply(None, "bad") == b'{"a2a":true,"response":null,"error":"bad"}'


def test_parse_reply() -> None:
    reply = parse_reply(b'{"service":"w","response":{"id":2},"error":""}')
    assert reply.response.value == {"id": 2} and reply.error == ""
    assert parse_reply(b'{"a2a":true,"error":"no"}').error == "no"
    with pytest.raises(DecodeError):
        parse_reply(b"oops")


def test_sse_decoder_skips_comments_and_joins_data_lines() -> None:
    decoder = SseDecoder(max_event_size=1000)
    assert decoder.feed(b": ping\r\n\r\nevent: message\ndata: {\"a\":") == []
    assert decoder.feed(b"\ndata: 1}\n\nid: 3\ndata:x\n") == ['{"a":\n1}']
    assert decoder.finish() == ["x"]
    with pytest.raises(DecodeError):
        SseDecoder(max_event_size=4).feed(b"data: 123456")


def test_header_carrying_and_derivation() -> None:
    carried = carried_mcp_headers({"mcp-protocol-version": "2026-07-28", "MCP-PARAM-Region": "eu", "Mcp-Param-": "x",
                                   "Mcp-Name": "bad\r\nInjected: 1", "Accept": "*/*"})
    assert carried == {"MCP-Protocol-Version": "2026-07-28", "Mcp-Param-Region": "eu"}
    modern = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
              "params": {"name": "météo", "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}}
    assert derived_mcp_headers(modern) == {
        "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "=?base64?bcOpdMOpbw==?=",
    }
    assert derived_mcp_headers({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}) == {}


def test_rekey_and_a2a_version_rule() -> None:
    assert rekeyed({"jsonrpc": "2.0", "id": None, "error": {}}, 7)["id"] == 7
    assert a2a_version_for({"method": "SendMessage"}) == "1.0"
    assert a2a_version_for({"method": "message/send"}) is None
    assert a2a_version_for(None) == "1.0"


def test_card_rewrite() -> None:
    card = {"name": "n", "url": "http://far/", "supportedInterfaces": [{"url": "/a2a/p", "protocolBinding": "JSONRPC"}],
            "additionalInterfaces": [{"url": "http://far/"}], "capabilities": {"streaming": True, "pushNotifications": False}}
    out = rewrite_agent_card(card, "http://127.0.0.1:9002/a2a/p")
    assert out["url"] == out["supportedInterfaces"][0]["url"] == out["additionalInterfaces"][0]["url"]
    assert out["supportedInterfaces"][0]["protocolBinding"] == "JSONRPC"
    assert out["capabilities"] == {"streaming": False, "pushNotifications": False}
    assert card["capabilities"]["streaming"] is True


def test_session_stores_are_bounded() -> None:
    sessions = McpSessions(capacity=2)
    first = sessions.mint("s", "ab" * 32)
    second = sessions.mint("s", "ab" * 32)
    assert first.startswith("mcp-s-abababab-") and sessions.known(first)
    sessions.mint("s", "cd" * 32)
    assert not sessions.known(second) and sessions.known(first)
    upstream = UpstreamSessions(capacity=1)
    upstream.put(("p", "s", "b1"), "u1")
    upstream.put(("p", "s", "b2"), "u2")
    assert upstream.get(("p", "s", "b1")) is None and upstream.get(("p", "s", "b2")) == "u2"
    upstream.forget_service("s")
    assert upstream.get(("p", "s", "b2")) is None


@pytest.fixture
async def fake_router():
    calls: list[dict] = []
    answers: list[web.Response] = []

    async def route(request: web.Request) -> web.Response:
        calls.append(await request.json())
        return answers.pop(0)

    app = web.Application()
    app.router.add_post("/route", route)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield server.port, calls, answers
    await server.close()


async def test_dispatcher_posts_to_the_router_and_wraps_its_answers(fake_router) -> None:
    port, calls, answers = fake_router
    dispatcher = InboundDispatcher(DispatchSettings(router_addr="http://127.0.0.1", router_port=port))
    key = bytes(range(32))
    try:
        answers.append(web.json_response({"response": {"jsonrpc": "2.0", "id": 1, "result": {}}, "error": None}))
        result = await dispatcher.dispatch(key, b'{"service":"w","request":{"jsonrpc":"2.0","id":1,"method":"m"}}')
        assert result.handled
        assert result.reply == b'{"service":"w","response":{"jsonrpc":"2.0","id":1,"result":{}}}'
        assert calls[-1] == {"service": "w", "request": {"jsonrpc": "2.0", "id": 1, "method": "m"},
                             "from_peer_id": key.hex(), "headers": {}}

        answers.append(web.json_response({"response": None, "error": "Service not found: w"}, status=404))
        result = await dispatcher.dispatch(key, b'{"service":"w","request":{"id":2,"method":"m"}}')
        assert result.reply == b'{"service":"w","response":null,"error":"router error: Service not found: w"}'

        answers.append(web.json_response({"response": None, "error": None}))
        result = await dispatcher.dispatch(key, b'{"service":"w","request":{"method":"notifications/x"}}')
        assert result.handled and result.reply is None

        answers.append(web.Response(text="<html>"))
        result = await dispatcher.dispatch(key, b'{"service":"w","request":{"id":3,"method":"m"}}')
        assert b'"error":"failed to parse router response' in result.reply

        assert not (await dispatcher.dispatch(key, b'{"a2a":true}')).handled
        assert not (await dispatcher.dispatch(key, b"hello")).handled
        # Four forwarded (the notification too); the router's refusal and its
        # unreadable answer are errors, the A2A envelope and "hello" not ours.
        assert dispatcher.counts.mcp_in == ForwardCounts(requests=4, errors=2)
        assert dispatcher.counts.a2a_in == ForwardCounts()
    finally:
        await dispatcher.close()


async def test_dispatcher_reports_a_dead_router() -> None:
    with_socket = TestServer(web.Application(), host="127.0.0.1")
    await with_socket.start_server()
    port = with_socket.port
    await with_socket.close()
    dispatcher = InboundDispatcher(DispatchSettings(router_addr="http://127.0.0.1", router_port=port, a2a_addr="http://127.0.0.1", a2a_port=port))
    try:
        reply = (await dispatcher.dispatch(b"\x01" * 32, b'{"service":"w","request":{"id":1,"method":"m"}}')).reply
        assert json.loads(reply)["error"].startswith("failed to contact the MCP router: ")
        card = (await dispatcher.dispatch(b"\x01" * 32, b'{"a2a":true,"agent_card":true}')).reply
        assert json.loads(card)["error"].startswith("failed to contact the A2A server: ")
        assert dispatcher.counts.mcp_in == dispatcher.counts.a2a_in == ForwardCounts(requests=1, errors=1)
    finally:
        await dispatcher.close()


def test_compact_keeps_strings_intact() -> None:
    from axl.adapters.envelopes import compact

    text = '{ "a b" : [1, "x\\" y", "\\\\" ] ,\n "c" : "" }'
    assert compact(text) == '{"a b":[1,"x\\" y","\\\\"],"c":""}'
    assert json.loads(compact(text)) == json.loads(text)


async def test_agent_routes_refuse_a_large_body_from_its_content_length():
    """413 before the body is read, and the connection is closed (no lingering upload)."""
    import asyncio

    from aiohttp import web
    from aiohttp.test_utils import TestServer

    from axl.adapters.bridge import AgentBridgeSettings, add_agent_routes

    class NoRequests:
        async def request(self, dest_key, payload, timeout):
            raise AssertionError("nothing may be sent")

    app = web.Application()
    add_agent_routes(app, NoRequests(), AgentBridgeSettings(max_message_size=1000), AdapterCounts())
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        for path in (f"/mcp/{'ab' * 32}/svc", f"/a2a/{'ab' * 32}"):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {2 ** 31}\r\n\r\n".encode())
            await writer.drain()
            response = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            assert response.startswith(b"HTTP/1.1 413"), response[:80]
    finally:
        await server.close()


@pytest.fixture
async def slow_server():
    """An HTTP server that answers everything with JSON after one second."""
    async def slow(_request: web.Request) -> web.Response:
        await asyncio.sleep(1.0)
        return web.json_response({"response": {"jsonrpc": "2.0", "id": 1, "result": {}}, "error": None})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", slow)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield server.port
    await server.close()


async def test_mcp_and_a2a_dispatch_each_use_their_own_timeout(slow_server) -> None:
    both = dict(router_addr="http://127.0.0.1", router_port=slow_server,
                a2a_addr="http://127.0.0.1", a2a_port=slow_server)
    mcp_request = b'{"service":"w","request":{"jsonrpc":"2.0","id":1,"method":"m"}}'
    a2a_request = b'{"a2a":true,"request":{"jsonrpc":"2.0","id":1,"method":"SendMessage"}}'
    key = b"\x01" * 32
    short_a2a = InboundDispatcher(DispatchSettings(**both, mcp_timeout=20.0, a2a_timeout=0.2))
    short_mcp = InboundDispatcher(DispatchSettings(**both, mcp_timeout=0.2, a2a_timeout=20.0))
    try:
        a2a_reply = json.loads((await asyncio.wait_for(short_a2a.dispatch(key, a2a_request), 10)).reply)
        mcp_reply = json.loads((await asyncio.wait_for(short_a2a.dispatch(key, mcp_request), 10)).reply)
        assert a2a_reply["error"] == "the A2A server did not answer within 0.2 s"
        assert "error" not in mcp_reply
        mcp_reply = json.loads((await asyncio.wait_for(short_mcp.dispatch(key, mcp_request), 10)).reply)
        a2a_reply = json.loads((await asyncio.wait_for(short_mcp.dispatch(key, a2a_request), 10)).reply)
        assert mcp_reply["error"] == "the MCP router did not answer within 0.2 s"
        assert "error" not in a2a_reply
    finally:
        await short_a2a.close()
        await short_mcp.close()


@pytest.mark.parametrize("pad, status", [(1_000_000, 200), (16 * 1024 * 1024, 502)])
async def test_the_router_forwards_a_large_answer_whole(pad: int, status: int) -> None:
    """An MCP server's answer arrives in many chunks: the router reads it to
    its end (up to 16 MiB), not only the part that has arrived."""
    from axl.adapters.mcp_router import McpRouter

    async def upstream(request: web.Request) -> web.Response:
        request_id = json.loads(await request.read())["id"]
        body = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"pad": "x" * pad}})
        return web.Response(body=body.encode(), content_type="application/json")

    server_app = web.Application()
    server_app.router.add_post("/mcp", upstream)
    server = TestServer(server_app, host="127.0.0.1")
    router = TestServer(McpRouter(timeout=30).app(), host="127.0.0.1")
    await server.start_server()
    await router.start_server()
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"http://127.0.0.1:{router.port}/register",
                                 json={"service": "big", "endpoint": f"http://127.0.0.1:{server.port}/mcp"}) as reply:
                assert reply.status == 200
            request = {"service": "big", "request": {"jsonrpc": "2.0", "id": 7, "method": "tools/call"}}
            async with http.post(f"http://127.0.0.1:{router.port}/route", json=request) as reply:
                answer = json.loads(await reply.read())
                assert reply.status == status, answer.get("error")
        if status == 200:
            assert answer["error"] is None and len(answer["response"]["result"]["pad"]) == pad
        else:
            assert answer["error"] == "Service response too large"
    finally:
        await router.close()
        await server.close()


async def test_the_router_refuses_an_endpoint_without_a_host_and_says_why_json_is_bad() -> None:
    from axl.adapters.mcp_router import McpRouter

    router = TestServer(McpRouter(timeout=30).app(), host="127.0.0.1")
    await router.start_server()
    try:
        async with aiohttp.ClientSession() as http:
            register = f"http://127.0.0.1:{router.port}/register"
            async with http.post(register, json={"service": "x", "endpoint": "http://"}) as reply:
                assert reply.status == 400 and "with a host" in (await reply.json())["error"]
            async with http.post(register, data=b"{nope") as reply:
                assert reply.status == 400 and (await reply.json())["error"].startswith("invalid JSON: ")
    finally:
        await router.close()
