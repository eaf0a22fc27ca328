"""Python's cycle collector in a daemon whose heap is mostly permanent.

By the time a node serves, nearly every object it holds lives as long as
the process: modules, classes, functions, aiohttp's and the parsers'
tables. The collector does not know that. Each young pass runs after 700
container allocations, and every few passes of the next generation it
scans the whole heap again, finding nothing. At `/ws` rates, where
thousands of sends are under way at once, the sending node made about
930 young passes and 7 full ones (29 ms each, 81,000 objects) in 80,000
messages: 0.37 s of collection, an eighth of its CPU, and a 29 ms stall
every few seconds (docs/performance-log.md, "Less interpreter around the
compiled code").

So the daemon moves what is alive once it has started into the permanent
generation (`gc.freeze`), where no pass looks, and again once the full
application has loaded aiohttp; and a young pass waits for YOUNG_THRESHOLD
allocations. Garbage in cycles is still found: the message path makes
almost none (1,870 objects in a whole run), so waiting longer for it
costs no memory worth counting. What the two freezes leave is an object
alive then that later ends in a cycle: it is never collected, a fixed
amount once per process, not per message.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000


def collect_less_often() -> None:
    """Raise the young generation's threshold; the older generations keep
    their ratios to it (a pass of each every 10 of the one below)."""
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)


def freeze_survivors() -> int:
    """Collect once, then set everything still alive aside for good: how
    many objects the permanent generation now holds."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
