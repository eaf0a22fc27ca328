"""JSON that arrives from peers: the MCP and A2A envelopes
(axl.adapters.envelopes), the replies to them, the A2A server's message text
(axl.adapters.a2a_server.parse_mcp_call) and the name in a peer's NodeInfo
(axl.node.core). A peer writes these bytes, so: classifying never raises,
a reply fails only with DecodeError, the message text only with ValueError,
a NodeInfo gives a name or "" whatever it holds, however deep its nesting;
envelopes we encode come back as sent, and the strict JSON parser agrees
with `json` wherever `json` reads a document without NaN or Infinity."""

from __future__ import annotations

import json
import math

from hypothesis import given
from hypothesis import strategies as st

from axl.adapters.a2a_server import parse_mcp_call
from axl.adapters.envelopes import (
    A2aEnvelope, McpEnvelope, Reply, classify, encode_a2a_reply, encode_a2a_request, encode_mcp_reply,
    encode_mcp_request, parse_a2a_envelope, parse_json, parse_mcp_envelope, parse_reply,
)
from axl.node.core import _name_in
from axl.wire import DecodeError
from fuzzing import FUZZ, noise_or_mutation

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=10,
)
headers = st.none() | st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8), max_size=3)
VALID = [
    encode_mcp_request("weather", '{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}', {"Mcp-Session-Id": "s"}),
    encode_a2a_request('{"jsonrpc":"2.0","id":"x","method":"message/send","params":{"k":[1,2.5,null]}}', None),
    encode_a2a_request(None, {"a": "b"}),
    encode_mcp_reply("weather", '{"result": {}}', "oops"),
    encode_a2a_reply(None),
    b'{"SERVICE": "x", "\\u0072equest": true, "service": "y"}',
    b'{"name": "node-1", "buildname": "axl"}',
]
# Nesting past the interpreter's recursion limit, which `json` reports as RecursionError.
deep = st.tuples(st.integers(1, 3000), st.sampled_from(["[", '{"a":', '{"service": "s", "request": ['])).map(
    lambda case: (case[1] + case[0] * "[").encode())
payloads = st.one_of(noise_or_mutation(VALID, 120), deep)


@FUZZ
@given(payloads, st.booleans(), st.booleans())
def test_classify_never_raises(payload, mcp, a2a):
    envelope = classify(payload, mcp_enabled=mcp, a2a_enabled=a2a)
    assert envelope is None or (mcp and isinstance(envelope, McpEnvelope)) or (a2a and isinstance(envelope, A2aEnvelope))


@FUZZ
@given(payloads)
def test_replies_fail_only_with_decode_error(payload):
    try:
        reply = parse_reply(payload)
    except DecodeError:
        return
    assert isinstance(reply, Reply) and isinstance(reply.error, str)


@FUZZ
@given(payloads)
def test_strict_json_agrees_with_json_where_json_reads_it(payload):
    try:
        ours = parse_json(payload).value
    except DecodeError:
        ours = DecodeError
    try:
        theirs = json.loads(payload.decode("utf-8", "replace"), parse_constant=_no_constants)
    except (ValueError, RecursionError):
        theirs = DecodeError
    assert _same(ours, theirs)


def _no_constants(name: str) -> None:
    raise ValueError(name)


def _same(a: object, b: object) -> bool:
    """Equal, with NaN-free floats compared exactly and types kept apart (1 is not 1.0, True is not 1)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


@FUZZ
@given(st.text(min_size=1, max_size=12), json_values, headers)
def test_mcp_requests_round_trip(service, request, extra):
    payload = encode_mcp_request(service, json.dumps(request), extra)
    envelope = parse_mcp_envelope(payload)
    assert envelope is not None and envelope.service == service
    # A null request leaves the field unset, as Go's decoder does.
    assert _same(envelope.request.value if envelope.request else None, request)
    assert envelope.headers == (extra or None)
    assert classify(payload, mcp_enabled=True, a2a_enabled=True) == envelope


@FUZZ
@given(st.none() | json_values, headers)
def test_a2a_requests_round_trip(request, extra):
    payload = encode_a2a_request(None if request is None else json.dumps(request), extra)
    envelope = parse_a2a_envelope(payload)
    assert envelope is not None and envelope.agent_card == (request is None)
    assert _same(envelope.request.value if envelope.request else None, request)
    assert envelope.headers == (extra or None)


@FUZZ
@given(st.text(max_size=12), json_values, st.text(max_size=12))
def test_replies_round_trip(service, response, error):
    for payload in (encode_mcp_reply(service, json.dumps(response), error), encode_a2a_reply(json.dumps(response), error)):
        reply = parse_reply(payload)
        assert _same(reply.response.value if reply.response else None, response) and reply.error == error


@FUZZ
@given(payloads)
def test_a2a_message_text_fails_only_with_value_error(payload):
    try:
        service, _ = parse_mcp_call(payload.decode("utf-8", "replace"))
    except ValueError:
        return
    assert isinstance(service, str) and service


@FUZZ
@given(payloads)
def test_a_nodeinfo_gives_a_name_or_nothing(payload):
    name = _name_in(payload)
    assert isinstance(name, str)
    try:
        document = json.loads(payload)
    except (ValueError, RecursionError):
        assert name == ""
        return
    expected = document.get("name") if isinstance(document, dict) else None
    assert name == (expected if isinstance(expected, str) else "")
