"""Dependencies whose private parts AXL uses, checked before the node starts.

PyNaCl's cffi handle on libsodium and aioquic's stream-buffer offsets have
no public equivalent fast or exact enough (nor aiohttp's WebSocket masking
function, looked for by axl.bridge.wsframes on the first /ws frame, since
only /ws loads aiohttp there) (docs/security.md, "Dependencies'
private surfaces"). pyproject.toml caps each package below its next major
version; within that range a release may still drop a private part, so the
node looks before it starts instead of failing on its first packet: PyNaCl
then gets a slower public path, aioquic (whose loss has no public path)
stops the node with one line naming the package, its version and the
supported range. aioquic is looked at only when a quic:// link is
configured, as only those load it.
"""

from __future__ import annotations

import logging

from axl.sessions import crypto
from axl.supported import unsupported

log = logging.getLogger("axl.node")


class UnsupportedDependency(Exception):
    """An installed package lacks a private part AXL cannot do without;
    the message is one line that says what to install instead."""


def check_pynacl() -> None:
    """Say once, as a warning, that packets are boxed the slower public way."""
    missing = crypto.MISSING_PRIVATE_CALL
    if missing is not None:
        log.warning("%s; boxing packets through nacl.bindings instead, with more copies",
                    unsupported("PyNaCl", missing))


def check_aioquic() -> None:
    """UnsupportedDependency when quic:// links cannot work with this aioquic."""
    try:
        from axl.link import quic
    except ImportError as exc:
        module = exc.name or ""
        if not module.startswith("aioquic"):
            raise
        missing = module if isinstance(exc, ModuleNotFoundError) else f"a name axl imports from {module}"
        raise UnsupportedDependency(unsupported("aioquic", missing)) from None
    field = quic.missing_private_field()
    if field is not None:
        raise UnsupportedDependency(unsupported("aioquic", field))


def check_private_surfaces(quic_links: bool) -> None:
    """Run before anything listens; `quic_links` when the config has a quic:// URI."""
    check_pynacl()
    if quic_links:
        check_aioquic()
