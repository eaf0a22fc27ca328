"""The C heap of a daemon that moves large buffers: keep freed memory for reuse
while data flows, and hand it back to the system every few seconds.

A bulk transfer allocates and frees the same large buffers (64 KiB frames,
decrypted packets, a 16 MiB message being joined) many times a second.
glibc's malloc gives the top of its heap back to the kernel as soon as
128 KiB of it are free, so the next allocation faults every page in again:
450-530 page faults per MB moved at each node, each one a kernel entry and
a page cleared (docs/performance-log.md, "The heap"). A top pad makes malloc
grow and shrink its heap in steps of TOP_PAD_BYTES instead, and a trim
every TRIM_INTERVAL seconds returns what a burst left behind, so an idle
node's memory still comes back down.

Only glibc has these knobs; elsewhere (musl, macOS) both calls do nothing.
"""

from __future__ import annotations

import ctypes

M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
TOP_PAD_BYTES = 64 << 20
MMAP_THRESHOLD_BYTES = 32 << 20
TRIM_INTERVAL = 10.0


class HeapTuning:
    """The process's malloc settings; a no-op where the C library is not glibc."""

    def __init__(self) -> None:
        self._libc = _glibc()

    @property
    def active(self) -> bool:
        return self._libc is not None

    def keep_freed_memory(self) -> bool:
        """Grow and shrink the heap in TOP_PAD_BYTES steps, and take buffers
        up to MMAP_THRESHOLD_BYTES from it too; False if not glibc.

        Setting any of these switches off glibc's own rule, which raises the
        mmap threshold once a large buffer is freed: without the second
        setting every buffer of 128 KiB or more would be mapped, and faulted
        in, afresh (about 245 faults per MB)."""
        if self._libc is None:
            return False
        padded = self._libc.mallopt(M_TOP_PAD, TOP_PAD_BYTES)
        return bool(padded and self._libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))

    def release_free_memory(self) -> None:
        """Give every whole free page of the heap back to the system."""
        if self._libc is not None:
            self._libc.malloc_trim(0)


def _glibc() -> ctypes.CDLL | None:
    """The C library the interpreter runs on, if it is glibc (the process's
    own symbols: no library search, which would run ldconfig)."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version
        libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        libc.malloc_trim.argtypes = (ctypes.c_size_t,)
    except (OSError, AttributeError):
        return None
    return libc
