"""Two node cores joined by one link in memory, on a virtual clock.

Every layer of the node from tree frames to a message's acknowledgement,
with no socket, event loop or sleep: frames written by one core arrive at
the other at once, and time jumps to the next deadline. The tests drive the
core through it, and `make bench-instructions` counts the instructions a
message costs in it.
"""

from __future__ import annotations

import random

from axl.identity import NodeIdentity
from axl.node.core import NodeCore
from axl.node.messages import MessageEvent, MessageSettings
from axl.routing.frames import split_frame


class CorePair:
    """Cores 0 and 1 (keys from seeds 1 and 2), peered on link 1. Each
    event a core emits goes to `on_event`, which keeps it in `events`."""

    def __init__(self, settings: tuple[MessageSettings, MessageSettings], **options) -> None:
        self.now = 1000.0
        self.cores = [NodeCore(NodeIdentity.from_seed(bytes([n]) * 32), settings[n - 1], self.now,
                               rng=random.Random(n), **options) for n in (1, 2)]
        self.events: list[list[MessageEvent]] = [[], []]
        for index, core in enumerate(self.cores):
            core.link_up(1, self.cores[1 - index].identity.public_key, 0, self.now)

    @property
    def keys(self) -> list[bytes]:
        return [core.identity.public_key for core in self.cores]

    def on_event(self, index: int, event: MessageEvent) -> None:
        self.events[index].append(event)

    def pump(self) -> bool:
        """Carry each core's frames to the other and hand on its events: whether anything moved."""
        moved = False
        for index, core in enumerate(self.cores):
            for write in core.frames_to_send():
                ftype, body = split_frame(write.frame)
                self.cores[1 - index].frame_received(1, ftype, body, self.now)
                moved = True
            while (event := core.next_event()) is not None:
                self.on_event(index, event)
                moved = True
        return moved

    def run(self, seconds: float) -> None:
        """Pump until quiet, then jump to the next deadline, for `seconds` of virtual time."""
        end = self.now + seconds
        while True:
            while self.pump():
                pass
            due = min(core.get_timer() for core in self.cores)
            if due > end:
                self.now = end
                return
            self.now = max(self.now, due)
            for core in self.cores:
                if core.get_timer() <= self.now:
                    core.handle_timer(self.now)

    def take(self, index: int, kind: type) -> list:
        """The events of `kind` core `index` emitted, taken out of `events`."""
        found = [event for event in self.events[index] if isinstance(event, kind)]
        self.events[index] = [event for event in self.events[index] if not isinstance(event, kind)]
        return found
