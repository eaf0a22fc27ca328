"""The admin socket: yggdrasil 0.5's admin protocol, so that `yggdrasilctl`
works against this node (AdminListen in the config)."""

from axl.admin.server import AdminServer

__all__ = ["AdminServer"]
