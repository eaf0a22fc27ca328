"""Real loopback links between LinkManagers and hand-driven raw sockets."""

from __future__ import annotations

import asyncio
import socket
import logging
import random
import re
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest

from axl.identity import NodeIdentity
from axl.link.framing import KEEPALIVE_FRAME, FrameType, encode_frame
from axl.link.manager import NODE_LOG_LINES, NODE_LOG_WINDOW, PEER_LOG_INTERVAL, DialFailureLog, Link, LinkManager
from axl.link.meta import decode_meta, encode_meta
from axl.link.tls import server_context
from axl.link.uri import parse_peer_uri
from axl.wire import DecodeError

WAIT = 5.0
FAST = dict(handshake_timeout=2.0, backoff_min=0.05, backoff_max=0.2)
ID_A = NodeIdentity.from_seed(b"A" * 32)
ID_B = NodeIdentity.from_seed(b"B" * 32)
ID_C = NodeIdentity.from_seed(b"C" * 32)


@dataclass
class Recorder:
    """A LinkHandler that records everything and can be waited on."""

    ups: list[Link] = field(default_factory=list)
    downs: list[tuple[Link, str]] = field(default_factory=list)
    frames: list[tuple[Link, int, bytes]] = field(default_factory=list)
    reject_type: int | None = None

    def link_up(self, link: Link) -> None:
        self.ups.append(link)

    def frame_received(self, link: Link, ftype: int, body: bytes) -> None:
        if ftype == self.reject_type:
            raise DecodeError("test rejects this type")
        self.frames.append((link, ftype, body))

    def link_down(self, link: Link, reason: str) -> None:
        self.downs.append((link, reason))

    @staticmethod
    async def until(predicate: Callable[[], bool]) -> None:
        """Poll until `predicate` holds; WAIT is only a hang guard."""
        async def poll() -> None:
            while not predicate():
                await asyncio.sleep(0.005)
        await asyncio.wait_for(poll(), WAIT)


@pytest.fixture
async def managers() -> AsyncIterator[Callable[..., tuple[LinkManager, Recorder]]]:
    made: list[LinkManager] = []

    def make(identity: NodeIdentity, **options) -> tuple[LinkManager, Recorder]:
        recorder = Recorder()
        options = {**FAST, **options}
        manager = LinkManager(identity, recorder, rng=random.Random(1), **options)
        made.append(manager)
        return manager, recorder

    yield make
    for manager in made:
        await manager.stop()


async def _listen(manager: LinkManager, uri: str) -> str:
    await manager.start([uri])
    return str(manager.listen_uris()[-1])


async def _raw_peer(port: int, identity: NodeIdentity = ID_C, password: bytes = b"",
                    tls: bool = False) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    """Dial a listener by hand and complete the meta exchange."""
    context = None
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    writer.write(encode_meta(identity, 0, password))
    remote = await asyncio.wait_for(reader.readexactly(123), WAIT)
    return reader, writer, decode_meta(remote, password).key


def _port(uri: str) -> int:
    return int(uri.split("?")[0].rsplit(":", 1)[1])


@pytest.mark.parametrize("scheme", ["tls", "tcp"])
async def test_handshake_and_frames_both_ways(managers, scheme: str) -> None:
    server, at_server = managers(ID_A)
    client, at_client = managers(ID_B)
    uri = await _listen(server, f"{scheme}://127.0.0.1:0?priority=3")
    client.add_peer(uri.replace("priority=3", "priority=5"))
    await at_client.until(lambda: at_client.ups)
    await at_server.until(lambda: at_server.ups)
    outbound, inbound = at_client.ups[0], at_server.ups[0]
    assert outbound.remote_key == ID_A.public_key and not outbound.inbound
    assert inbound.remote_key == ID_B.public_key and inbound.inbound
    assert outbound.priority == inbound.priority == 5
    assert inbound.link_id != outbound.link_id
    for link in (outbound, inbound):  # kernel keepalive catches a wire that dies silently
        sock = link._connection._transport.get_extra_info("socket")
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    outbound.send_frame(encode_frame(FrameType.SIGREQ, b"\x01\x02"))
    inbound.send_traffic(encode_frame(FrameType.TRAFFIC, b"payload"), b"flow")
    inbound.send_frame(encode_frame(FrameType.DUMMY, b"ignored"))
    await at_server.until(lambda: at_server.frames)
    await at_client.until(lambda: at_client.frames)
    assert [(t, b) for _, t, b in at_server.frames] == [(2, b"\x01\x02")]
    assert [(t, b) for _, t, b in at_client.frames] == [(9, b"payload")]
    (status,) = client.peers_status()
    assert status["up"] and not status["inbound"] and status["link"] is outbound
    assert status["public_key"] == ID_A.public_key.hex() and status["priority"] == 5
    (status,) = server.peers_status()
    assert status["inbound"] and status["public_key"] == ID_B.public_key.hex()


