"""Peers at run time: adding and removing them, and reporting on them as
yggdrasil's getPeers does.

Peers added here are not written to the config file: they last until the
node stops, or until removed. A configured peer removed here stays removed
until the next start.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from axl.budgets import MAX_RUNTIME_PEERS, BudgetUse
from axl.errors import PeerChangeRefused, RuntimePeersFull
from axl.link.manager import LinkManager
from axl.link.uri import PeerURI, URIError, parse_peer_uri
from axl.routing import Router

log = logging.getLogger("axl.node")


@dataclass(frozen=True)
class PeerReport:
    """One peering, in getPeers' terms: `uri` without its options, times in
    seconds, latency in nanoseconds, and the last error of a configured peer
    that is down (with how long ago it happened)."""

    uri: str
    up: bool
    inbound: bool
    key: bytes
    port: int
    priority: int
    cost: int
    rx_bytes: int
    tx_bytes: int
    uptime: float
    latency_ns: int
    link_id: int | None
    last_error: str
    last_error_age: float


def bare_uri(uri: str) -> str:
    """A peer URI without its `?options`, as yggdrasil names a peering."""
    return uri.split("?", 1)[0]


def peer_reports(manager: LinkManager, router: Router, live_links: set[int]) -> list[PeerReport]:
    now = time.monotonic()
    return [_report(status, router, live_links, now) for status in manager.peers_status()]


def _report(status: dict[str, Any], router: Router, live_links: set[int], now: float) -> PeerReport:
    link = status["link"]
    up = link is not None and link.link_id in live_links
    view = router.peer_view(link.link_id) if up else None
    error = "" if up else status["last_error"]
    return PeerReport(
        uri=bare_uri(status["uri"]), up=up, inbound=status["inbound"],
        key=link.remote_key if up else b"", port=view.port if view else 0,
        priority=status["priority"] if up else 0, cost=view.cost if view else 0,
        rx_bytes=link.counters.bytes_in if up else 0, tx_bytes=link.counters.bytes_out if up else 0,
        uptime=now - link.since if up else 0.0, latency_ns=view.latency_ns if view else 0,
        link_id=link.link_id if up else None,
        last_error=error, last_error_age=now - status["last_error_at"] if error else 0.0,
    )


@dataclass
class RuntimePeers:
    """The peers added at run time and not removed since (by peer address),
    within MAX_RUNTIME_PEERS: each keeps a dialer retrying for good, so a
    local client adding thousands cost memory, CPU and log lines."""

    limit: int = MAX_RUNTIME_PEERS
    added: set[str] = field(default_factory=set)
    refused: int = 0

    def usage(self) -> list[BudgetUse]:
        return [BudgetUse("runtime_peers", "node", self.limit, len(self.added), self.refused)]


def add_peer(manager: LinkManager, runtime: RuntimePeers, uri: str) -> str:
    """Dial `uri` from now on and keep it connected (not saved in the
    config); returns the URI as the node reads it. PeerChangeRefused says
    why not: a bad URI, a peer already there (PeerAlreadyConfigured), or
    the budget spent (RuntimePeersFull)."""
    peer = _parse(uri)
    if peer.peer_key not in runtime.added and len(runtime.added) >= runtime.limit:
        runtime.refused += 1
        raise RuntimePeersFull(f"this node already has {runtime.limit} peers added at run time, its budget; "
                               f"remove one first")
    manager.add_peer(peer)
    runtime.added.add(peer.peer_key)
    log.info("peer added at run time: %s (not saved to the config file)", peer)
    return str(peer)


def remove_peer(manager: LinkManager, runtime: RuntimePeers, uri: str) -> str:
    """Stop dialing `uri` and close its peering, for the rest of this run
    (PeerNotConfigured if there is no such peer)."""
    peer = _parse(uri)
    manager.remove_peer(peer)
    runtime.added.discard(peer.peer_key)
    log.info("peer removed at run time: %s (it is not redialed)", peer)
    return str(peer)


def _parse(uri: str) -> PeerURI:
    if not uri:
        raise PeerChangeRefused("no peer URI given, e.g. tls://203.0.113.5:9001")
    try:
        return parse_peer_uri(uri)
    except URIError as exc:
        raise PeerChangeRefused(str(exc)) from None
