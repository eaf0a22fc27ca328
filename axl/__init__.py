"""AXL node: a peer-to-peer overlay daemon, wire-compatible with Yggdrasil v0.5."""

from axl.compiled import choose

__version__ = "0.1.0"
# Before any other axl module is imported: the compiled modules, when their
# build matches the source, else the Python ones (axl/compiled.py).
BUILD = choose()
