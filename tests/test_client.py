"""axl.client against two real axl-node processes: the async and the blocking client."""

from __future__ import annotations

import asyncio
import json

import pytest

from axl.client import Ack, AsyncClient, BridgeError, BridgeUnreachable, Client, Message
from nodes import Cluster, drain, free_port, wait_until

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
        assert await receiver.recv(wait=10) == Message(a.peer_id, b"hello")
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
        assert message == Message(a.peer_id, b"\x00binary\xff")
        sender.send(b.peer_id, "second")
        assert next(iter(receiver)).text() == "second"


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
