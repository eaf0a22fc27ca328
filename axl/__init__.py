"""AXL node: a peer-to-peer overlay daemon, wire-compatible with Yggdrasil v0.5."""

__version__ = "0.1.0"
