"""End-to-end encrypted sessions between node keys (ironwood's encrypted layer)."""

from axl.sessions.crypto import KeyPair, KeyPairFactory, random_key_pair
from axl.sessions.manager import (
    Action, DeliverPlaintext, Rekeyed, SendPacket, SessionManager, SessionReport,
)

__all__ = [
    "Action", "DeliverPlaintext", "KeyPair", "KeyPairFactory", "Rekeyed", "SendPacket", "SessionManager",
    "SessionReport", "random_key_pair",
]
