"""What the message layer tells the application, by message handle.

Both the per-message connections (axl.node.messages) and the message
streams (axl.node.streams) report through these.
"""

from __future__ import annotations

from dataclasses import dataclass

from axl.errors import DeliveryError


@dataclass
class MessageEvent:
    handle: int


@dataclass
class Acknowledged(MessageEvent):
    """The receiver read the whole message and closed: it is delivered."""


@dataclass
class ReplyReceived(MessageEvent):
    """A request's framed reply arrived."""

    reply: bytes


@dataclass
class SendFailed(MessageEvent):
    """A send or request ended without success; `error` says why in one line."""

    error: DeliveryError

    @property
    def kind(self) -> str:
        return type(self.error).__name__


@dataclass
class InboundMessage(MessageEvent):
    """A whole message arrived; answer it with `answer_inbound(handle, ...)`.
    `origin`: its (session id, sequence number) when it came on a message stream."""

    sender: bytes
    payload: bytes
    origin: tuple[int, int] | None = None
