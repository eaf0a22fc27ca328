"""The local HTTP bridge: how applications in any language use the node."""

from axl.bridge.api import BridgeNode

__all__ = ["BridgeNode"]
