"""A small server-sent-events decoder (sans-IO).

MCP servers may answer a POST with ``text/event-stream`` instead of JSON; the
router only needs the ``data`` of each event, in order, to find the JSON-RPC
response among notifications and keep-alive comments.
"""

from __future__ import annotations

from axl.wire import DecodeError


class SseDecoder:
    """Feed raw bytes, get back the data of every event they complete."""

    def __init__(self, max_event_size: int) -> None:
        self._max_event_size = max_event_size
        self._buffer = bytearray()
        self._data: list[str] = []
        self._data_size = 0

    def feed(self, chunk: bytes) -> list[str]:
        self._buffer += chunk
        events: list[str] = []
        while True:
            newline = self._buffer.find(b"\n")
            if newline < 0:
                break
            line = bytes(self._buffer[:newline]).rstrip(b"\r")
            del self._buffer[: newline + 1]
            event = self._line(line.decode("utf-8", errors="replace"))
            if event is not None:
                events.append(event)
        if len(self._buffer) + self._data_size > self._max_event_size:
            raise DecodeError("event stream: event larger than the limit")
        return events

    def finish(self) -> list[str]:
        """Events still pending when the stream ends without a final blank line."""
        events = self.feed(b"\n") if self._buffer else []
        if self._data:
            events.append(self._flush())
        return events

    def _line(self, line: str) -> str | None:
        if line == "":
            return self._flush() if self._data else None
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if name == "data":
            value = value[1:] if value.startswith(" ") else value
            self._data.append(value)
            self._data_size += len(value)
        return None

    def _flush(self) -> str:
        data = "\n".join(self._data)
        self._data = []
        self._data_size = 0
        return data
