"""Traffic counters of one link: plain integers, bumped where frames cross the socket.

They are read, never reset, by whoever reports on the node (metrics, the
dashboard); the link layer itself makes no decision on them.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Any

# Linux `struct tcp_info`: eight u8 fields, then u32s; tcpi_rtt (microseconds)
# is the 16th u32, at byte 68.
_TCP_INFO_RTT = struct.Struct("=68xI")
_TCP_INFO_SIZE = 104


@dataclass(slots=True)
class LinkCounters:
    bytes_in: int = 0
    bytes_out: int = 0
    frames_in: int = 0
    frames_out: int = 0


def smoothed_rtt(sock: Any) -> float | None:
    """The kernel's smoothed round-trip time of a TCP socket in seconds (Linux),
    or None where TCP_INFO is not available or the socket has closed. Costs
    one system call, so it is read when someone asks, never per frame.

    A closed transport's socket has descriptor -1: uvloop's then raises
    ValueError rather than OSError, and under TLS it closes a turn before
    the link hears that its connection is lost (while the node still lists
    the link)."""
    option = getattr(socket, "TCP_INFO", None)
    if sock is None or option is None or sock.fileno() < 0:
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, option, _TCP_INFO_SIZE)
    except OSError:
        return None
    if len(info) < _TCP_INFO_RTT.size:
        return None
    (rtt_us,) = _TCP_INFO_RTT.unpack_from(info)
    return rtt_us / 1e6
