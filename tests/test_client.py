"""axl.client against two real axl-node processes: the async and the blocking client."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
import time

import pytest

from axl.client import Ack, AsyncClient, BridgeError, BridgeUnreachable, Client, Message
from nodes import Cluster, drain, free_port, polls_waiting, wait_until

LIMIT = 64 << 10


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("client"))
    a = cluster.add("a", extra={"max_message_size": LIMIT})
    b = cluster.add("b", peers=[a])
    try:
        cluster.start_all()
        wait_until(lambda: a.send(b.peer_id, b"warm-up")[0] == 200, 60, interval=0.5, what="a reaches b")
        wait_until(lambda: b.recv(0.1)[0] == 204, 30, what="b's queue drained")
        yield a, b
    finally:
        cluster.stop_all()


async def test_async_client_sends_receives_and_iterates(pair):
    a, b = pair
    async with AsyncClient(a.url) as sender, AsyncClient(b.url) as receiver:
        assert await sender.peer_id() == a.peer_id
        assert (await receiver.topology())["our_public_key"] == b.peer_id
        assert await receiver.recv() is None
        await sender.send(b.peer_id, "hello")
        message = await receiver.recv(wait=10)
        assert (message.sender, message.body) == (a.peer_id, b"hello")
        for index in range(3):
            await sender.send(b.peer_id, json.dumps({"n": index}).encode())
        received = []
        async for message in receiver:
            received.append(message.json()["n"])
            if len(received) == 3:
                break
        assert received == [0, 1, 2]


def test_blocking_client_sends_receives_and_iterates(pair):
    a, b = pair
    with Client(a.url) as sender, Client(b.url) as receiver:
        assert sender.peer_id() == a.peer_id
        assert receiver.recv() is None
        sender.send(b.peer_id, b"\x00binary\xff")
        message = receiver.recv(wait=10)
        assert (message.sender, message.body) == (a.peer_id, b"\x00binary\xff")
        sender.send(b.peer_id, "second")
        assert next(iter(receiver)).text() == "second"


async def test_both_clients_give_the_nodes_message_id(pair):
    """`Message.id` is the node's X-Message-Id (docs/operations.md: keep it against
    duplicates); the node numbers its queue one by one."""
    a, b = pair
    for text in ("raw", "blocking", "async"):
        a.send(b.peer_id, text.encode())
    status, headers, body = b.recv()
    assert (status, body) == (200, b"raw")
    raw_id = int(headers["X-Message-Id"])
    with Client(b.url) as blocking:
        taken = blocking.recv(wait=10)
    async with AsyncClient(b.url) as client:
        awaited = await client.recv(wait=10)
    assert [(m.body, m.id) for m in (taken, awaited)] == [(b"blocking", raw_id + 1), (b"async", raw_id + 2)]


def test_refusals_carry_status_and_text(pair):
    a, _ = pair
    with Client(a.url) as client:
        with pytest.raises(BridgeError) as caught:
            client.send("not-a-key", b"x")
    assert caught.value.status == 400 and caught.value.text
    assert f"{a.url}/send: HTTP 400" in str(caught.value)


async def test_async_refusals_carry_status_and_text(pair):
    a, _ = pair
    async with AsyncClient(a.url) as client:
        with pytest.raises(BridgeError) as caught:
            await client.send("not-a-key", b"x")
    assert caught.value.status == 400 and caught.value.text


async def test_no_node_is_bridge_unreachable():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(BridgeUnreachable) as caught:
        await asyncio.to_thread(Client(url).topology)
    assert caught.value.status is None
    async with AsyncClient(url) as client:
        with pytest.raises(BridgeUnreachable):
            await client.topology()


async def take(stream, count: int) -> list[Message]:
    taken = []
    async for message in stream.messages():
        taken.append(message)
        if len(taken) == count:
            return taken
    raise AssertionError(f"the stream ended after {len(taken)} of {count} messages")


async def test_a_stream_pipelines_sends_and_pushes_messages_in_order(pair):
    """200 sends under way at once, each future settled by its ack; the receiver's
    window of 16 is refilled only as handled messages are marked done."""
    a, b = pair
    async with AsyncClient(a.url) as sender, AsyncClient(b.url) as receiver:
        async with receiver.stream(receive=True, window=16) as inbound:
            async with sender.stream() as outbound:
                futures = [await outbound.start_send(b.peer_id, f"p{i}") for i in range(200)]
                acks = await asyncio.wait_for(asyncio.gather(*futures), 60)
                assert await outbound.send(b.peer_id, b"last") == Ack(201)
            got = await asyncio.wait_for(take(inbound, 201), 60)
    assert [ack.number for ack in acks] == list(range(1, 201))
    assert [message.text() for message in got] == [f"p{i}" for i in range(200)] + ["last"]
    assert {message.sender for message in got} == {a.peer_id}
    assert len({message.id for message in got}) == 201
    assert drain(b) == []


async def test_a_failed_stream_send_raises_what_send_raises(pair):
    a, b = pair
    async with AsyncClient(a.url) as client, client.stream() as stream:
        with pytest.raises(BridgeError) as too_large:
            await stream.send(b.peer_id, bytes(LIMIT + 1))
        with pytest.raises(BridgeError) as bad_peer:
            await stream.send("not-a-key", b"x")
        assert await stream.send(b.peer_id, b"after the failures") == Ack(2)
        with pytest.raises(BridgeError) as direct:
            await client.send(b.peer_id, bytes(LIMIT + 1))
    assert too_large.value.status == direct.value.status == 413 and too_large.value.text
    assert bad_peer.value.status == 400
    assert drain(b) == [b"after the failures"]


async def test_messages_not_handled_when_a_block_fails_are_delivered_again(pair):
    """Leaving with an exception marks nothing more done: the message being
    handled, and those pushed but not yet handed out, go back to the queue
    with their ids. Leaving normally marks the last one handed out done."""
    a, b = pair
    for i in range(4):
        assert a.send(b.peer_id, b"r%d" % i)[0] == 200
    async with AsyncClient(b.url) as client:
        with pytest.raises(RuntimeError):
            async with client.stream(receive=True, window=4) as stream:
                first = await asyncio.wait_for(take(stream, 2), 30)
                raise RuntimeError("the handler failed on r1")
        async with client.stream(receive=True) as stream:
            again = await asyncio.wait_for(take(stream, 3), 30)
        assert await client.recv() is None
    assert [m.body for m in first] == [b"r0", b"r1"]
    assert [m.body for m in again] == [b"r1", b"r2", b"r3"]
    assert again[0].id == first[1].id


async def test_a_second_receiving_stream_is_refused_with_409(pair):
    _, b = pair
    async with AsyncClient(b.url) as client, client.stream(receive=True):
        with pytest.raises(BridgeError) as caught:
            async with client.stream(receive=True):
                pass
    assert caught.value.status == 409
    assert caught.value.text == "another /ws connection is receiving this node's messages"


def test_a_blocking_stream_pipelines_sends_and_pushes_messages_in_order(pair):
    a, b = pair
    with Client(a.url) as sender, Client(b.url) as receiver:
        with receiver.stream(receive=True, window=16) as inbound:
            with sender.stream() as outbound:
                futures = [outbound.start_send(b.peer_id, f"p{i}") for i in range(200)]
                acks = [future.result(60) for future in futures]
                assert outbound.send(b.peer_id, b"last") == Ack(201)
            got = []
            for message in inbound.messages():
                got.append(message)
                if len(got) == 201:
                    break
    assert [ack.number for ack in acks] == list(range(1, 201))
    assert [message.text() for message in got] == [f"p{i}" for i in range(200)] + ["last"]
    assert {message.sender for message in got} == {a.peer_id}
    assert drain(b) == []
    assert not [t for t in threading.enumerate() if t.name == "axl-client-stream"]


def test_a_blocking_stream_raises_what_send_raises_and_goes_on(pair):
    a, b = pair
    with Client(a.url) as client, client.stream() as stream:
        with pytest.raises(BridgeError) as too_large:
            stream.send(b.peer_id, bytes(LIMIT + 1))
        with pytest.raises(BridgeError) as bad_peer:
            stream.start_send("not-a-key", b"x")
        refused = stream.start_send(b.peer_id, bytes(LIMIT + 1))
        assert stream.send(b.peer_id, b"after the failures") == Ack(3)
        with pytest.raises(BridgeError) as later:
            refused.result(30)
    assert too_large.value.status == later.value.status == 413
    assert bad_peer.value.status == 400
    assert drain(b) == [b"after the failures"]


def test_a_blocking_stream_left_by_an_exception_gives_its_message_back(pair):
    a, b = pair
    for i in range(3):
        assert a.send(b.peer_id, b"r%d" % i)[0] == 200
    with Client(b.url) as client:
        with pytest.raises(RuntimeError):
            with client.stream(receive=True, window=4) as stream:
                for message in stream.messages():
                    if message.body == b"r1":
                        raise RuntimeError("the handler failed on r1")
        with pytest.raises(BridgeError) as refused:
            with client.stream(receive=True), client.stream(receive=True):
                pass
        assert [client.recv(5).body for _ in range(2)] == [b"r1", b"r2"]
    assert refused.value.status == 409


def test_a_blocking_stream_to_no_node_is_bridge_unreachable():
    with pytest.raises(BridgeUnreachable):
        with Client(f"http://127.0.0.1:{free_port()}").stream():
            pass
    assert not [t for t in threading.enumerate() if t.name == "axl-client-stream"]


def blocked_in_a_wait(thread: threading.Thread) -> bool:
    """`thread` is blocked in a threading wait (a lock, a condition, a future's result)."""
    frame = sys._current_frames().get(thread.ident)
    return frame is not None and frame.f_code.co_name == "wait" and frame.f_code.co_filename == threading.__file__


def test_closing_a_blocking_stream_ends_a_wait_for_messages_in_another_thread(pair):
    _, b = pair
    drain(b)
    ended = threading.Event()
    with Client(b.url) as client:
        stream = client.stream(receive=True)
        stream.open()

        def consume() -> None:
            for _ in stream.messages():
                pass
            ended.set()

        consumer = threading.Thread(target=consume)
        consumer.start()
        wait_until(lambda: blocked_in_a_wait(consumer), 10, interval=0.02, what="the consumer waiting")
        assert not ended.is_set()
        stream.close()
        consumer.join(10)
        assert ended.is_set()


class CountingBridge:
    """A stand-in bridge on loopback that answers every request with a
    topology and counts the connections it accepts; with `close_after` it
    closes each connection after that many answers (as the node does with an
    idle one) without saying so."""

    def __init__(self, close_after: int | None = None) -> None:
        self.close_after = close_after
        self.connections = 0
        self.closed = 0
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._answer, args=(sock,), daemon=True).start()

    def _answer(self, sock) -> None:
        body = json.dumps({"our_public_key": "ab" * 32, "peers": [], "tree": []}).encode()
        answers = 0
        with sock, sock.makefile("rb") as reader:
            while self.close_after is None or answers < self.close_after:
                if not self._read_head(reader):
                    break
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                answers += 1
        self.closed += 1

    @staticmethod
    def _read_head(reader) -> bool:
        """Read one request head (these requests have no body); False at the end."""
        while (line := reader.readline()) not in (b"\r\n", b""):
            pass
        return line == b"\r\n"

    def close(self) -> None:
        self.server.close()

    def __enter__(self) -> "CountingBridge":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def test_the_blocking_client_keeps_its_connection_between_calls() -> None:
    with CountingBridge() as bridge:
        with Client(bridge.url) as client:
            for _ in range(10):
                assert client.topology()["our_public_key"] == "ab" * 32
        assert bridge.connections == 1


