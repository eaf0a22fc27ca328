"""The running event loop, found without a system call.

On Python 3.11 every `asyncio.get_running_loop()` asks the kernel for the
process id, to notice a fork; on this machine that is 0.8 us a call, and
the message path asks several times per message (the journal for the
time, the inbox for a future, the front door for a timer). At /ws rates
that was 4 % of a receiving node's CPU. The node never forks while its
loop runs, so the loop a thread found once is its loop for as long as
that loop runs.
"""

from __future__ import annotations

import asyncio
from threading import get_ident
from typing import Final

# The loop each thread last found running. Threads are few and long-lived
# (the event loop's, the inbox store's), so this stays small.
_found: Final[dict[int, asyncio.AbstractEventLoop]] = {}


def running_loop() -> asyncio.AbstractEventLoop:
    """The event loop running in this thread (RuntimeError when none is),
    as asyncio.get_running_loop() answers."""
    thread = get_ident()
    loop = _found.get(thread)
    if loop is None or not loop.is_running():
        loop = _found[thread] = asyncio.get_running_loop()
    return loop
