"""Background tasks whose failures are logged when they happen.

asyncio reports an exception nobody awaited only when the task is garbage
collected, which may be much later or never; a dead redial loop or tick
would then fail silently. Every long-lived task of the node starts here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


# Every task start_task started that has not ended: the loop keeps only a
# weak reference to a task, so one whose caller drops it (a pump, a
# session) would otherwise live only as long as what it waits on.
_RUNNING: set[asyncio.Task[Any]] = set()


def start_task(coro: Coroutine[Any, Any, T], logger: logging.Logger, what: str) -> asyncio.Task[T]:
    """Run `coro` in the background, held until it ends; if it ends with an
    exception, log it at once."""
    task = asyncio.get_running_loop().create_task(coro)
    _RUNNING.add(task)
    task.add_done_callback(lambda done: _ended(done, logger, what))
    return task


def _ended(task: asyncio.Task, logger: logging.Logger, what: str) -> None:
    _RUNNING.discard(task)
    log_failure(task, logger, what)


def log_failure(task: asyncio.Task, logger: logging.Logger, what: str) -> None:
    """Log (and so retrieve) a finished task's exception; cancellation is not a failure."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        logger.error("%s failed: %s", what, exc, exc_info=exc)
