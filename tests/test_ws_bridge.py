"""GET /ws, the streaming bridge, against real nodes (SPEC.md "GET /ws")."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket

import aiohttp
import pytest

from axl.budgets import WS_MAX_IN_FLIGHT
from nodes import Cluster, drain, metric_samples, polls_waiting, up_peers, wait_until
from wsclient import client_frame

LIMIT = 64 << 10
WAIT = 20.0


@pytest.fixture(scope="module")
def trio(tmp_path_factory):
    """a and b with message streams; g without (the Go node's one connection per message), b - a - g."""
    cluster = Cluster(tmp_path_factory.mktemp("ws"))
    a = cluster.add("a", extra={"max_message_size": LIMIT, "lookup_timeout_secs": 3})
    b = cluster.add("b", peers=[a])
    g = cluster.add("g", peers=[a], extra={"message_streams": False})
    cluster.start_all()
    try:
        wait_until(lambda: len(up_peers(a)) == 2, 20, what="a peered with b and g")
        wait_until(lambda: all(x.send(y.peer_id, b"warm")[0] == 200 for x, y in ((a, b), (b, a), (g, b))),
                   30, what="paths a-b both ways and g-b")
        for node in (a, b, g):
            drain(node)
        yield a, b, g
    finally:
        cluster.stop_all()


@pytest.fixture(scope="module")
def pair(trio):
    return trio[:2]


@pytest.fixture
def clean(pair):
    """Both queues empty before and after the test."""
    for node in pair:
        drain(node)
    yield pair
    for node in pair:
        drain(node)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


class WsClient:
    """A small test client for /ws: binary sends, JSON acks, deliveries, done."""

    def __init__(self, session: aiohttp.ClientSession, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.session = session
        self.ws = ws

    @classmethod
    async def open(cls, node, query: str = "") -> "WsClient":
        session = aiohttp.ClientSession()
        try:
            ws = await session.ws_connect(f"{node.url}/ws{query}", max_msg_size=0)
        except BaseException:
            await session.close()
            raise
        return cls(session, ws)

    async def close(self) -> None:
        await self.ws.close()
        await self.session.close()

    async def next(self) -> aiohttp.WSMessage:
        return await asyncio.wait_for(self.ws.receive(), WAIT)

    async def acks(self, count: int) -> dict[int, dict]:
        acks = {}
        while len(acks) < count:
            message = await self.next()
            assert message.type == aiohttp.WSMsgType.TEXT, message
            ack = json.loads(message.data)
            acks[ack["ack"]] = ack
        return acks

    async def delivery(self) -> tuple[int, str, bytes]:
        message = await self.next()
        assert message.type == aiohttp.WSMsgType.BINARY, message
        data = message.data
        return int.from_bytes(data[:8], "big"), data[8:40].hex(), data[40:]

    async def done(self, *ids: int) -> None:
        await self.ws.send_str(json.dumps({"done": ids[0] if len(ids) == 1 else list(ids)}))


def frame(node, payload: bytes) -> bytes:
    return bytes.fromhex(node.peer_id) + payload


def delivered_count(node) -> float:
    """axl_messages_sent_total{status="200"}: /ws sends count there as /send's do."""
    _, _, body = node.request("GET", "/metrics")
    return metric_samples(body.decode()).get(("axl_messages_sent_total", (("status", "200"),)), 0.0)


def test_sends_are_numbered_acknowledged_and_ordered_per_destination(clean) -> None:
    a, b = clean
    delivered_before = delivered_count(a)

    async def scenario() -> dict[int, dict]:
        client = await WsClient.open(a)
        try:
            for i in range(20):
                await client.ws.send_bytes(frame(b if i % 2 else a, f"m{i}".encode()))
            return await client.acks(20)
        finally:
            await client.close()

    acks = run(scenario())
    assert sorted(acks) == list(range(1, 21))
    assert [ack for ack in acks.values() if ack["status"] != 200 or "error" in ack] == []
    assert drain(b) == [f"m{i}".encode() for i in range(1, 20, 2)]
    assert drain(a) == [f"m{i}".encode() for i in range(0, 20, 2)]
    assert delivered_count(a) - delivered_before == 20


def numbered(i: int, large: int) -> bytes:
    """Every other payload `large` bytes, so that a small one sent after it finishes
    first wherever messages to one destination could overtake each other."""
    return b"%05d" % i + bytes(large * (i % 2))


async def send_numbered(node, dest, count: int, large: int) -> dict[int, dict]:
    """Write `count` frames to `dest` at once over one /ws, then collect their acks."""
    client = await WsClient.open(node)
    try:
        for i in range(count):
            await client.ws.send_bytes(frame(dest, numbered(i, large)))
        return await client.acks(count)
    finally:
        await client.close()


@pytest.mark.parametrize("path, count, large", [("stream", 400, 40_000), ("one connection each", 40, 400_000)])
def test_many_frames_to_one_destination_arrive_in_order(trio, path: str, count: int, large: int) -> None:
    """a -> b is a message stream: the frames are under way together. g -> b has
    streams off (the Go node's one connection per message): one at a time, since
    a small message on its own connection would overtake a large one. Either
    way b's queue holds them in the order written."""
    a, b, g = trio
    source = a if path == "stream" else g
    drain(b)
    acks = run(send_numbered(source, b, count, large))
    assert sorted(acks) == list(range(1, count + 1))
    assert [n for n, ack in acks.items() if ack["status"] != 200] == []
    assert drain(b) == [numbered(i, large) for i in range(count)]


def ws_reading_paused(node) -> float:
    """How often the bridge stopped reading a /ws socket at WS_MAX_IN_FLIGHT frames."""
    samples = metric_samples(node.request("GET", "/metrics", timeout=10)[2].decode())
    return samples[("axl_budget_refused_total", (("budget", "ws_in_flight"), ("scope", "connection")))]


def test_a_long_paths_worth_of_frames_in_flight_arrive_in_order_once(trio) -> None:
    """1,000 frames written at once, as a client on a long path keeps them in
    flight: the bridge reads them all without pausing (it once stopped at 256,
    a tenth of what a 200 ms path holds), and b queues each once, in order."""
    a, b, _ = trio
    drain(b)
    paused_before = ws_reading_paused(a)
    count = 1000
    acks = run(send_numbered(a, b, count, 0))
    assert sorted(acks) == list(range(1, count + 1))
    assert [n for n, ack in acks.items() if ack["status"] != 200] == []
    assert drain(b) == [numbered(i, 0) for i in range(count)]
    assert ws_reading_paused(a) == paused_before


def test_failed_sends_are_acknowledged_with_their_status(clean) -> None:
    a, b = clean

    async def scenario() -> dict[int, dict]:
        client = await WsClient.open(a)
        try:
            await client.ws.send_bytes(b"\x01" * 31)
            await client.ws.send_bytes(frame(b, b"x" * (LIMIT + 1)))
            await client.ws.send_bytes(b"\xab" * 32 + b"nobody")
            await client.ws.send_bytes(frame(b, b"after the failures"))
            return await client.acks(4)
        finally:
            await client.close()

    acks = run(scenario())
    assert [acks[n]["status"] for n in (1, 2, 3, 4)] == [400, 413, 502, 200]
    assert all(acks[n]["error"] for n in (1, 2, 3))
    assert drain(b) == [b"after the failures"]


def test_receiving_delivers_id_sender_payload_and_done_removes(clean) -> None:
    a, b = clean
    for i in range(3):
        assert b.send(a.peer_id, f"r{i}".encode())[0] == 200

    async def scenario() -> list[tuple[int, str, bytes]]:
        client = await WsClient.open(a, "?recv=1")
        try:
            got = [await client.delivery() for _ in range(3)]
            await client.ws.send_str(json.dumps({"done": []}))  # says nothing, breaks nothing
            first = got[0][0]
            await client.done(first, *[message_id for message_id, _, _ in got])  # twice in a frame: once
            assert (await asyncio.to_thread(b.send, a.peer_id, b"later"))[0] == 200
            got.append(await client.delivery())
            await client.done(got[-1][0])
            return got
        finally:
            await client.close()

    got = run(scenario())
    assert [payload for _, _, payload in got] == [b"r0", b"r1", b"r2", b"later"]
    assert {sender for _, sender, _ in got} == {b.peer_id}
    ids = [message_id for message_id, _, _ in got]
    assert ids == sorted(ids) and len(set(ids)) == 4
    assert a.recv(0)[0] == 204


def test_undone_messages_return_to_the_front_with_their_ids(clean) -> None:
    a, b = clean
    for i in range(4):
        assert b.send(a.peer_id, f"u{i}".encode())[0] == 200

    async def first_then_second() -> tuple[list, list]:
        first = await WsClient.open(a, "?recv=1")
        try:
            taken = [await first.delivery() for _ in range(3)]
            await first.done(taken[0][0])
        finally:
            await first.close()
        second = await WsClient.open(a, "?recv=1")
        try:
            again = [await second.delivery() for _ in range(3)]
            await second.done(*[message_id for message_id, _, _ in again[:1]])
        finally:
            await second.close()
        return taken, again

    taken, again = run(first_then_second())
    assert [payload for _, _, payload in again] == [b"u1", b"u2", b"u3"]
    assert [message_id for message_id, _, _ in again[:2]] == [message_id for message_id, _, _ in taken[1:]]
    assert drain(a) == [b"u2", b"u3"]


def test_window_limits_undone_deliveries(clean) -> None:
    a, b = clean
    for i in range(4):
        assert b.send(a.peer_id, f"w{i}".encode())[0] == 200

    async def scenario() -> None:
        client = await WsClient.open(a, "?recv=1&window=2")
        try:
            first = [await client.delivery() for _ in range(2)]
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(client.ws.receive(), 1.0)
            await client.done(first[0][0])
            third = await client.delivery()
            assert third[2] == b"w2"
            await client.done(first[1][0], third[0])
            assert (await client.delivery())[2] == b"w3"
        finally:
            await client.close()

    run(scenario())


def test_one_receiver_at_a_time_and_recv_answers_409_meanwhile(clean) -> None:
    a, _ = clean

    async def scenario() -> None:
        receiver = await WsClient.open(a, "?recv=1")
        try:
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await receiver.session.ws_connect(f"{a.url}/ws?recv=1")
            assert refused.value.status == 409
            status, _, _ = await asyncio.to_thread(a.recv, 0)
            assert status == 409
            sender_only = await WsClient.open(a)
            await sender_only.close()
        finally:
            await receiver.close()

    run(scenario())
    wait_until(lambda: a.recv(0)[0] == 204, 10, what="/recv served again")


@pytest.mark.parametrize("window", ["0", "1025", "many"])
def test_a_bad_window_is_400(pair, window: str) -> None:
    a, _ = pair
    status, _, body = a.request("GET", f"/ws?recv=1&window={window}")
    assert status == 400 and b"window" in body


@pytest.mark.parametrize("query, text", [
    ("?recv=1", "not json"),
    ("?recv=1", '{"done": "seven"}'),
    ("?recv=1", '{"done": 123456789}'),
    ("", '{"done": 1}'),
])
def test_protocol_violations_close_with_1008(clean, query: str, text: str) -> None:
    a, _ = clean

    async def scenario() -> aiohttp.WSMessage:
        client = await WsClient.open(a, query)
        try:
            await client.ws.send_str(text)
            return await client.next()
        finally:
            await client.close()

    message = run(scenario())
    assert message.type == aiohttp.WSMsgType.CLOSE
    assert message.data == 1008 and message.extra


def test_a_waiting_recv_poll_yields_to_a_ws_receiver(clean) -> None:
    a, b = clean

    async def scenario() -> tuple[int, bytes]:
        poll = asyncio.ensure_future(asyncio.to_thread(a.recv, 8))
        await asyncio.to_thread(wait_until, lambda: polls_waiting(a) == 1, 10, what="the long poll waiting")
        receiver = await WsClient.open(a, "?recv=1")
        try:
            assert (await asyncio.to_thread(b.send, a.peer_id, b"for the socket"))[0] == 200
            _, _, payload = await receiver.delivery()
            status = (await poll)[0]
        finally:
            await receiver.close()
        return status, payload

    status, payload = run(scenario())
    assert payload == b"for the socket"
    assert status in (204, 409)


def raw_ws(node) -> socket.socket:
    """A WebSocket opened by hand on a plain socket, so the test controls its writes and its close."""
    sock = socket.create_connection(("127.0.0.1", node.api_port), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        assert chunk, "closed during the handshake"
        head += chunk
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def test_a_sender_that_outruns_delivery_is_held_back(clean) -> None:
    """Frames to a node that does not exist wait seconds each: the bridge stops reading
    long before the client has written them all, instead of buffering them."""
    a, _ = clean
    count = 2 * WS_MAX_IN_FLIGHT  # their 32 MiB are within WS_MAX_IN_FLIGHT_BYTES: the frames' limit holds them
    frame = client_frame(0x2, b"\xcd" * 32 + b"p" * (4 << 10))
    sock = raw_ws(a)
    written = 0
    try:
        sock.settimeout(2.0)
        for _ in range(count):
            sock.sendall(frame)
            written += 1
    except socket.timeout:
        pass
    finally:
        sock.close()
    assert written < count
    assert a.get_json("/health")["status"] == "ok"
    paused = metric_samples(a.request("GET", "/metrics", timeout=10)[2].decode())
    assert paused[("axl_budget_refused_total", (("budget", "ws_in_flight"), ("scope", "connection")))] >= 1


def test_a_refused_upgrade_leaves_nothing_for_shutdown_to_trip_on(tmp_path) -> None:
    """A plain GET /ws (no upgrade) is answered 400; stopping the node after
    it must not log a traceback from closing a socket that never opened."""
    node = Cluster(tmp_path).add("solo")
    node.start()
    assert node.request("GET", "/ws", timeout=10)[0] == 400
    assert node.stop() == 0
    log = node.log_path.read_text()
    assert "Traceback" not in log and "never retrieved" not in log


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    """The next server frame: its opcode and (unmasked) payload."""
    def exactly(count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = sock.recv(count - len(data))
            assert chunk, "the connection closed"
            data += chunk
        return data
    first, second = exactly(2)
    size = second & 0x7F
    if size >= 126:
        size = int.from_bytes(exactly(2 if size == 126 else 8), "big")
    return first & 0x0F, exactly(size)


def test_the_front_door_serves_ws_pings_and_fragments_without_the_full_application(tmp_path) -> None:
    cluster = Cluster(tmp_path)
    a = cluster.add("a")
    b = cluster.add("b", peers=[a])
    cluster.start_all()
    try:
        wait_until(lambda: a.send(b.peer_id, b"warm")[0] == 200, 30, what="a path a-b")
        drain(b)
        sock = raw_ws(a)
        try:
            sock.sendall(client_frame(0x9, b"are you there"))
            assert read_frame(sock) == (0xA, b"are you there")
            key = bytes.fromhex(b.peer_id)
            sock.sendall(client_frame(0x2, key + b"one ", final=False) + client_frame(0x9, b"")
                         + client_frame(0x0, b"two ", final=False) + client_frame(0x0, b"three"))
            assert read_frame(sock) == (0xA, b"")
            opcode, ack = read_frame(sock)
            assert opcode == 0x1 and json.loads(ack) == {"ack": 1, "status": 200}
            sock.sendall(client_frame(0x8, (1000).to_bytes(2, "big")))
            assert read_frame(sock) == (0x8, (1000).to_bytes(2, "big"))
        finally:
            sock.close()
        assert b.recv(10)[2] == b"one two three"
        assert "full application loaded" not in a.log_path.read_text()
    finally:
        cluster.stop_all()


@pytest.mark.parametrize("data, code", [
    (bytes([0x82, 0x05]) + b"12345", 1002),  # not masked
    (bytes([0x82, 0xFF]) + (1 << 30).to_bytes(8, "big") + bytes(4), 1009),  # over the message limit
    (client_frame(0x1, b"\xff\xfe"), 1007),  # text that is not UTF-8
])
def test_a_frame_rfc_6455_forbids_closes_with_its_code(pair, data: bytes, code: int) -> None:
    a, _ = pair
    sock = raw_ws(a)
    try:
        sock.sendall(data)
        opcode, payload = read_frame(sock)
        assert opcode == 0x8 and int.from_bytes(payload[:2], "big") == code and payload[2:]
        assert sock.recv(1) == b""  # and the node ends the connection
    finally:
        sock.close()


def ws_after_the_full_application(node, query: str = "") -> socket.socket:
    """A WebSocket opened on a keep-alive connection whose first request
    went to the full application, which serves the upgrade with aiohttp."""
    sock = socket.create_connection(("127.0.0.1", node.api_port), timeout=10)
    sock.sendall(b"GET /no-such-route HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(4096)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 404")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")))
    while len(body) < length:
        body += sock.recv(4096)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(f"GET /ws{query} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101") and b"aiohttp/" in head  # aiohttp's Server header
    return sock


def test_ws_on_a_connection_the_full_application_already_holds(clean) -> None:
    """The same session serves aiohttp's /ws: sends acknowledged, deliveries marked done."""
    a, b = clean
    sender, receiver = ws_after_the_full_application(a), ws_after_the_full_application(b, "?recv=1")
    try:
        sender.sendall(client_frame(0x2, frame(b, b"via aiohttp")))
        opcode, ack = read_frame(sender)
        assert opcode == 0x1 and json.loads(ack) == {"ack": 1, "status": 200}
        opcode, delivery = read_frame(receiver)
        assert opcode == 0x2 and delivery[8:40].hex() == a.peer_id and delivery[40:] == b"via aiohttp"
        receiver.sendall(client_frame(0x1, json.dumps({"done": int.from_bytes(delivery[:8], "big")}).encode()))
        receiver.sendall(client_frame(0x8, (1000).to_bytes(2, "big")))
        assert read_frame(receiver)[0] == 0x8
    finally:
        sender.close()
        receiver.close()
    assert b.recv(0.5)[0] == 204  # marked done: not delivered again
