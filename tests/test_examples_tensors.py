"""examples/tensors.py: packing round trips, rejection of bad input, real transfers."""

from __future__ import annotations

import asyncio
import io
import sys
from pathlib import Path

import msgpack
import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

import tensors  # noqa: E402
from axl.client import AsyncClient  # noqa: E402
from test_testnet import FAKE_NODE, REAL_NODE, node_command  # noqa: E402

from axl.testnet import Testnet  # noqa: E402


def sample_arrays() -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    special = np.array([np.nan, -0.0, np.inf, -np.inf, 1e-310], dtype=np.float64)
    return [
        rng.standard_normal((3, 4)).astype(np.float32),
        special,
        rng.integers(-(2**62), 2**62, size=7, dtype=np.int64),
        rng.integers(0, 255, size=(2, 2, 2), dtype=np.uint8),
        np.array([True, False, True]),
        rng.standard_normal(6).astype(">f8"),
        np.arange(12, dtype=np.int16).reshape(3, 4).T,
        np.zeros((0, 5), dtype=np.float16),
        (rng.standard_normal(4) + 1j * rng.standard_normal(4)).astype(np.complex64),
    ]


@pytest.mark.parametrize("array", sample_arrays(), ids=lambda a: f"{a.dtype.str}{a.shape}")
def test_pack_unpack_is_bit_identical(array):
    message = tensors.unpack(tensors.pack(array, "w", 9))
    assert message is not None and message.name == "w" and message.seq == 9
    assert message.array.dtype == array.dtype and message.array.shape == array.shape
    assert message.array.tobytes() == np.ascontiguousarray(array).tobytes()


def test_malformed_tensor_messages_are_rejected():
    good = msgpack.unpackb(tensors.pack(np.arange(4, dtype=np.int32)))
    short = {**good, "tensor": {**good["tensor"], "data": b"\x00" * 15}}
    objects = {**good, "tensor": {**good["tensor"], "dtype": "|O"}}
    negative = {**good, "tensor": {**good["tensor"], "shape": [-4]}}
    for document in (short, objects, negative, {"name": "x"}):
        assert tensors.unpack(msgpack.packb(document)) is None
    assert tensors.unpack(b"\xc1") is None
    assert tensors.unpack_ack(b"\x90") is None


def test_bandwidth_sizes_grow_to_the_largest_message_that_fits():
    sizes = tensors.bandwidth_sizes(1 << 20, factor=4)
    assert sizes == [1024, 4096, 16384, 65536, 262144, (1 << 20) - tensors.ENVELOPE_ALLOWANCE]
    largest = np.zeros(sizes[-1], dtype=np.uint8)
    assert len(tensors.pack(largest, "bandwidth", 99)) <= 1 << 20


def test_progress_bar_shows_fraction_done():
    assert tensors.progress_bar(1, 4) == "[" + "#" * 7 + "." * 23 + "]  25%"
    assert tensors.progress_bar(4, 4).endswith("100%")


@pytest.fixture(scope="module", params=[FAKE_NODE, REAL_NODE])
def pair(request, tmp_path_factory):
    with Testnet(2, "line", tmp_path_factory.mktemp("tensors"), node_command=node_command(request.param)) as net:
        net.wait_converged(timeout=60)
        yield net


async def test_arrays_arrive_bit_identical(pair):
    arrays = sample_arrays()
    sender_node, receiver_node = pair.nodes
    async with AsyncClient(sender_node.bridge_url) as sender, AsyncClient(receiver_node.bridge_url) as receiver:
        receiving = asyncio.create_task(tensors.receive_tensors(receiver, len(arrays), timeout=30))
        for seq, array in enumerate(arrays):
            ack = await tensors.send_tensor(sender, receiver_node.peer_id, array, f"a{seq}", seq, ack_timeout=30)
            assert ack.size == array.nbytes
        received = await receiving
    assert [message.seq for message in received] == list(range(len(arrays)))
    for message, array in zip(received, arrays):
        assert message.array.dtype == array.dtype and message.array.shape == array.shape
        assert message.array.tobytes() == np.ascontiguousarray(array).tobytes()


async def test_bandwidth_mode_prints_a_row_per_size(pair):
    sender_node, receiver_node = pair.nodes
    table, bar = io.StringIO(), io.StringIO()
    async with AsyncClient(sender_node.bridge_url) as sender, AsyncClient(receiver_node.bridge_url) as receiver:
        receiving = asyncio.create_task(tensors.receive_tensors(receiver, 4, timeout=30))
        rows = await tensors.bandwidth(sender, receiver_node.peer_id, max_message_size=256 * 1024,
                                       factor=8, out=table, progress=bar)
        await receiving
    assert [row.size for row in rows] == tensors.bandwidth_sizes(256 * 1024, 8)
    assert all(row.seconds > 0 for row in rows)
    lines = [line.strip("\r") for line in table.getvalue().split("\n") if line.strip()]
    assert len(lines) == 1 + len(rows) and lines[-1].split()[0] == str(rows[-1].size)
    assert bar.getvalue().endswith("100%")
