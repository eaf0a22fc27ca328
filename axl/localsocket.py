"""The node's local servers (the admin socket and the bridge): UNIX stream
sockets bound with their final file mode, a socket file left by a node
that died replaced (never another's), and which host names are loopback."""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import stat

log = logging.getLogger("axl.node")

PROBE_TIMEOUT = 2.0


def bind_unix_socket(path: str, mode: int) -> socket.socket:
    """A listening-ready socket at `path` with file mode `mode` from the
    start (no moment when others could connect); OSError when the path
    is in use or not ours to replace."""
    clear_stale_socket(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o777 & ~mode)
    try:
        sock.bind(path)
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(previous)
    os.chmod(path, mode)  # the umask only takes bits away: set exactly what was asked
    return sock


def clear_stale_socket(path: str) -> None:
    """A socket at `path` that nobody answers on is removed; one that
    answers belongs to a running process, and anything else is not a
    socket this node may delete."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise OSError(f"{path} exists and is not a socket; not removing it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(PROBE_TIMEOUT)
    try:
        probe.connect(path)
    except OSError:
        os.unlink(path)
        log.info("%s was left by a process that ended; removed it", path)
        return
    finally:
        probe.close()
    raise OSError(f"{path} is in use by another process")


def remove_socket(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address without brackets or port) is
    this machine only: `localhost`, 127.0.0.0/8 or ::1."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host.lower() == "localhost"