async def test_pinned_key_mismatch_is_refused(managers, caplog) -> None:
    server, at_server = managers(ID_A)
    client, at_client = managers(ID_B)
    uri = await _listen(server, "tcp://127.0.0.1:0")
    client.add_peer(f"{uri}?key={ID_C.public_key.hex()}")
    await at_server.until(lambda: at_server.downs)
    assert not at_client.ups
    assert "does not match the pinned key" in caplog.text
    (status,) = client.peers_status()
    assert not status["up"] and status["public_key"] == ""


async def test_pinned_key_match_is_accepted(managers) -> None:
    server, _ = managers(ID_A)
    client, at_client = managers(ID_B)
    uri = await _listen(server, "tls://127.0.0.1:0")
    client.add_peer(f"{uri}?key={ID_A.public_key.hex()}")
    await at_client.until(lambda: at_client.ups)


async def test_allowed_public_keys_refuse_inbound(managers, caplog) -> None:
    server, at_server = managers(ID_A, allowed_keys={ID_C.public_key})
    client, at_client = managers(ID_B)
    uri = await _listen(server, "tcp://127.0.0.1:0")
    client.add_peer(uri)
    await at_client.until(lambda: at_client.downs)
    assert not at_server.ups
    assert "not in AllowedPublicKeys" in caplog.text
    allowed_uri = await _listen(server, "tcp://127.0.0.1:0")
    _, writer, key = await _raw_peer(_port(allowed_uri), ID_C)
    await at_server.until(lambda: at_server.ups)
    assert key == ID_A.public_key
    writer.close()


async def test_password_mismatch_is_refused(managers, caplog) -> None:
    server, at_server = managers(ID_A)
    client, at_client = managers(ID_B)
    uri = await _listen(server, "tls://127.0.0.1:0?password=right")
    client.add_peer(uri.replace("password=right", "password=wrong"))
    await at_client.until(lambda: "bad signature" in caplog.text)
    assert not at_server.ups and not at_client.ups
    assert "handshake with" in caplog.text


async def test_matching_password_links(managers) -> None:
    server, _ = managers(ID_A)
    client, at_client = managers(ID_B)
    uri = await _listen(server, "tcp://127.0.0.1:0?password=shared")
    client.add_peer(uri)
    await at_client.until(lambda: at_client.ups)


async def test_own_key_is_refused(managers, caplog) -> None:
    node, at_node = managers(ID_A)
    uri = await _listen(node, "tcp://127.0.0.1:0")
    dialed = node.add_peer(uri)
    await at_node.until(lambda: caplog.text.count("own key") >= 2)
    assert not at_node.ups
    # yggdrasil 0.5.13: a link to ourselves is not redialed; the peer stays
    # configured, showing why it is down.
    dialer = node._peers[dialed.peer_key].task
    await asyncio.wait_for(asyncio.shield(dialer), WAIT)
    assert "not redialed" in caplog.text and caplog.text.count("own key") == 2
    [status] = [s for s in node.peers_status() if s["uri"] == str(dialed)]
    assert "own key" in status["last_error"]


