"""What this build of the node says about itself, in yggdrasil's terms.

yggdrasil puts its build name and version in getSelf, and adds them with
the platform and architecture (Go's GOOS and GOARCH names) to the NodeInfo
it answers unless NodeInfoPrivacy is set. This node does the same, with
its own name, so that tools reading those fields see one vocabulary.
"""

from __future__ import annotations

import platform

from axl import __version__

BUILD_NAME = "axl-py"
BUILD_VERSION = __version__
# platform.machine() names -> Go's GOARCH names
_GO_ARCHES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
              "i386": "386", "i686": "386", "x86": "386", "armv6l": "arm", "armv7l": "arm",
              "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}


def build_fields() -> dict[str, str]:
    """The NodeInfo fields yggdrasil adds without NodeInfoPrivacy."""
    machine = platform.machine().lower()
    return {
        "buildname": BUILD_NAME,
        "buildversion": BUILD_VERSION,
        "buildplatform": platform.system().lower() or "unknown",
        "buildarch": _GO_ARCHES.get(machine, machine or "unknown"),
    }
