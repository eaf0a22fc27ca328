"""The IPv6 packet device between the local TCP stack and the overlay: the
equivalent of yggdrasil-go v0.5.12's src/ipv6rwc.

It maps 200::/7 destinations to node keys. A destination's key is only
known once the router found a path to it (or it sent us a packet); until
then one packet per address or subnet waits and every write asks the
router to look the key up (the router throttles lookups). Received packets
are checked so that a node can only speak from its own address or subnet.

Memory is bounded: at most `max_entries` (default 4096) known keys and as
many pending packets per table; the least recently used goes first.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Final

from axl.budgets import MAX_DEVICE_ENTRIES
from axl.identity import (
    ADDRESS_PREFIX, SUBNET_PREFIX, NodeIdentity, address_for_key, key_for_address_bytes,
    subnet_for_key,
)
from axl.packets.ipv6 import HEADER_SIZE, packet_too_big

KEY_TIMEOUT: Final = 120.0
DEFAULT_MTU = 1280
_SUBNET_SIZE: Final = 8


@dataclass(init=False)
class SendIPv6:
    """Send `packet` to `key` (the node wraps it for the core and session)."""

    key: bytes
    packet: bytes

    def __init__(self, key: bytes, packet: bytes) -> None:
        self.key = key
        self.packet = packet


@dataclass(frozen=True)
class Lookup:
    """Ask the router to find the node whose key starts like `partial_key`."""

    partial_key: bytes


@dataclass(init=False)
class DeliverPacket:
    """A checked incoming packet for the local TCP stack."""

    source_key: bytes
    packet: bytes | memoryview

    def __init__(self, source_key: bytes, packet: bytes | memoryview) -> None:
        self.source_key = source_key
        self.packet = packet


Action = SendIPv6 | Lookup | DeliverPacket


@dataclass
class _KeyInfo:
    key: bytes
    address: bytes
    subnet: bytes
    expires: float


@dataclass
class _Pending:
    packet: bytes
    expires: float


class IPv6Device:
    """Sans-IO ipv6rwc: `write` for packets from our stack, `read` for
    packets from the overlay, `path_found` when the router learns a key."""

    def __init__(self, identity: NodeIdentity, mtu: int = DEFAULT_MTU, *,
                 max_entries: int = MAX_DEVICE_ENTRIES) -> None:
        self.identity = identity
        self.mtu = mtu
        self.address = identity.address
        self.subnet = identity.subnet
        self._max_entries = max_entries
        self._by_key: OrderedDict[bytes, _KeyInfo] = OrderedDict()
        self._by_address: dict[bytes, _KeyInfo] = {}
        self._by_subnet: dict[bytes, _KeyInfo] = {}
        self._pending_address: OrderedDict[bytes, _Pending] = OrderedDict()
        self._pending_subnet: OrderedDict[bytes, _Pending] = OrderedDict()
        self.dropped: Counter[str] = Counter()
        # Entries forgotten to make room, by table ("keys", "waiting_packets").
        self.evicted: Counter[str] = Counter()

    @property
    def max_entries(self) -> int:
        return self._max_entries

    def key_count(self) -> int:
        return len(self._by_key)

    def waiting_packet_count(self) -> int:
        """Packets waiting for a lookup in the fuller of the two tables
        (addresses, subnets), each of which holds up to `max_entries`."""
        return max(len(self._pending_address), len(self._pending_subnet))

    def mtu_for(self, source_key: bytes) -> int:
        """The largest packet accepted from `source_key`: the place to add
        per-node exceptions (larger MTUs between our own nodes)."""
        return self.mtu

    def write(self, packet: bytes, now: float) -> list[Action]:
        if len(packet) < HEADER_SIZE or packet[0] >> 4 != 6:
            self.dropped["write_malformed"] += 1
            return []
        src, dst = packet[8:24], packet[24:40]
        if not self._is_ours(src):
            self.dropped["write_bad_source"] += 1
            return []
        if dst[0] == ADDRESS_PREFIX:
            return self._send(self._by_address, self._pending_address, dst, packet, now)
        if dst[0] == SUBNET_PREFIX:
            subnet = dst[:_SUBNET_SIZE]
            return self._send(self._by_subnet, self._pending_subnet, subnet, packet, now)
        self.dropped["write_bad_destination"] += 1
        return []

    def read(self, source_key: bytes, packet: bytes | memoryview, now: float) -> list[Action]:
        """Check a packet from the overlay, in ipv6rwc's order."""
        if not packet or packet[0] >> 4 != 6 or len(packet) < HEADER_SIZE:
            self.dropped["read_malformed"] += 1
            return []
        mtu = self.mtu_for(source_key)
        if len(packet) > mtu:
            self.dropped["read_too_big"] += 1
            return self.write(packet_too_big(packet, mtu), now)
        if not self._is_ours(packet[24:40]):
            self.dropped["read_bad_destination"] += 1
            return []
        info, actions = self._update(source_key, now)
        src = packet[8:24]
        if src != info.address and src[:_SUBNET_SIZE] != info.subnet:
            self.dropped["read_bad_source"] += 1
            return actions
        return actions + [DeliverPacket(source_key, packet)]

    def path_found(self, key: bytes, now: float) -> list[Action]:
        _, actions = self._update(key, now)
        return actions

    def tick(self, now: float) -> None:
        """Forget keys and pending packets idle for two minutes."""
        for info in [i for i in self._by_key.values() if i.expires <= now]:
            self._forget(info)
        for table in (self._pending_address, self._pending_subnet):
            for name in [k for k, p in table.items() if p.expires <= now]:
                del table[name]

    def _is_ours(self, addr: bytes | memoryview) -> bool:
        return addr == self.address or addr[:_SUBNET_SIZE] == self.subnet

    def _live(self, table: dict[bytes, _KeyInfo], name: bytes, now: float) -> _KeyInfo | None:
        info = table.get(name)
        if info is not None and info.expires <= now:
            self._forget(info)
            return None
        return info

    def _forget(self, info: _KeyInfo) -> None:
        for table, name in ((self._by_key, info.key), (self._by_address, info.address),
                            (self._by_subnet, info.subnet)):
            if table.get(name) is info:
                del table[name]

    def _touch(self, info: _KeyInfo, now: float) -> None:
        info.expires = now + KEY_TIMEOUT
        self._by_key.move_to_end(info.key)

    def _send(self, known: dict[bytes, _KeyInfo], pending: OrderedDict[bytes, _Pending],
              name: bytes, packet: bytes, now: float) -> list[Action]:
        info = self._live(known, name, now)
        if info is not None:
            self._touch(info, now)
            return [SendIPv6(info.key, packet)]
        pending.pop(name, None)
        while len(pending) >= self._max_entries:
            pending.popitem(last=False)
            self.evicted["waiting_packets"] += 1
        pending[name] = _Pending(packet, now + KEY_TIMEOUT)
        return [Lookup(key_for_address_bytes(name))]

    def _update(self, key: bytes, now: float) -> tuple[_KeyInfo, list[Action]]:
        """Cache `key` (or refresh it) and release packets waiting for it."""
        info = self._live(self._by_key, key, now)
        actions: list[Action] = []
        if info is None:
            while len(self._by_key) >= self._max_entries:
                self._forget(next(iter(self._by_key.values())))
                self.evicted["keys"] += 1
            info = _KeyInfo(key, address_for_key(key), subnet_for_key(key), now)
            self._by_key[key] = info
            self._by_address[info.address] = info
            self._by_subnet[info.subnet] = info
            for table, name in ((self._pending_address, info.address),
                                (self._pending_subnet, info.subnet)):
                waiting = table.pop(name, None)
                if waiting is not None and waiting.expires > now:
                    actions.append(SendIPv6(key, waiting.packet))
        self._touch(info, now)
        return info, actions