async def test_garbage_and_http_are_refused_without_harm(managers, caplog) -> None:
    server, at_server = managers(ID_A)
    client, at_client = managers(ID_B)
    tcp_uri = await _listen(server, "tcp://127.0.0.1:0")
    tls_uri = await _listen(server, "tls://127.0.0.1:0")
    client.add_peer(tcp_uri)
    await at_client.until(lambda: at_client.ups)
    for port, payload in ((_port(tcp_uri), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
                          (_port(tcp_uri), bytes(range(256))),
                          (_port(tls_uri), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(payload)
        await asyncio.wait_for(reader.read(), WAIT)
        writer.close()
    assert caplog.text.count("not Yggdrasil") == 2
    assert "Traceback" not in caplog.text
    assert not at_client.downs and at_client.ups[0].is_up
    # the TLS listener still accepts a real peer after the garbage
    other, at_other = managers(ID_C)
    other.add_peer(tls_uri)
    await at_other.until(lambda: at_other.ups)


async def test_tls_client_that_never_handshakes(managers, caplog) -> None:
    server, _ = managers(ID_A, handshake_timeout=0.3)
    uri = await _listen(server, "tls://127.0.0.1:0")
    reader, writer = await asyncio.open_connection("127.0.0.1", _port(uri))
    assert await asyncio.wait_for(reader.read(), WAIT) == b""
    writer.close()
    assert "Traceback" not in caplog.text


async def test_silent_tcp_client_times_out(managers, caplog) -> None:
    server, _ = managers(ID_A, handshake_timeout=0.3)
    uri = await _listen(server, "tcp://127.0.0.1:0")
    reader, writer = await asyncio.open_connection("127.0.0.1", _port(uri))
    assert len(await asyncio.wait_for(reader.read(), WAIT)) == 123
    writer.close()
    assert "handshake timeout" in caplog.text


async def test_disconnect_mid_frame(managers) -> None:
    server, at_server = managers(ID_A)
    uri = await _listen(server, "tcp://127.0.0.1:0")
    _, writer, _ = await _raw_peer(_port(uri))
    writer.write(encode_frame(FrameType.TRAFFIC, b"x" * 500)[:200])
    await at_server.until(lambda: at_server.ups)
    writer.close()
    await at_server.until(lambda: at_server.downs)
    assert at_server.downs[0][1] == "connection closed mid-frame"
    assert server.peers_status() == []


async def test_frames_arriving_with_the_handshake(managers) -> None:
    server, at_server = managers(ID_A)
    uri = await _listen(server, "tls://127.0.0.1:0")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    _, writer = await asyncio.open_connection("127.0.0.1", _port(uri), ssl=context)
    writer.write(encode_meta(ID_C, 0) + encode_frame(FrameType.BLOOM, b"b") + b"\x81\x00\x01")
    await at_server.until(lambda: at_server.frames)
    assert [(t, b) for _, t, b in at_server.frames] == [(5, b"b")]
    writer.close()


async def test_bad_framing_closes_link(managers) -> None:
    server, at_server = managers(ID_A)
    uri = await _listen(server, "tcp://127.0.0.1:0")
    reader, writer, _ = await _raw_peer(_port(uri))
    writer.write(b"\x01\x0a")
    await at_server.until(lambda: at_server.downs)
    assert at_server.downs[0][1] == "malformed frame: unknown frame type 10"
    assert await asyncio.wait_for(reader.read(), WAIT) == b""


async def test_handler_decode_error_closes_link(managers, caplog) -> None:
    caplog.set_level(logging.INFO, logger="axl.link")
    server, at_server = managers(ID_A)
    at_server.reject_type = FrameType.ANNOUNCE
    uri = await _listen(server, "tcp://127.0.0.1:0")
    _, writer, _ = await _raw_peer(_port(uri))
    writer.write(encode_frame(FrameType.SIGREQ, b"\x01\x01") + encode_frame(FrameType.ANNOUNCE, b"?"))
    await at_server.until(lambda: at_server.downs)
    assert at_server.downs[0][1] == "malformed frame: test rejects this type"
    assert len(at_server.frames) == 1
    assert f"peering down: {ID_C.peer_id}: malformed frame" in caplog.text


async def test_keepalive_answers_an_unanswered_frame(managers) -> None:
    server, at_server = managers(ID_A, keepalive_delay=0.05, peer_timeout=5.0)
    uri = await _listen(server, "tcp://127.0.0.1:0")
    reader, writer, _ = await _raw_peer(_port(uri))
    writer.write(encode_frame(FrameType.SIGREQ, b"\x05\x06"))
    assert await asyncio.wait_for(reader.readexactly(2), WAIT) == KEEPALIVE_FRAME
    writer.write(KEEPALIVE_FRAME)
    writer.write(encode_frame(FrameType.DUMMY, b"x"))
    writer.write(encode_frame(FrameType.PATH_LOOKUP, b"y"))
    assert await asyncio.wait_for(reader.readexactly(2), WAIT) == KEEPALIVE_FRAME
    assert [t for _, t, _ in at_server.frames] == [2, 6]
    writer.close()


async def test_peer_timeout_when_nothing_answers(managers) -> None:
    server, at_server = managers(ID_A, keepalive_delay=0.05, peer_timeout=0.2)
    uri = await _listen(server, "tcp://127.0.0.1:0")
    reader, writer, _ = await _raw_peer(_port(uri))
    await at_server.until(lambda: at_server.ups)
    at_server.ups[0].send_frame(encode_frame(FrameType.SIGREQ, b"\x01\x01"))
    assert await asyncio.wait_for(reader.readexactly(4), WAIT) == b"\x03\x02\x01\x01"
    await at_server.until(lambda: at_server.downs)
    assert at_server.downs[0][1] == "peer timeout"
    assert await asyncio.wait_for(reader.read(), WAIT) == b""
    writer.close()


async def test_linked_managers_keep_each_other_alive(managers) -> None:
    timers = dict(keepalive_delay=0.02, peer_timeout=0.1)
    server, at_server = managers(ID_A, **timers)
    client, at_client = managers(ID_B, **timers)
    client.add_peer(await _listen(server, "tls://127.0.0.1:0"))
    await at_client.until(lambda: at_client.ups)
    await at_server.until(lambda: at_server.ups)
    for round_ in range(5):
        at_client.ups[0].send_frame(encode_frame(FrameType.SIGREQ, bytes((1, round_))))
        await at_server.until(lambda: len(at_server.frames) > round_)
        await asyncio.sleep(0.15)
    assert not at_client.downs and not at_server.downs


async def test_reconnect_after_listener_restart(managers) -> None:
    server, at_server = managers(ID_A)
    client, at_client = managers(ID_B)
    uri = await _listen(server, "tcp://127.0.0.1:0")
    client.add_peer(uri)
    await at_client.until(lambda: at_client.ups)
    await server.stop()
    await at_client.until(lambda: at_client.downs)
    assert not client.peers_status()[0]["up"]
    restarted, at_restarted = managers(ID_A)
    await restarted.start([uri])
    await at_client.until(lambda: len(at_client.ups) == 2)
    await at_restarted.until(lambda: at_restarted.ups)
    assert client.peers_status()[0]["up"]


async def test_traffic_waits_under_back_pressure(managers) -> None:
    server, at_server = managers(ID_A)
    client, at_client = managers(ID_B)
    client.add_peer(await _listen(server, "tcp://127.0.0.1:0"))
    await at_client.until(lambda: at_client.ups)
    link = at_client.ups[0]
    connection = link._connection
    connection.pause_writing()
    for i in range(3):
        link.send_traffic(encode_frame(FrameType.TRAFFIC, b"a%d" % i), b"a")
    link.send_traffic(encode_frame(FrameType.TRAFFIC, b"b0"), b"b")
    link.send_frame(encode_frame(FrameType.SIGREQ, b"\x01\x01"))
    assert len(connection.queue) == 4
    connection.resume_writing()
    await at_server.until(lambda: len(at_server.frames) == 5)
    assert [b for _, _, b in at_server.frames] == [b"\x01\x01", b"a0", b"b0", b"a1", b"a2"]


async def test_duplicate_and_removed_peers(managers) -> None:
    server, at_server = managers(ID_A)
    client, at_client = managers(ID_B)
    uri = await _listen(server, "tcp://127.0.0.1:0")
    client.add_peer(uri)
    with pytest.raises(ValueError, match="already configured"):
        client.add_peer(uri + "?priority=1")
    await at_client.until(lambda: at_client.ups)
    client.remove_peer(uri)
    await at_server.until(lambda: at_server.downs)
    assert at_client.downs[0][1] == "peer removed"
    assert client.peers_status() == []


async def test_stop_reports_links_down(managers, caplog) -> None:
    caplog.set_level(logging.INFO, logger="axl.link")
    server, at_server = managers(ID_A)
    client, at_client = managers(ID_B)
    client.add_peer(await _listen(server, "tls://127.0.0.1:0"))
    await at_server.until(lambda: at_server.ups)
    await server.stop()
    assert at_server.downs[0][1] == "shutting down"
    await at_client.until(lambda: at_client.downs)
    assert f"peering up: {ID_A.peer_id}" in caplog.text
    assert "inbound=False priority=0" in caplog.text


async def test_redialing_survives_an_unexpected_error(managers, monkeypatch, caplog) -> None:
    server, _ = managers(ID_A)
    client, at_client = managers(ID_B)
    uri = await _listen(server, "tcp://127.0.0.1:0")
    real_connect = client._connect
    attempts = []

    async def fails_first(peer):
        attempts.append(peer)
        if len(attempts) == 1:
            raise RuntimeError("unexpected failure in one attempt")
        return await real_connect(peer)

    monkeypatch.setattr(client, "_connect", fails_first)
    with caplog.at_level(logging.ERROR, logger="axl.link"):
        client.add_peer(uri)
        await at_client.until(lambda: at_client.ups)
    assert len(attempts) >= 2
    assert "unexpected failure in one attempt" in caplog.text


async def test_a_failed_dial_says_when_it_is_tried_again(managers, caplog) -> None:
    """A refused dial's log line says the node keeps trying, and when."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    uri = f"tcp://127.0.0.1:{closed.getsockname()[1]}"
    client, _ = managers(ID_B)
    with caplog.at_level(logging.INFO, logger="axl.link"):
        client.add_peer(uri)
        await Recorder.until(lambda: "retrying in" in caplog.text)
    closed.close()
    failures = [record.getMessage() for record in caplog.records if "failed" in record.getMessage()]
    assert all(re.fullmatch(rf"dial {uri} failed: .+ \(retrying in 0\.\d+ s\)", line) for line in failures), \
        failures


async def _impostor_server(cert_identity: NodeIdentity, meta_identity: NodeIdentity,
                           tls_version: ssl.TLSVersion) -> tuple[asyncio.Server, int, list[bytes]]:
    """A TLS listener presenting one node's certificate and another's meta, as a replay would."""
    context = server_context(cert_identity)
    context.minimum_version = context.maximum_version = tls_version
    handshakes: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handshakes.append(b"tls")
        writer.write(encode_meta(meta_identity, 0))
        await reader.read()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
    return server, server.sockets[0].getsockname()[1], handshakes


async def test_tls_server_whose_certificate_is_not_its_meta_key_is_refused(managers, caplog) -> None:
    server, port, handshakes = await _impostor_server(ID_C, ID_A, ssl.TLSVersion.TLSv1_3)
    try:
        client, at_client = managers(ID_B)
        client.add_peer(f"tls://127.0.0.1:{port}?key={ID_A.public_key.hex()}")
        await Recorder.until(lambda: "differs from the meta key" in caplog.text)
        assert handshakes and not at_client.ups
        assert f"TLS certificate key {ID_C.public_key.hex()} differs from the meta key" in caplog.text
    finally:
        server.close()


async def test_tls_server_with_its_own_certificate_links(managers) -> None:
    server, port, _ = await _impostor_server(ID_A, ID_A, ssl.TLSVersion.TLSv1_3)
    try:
        client, at_client = managers(ID_B)
        client.add_peer(f"tls://127.0.0.1:{port}?key={ID_A.public_key.hex()}")
        await at_client.until(lambda: at_client.ups)
    finally:
        server.close()


async def test_tls_1_2_only_server_is_refused(managers, caplog) -> None:
    caplog.set_level(logging.INFO)
    server, port, handshakes = await _impostor_server(ID_A, ID_A, ssl.TLSVersion.TLSv1_2)
    try:
        client, at_client = managers(ID_B)
        client.add_peer(f"tls://127.0.0.1:{port}")
        await Recorder.until(lambda: "our dialers require TLS 1.3" in caplog.text)
        assert not handshakes and not at_client.ups
    finally:
        server.close()


def test_maxbackoff_lowers_the_redial_ceiling() -> None:
    manager = LinkManager(NodeIdentity.generate(), None, rng=random.Random(1))  # type: ignore[arg-type]
    capped = manager._backoff_for(parse_peer_uri("tls://127.0.0.1:1?maxbackoff=30s"))
    delays = [capped.next_delay() for _ in range(12)]
    assert max(delays) <= 30 * 1.2
    assert delays[-1] >= 30 * 0.8
    uncapped = manager._backoff_for(parse_peer_uri("tls://127.0.0.1:1"))
    assert max(uncapped.next_delay() for _ in range(12)) > 30 * 1.2


async def test_a_configured_peer_remembers_why_it_is_down(managers) -> None:
    client, at_client = managers(ID_B)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    client.add_peer(f"tcp://127.0.0.1:{port}")
    await at_client.until(lambda: client.peers_status()[0]["last_error"])
    [status] = client.peers_status()
    assert not status["up"] and "connect call failed" in status["last_error"].lower() and status["last_error_at"] > 0

    server, _ = managers(ID_A)
    other, at_other = managers(ID_C)
    other.add_peer(await _listen(server, "tcp://127.0.0.1:0"))
    await at_other.until(lambda: at_other.ups)
    assert other.peers_status()[0]["last_error"] == "" and at_other.ups[0].since > 0
    await server.stop()
    await at_other.until(lambda: other.peers_status()[0]["last_error"])
    assert not other.peers_status()[0]["up"]


def test_dial_failures_are_logged_once_a_while_per_peer_and_node() -> None:
    """Sans-IO: a peer's first failure, a changed error or the same one
    after PEER_LOG_INTERVAL get a line (with the retry delay); the node
    writes at most NODE_LOG_LINES a window, then counts the rest."""
    notes = DialFailureLog()
    refused = "[Errno 111] Connection refused"
    assert notes.lines("tls://h:1", refused, 2.2, 0.0) == ["dial tls://h:1 failed: [Errno 111] Connection refused "
                                                            "(retrying in 2 s)"]
    assert notes.lines("tls://h:1", refused, 4.0, 2.0) == []
    assert notes.lines("tls://h:1", refused, 8.0, 6.0) == []
    assert notes.lines("tls://h:1", "timed out", 16.0, 14.0) == [
        "dial tls://h:1 failed: timed out (retrying in 16 s); 2 more failure(s) of this peer since its last line"]
    assert notes.lines("tls://h:1", "timed out", 60.0, 14.0 + PEER_LOG_INTERVAL) == [
        "dial tls://h:1 failed: timed out (retrying in 60 s)"]
    assert notes.lines("tls://h:2", refused, None, 400.0)[0] == "dial tls://h:2 failed: " + refused

    flood = DialFailureLog()
    lines = [line for index in range(3000) for line in flood.lines(f"tls://h:{index}", refused, 1.0, 1000.0)]
    assert len(lines) == NODE_LOG_LINES
    later = flood.lines("tls://h:0", "timed out", 2.0, 1000.0 + NODE_LOG_WINDOW)
    assert later[0] == (f"{3000 - NODE_LOG_LINES} more dial failure(s) not logged in the last 10 s "
                        f"(at most {NODE_LOG_LINES} lines a 10 s)")
    assert later[1].startswith("dial tls://h:0 failed: timed out")
    assert flood.lines("tls://h:20", refused, 1.0, 1000.0 + 2 * NODE_LOG_WINDOW) == [
        f"dial tls://h:20 failed: {refused} (retrying in 1 s)"]
