"""Hostile overlay messages must not leak the connection that carried them.

A JSON object with a 4,301-digit integer made Python's int parser raise
ValueError inside envelope classification; the per-connection task died and
the connection kept one of max_concurrent_conns for good.
"""

from __future__ import annotations

import asyncio

import pytest

from axl.adapters.envelopes import classify
from axl.config import NodeConfig
from axl.errors import ReceiverFull
from axl.identity import NodeIdentity
from axl.node import Node
from axl.wire import DecodeError
from nodes import Cluster, up_peers, wait_until

HUGE_INT = b'{"service":"s","request":{"jsonrpc":"2.0","id":1,"method":"m"},"n":' + b"7" * 4301 + b"}"


@pytest.mark.parametrize("mcp, a2a", [(True, False), (False, True), (True, True)])
def test_a_huge_integer_is_not_an_envelope(mcp: bool, a2a: bool) -> None:
    assert classify(HUGE_INT, mcp_enabled=mcp, a2a_enabled=a2a) is None


def test_a_huge_integer_is_a_decode_error_not_a_value_error() -> None:
    from axl.adapters.envelopes import parse_json

    with pytest.raises(DecodeError):
        parse_json(b"[" + b"1" * 5000 + b"]")


class Exploding:
    """An inbound handler with a bug: every dispatch raises."""

    def claims(self, message: bytes) -> bool:
        return True

    async def dispatch(self, sender: bytes, message: bytes):
        raise RuntimeError("bug in a handler")

    def refusal(self, message: bytes) -> bytes | None:
        return None


async def test_a_failing_inbound_dispatch_refuses_and_releases_its_connection() -> None:
    """Each failure is a refusal (503 at the sender), and the connections it used are freed:
    with two slots, five failed messages are followed by a delivered one."""
    node = Node(NodeConfig(send_timeout_secs=20, max_concurrent_conns=2), NodeIdentity.generate(),
                inbound_handler=Exploding())
    await node.start()
    try:
        for _ in range(5):
            with pytest.raises(ReceiverFull):
                await asyncio.wait_for(node.send(node.identity.public_key, b"x"), 30)
        node.inbound_handler = None
        await asyncio.wait_for(node.send(node.identity.public_key, b"fine"), 30)
        assert (await node.recv(0)).payload == b"fine"
    finally:
        await node.stop()


def test_huge_integers_do_not_fill_the_connection_limit(tmp_path) -> None:
    cluster = Cluster(tmp_path)
    target = cluster.add("target", extra={"max_concurrent_conns": 3})
    sender = cluster.add("sender", peers=[target], extra={"send_timeout_secs": 10})
    cluster.start_all()
    try:
        wait_until(lambda: len(up_peers(target)) == 1, 20, what="peering")
        for _ in range(5):
            assert sender.send(target.peer_id, HUGE_INT)[0] == 200
        assert sender.send(target.peer_id, b"normal")[0] == 200
        received = [target.recv(5)[2] for _ in range(6)]
        assert received == [HUGE_INT] * 5 + [b"normal"]
        assert "Traceback" not in target.log_path.read_text()
    finally:
        cluster.stop_all()