def test_the_blocking_client_notices_a_connection_the_bridge_closed() -> None:
    with CountingBridge(close_after=1) as bridge:
        with Client(bridge.url) as client:
            for call in range(1, 4):
                assert client.topology()["our_public_key"] == "ab" * 32
                wait_until(lambda: bridge.closed == call, 5, what="the stand-in closed the connection")
        assert bridge.connections == 3


def test_closing_the_blocking_client_closes_every_threads_connection() -> None:
    with CountingBridge() as bridge:
        client = Client(bridge.url)
        called = threading.Barrier(3)
        checked = threading.Event()

        def call_and_stay() -> None:
            """Call, then stay alive (with the connection) until the check is over."""
            client.topology()
            called.wait(5)
            checked.wait(10)

        threads = [threading.Thread(target=call_and_stay) for _ in range(2)]
        for thread in threads:
            thread.start()
        try:
            called.wait(5)
            assert bridge.connections == 2
            client.close()
            wait_until(lambda: bridge.closed == 2, 5, what="both threads' connections closed")
        finally:
            checked.set()
            for thread in threads:
                thread.join(5)
        assert client.topology()["our_public_key"] == "ab" * 32
        assert bridge.connections == 3
        client.close()


def test_a_blocking_client_threads_connection_closes_when_the_thread_ends() -> None:
    with CountingBridge() as bridge:
        client = Client(bridge.url)
        thread = threading.Thread(target=client.topology)
        thread.start()
        thread.join(5)
        assert bridge.connections == 1
        wait_until(lambda: bridge.closed == 1, 5, what="the ended thread's connection closed")


