"""The shared deadline heap of the message layer and the message streams."""

from __future__ import annotations

from dataclasses import dataclass

from axl.node.deadlines import Deadlines


@dataclass(eq=False)
class Owner:
    name: str
    deadline: float | None = None


def test_a_deadline_pushed_back_many_times_keeps_one_heap_entry():
    timers: Deadlines[Owner] = Deadlines()
    idle = Owner("idle")
    for step in range(10_000):
        timers.set(idle, 300.0 + step)
    assert len(timers) == 1
    assert list(timers.due(300.0)) == []  # the old entry moves to the current deadline
    assert timers.earliest() == 300.0 + 9_999
    assert list(timers.due(10_299.0)) == [idle] and idle.deadline is None


def test_earlier_deadlines_fire_first_and_cleared_ones_never():
    timers: Deadlines[Owner] = Deadlines()
    a, b, c = Owner("a"), Owner("b"), Owner("c")
    timers.set(a, 10.0)
    timers.set(b, 20.0)
    timers.set(c, 5.0)
    timers.set(b, 1.0)  # moved earlier: fires first
    timers.set(c, None)
    assert timers.earliest() == 1.0
    assert list(timers.due(15.0)) == [b, a]
    assert timers.earliest() is None and len(timers) == 0


def test_an_owner_forgotten_by_clearing_its_deadline_directly_is_dropped():
    timers: Deadlines[Owner] = Deadlines()
    gone = Owner("gone")
    timers.set(gone, 3.0)
    gone.deadline = None
    assert timers.earliest() is None and list(timers.due(100.0)) == []
