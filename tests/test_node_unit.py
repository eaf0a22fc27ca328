"""The node core's action pump and the node's life cycle, without processes."""

import asyncio
import logging

import pytest

from axl.config import NodeConfig
from axl.errors import DeliveryError
from axl.identity import NodeIdentity
from axl.node import Node
from axl.packets import DeliverPacket


async def test_malformed_end_to_end_packet_is_dropped_not_raised(caplog):
    """The pump catches every exception, so "nothing raised" proves nothing:
    the packet must be refused by the decoder (a DecodeError, logged at debug
    as malformed), not by a crash that the pump logs as an internal error."""
    caplog.set_level(logging.DEBUG, logger="axl.node")
    node = Node(NodeConfig(), NodeIdentity.generate())
    sender = NodeIdentity.generate().public_key
    # An IPv6 header whose payload length (0) disagrees with the one byte that follows.
    garbage_tcp = bytes([0x60]) + bytes(5) + bytes([6, 64]) + sender[:16] + node.identity.address + b"\x01"
    node.core.apply([DeliverPacket(sender, garbage_tcp)], 0.0)
    assert node.inbox.get_nowait() is None
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert any(r.getMessage().startswith("dropped malformed DeliverPacket") for r in caplog.records)


async def test_topology_of_a_lone_node_shows_itself_as_root():
    node = Node(NodeConfig(), NodeIdentity.generate())
    topology = node.topology()
    assert topology["peers"] == []
    assert topology["tree"] == [{"public_key": node.identity.peer_id, "parent": "", "sequence": 1}]
    assert topology["our_ipv6"].startswith("2")


async def test_stopping_the_node_fails_a_send_still_in_flight():
    node = Node(NodeConfig(), NodeIdentity.generate())
    await node.start()
    pending = asyncio.ensure_future(node.send(NodeIdentity.generate().public_key, b"never routed"))
    await asyncio.sleep(0)
    assert not pending.done()  # no route: it would wait for the 10 s lookup timeout
    await node.stop()
    with pytest.raises(DeliveryError, match="stopping"):
        await asyncio.wait_for(pending, 1.0)


async def test_each_send_caller_is_told_its_fate_once_even_when_another_caller_fails(caplog):
    """start_send_then tells its caller nothing from inside the call; when
    the node stops, every caller still waiting hears why, and one whose
    callback raises is logged without keeping the others from hearing."""
    node = Node(NodeConfig(), NodeIdentity.generate())
    await node.start()
    told: list[tuple[int, DeliveryError | None]] = []

    def failing(error: DeliveryError | None) -> None:
        raise RuntimeError("the caller's own bug")

    for index in range(3):
        node.start_send_then(NodeIdentity.generate().public_key, b"never routed",
                             failing if index == 1 else lambda error, index=index: told.append((index, error)))
    await asyncio.sleep(0)
    assert told == []  # no route: each would wait for the 10 s lookup timeout
    await node.stop()
    assert [index for index, _ in told] == [0, 2]
    assert all(isinstance(error, DeliveryError) and "stopping" in str(error) for _, error in told)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
        "a send's caller failed on its fate"]
