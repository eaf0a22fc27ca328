"""The local HTTP bridge: how applications in any language use the node."""

from axl.bridge.app import BridgeNode, build_app

__all__ = ["BridgeNode", "build_app"]
