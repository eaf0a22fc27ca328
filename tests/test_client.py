"""axl.client against two real axl-node processes: the async and the blocking client."""

from __future__ import annotations

import asyncio
import json

import pytest

from axl.client import AsyncClient, BridgeError, BridgeUnreachable, Client, Message
from nodes import Cluster, free_port, wait_until


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("client"))
    a = cluster.add("a")
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