def test_an_interrupted_long_poll_takes_no_message_for_nobody(pair):
    """Ctrl-C during recv(wait) must not leave the poll waiting on a kept
    connection: the next message would be written to it and lost."""
    import signal

    class Interrupted(BaseException):
        pass

    def interrupt(*_: object) -> None:
        raise Interrupted()

    a, b = pair
    drain(b)
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        with Client(b.url) as receiver, Client(a.url) as sender:
            assert receiver.recv() is None
            signal.setitimer(signal.ITIMER_REAL, 0.5)
            with pytest.raises(Interrupted):
                receiver.recv(wait=5)
            sender.send(b.peer_id, b"not for nobody")
            message = receiver.recv(wait=5)
            assert message is not None and message.body == b"not for nobody"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_the_blocking_client_works_with_descriptors_past_1024() -> None:
    import os
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"the descriptor limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        with CountingBridge() as bridge, Client(bridge.url) as client:
            for _ in range(3):
                assert client.topology()["our_public_key"] == "ab" * 32
        assert bridge.connections == 1
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_close_from_another_thread_ends_a_call_under_way(pair):
    """A recv(wait) blocked in one thread fails at once when another thread
    closes the client, and takes no message for nobody."""
    a, b = pair
    drain(b)
    outcome: list[BaseException | Message | None] = []
    with Client(a.url) as sender:
        receiver = Client(b.url)

        def poll() -> None:
            try:
                outcome.append(receiver.recv(wait=8))
            except BridgeError as error:
                outcome.append(error)

        polling = threading.Thread(target=poll)
        polling.start()
        wait_until(lambda: polls_waiting(b) == 1, 10, what="the recv(wait=8) waiting on b")
        started = time.monotonic()
        receiver.close()
        polling.join(5)
        assert time.monotonic() - started < 2 and not polling.is_alive()
        assert isinstance(outcome[0], BridgeUnreachable), outcome
        sender.send(b.peer_id, b"after the close")
        message = Client(b.url).recv(wait=5)
        assert message is not None and message.body == b"after the close"


