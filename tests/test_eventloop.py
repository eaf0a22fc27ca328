"""axl.eventloop.running_loop answers as asyncio.get_running_loop does,
across loops that follow each other in one thread and loops of other threads."""

from __future__ import annotations

import asyncio
import threading

import pytest
import uvloop

from axl.eventloop import running_loop


async def both() -> tuple[asyncio.AbstractEventLoop, asyncio.AbstractEventLoop]:
    return running_loop(), asyncio.get_running_loop()


def test_each_loop_run_in_turn_is_found() -> None:
    for run in (asyncio.run, uvloop.run, asyncio.run):
        found, actual = run(both())
        assert found is actual


def test_no_loop_running_is_an_error() -> None:
    asyncio.run(both())
    with pytest.raises(RuntimeError):
        running_loop()


def test_each_thread_finds_its_own_loop() -> None:
    found: dict[str, bool] = {}
    started = threading.Barrier(2)

    async def check(name: str) -> None:
        started.wait(5)
        for _ in range(100):
            loop, actual = await both()
            found[name] = found.get(name, True) and loop is actual
            await asyncio.sleep(0)

    threads = [threading.Thread(target=asyncio.run, args=(check(name),)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert found == {"a": True, "b": True}
