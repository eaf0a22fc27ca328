"""ironwood routing: frames, bloom filters and the sans-IO router."""

from axl.routing.actions import Action, DeliverTraffic, PathFound, SendFrame, SendTraffic
from axl.routing.bloom import BloomFilter
from axl.routing.pathfinder import PathReport
from axl.routing.router import BadSignature, PeerView, Router, TreeEntry

__all__ = [
    "Action",
    "BadSignature",
    "BloomFilter",
    "DeliverTraffic",
    "PathFound",
    "PathReport",
    "PeerView",
    "Router",
    "SendFrame",
    "SendTraffic",
    "TreeEntry",
]
