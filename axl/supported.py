"""The versions AXL supports of the packages whose private parts it uses,
and the one line that says an installed one lacks a part.

At the bottom of the layers: the modules that reach into those packages
(axl.link.quic, axl.bridge.wsframes) say what is missing with it, and
axl.dependencies, which checks them all before the node starts, imports
those modules in turn.
"""

from __future__ import annotations

SUPPORTED = {"PyNaCl": ">=1.6,<2", "aioquic": ">=1.0,<2", "aiohttp": ">=3.9,<4"}
"""The versions pyproject.toml allows of the packages whose private parts are checked."""


def installed_version(package: str) -> str:
    """The installed version of `package`, or "(version unknown)"."""
    from importlib import metadata  # only once something is missing

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "(version unknown)"


def unsupported(package: str, missing: str) -> str:
    """One line: the package, the version found, what it lacks, what to install."""
    supported = SUPPORTED[package]
    below = supported.split(",")[-1]
    return (f"{package} {installed_version(package)} lacks {missing}; AXL supports "
            f"{package} {supported} (pip install '{package.lower()}{below}')")
