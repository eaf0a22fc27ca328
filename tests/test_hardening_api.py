"""docs/openapi.yaml against a live bridge: real answers fit the published schema.

The first test drives every core endpoint through its documented outcomes
and checks each answer (status documented, content type, headers, body
schema). The second runs schemathesis briefly; `make fuzz-api` runs it long.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

from axl.chaos import fuzz_schema_text, run_fuzz_api
from nodes import Cluster, NodeProcess, wait_until

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "docs" / "openapi.yaml"
DOC = yaml.safe_load(SCHEMA_PATH.read_text())
UNKNOWN_PEER = "ab" * 32


def resolve(node: dict) -> dict:
    while "$ref" in node and len(node) == 1:
        target = DOC
        for part in node["$ref"].lstrip("#/").split("/"):
            target = target[part]
        node = target
    return node


def check_response(path: str, method: str, status: int, headers: dict, body: bytes) -> None:
    """Fail unless this answer is one the schema documents, with a fitting body."""
    responses = DOC["paths"][path][method]["responses"]
    assert str(status) in responses, f"{method.upper()} {path}: undocumented status {status}"
    documented = resolve(responses[str(status)])
    for name, header in documented.get("headers", {}).items():
        header = resolve(header)
        value = {k.lower(): v for k, v in headers.items()}.get(name.lower())
        if header.get("required"):
            assert value is not None, f"{method.upper()} {path} {status}: header {name} missing"
        if value is not None:
            Draft202012Validator({**DOC, **header["schema"]}).validate(value)
    content = documented.get("content")
    if not content:
        assert body == b"", f"{method.upper()} {path} {status}: undocumented body {body[:80]!r}"
        return
    media = headers.get("Content-Type", "").split(";")[0].strip()
    assert media in content, f"{method.upper()} {path} {status}: content type {media!r} not documented"
    schema = content[media]["schema"]
    if media == "application/json":
        Draft202012Validator({**DOC, **schema}).validate(json.loads(body))


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[NodeProcess, NodeProcess]:
    cluster = Cluster(tmp_path_factory.mktemp("api"))
    small = {"max_message_size": 4096, "lookup_timeout_secs": 5}
    a = cluster.add("a", extra=small)
    b = cluster.add("b", peers=[a], extra=small)
    cluster.start_all()
    try:
        wait_until(lambda: a.get_json("/health")["peers_up"] == 1, 20, what="a peered with b")
        wait_until(lambda: a.send(b.peer_id, b"warm-up")[0] == 200, 30, what="a path from a to b")
        assert b.recv(5)[2] == b"warm-up"
        yield a, b
    finally:
        cluster.stop_all()


def test_schema_document_is_what_the_fuzzer_reads() -> None:
    assert DOC["openapi"].startswith("3.1")
    spec_paths = {"/topology", "/health", "/send", "/recv", "/mcp/{peer_id}/{service}",
                  "/a2a/{peer_id}", "/a2a/{peer_id}/.well-known/agent-card.json"}
    assert spec_paths <= set(DOC["paths"])
    assert "maximum: 1" in fuzz_schema_text(SCHEMA_PATH)


def test_core_endpoints_answer_as_documented(pair) -> None:
    a, b = pair
    status, headers, body = a.request("GET", "/topology")
    check_response("/topology", "get", status, headers, body)
    assert status == 200 and json.loads(body)["peers"][0]["up"]

    status, headers, body = a.request("GET", "/health")
    check_response("/health", "get", status, headers, body)

    outcomes = []
    for payload, dest_headers in [
        (b"hello", {"X-Destination-Peer-Id": b.peer_id}),
        (b"", {"X-Destination-Peer-Id": b.peer_id.upper()}),
        (b"x", {}),
        (b"x", {"X-Destination-Peer-Id": "not-hex"}),
        (b"x" * 5000, {"X-Destination-Peer-Id": b.peer_id}),
        (b"x", {"X-Destination-Peer-Id": UNKNOWN_PEER}),
    ]:
        status, headers, body = a.request("POST", "/send", payload, dest_headers)
        check_response("/send", "post", status, headers, body)
        outcomes.append(status)
    assert outcomes == [200, 200, 400, 400, 413, 502]

    seen = []
    for query in ("?wait=2", "?wait=2", "", "?wait=abc", "?wait=301", "?wait=-1"):
        status, headers, body = b.request("GET", "/recv" + query)
        check_response("/recv", "get", status, headers, body)
        seen.append((status, body, headers.get("X-From-Peer-Id")))
    assert seen[0] == (200, b"hello", a.peer_id)
    assert seen[1] == (200, b"", a.peer_id)
    assert [s[0] for s in seen[2:]] == [204, 400, 400, 400]


def test_agent_routes_refuse_bad_input_as_documented(pair) -> None:
    a, _ = pair
    mcp = f"/mcp/{UNKNOWN_PEER}/weather"
    cases = [
        ("post", "/mcp/{peer_id}/{service}", "POST", mcp, b"{not json", 400),
        ("post", "/mcp/{peer_id}/{service}", "POST", "/mcp/zz/weather", b"{}", 400),
        ("post", "/mcp/{peer_id}/{service}", "POST", mcp, b'{"jsonrpc":"2.0","method":"notifications/x"}', 202),
        ("get", "/mcp/{peer_id}/{service}", "GET", mcp, None, 405),
        ("delete", "/mcp/{peer_id}/{service}", "DELETE", mcp, None, 204),
        ("post", "/a2a/{peer_id}", "POST", f"/a2a/{UNKNOWN_PEER}", b"[", 400),
        ("get", "/a2a/{peer_id}", "GET", "/a2a/nothex", None, 400),
    ]
    for method, template, verb, url, body, expected in cases:
        status, headers, answer = a.request(verb, url, body, {"Content-Type": "application/json"})
        check_response(template, method, status, headers, answer)
        assert status == expected, (verb, url, status, answer)
    status, headers, answer = a.request("POST", mcp, b'{"jsonrpc":"2.0","id":7,"method":"ping"}',
                                        {"Content-Type": "application/json"})
    check_response("/mcp/{peer_id}/{service}", "post", status, headers, answer)
    reply = json.loads(answer)
    assert status == 200 and reply["id"] == 7 and reply["error"]["code"] == -32603


def test_schemathesis_finds_no_undocumented_answer(tmp_path: Path) -> None:
    code, output = run_fuzz_api(tmp_path, max_examples=3, max_time=None, seed=7, phases="fuzzing")
    assert code == 0, output[-4000:]
