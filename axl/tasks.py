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


def start_task(coro: Coroutine[Any, Any, T], logger: logging.Logger, what: str) -> asyncio.Task[T]:
    """Run `coro` in the background; if it ends with an exception, log it at once."""
    task = asyncio.get_running_loop().create_task(coro)
    task.add_done_callback(lambda done: log_failure(done, logger, what))
    return task


def log_failure(task: asyncio.Task, logger: logging.Logger, what: str) -> None:
    """Log (and so retrieve) a finished task's exception; cancellation is not a failure."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        logger.error("%s failed: %s", what, exc, exc_info=exc)
