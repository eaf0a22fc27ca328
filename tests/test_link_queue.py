"""The per-link traffic queue: round robin per flow, ironwood's 25 ms
shedding rule, and the byte cap."""

from __future__ import annotations

from axl.link.queue import FairQueue


def _drain(queue: FairQueue) -> list[bytes]:
    out = []
    while (frame := queue.pop()) is not None:
        out.append(frame)
    return out


def test_empty_queue() -> None:
    queue = FairQueue()
    assert queue.pop() is None
    assert len(queue) == 0 and queue.byte_count == 0


def test_round_robin_between_flows() -> None:
    queue = FairQueue()
    for i in range(4):
        queue.push(b"A%d" % i, b"flow-a", 0.0)
    queue.push(b"B0", b"flow-b", 0.0)
    queue.push(b"B1", b"flow-b", 0.0)
    queue.push(b"C0", b"flow-c", 0.0)
    assert len(queue) == 7 and queue.byte_count == 14
    assert _drain(queue) == [b"A0", b"B0", b"C0", b"A1", b"B1", b"A2", b"A3"]
    assert len(queue) == 0 and queue.byte_count == 0


def test_fifo_within_a_flow() -> None:
    queue = FairQueue()
    frames = [bytes([i]) * 3 for i in range(20)]
    for frame in frames:
        queue.push(frame, b"one", 0.0)
    assert _drain(queue) == frames


def test_no_drop_while_head_is_young() -> None:
    queue = FairQueue()
    queue.push(b"x" * 10, b"a", 0.0)
    queue.push(b"y" * 10, b"a", 0.025)
    assert queue.dropped == 0 and len(queue) == 2


def test_stale_head_drops_oldest_of_largest_flow() -> None:
    queue = FairQueue()
    queue.push(b"small-old", b"small", 0.000)
    queue.push(b"big-1" + bytes(100), b"big", 0.001)
    queue.push(b"big-2" + bytes(100), b"big", 0.002)
    queue.push(b"new", b"other", 0.030)
    assert queue.dropped == 1
    assert _drain(queue) == [b"small-old", b"big-2" + bytes(100), b"new"]


def test_one_drop_per_push() -> None:
    queue = FairQueue()
    for i in range(5):
        queue.push(bytes(10), b"f", 0.0)
    queue.push(bytes(10), b"f", 1.0)
    assert queue.dropped == 1 and len(queue) == 5


def test_byte_cap_bounds_memory() -> None:
    queue = FairQueue(byte_cap=1000)
    for i in range(50):
        queue.push(bytes(100), b"bulk", 0.0)
    queue.push(b"z" * 50, b"mouse", 0.0)
    assert queue.byte_count <= 1000
    assert queue.dropped == 41
    assert b"z" * 50 in _drain(queue)


def test_drop_stubs_release_frames() -> None:
    queue = FairQueue(byte_cap=10_000)
    for i in range(1000):
        queue.push(bytes(100), b"%d" % (i % 3), i * 0.001)
        if i % 2:
            queue.pop()
    assert queue.byte_count <= 10_000
    assert queue.byte_count == 100 * len(queue)
    queue.clear()
    assert queue.pop() is None and queue.byte_count == 0
