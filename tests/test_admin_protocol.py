"""The admin socket's protocol, sans-IO: requests cut out of a byte stream
and answers written as a yggdrasil 0.5.12 router writes them (the expected
bytes are a real router's)."""

from __future__ import annotations

import json

import pytest

from axl.admin.protocol import AdminRequest, BadRequest, RequestReader, parse_request, render
from axl.budgets import ADMIN_MAX_REQUEST
from axl.gojson import Raw

# A real yggdrasil 0.5.12 router's answers, byte for byte.
GO_NOT_JSON = b'{\n  "status": "error",\n  "error": "Failed to find request",\n  "request": {\n' \
              b'    "request": ""\n  },\n  "response": null\n}\n'
GO_NO_NAME = b'{\n  "status": "error",\n  "error": "No request specified",\n  "request": {\n' \
             b'    "request": "",\n    "arguments": {}\n  },\n  "response": null\n}\n'
GO_TUN_KEEPALIVE = b'{\n  "status": "success",\n  "request": {\n    "request": "getTun",\n' \
                   b'    "arguments": {},\n    "keepalive": true\n  },\n  "response": {\n' \
                   b'    "enabled": false\n  }\n}\n'


def feed_all(*chunks: bytes) -> list:
    reader = RequestReader()
    found = []
    for chunk in chunks:
        found += reader.feed(chunk)
    return found


def test_a_request_split_anywhere_comes_out_whole():
    text = b'{"request":"getPeers","arguments":{"k":"a}\\"{"},"keepalive":true}\n'
    for cut in range(1, len(text)):
        [request] = feed_all(text[:cut], text[cut:])
        assert request == AdminRequest("getPeers", {"k": 'a}"{'}, True, request.echo)


def test_requests_back_to_back_without_newlines():
    first, second = feed_all(b'{"request":"getSelf","keepalive":true}  {"request":"list"}')
    assert (first.name, first.keepalive, second.name, second.keepalive) == ("getSelf", True, "list", False)


def test_field_names_in_any_case_as_go_reads_them():
    request = parse_request(b'{"Request":"getSelf","ARGUMENTS":{"a":"b"},"KeepAlive":true}')
    assert (request.name, request.arguments, request.keepalive) == ("getSelf", {"a": "b"}, True)


@pytest.mark.parametrize("text, error", [
    (b"not json\n", "Failed to find request"),
    (b'{"request": NaN}', "Failed to find request"),
    (b"[1, 2]", "Failed to unmarshal request"),
    (b'{"request": 5}', "Failed to unmarshal request"),
    (b'{"request": "getSelf", "keepalive": "yes"}', "Failed to unmarshal request"),
    (b'{"request": ""}', "No request specified"),
])
def test_what_is_not_a_request(text, error):
    [bad] = feed_all(text + b" ")
    assert isinstance(bad, BadRequest) and bad.error == error


def test_nothing_is_read_after_a_bad_request():
    assert len(feed_all(b'nonsense {"request":"getSelf"}')) == 1


def test_an_endless_request_is_refused():
    reader = RequestReader()
    assert reader.feed(b'{"request":"' + b"x" * (ADMIN_MAX_REQUEST - 100)) == []
    [bad] = reader.feed(b"x" * 100)
    assert bad.error == "Failed to find request"


def test_numbers_are_echoed_as_written():
    request = parse_request(b'{"request":"getSelf","arguments":{"n":1.50}}')
    assert b'"n": 1.50' in render(request.echo, {})
    assert isinstance(request.arguments["n"], Raw), "a number is never taken for a string argument"


def test_answers_as_yggdrasil_writes_them():
    assert render({"request": ""}, error="Failed to find request") == GO_NOT_JSON
    [no_name] = feed_all(b'{"request":""}\n')
    assert render(no_name.echo, error=no_name.error) == GO_NO_NAME
    [tun] = feed_all(b'{"request":"getTun","keepalive":true}{')
    assert render(tun.echo, {"enabled": False}) == GO_TUN_KEEPALIVE


def test_a_trickled_request_is_looked_through_once():
    """Fed a byte at a time, the search for a request's end resumes where
    it stopped (inside a string, after an escape, between brackets): the
    bytes looked at, summed, grow with the request, not with its square.
    The reader used to rescan from the front at every byte (30 KB at one
    byte a millisecond cost 18.5 s of CPU)."""
    uri = "tls://[::1]:1?" + 'k=\\"v\\\\&' * 2000
    request = json.dumps({"request": "addPeer", "arguments": {"uri": uri, "list": [1, {"x": "]"}]}}).encode()
    reader = RequestReader()
    buffer = reader._buffer
    looked_at = 0
    for index in range(len(request) - 1):
        assert reader.feed(request[index:index + 1]) == []
        assert len(buffer.data) - buffer.resume_at() <= 1, index
        looked_at += len(buffer.data) - buffer.resume_at()
    assert looked_at <= len(request)
    [whole] = reader.feed(request[-1:])
    assert isinstance(whole, AdminRequest) and whole.arguments["uri"] == uri
    assert reader.pending == 0
