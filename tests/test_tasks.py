"""Background tasks report their failure when it happens, not when collected."""

from __future__ import annotations

import asyncio
import gc
import logging
import weakref

from axl.tasks import start_task

log = logging.getLogger("axl.test")


async def test_a_failing_task_is_logged_while_still_referenced(caplog) -> None:
    async def fails() -> None:
        raise RuntimeError("boom in the background")

    with caplog.at_level(logging.ERROR, logger="axl.test"):
        task = start_task(fails(), log, "test worker")
        await asyncio.wait({task}, timeout=5)
        await asyncio.sleep(0)
    assert task.done()
    assert "test worker failed: boom in the background" in caplog.text


async def test_cancellation_and_success_are_not_failures(caplog) -> None:
    async def sleeps() -> None:
        await asyncio.sleep(10)

    async def succeeds() -> int:
        return 1

    with caplog.at_level(logging.ERROR, logger="axl.test"):
        cancelled = start_task(sleeps(), log, "sleeper")
        finished = start_task(succeeds(), log, "quick")
        cancelled.cancel()
        await asyncio.wait({cancelled, finished}, timeout=5)
        await asyncio.sleep(0)
    assert finished.result() == 1
    assert caplog.text == ""



async def test_a_task_nobody_holds_is_not_collected_while_it_waits() -> None:
    """The loop keeps only a weak reference to a task: one waiting on a
    future that only it holds would be collected mid-wait, its end never
    run. start_task holds it until it ends."""
    async def waits_on_its_own_future() -> None:
        await asyncio.get_running_loop().create_future()

    held = weakref.ref(start_task(waits_on_its_own_future(), log, "unheld worker"))
    await asyncio.sleep(0)
    gc.collect()
    task = held()
    assert task is not None and not task.done()
    task.cancel()
    await asyncio.wait({task}, timeout=5)