@pytest.mark.parametrize("make", [Client, AsyncClient])
def test_a_bridge_url_without_a_scheme_is_refused_at_once(make):
    with pytest.raises(ValueError, match="bridge URL must be http://host:port"):
        make("127.0.0.1:9002")


@pytest.mark.parametrize("call, error", [
    (lambda node: node.recv(wait=1e20), ValueError),
    (lambda node: node.recv(wait=float("nan")), ValueError),
    (lambda node: node.recv(wait=-1), ValueError),
    (lambda node: node.send("ab" * 32, None), TypeError),
    (lambda node: node.send("ab" * 32 + "\r\nX-Injected: 1", b"x"), ValueError),
    (lambda node: node.stream(receive=True, window=0), ValueError),
])
def test_calls_the_client_cannot_make_raise_before_any_request(call, error):
    with Client(f"http://127.0.0.1:{free_port()}") as node, pytest.raises(error):
        call(node)


def test_https_to_the_plain_bridge_fails_at_once(pair):
    """The bridge speaks plain HTTP: an https:// client's TLS hello is no
    request line, and is refused at once rather than left to time out."""
    _, b = pair
    started = time.monotonic()
    with Client(b.url.replace("http://", "https://"), timeout=20) as node, \
            pytest.raises(BridgeUnreachable, match="WRONG_VERSION_NUMBER|wrong version"):
        node.recv(wait=1)
    assert time.monotonic() - started < 5
