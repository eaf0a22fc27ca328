"""The node: every layer wired together, with the asyncio API the bridge uses."""

from axl.node.node import Node, validate_config

__all__ = ["Node", "validate_config"]
