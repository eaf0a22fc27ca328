"""LAN discovery as Yggdrasil does it (`MulticastInterfaces`).

Nodes on the same link find each other by UDP beacons to [ff02::114]:9001:
major/minor version, the node's key, the port of a TLS listener on the
interface's link-local address, and BLAKE2b-512(key) keyed with the rule's
password. A node that hears a beacon whose hash matches its own password
dials `tls://[fe80::src%if]:port` once, pinned to the beaconer's key; the
next beacon retries. Off unless the config lists interfaces.

The beacon codec and the schedule are plain functions; `Discovery` is the
asyncio edge (the UDP socket, interface scan, listeners and dials).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import re
import socket
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from axl.link.uri import PeerURI
from axl.tasks import start_task

if TYPE_CHECKING:
    from axl.identity import NodeIdentity
    from axl.link.manager import LinkManager
    from axl.link.transports import Listener

GROUP = "ff02::114"
PORT = 9001
MAJOR, MINOR = 0, 5
HASH_LEN = 64
BEACON_LEN = 2 + 2 + 32 + 2 + 2 + HASH_LEN
TICK = 1.0
TICK_JITTER = 0.1
MAX_INTERVAL = 15.0
IFF_UP, IFF_POINTOPOINT, IFF_RUNNING, IFF_MULTICAST = 0x1, 0x10, 0x40, 0x1000
IFA_F_TENTATIVE, IFA_F_DADFAILED = 0x40, 0x08
log = logging.getLogger("axl.multicast")


@dataclass(frozen=True)
class MulticastRule:
    """One `MulticastInterfaces` entry; the first whose regex matches applies
    (anywhere in the name, as Go's regexp.MatchString does)."""

    regex: str = ""
    beacon: bool = True
    listen: bool = True
    port: int = 0
    priority: int = 0
    password: str = ""

    def matches(self, name: str) -> bool:
        return re.search(self.regex, name) is not None


@dataclass(frozen=True)
class Beacon:
    key: bytes
    port: int
    hash: bytes


def beacon_hash(key: bytes, password: bytes) -> bytes:
    """BLAKE2b-512 of the key, keyed with the password (none when empty)."""
    return hashlib.blake2b(key, digest_size=HASH_LEN, key=password).digest()


def encode_beacon(key: bytes, port: int, password: bytes) -> bytes:
    return (struct.pack(">HH", MAJOR, MINOR) + key + struct.pack(">HH", port, HASH_LEN)
            + beacon_hash(key, password))


def decode_beacon(data: bytes) -> Beacon | None:
    """The beacon, or None if it is not a v0.5 beacon."""
    if len(data) < BEACON_LEN - HASH_LEN:
        return None
    major, minor = struct.unpack_from(">HH", data)
    port, hash_len = struct.unpack_from(">HH", data, 36)
    if (major, minor) != (MAJOR, MINOR) or len(data) != 40 + hash_len:
        return None
    return Beacon(bytes(data[4:36]), port, bytes(data[40:]))


def next_interval(interval: float) -> float:
    """Each interface's beacon gap grows by a second per beacon, to 15 s."""
    return min(interval + 1.0, MAX_INTERVAL)


@dataclass(frozen=True)
class Interface:
    name: str
    index: int
    link_local: str


def _interface_flags(name: str) -> int:
    """The interface's flags; sysfs keeps "running" apart, in operstate."""
    try:
        flags = int(Path(f"/sys/class/net/{name}/flags").read_text(), 16)
        operstate = Path(f"/sys/class/net/{name}/operstate").read_text().strip()
    except (OSError, ValueError):
        return 0
    return flags | (IFF_RUNNING if operstate in ("up", "unknown") else 0)


def scan_interfaces() -> list[Interface]:
    """Up, running, multicast, not point-to-point interfaces with a usable
    (DAD finished) IPv6 link-local address; Linux only."""
    try:
        lines = Path("/proc/net/if_inet6").read_text().splitlines()
    except OSError:
        return []
    found: dict[str, Interface] = {}
    wanted = IFF_UP | IFF_RUNNING | IFF_MULTICAST
    for line in lines:
        hex_addr, index, _, scope, flags, name = line.split()
        if int(scope, 16) != 0x20 or int(flags, 16) & (IFA_F_TENTATIVE | IFA_F_DADFAILED):
            continue
        if_flags = _interface_flags(name)
        if if_flags & wanted != wanted or if_flags & IFF_POINTOPOINT or name in found:
            continue
        address = socket.inet_ntop(socket.AF_INET6, bytes.fromhex(hex_addr))
        found[name] = Interface(name, int(index, 16), address)
    return list(found.values())


@dataclass(frozen=True)
class InterfaceReport:
    """An interface multicast runs on, as yggdrasil's getMulticastInterfaces
    shows it: `address` is the listener's `[addr%if]:port`, or "-"."""

    name: str
    address: str
    beacon: bool
    listen: bool
    password: bool


@dataclass
class _Active:
    """An interface we beacon or listen on."""

    interface: Interface
    rule: MulticastRule
    listener: Listener | None = None
    port: int = 0
    interval: float = 0.0
    last_beacon: float = float("-inf")
    joined: bool = False


class _BeaconProtocol(asyncio.DatagramProtocol):
    def __init__(self, discovery: Discovery) -> None:
        self.discovery = discovery

    def datagram_received(self, data: bytes, addr: tuple) -> None:  # type: ignore[override]
        self.discovery.beacon_received(data, addr)


@dataclass
class Discovery:
    identity: NodeIdentity
    rules: list[MulticastRule]
    manager: LinkManager
    rng: random.Random = field(default_factory=random.Random)
    _active: dict[str, _Active] = field(default_factory=dict)
    _dialing: dict[str, asyncio.Task[bool]] = field(default_factory=dict)
    _sock: socket.socket | None = None
    _transport: asyncio.DatagramTransport | None = None
    _task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 1)
        sock.bind(("::", PORT))
        sock.setblocking(False)
        self._sock = sock
        loop = asyncio.get_running_loop()
        self._transport, _ = await loop.create_datagram_endpoint(  # type: ignore[assignment]
            lambda: _BeaconProtocol(self), sock=sock)
        self._task = start_task(self._run(), log, "multicast discovery")
        log.info("multicast discovery on %s:%d", GROUP, PORT)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for task in self._dialing.values():
            task.cancel()
        for active in self._active.values():
            if active.listener is not None:
                active.listener.close()
        if self._transport is not None:
            self._transport.close()

    def interface_report(self) -> list[InterfaceReport]:
        reports = []
        for name, active in self._active.items():
            address = "-"
            if active.listener is not None:
                address = f"[{active.interface.link_local}%{name}]:{active.port}"
            reports.append(InterfaceReport(name, address, active.rule.beacon, active.rule.listen,
                                           bool(active.rule.password)))
        return sorted(reports, key=lambda report: report.name)

    # --- the beacon loop --------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                await self._refresh(scan_interfaces())
                self._send_due(loop.time())
            except OSError as exc:
                log.warning("multicast: %s", exc)
            except Exception:
                # One bad tick must not end discovery for the life of the node.
                log.exception("multicast: discovery tick failed")
            await asyncio.sleep(TICK + self.rng.uniform(0, TICK_JITTER))

    def _rule_for(self, name: str) -> MulticastRule | None:
        return next((rule for rule in self.rules if rule.matches(name)), None)

    async def _refresh(self, interfaces: list[Interface]) -> None:
        """Start on new interfaces, drop vanished ones."""
        current = {i.name: i for i in interfaces}
        for name in list(self._active):
            if current.get(name) != self._active[name].interface:
                active = self._active.pop(name)
                if active.listener is not None:
                    active.listener.close()
        for name, interface in current.items():
            rule = self._rule_for(name)
            if name in self._active or rule is None or not (rule.beacon or rule.listen):
                continue
            self._active[name] = await self._activate(interface, rule)

    async def _activate(self, interface: Interface, rule: MulticastRule) -> _Active:
        active = _Active(interface, rule)
        if rule.listen:
            group = socket.inet_pton(socket.AF_INET6, GROUP) + struct.pack("@I", interface.index)
            assert self._sock is not None
            self._sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP, group)
            active.joined = True
        if rule.beacon:
            uri = PeerURI("tls", f"{interface.link_local}%{interface.name}", rule.port,
                          password=rule.password.encode(), priority=rule.priority)
            active.listener = await self.manager.listen_discovered(uri)
            active.port = active.listener.port
        log.info("multicast on %s (%s): beacon=%s listen=%s port=%d", interface.name,
                 interface.link_local, rule.beacon, rule.listen, active.port)
        return active

    def _send_due(self, now: float) -> None:
        for active in self._active.values():
            if active.listener is None or now - active.last_beacon < active.interval:
                continue
            beacon = encode_beacon(self.identity.public_key, active.port,
                                   active.rule.password.encode())
            assert self._transport is not None
            self._transport.sendto(beacon, (GROUP, PORT, 0, active.interface.index))
            active.last_beacon = now
            active.interval = next_interval(active.interval)

    # --- receiving -----------------------------------------------------------------

    def beacon_received(self, data: bytes, addr: tuple) -> None:
        beacon = decode_beacon(data)
        host, _, _, scope = addr
        active = next((a for a in self._active.values() if a.interface.index == scope), None)
        if beacon is None or active is None or not active.rule.listen:
            return
        if beacon.key == self.identity.public_key:
            return
        password = active.rule.password.encode()
        if beacon.hash != beacon_hash(beacon.key, password):
            return
        name = active.interface.name
        uri = PeerURI("tls", f"{host.split('%')[0]}%{name}", beacon.port, (beacon.key,),
                      password, active.rule.priority)
        key = str(uri)
        if key in self._dialing:
            return
        log.debug("multicast: beacon from %s on %s", beacon.key.hex()[:16], name)
        task = start_task(self.manager.dial_discovered(uri), log, f"dialing discovered {uri}")
        self._dialing[key] = task
        task.add_done_callback(lambda _: self._dialing.pop(key, None))
