"""The dashboard's JSON documents, built from a node's public state.

Pure functions of the node and the current time, so the HTTP layer only
serialises them.
"""

from __future__ import annotations

from dataclasses import asdict

from axl import __version__
from axl.adapters.counts import AdapterCounts
from axl.identity import format_address
from axl.node.stats import DestinationStats, Histogram, PeerStats
from axl.observe.series import Reading, resident_bytes
from axl.observe.view import ObservedNode
from axl.tcp.recovery import PathStats


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def _mean_ms(histogram: Histogram) -> float | None:
    observed = histogram.count
    return _ms(histogram.total / observed) if observed else None


def reading(node: ObservedNode, now: float) -> Reading:
    stats = node.stats
    links = stats.link_totals()
    return Reading(
        time=now,
        messages_in=stats.messages_received,
        messages_out=stats.sent_by_status.get(200, 0),
        bytes_in=links.bytes_in,
        bytes_out=links.bytes_out,
        recv_queue_messages=len(node.inbox),
        link_queue_bytes=sum(link.queued_bytes for link in list(node.links.values())),
        rss_bytes=resident_bytes(),
    )


def snapshot(node: ObservedNode, adapters: AdapterCounts, now: float) -> dict:
    stats = node.stats
    links = stats.link_totals()
    peers = node.topology()["peers"]
    up = sum(1 for peer in peers if peer["up"])
    return {
        "identity": {
            "public_key": node.identity.peer_id,
            "ipv6": format_address(node.identity.address),
            "version": __version__,
            "started_at": stats.started_at,
            "uptime_secs": max(0.0, now - stats.started_at),
        },
        "totals": {
            "messages_sent": stats.sent_by_status.get(200, 0),
            "send_failures": sum(n for status, n in stats.sent_by_status.items() if status != 200),
            "messages_received": stats.messages_received,
            "payload_bytes_in": stats.payload_in,
            "payload_bytes_out": stats.payload_out,
            "link_bytes_in": links.bytes_in,
            "link_bytes_out": links.bytes_out,
            "recv_queue_messages": len(node.inbox),
            "recv_queue_bytes": node.inbox.queued_bytes,
            "sessions": node.session_count(),
            "peers_up": up,
            "peers_down": len(peers) - up,
        },
        "inbox": {
            "messages": node.inbox.held,
            "bytes": node.inbox.held_bytes,
            "durable": node.inbox.durable,
            "commits": node.inbox.commit_seconds.count,
            "commit_mean_ms": _mean_ms(node.inbox.commit_seconds),
        },
        "listener": asdict(node.listener_counts()),
        "adapters": {f"{adapter}_{direction}": asdict(counts) for adapter, direction, counts in adapters.as_rows()},
    }


def queued_by_peer(node: ObservedNode) -> dict[bytes, int]:
    """Traffic bytes each peer's links hold under back-pressure."""
    queued: dict[bytes, int] = {}
    for link in list(node.links.values()):
        queued[link.remote_key] = queued.get(link.remote_key, 0) + link.queued_bytes
    return queued


def peers(node: ObservedNode) -> dict:
    """Direct peerings (configured, inbound, and recently seen ones) and remote destinations."""
    stats = node.stats
    rtts = {link.remote_key: link.rtt() for link in list(node.links.values())}
    queued = queued_by_peer(node)
    paths = dict(node.overlay_paths())
    rows, listed = [], set()
    for entry in node.topology()["peers"]:
        key = bytes.fromhex(entry["public_key"]) if entry["public_key"] else b""
        if key in listed and key:
            continue
        listed.add(key)
        rows.append(_peering(entry["public_key"], entry.get("name", ""), entry["uri"], entry["up"],
                             entry["inbound"], stats.peers.get(key), rtts.get(key), queued.get(key, 0)))
    for key, peer in stats.peers.items():
        if key not in listed:
            rows.append(_peering(key.hex(), "", "", False, False, peer, None, 0))
    return {
        "peerings": rows,
        "destinations": [_destination(key, entry, paths.get(key.hex()))
                         for key, entry in stats.destination_entries()],
    }


def _peering(key: str, name: str, uri: str, up: bool, inbound: bool, peer: PeerStats | None,
             rtt: float | None, queued: int) -> dict:
    totals = peer.totals() if peer is not None else None
    return {
        "public_key": key,
        "name": name,
        "uri": uri,
        "up": up,
        "inbound": inbound,
        "up_since": peer.up_since if peer is not None and up else None,
        "bytes_in": totals.bytes_in if totals else 0,
        "bytes_out": totals.bytes_out if totals else 0,
        "frames_in": totals.frames_in if totals else 0,
        "frames_out": totals.frames_out if totals else 0,
        "rtt_ms": _ms(rtt),
        "reconnects": peer.reconnects if peer is not None else 0,
        "last_reason": peer.last_reason if peer is not None else "",
        "queued_bytes": queued,
    }


def _destination(key: bytes, entry: DestinationStats, path: PathStats | None) -> dict:
    return {
        "public_key": key.hex(),
        "messages_sent": entry.messages_sent,
        "bytes_sent": entry.bytes_sent,
        "messages_received": entry.messages_received,
        "bytes_received": entry.bytes_received,
        "last_seen": entry.last_seen,
        "last_ack_ms": _ms(entry.last_ack_seconds),
        "mean_ack_ms": _ms(entry.mean_ack_seconds),
        "failures": {str(status): count for status, count in sorted(entry.failures.items())},
        "overlay_rtt_ms": _ms(path.srtt if path is not None else None),
        "retransmits": path.retransmits if path is not None else 0,
        "timeouts": path.timeouts if path is not None else 0,
    }


def topology(node: ObservedNode) -> dict:
    """/topology plus the root's key, which the graph is drawn from."""
    view = node.topology()
    roots = [entry["public_key"] for entry in view["tree"] if not entry["parent"]]
    return {**view, "root": roots[0] if roots else view["our_public_key"]}
