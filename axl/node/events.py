"""What the message layer tells the application, by message handle.

Both the per-message connections (axl.node.messages) and the message
streams (axl.node.streams) report through these. One is made per message
each way, so each class writes its own `__init__`: the compiled build
compiles that one, where the one dataclasses generates stays interpreted
(about 1,000-1,800 instructions a message, against 200).
"""

from __future__ import annotations

from dataclasses import dataclass

from axl.errors import DeliveryError


@dataclass(init=False)
class MessageEvent:
    handle: int

    def __init__(self, handle: int) -> None:
        self.handle = handle


@dataclass(init=False)
class Acknowledged(MessageEvent):
    """The receiver read the whole message and closed: it is delivered."""


@dataclass(init=False)
class ReplyReceived(MessageEvent):
    """A request's framed reply arrived."""

    reply: bytes

    def __init__(self, handle: int, reply: bytes) -> None:
        self.handle = handle
        self.reply = reply


@dataclass(init=False)
class SendFailed(MessageEvent):
    """A send or request ended without success; `error` says why in one line."""

    error: DeliveryError

    def __init__(self, handle: int, error: DeliveryError) -> None:
        self.handle = handle
        self.error = error

    @property
    def kind(self) -> str:
        return type(self.error).__name__


@dataclass(init=False)
class InboundMessage(MessageEvent):
    """A whole message arrived; answer it with `answer_inbound(handle, ...)`.
    `origin`: its (session id, sequence number) when it came on a message stream."""

    sender: bytes
    payload: bytes
    origin: tuple[int, int] | None

    def __init__(self, handle: int, sender: bytes, payload: bytes, origin: tuple[int, int] | None = None) -> None:
        self.handle = handle
        self.sender = sender
        self.payload = payload
        self.origin = origin
