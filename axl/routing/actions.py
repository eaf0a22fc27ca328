"""What the sans-IO router asks its driver (the node or the simulator) to do."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SendFrame:
    """A tree/control frame (types 2-5) to write on the link at once."""

    link_id: int
    frame: bytes


@dataclass(init=False)
class SendTraffic:
    """A frame of types 6-9 for the link's fair queue; `flow` is dest || source."""

    link_id: int
    frame: bytes
    flow: bytes

    def __init__(self, link_id: int, frame: bytes, flow: bytes) -> None:
        self.link_id = link_id
        self.frame = frame
        self.flow = flow


@dataclass(init=False)
class DeliverTraffic:
    """Traffic addressed to this node (the payload is a view of its frame)."""

    source_key: bytes
    payload: bytes | memoryview

    def __init__(self, source_key: bytes, payload: bytes | memoryview) -> None:
        self.source_key = source_key
        self.payload = payload


@dataclass(frozen=True)
class PathFound:
    """A path notify was accepted: the full key of a lookup's answer is now known."""

    key: bytes


Action = SendFrame | SendTraffic | DeliverTraffic | PathFound
