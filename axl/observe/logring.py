"""Recent log lines for the dashboard: a logging.Handler into a bounded ring."""

from __future__ import annotations

import logging
from collections import deque
from typing import Callable

MAX_LINES = 1000
MAX_MESSAGE = 500


class LogRing(logging.Handler):
    """Keeps the last MAX_LINES records as small dicts and hands each new one to `on_line`.

    `on_line` may be called from any thread that logs; it must only schedule work.
    """

    def __init__(self, on_line: Callable[[dict], None] | None = None, capacity: int = MAX_LINES) -> None:
        super().__init__(logging.NOTSET)
        self.lines: deque[dict] = deque(maxlen=capacity)
        self.on_line = on_line

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            message = str(record.msg)
        line = {"time": record.created, "level": record.levelname, "logger": record.name,
                "message": message[:MAX_MESSAGE]}
        self.lines.append(line)
        if self.on_line is not None:
            self.on_line(line)

    def recent(self, limit: int) -> list[dict]:
        """The newest `limit` lines, oldest first."""
        lines = list(self.lines)
        return lines[-limit:] if limit > 0 else []
