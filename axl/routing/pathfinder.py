"""ironwood's pathfinder, sans-IO: lookups, notifies, broken-path reports
and the source routes they find (ironwood's pathfinder.go).

A node that sends to a key without a path sends a PathLookup along the tree
where the peers' blooms match the key's transform (a *rumor*, throttled to
one a second, holding the last packet for that key); the owner answers with
a signed PathNotify carrying its coordinates, which becomes our path to it.
A relay that cannot forward traffic sends PathBroken back, and the source
looks up again.

As in ironwood, the pathfinder is part of the router, but it uses only the
router's public surface: its key and transform, coordinates and clock, and
what it does for the pathfinder (`send_to_tree_peers` for lookups along the
tree, `forward` for one greedy hop, `route_traffic`, `emit`). Peers, links
and the hop cache stay the router's own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from axl.budgets import MAX_RUMORS
from axl.identity import bloom_transform
from axl.routing.actions import PathFound
from axl.routing.bloom import key_mask
from axl.routing.frames import (
    MAX_WATERMARK,
    TYPE_PATH_BROKEN,
    TYPE_PATH_LOOKUP,
    TYPE_PATH_NOTIFY,
    PathBroken,
    PathLookup,
    PathNotify,
    Traffic,
    notify_info_bytes,
)

if TYPE_CHECKING:
    from axl.routing.router import Router

PATH_TIMEOUT: Final = 60.0
PATH_THROTTLE = 1.0
# Lookups re-sent for a rumor still holding a packet (see retry_waiting_rumors).
RUMOR_RETRIES = 15


@dataclass(frozen=True)
class PathReport:
    """A destination, its coordinates and the notify's sequence number
    (what yggdrasil's getPaths shows)."""

    key: bytes
    path: list[int]
    seq: int


@dataclass
class _PathInfo:
    path: list[int]
    seq: int
    req_time: float
    expires: float
    broken: bool = False
    cached: Traffic | None = None


@dataclass
class _Rumor:
    send_time: float
    expires: float
    cached: Traffic | None = None
    retries: int = 0
    unheard: bool = False
    """Its last lookup reached no peer: no bloom filter matched yet."""
    dest: bytes = b""
    """The key (or partial key) its last lookup asked for."""



class Pathfinder:
    """Paths to remote keys (from notifies) and rumors (lookups in flight)."""

    def __init__(self, router: Router, wall_clock: Callable[[], float] | None) -> None:
        self.router = router
        self._wall_clock = wall_clock
        self.paths: dict[bytes, _PathInfo] = {}
        self.rumors: dict[bytes, _Rumor] = {}
        self.rumors_refused = 0  # new destinations not looked up: MAX_RUMORS under way
        self._notify_seq = 0
        self._notify_path: list[int] = []
        self._notify_sig = router.identity.sign(notify_info_bytes(0, []))

    @property
    def _now(self) -> float:
        return self.router.now

    def known_paths(self) -> dict[bytes, list[int]]:
        """Destinations with a path from a notify, and their coordinates."""
        return {key: list(info.path) for key, info in self.paths.items()}

    def path_report(self) -> list[PathReport]:
        """Each known path with the sequence number of the notify that gave it."""
        return [PathReport(key, list(info.path), info.seq) for key, info in self.paths.items()]

    def handle_lookup(self, from_key: bytes, lookup: PathLookup) -> bool:
        """Multicast along the tree where blooms match, and answer if xform(dest)
        is ours; whether it went anywhere."""
        xdest = bloom_transform(lookup.dest)
        sent = self.router.send_to_tree_peers(TYPE_PATH_LOOKUP, lookup.encode(), key_mask(xdest),
                                              from_key, lookup.dest, lookup.source)
        if xdest != self.router.xform:
            return sent > 0
        seq = int(self._wall_clock() if self._wall_clock is not None else self._now)
        path = self.router.coords()
        if (seq, path) != (self._notify_seq, self._notify_path):
            self._notify_seq, self._notify_path = seq, path
            self._notify_sig = self.router.identity.sign(notify_info_bytes(seq, path))
        notify = PathNotify(
            list(lookup.from_path), MAX_WATERMARK, self.router.key, lookup.source,
            self._notify_seq, list(self._notify_path), self._notify_sig,
        )
        self.handle_notify(notify)
        return True

    def handle_notify(self, notify: PathNotify) -> None:
        if self.router.forward(notify, TYPE_PATH_NOTIFY):
            return
        if notify.dest != self.router.key:
            return
        info = self.paths.get(notify.source)
        if info is not None:
            if notify.info_seq <= info.seq or notify.info_path == info.path or not notify.check():
                return
            info.expires = self._now + PATH_TIMEOUT
        else:
            rumor = self.rumors.get(bloom_transform(notify.source))
            if rumor is None or not notify.check():
                return
            info = _PathInfo([], 0, self._now, self._now + PATH_TIMEOUT)
            if rumor.cached is not None and rumor.cached.dest == notify.source:
                info.cached, rumor.cached = rumor.cached, None
            self.paths[notify.source] = info
        info.path = list(notify.info_path)
        info.seq = notify.info_seq
        info.broken = False
        self.router.emit(PathFound(notify.source))
        if info.cached is not None:
            cached, info.cached = info.cached, None
            self.send_local_traffic(cached)

    def handle_broken(self, broken: PathBroken) -> None:
        if self.router.forward(broken, TYPE_PATH_BROKEN):
            return
        if broken.source != self.router.key:
            return
        info = self.paths.get(broken.dest)
        if info is not None:
            info.broken = True
            self._send_lookup(broken.dest)

    def send_local_traffic(self, traffic: Traffic) -> None:
        info = self.paths.get(traffic.dest)
        if info is not None:
            stamped = Traffic(list(info.path), self.router.coords(), traffic.source, traffic.dest,
                              traffic.watermark, traffic.payload)
            info.cached = stamped
            self.router.route_traffic(stamped)
            return
        self.rumor_send_lookup(traffic.dest)
        rumor = self.rumors.get(bloom_transform(traffic.dest))
        if rumor is not None:
            rumor.cached = traffic

    def rumor_send_lookup(self, dest: bytes) -> None:
        """Throttled per xform(dest): at most one lookup a second while no path exists."""
        xform = bloom_transform(dest)
        rumor = self.rumors.get(xform)
        if rumor is not None:
            if self._now - rumor.send_time < PATH_THROTTLE:
                return
            rumor.send_time = self._now
            rumor.expires = self._now + PATH_TIMEOUT
        elif len(self.rumors) >= MAX_RUMORS:
            self.rumors_refused += 1
            return
        else:
            self.rumors[xform] = _Rumor(self._now, self._now + PATH_TIMEOUT)
        rumor = self.rumors[xform]
        rumor.dest = dest
        rumor.unheard = not self._send_lookup(dest)

    def retry_waiting_rumors(self) -> None:
        """Re-send the lookup of a rumor that still holds a packet, once a
        second, RUMOR_RETRIES times.

        Go sends a rumor's lookup only when more traffic for it is written. A
        lookup sent while the bloom filters are still spreading or changing
        (just after peerings come up, or while the tree settles) is then lost
        for good if nothing else follows; the classic case is a session Ack,
        because the peer's session layer ignores the Init retransmissions that
        would otherwise re-trigger it. Retrying at the 1 s throttle is what a
        sender with steady traffic would cause anyway, so peers see ordinary
        lookups; 15 s outlasts the peer's connection attempt (about 9 s).
        """
        for rumor in list(self.rumors.values()):
            if rumor.cached is None or rumor.retries >= RUMOR_RETRIES:
                continue
            if self._now - rumor.send_time >= PATH_THROTTLE:
                rumor.retries += 1
                rumor.send_time = self._now
                rumor.unheard = not self._send_lookup(rumor.cached.dest)

    def retry_unheard_rumors(self) -> None:
        """Send again, at once, the lookups that reached no peer (the router
        calls this when the tree or the bloom filters changed): no peer saw
        them, so the throttle that spares peers does not apply."""
        for rumor in list(self.rumors.values()):
            if rumor.unheard:
                rumor.send_time = self._now
                rumor.unheard = not self._send_lookup(rumor.dest)

    def _send_lookup(self, dest: bytes) -> bool:
        """Throttled only against the path's creation time, as Go does (so
        PathBroken re-looks up); whether a lookup reached a peer (or was
        throttled: one did before)."""
        info = self.paths.get(dest)
        if info is not None and self._now - info.req_time < PATH_THROTTLE:
            return True
        return self.handle_lookup(self.router.key, PathLookup(self.router.key, dest, self.router.coords()))

    def reset_timeout(self, key: bytes) -> None:
        info = self.paths.get(key)
        if info is not None and not info.broken:
            info.expires = self._now + PATH_TIMEOUT

    def expire(self) -> None:
        for table in (self.paths, self.rumors):
            for key in [key for key, entry in table.items() if entry.expires <= self._now]:
                del table[key]
