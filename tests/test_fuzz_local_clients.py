"""Decoders fed by local clients and local services: the admin socket's
request stream (axl.admin.protocol), Go-style JSON (axl.gojson, which also
re-encodes a remote node's NodeInfo for getNodeInfo), the event streams of
MCP services (axl.adapters.sse) and the body of `POST /peers`
(axl.bridge.peers). A client that sends nonsense gets an error answer, not a
failure of the node: each fails only with its documented error, whatever the
bytes and however they are cut, and what is valid reads back as written."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from axl.adapters.sse import SseDecoder
from axl.admin.protocol import AdminRequest, BadRequest, RequestReader
from axl.bridge.peers import _uri_of
from axl.budgets import ADMIN_MAX_REQUEST
from axl.gojson import compact, dumps, loads
from axl.wire import DecodeError
from fuzzing import FUZZ, chunkings, feed_all, noise_or_mutation, with_chunkings

deep = st.tuples(st.integers(1, 3000), st.sampled_from(["[", '{"a":', '{"request": "x", "arguments": ['])).map(
    lambda case: (case[1] + case[0] * "[").encode())
names = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x2FF), max_size=10)
arguments = st.dictionaries(st.text(max_size=5), st.one_of(st.text(max_size=5), st.booleans(), st.integers(-9, 9)),
                            max_size=3)


# --- the admin socket --------------------------------------------------------------

VALID_ADMIN = [b'{"request": "getSelf"}\n{"Request": "getPeers", "keepalive": true}\n',
               b'{"request":"addPeer","arguments":{"uri":"tls://1.2.3.4:5","n":1.50}}',
               b' [1, 2] "x" 12 {"request": ""}']


def _read(chunks: list[bytes]) -> list[AdminRequest | BadRequest]:
    reader = RequestReader()
    found: list[AdminRequest | BadRequest] = []
    for chunk in chunks:
        if found and isinstance(found[-1], BadRequest):
            break  # the connection closes
        found += reader.feed(chunk)
        assert len(reader._buffer) <= ADMIN_MAX_REQUEST + len(chunk)
    return found


@FUZZ
@given(with_chunkings(st.one_of(noise_or_mutation(VALID_ADMIN, 120), deep)))
def test_admin_requests_any_bytes_any_chunking_same_requests(case):
    data, chunks = case
    whole = _read([data])
    assert all(isinstance(found, (AdminRequest, BadRequest)) for found in whole)
    assert repr(_read(chunks)) == repr(whole)


@FUZZ
@given(st.lists(st.tuples(names.filter(bool), arguments, st.booleans()), min_size=1, max_size=4), st.data())
def test_admin_requests_read_back_as_sent_split_anywhere(requests, data):
    stream = b"".join(json.dumps({"request": name, "arguments": args, "keepalive": keep}).encode()
                      + data.draw(st.sampled_from([b"\n", b"", b" \r\n"])) for name, args, keep in requests)
    found = _read(data.draw(chunkings(stream)))
    assert [(r.name, r.keepalive) for r in found] == [(name, keep) for name, _, keep in requests]
    # Numbers stay as written (to be echoed so): compare them as Go writes them back.
    assert [json.loads(dumps(r.arguments)) for r in found] == [args for _, args, _ in requests]


# --- Go-style JSON ---------------------------------------------------------------------

@FUZZ
@given(st.one_of(noise_or_mutation([b'{"a": [1, 2.5e3, "\\u00e9<>&"], "b": null}', b'"x"', b"[true, false]"], 80),
                 deep))
def test_compact_is_the_same_value_or_value_error(data):
    try:
        text = compact(data)
    except ValueError:
        return
    assert loads(text) == loads(data)
    assert compact(text.encode()) == text


# --- MCP event streams ------------------------------------------------------------------

LIMIT = 64
VALID_SSE = [b"event: message\ndata: {\"id\": 1}\n\n: ping\n\ndata: a\ndata:b\r\n\r\n", b"data: x\nid: 3\n\ndata"]


def _events(chunks: list[bytes]) -> tuple[list[str], bool]:
    """The events of `chunks` and then the stream's end (None)."""
    decoder = SseDecoder(LIMIT)
    return feed_all(lambda chunk: decoder.finish() if chunk is None else decoder.feed(chunk),
                    [*chunks, None], DecodeError)


@FUZZ
@given(with_chunkings(noise_or_mutation(VALID_SSE, 150)))
def test_event_stream_any_chunking_same_events_or_decode_error(case):
    data, chunks = case
    split, refused = _events(chunks)
    whole = _events([data])
    # A line is refused once too long even before it ends, so a split
    # stream can be refused where the whole is not; never the other way.
    if not refused:
        assert (split, refused) == whole
    assert all(len(event) <= LIMIT for event in split)


@FUZZ
@given(st.lists(st.lists(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"),
                                 max_size=10), min_size=1, max_size=3), max_size=4), st.data())
def test_events_read_back_as_sent(sent, data):
    stream = b"".join(b"".join(b"data: " + line.encode() + b"\n" for line in event) + b"\n" for event in sent)
    events, refused = _events(data.draw(chunkings(stream)))
    fits = all(sum(len(line) for line in event) + len(b"data: ") + 4 * len(event) <= LIMIT for event in sent)
    if fits:
        assert not refused
    if not refused:
        assert events == ["\n".join(event) for event in sent]


# --- POST /peers -----------------------------------------------------------------------------

@FUZZ
@given(st.one_of(noise_or_mutation([b'{"uri": "tls://127.0.0.1:9001"}', b'{"uri": 5}'], 60), deep))
def test_peers_body_gives_its_uri_or_none(body):
    uri = _uri_of(body)
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        assert uri is None
        return
    assert uri == (document.get("uri") if isinstance(document, dict) else None)
