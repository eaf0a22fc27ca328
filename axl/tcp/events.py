"""What a TCP connection tells its application.

Every connection the application knows about ends with exactly one of
Closed, Reset or TimedOut. A connection accepted by a listener becomes known
with NewConnection once its handshake completes; one the application opened
announces success with Connected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from axl.tcp.connection import TcpConnection


class TcpClosedError(ConnectionError):
    """The application wrote to a connection it already closed or that ended.

    Kept in this module, which the compiled build leaves as Python: a
    compiled class cannot derive from ConnectionError."""


@dataclass
class TcpEvent:
    connection: TcpConnection


@dataclass
class Connected(TcpEvent):
    """An actively opened connection completed its handshake."""


@dataclass
class NewConnection(TcpEvent):
    """A listener accepted a connection (handshake complete)."""


@dataclass
class DataReceived(TcpEvent):
    """In-order stream bytes, delivered once each.

    `data` may be a read-only view of a received packet rather than bytes;
    nothing changes it afterwards, so it can be kept as it is."""

    data: bytes | memoryview


@dataclass
class PeerFinished(TcpEvent):
    """The peer sent FIN after all delivered data: it will send nothing more."""


@dataclass
class Closed(TcpEvent):
    """Both directions finished cleanly: our FIN was acknowledged and theirs received."""


@dataclass
class Reset(TcpEvent):
    """The connection was reset: by the peer ("refused", "reset by peer") or locally ("aborted")."""

    reason: str


@dataclass
class TimedOut(TcpEvent):
    """The peer stopped acknowledging (handshake or data) after every retry."""
