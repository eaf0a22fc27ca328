"""The heap settings the daemon applies at start (axl/heap.py), checked on this
process's own glibc heap: freed memory stays for reuse until it is released."""

import resource

import pytest

from axl.heap import TOP_PAD_BYTES, HeapTuning

MIB = 1 << 20


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize()


@pytest.fixture
def heap() -> HeapTuning:
    tuning = HeapTuning()
    if not tuning.active:
        pytest.skip("the C library is not glibc")
    return tuning


def test_freed_buffers_stay_resident_until_released(heap: HeapTuning) -> None:
    assert heap.keep_freed_memory()
    heap.release_free_memory()
    buffers = [bytearray(b"\x01") * (64 * 1024) for _ in range(TOP_PAD_BYTES // 2 // (64 * 1024))]
    filled = resident_bytes()
    del buffers
    freed = resident_bytes()
    heap.release_free_memory()
    released = resident_bytes()
    assert filled - freed < 8 * MIB, "freed memory went back to the system at once"
    assert freed - released > 16 * MIB, "release_free_memory returned nothing"


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def test_large_buffers_are_reused_under_the_pad(heap: HeapTuning) -> None:
    # glibc raises its mmap threshold once a large mmapped buffer is freed, so
    # the next one comes from the heap; setting M_TOP_PAD switches that off
    # (mp_.no_dyn_threshold), and every buffer of 128 KiB or more is then
    # mmapped and faulted in afresh, page by page.
    assert heap.keep_freed_memory()
    size, rounds = 1 * MIB, 50
    for _ in range(rounds + 3):
        if _ == 3:
            start = minor_faults()
        buffer = bytearray(b"\x01") * size
        del buffer
    per_mb = (minor_faults() - start) / (rounds * size / 1e6)
    assert per_mb < 25, f"{per_mb:.0f} page faults per MB: each 1 MiB buffer is mapped anew"
