"""aioquic as a release that renamed its stream sender's `_buffer_stop`
would look to axl: every stream's sender is wrapped in a stand-in that
forwards all else to aioquic's own, which keeps working inside."""

from __future__ import annotations

from typing import Any, Callable

from aioquic.quic import stream

RENAMED = "_buffer_stop"


class QuicStreamSender:
    """Named as aioquic's class, so the node's message reads as it would."""

    def __init__(self, sender: stream.QuicStreamSender) -> None:
        object.__setattr__(self, "wrapped", sender)

    def __getattr__(self, name: str) -> Any:
        if name == RENAMED:
            raise AttributeError(name, name=name, obj=self)
        return getattr(self.wrapped, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.wrapped, name, value)


def rename() -> Callable[[], None]:
    """Wrap the sender of every stream made from now on; returns the undo."""
    initialise = stream.QuicStream.__init__

    def with_stand_in(self: stream.QuicStream, *args: Any, **kwargs: Any) -> None:
        initialise(self, *args, **kwargs)
        self.sender = QuicStreamSender(self.sender)

    stream.QuicStream.__init__ = with_stand_in

    def undo() -> None:
        stream.QuicStream.__init__ = initialise
    return undo
