"""Delivery failures that the node reports to its callers, and refused
changes to its peers.

They live at the bottom of the package so that the bridge and the adapters
can map them to HTTP statuses without knowing which layer raised them.
"""


class DeliveryError(Exception):
    """A message could not be delivered; the text says why in one line."""


class PeerUnreachable(DeliveryError):
    """No route to the destination, or it refused the connection (HTTP 502)."""


class ReceiverFull(DeliveryError):
    """The destination's receive queue is full; nothing was dropped (HTTP 503)."""


class DeliveryTimeout(DeliveryError):
    """The destination did not acknowledge in time (HTTP 504)."""


class MessageTooLarge(DeliveryError):
    """The payload exceeds max_message_size (HTTP 413). Wherever it is raised,
    its text ends with what the sender can do about it."""

    ADVICE = "split the message, or raise max_message_size on both nodes"

    def __init__(self, reason: str) -> None:
        super().__init__(f"{reason}; {self.ADVICE}")


class PeerChangeRefused(ValueError):
    """A peer could not be added or removed at run time; the text says why."""


class PeerAlreadyConfigured(PeerChangeRefused):
    """Adding a peer whose address is configured already."""


class PeerNotConfigured(PeerChangeRefused):
    """Removing a peer that is not configured."""


class RuntimePeersFull(PeerChangeRefused):
    """Adding a peer beyond the budget of peers added at run time (HTTP 503)."""


def never_connected(dest: str, how: str) -> PeerUnreachable:
    """The overlay connection to `dest` never opened (`how`: "timed out" or
    "reset: ..."). Silence is not a refusal: it says the peer is away."""
    if how == "timed out":
        return PeerUnreachable(f"{dest} did not answer (timed out): it is offline, "
                               f"not in this network, or the id is wrong")
    return PeerUnreachable(f"{dest} refused the connection ({how})")


STATUS_FOR_ERROR: list[tuple[type[DeliveryError], int]] = [
    (MessageTooLarge, 413),
    (PeerUnreachable, 502),
    (ReceiverFull, 503),
    (DeliveryTimeout, 504),
    (DeliveryError, 502),
]


def status_for(error: DeliveryError) -> int:
    """The HTTP status that reports `error` (POST /send's, and a /ws ack's)."""
    return next(status for kind, status in STATUS_FOR_ERROR if isinstance(error, kind))
