"""The daemon: a Node and its HTTP bridge, run until SIGINT or SIGTERM.

This sits above both the node and the bridge, so that neither has to know
about the other beyond the bridge's small `BridgeNode` protocol.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
from typing import TYPE_CHECKING

from axl.adapters import DispatchSettings, InboundDispatcher
from axl.bridge.server import BridgeServer
from axl.config import ConfigError, NodeConfig, parse_admin_listen
from axl.gctuning import collect_less_often, freeze_survivors
from axl.heap import TRIM_INTERVAL, HeapTuning
from axl.link.manager import ListenFailed
from axl.node import Node
from axl.tasks import start_task

if TYPE_CHECKING:
    from axl.admin import AdminServer

log = logging.getLogger("axl.node")

STOP_TIMEOUT = 5.0


def build_dispatcher(config: NodeConfig) -> InboundDispatcher:
    return InboundDispatcher(DispatchSettings(
        router_addr=config.router_addr, router_port=config.router_port,
        a2a_addr=config.a2a_addr, a2a_port=config.a2a_port,
        mcp_timeout=float(config.mcp_timeout_secs),
        a2a_timeout=float(config.a2a_timeout_secs),
    ))


async def run_daemon(node: Node, dispatcher: InboundDispatcher) -> int:
    """Serve until signalled; 0 on a clean stop, 1 when start-up failed.

    ConfigError when a port or address the config names cannot be bound."""
    heap = HeapTuning()
    heap.keep_freed_memory()
    collect_less_often()
    trimmer = start_task(_trim_heap(heap), log, "heap trim")
    try:
        return await _serve(node, dispatcher)
    finally:
        trimmer.cancel()


def stop_signals() -> list[signal.Signals]:
    """SIGINT, SIGTERM, and SIGHUP (its terminal closed) unless the node was
    started to ignore it (`nohup`): each stops the node cleanly."""
    signals = [signal.SIGINT, signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signals.append(signal.SIGHUP)
    return signals


def _settle(future: asyncio.Future[signal.Signals], sig: signal.Signals) -> None:
    if not future.done():
        future.set_result(sig)


async def _serve(node: Node, dispatcher: InboundDispatcher) -> int:
    loop = asyncio.get_running_loop()
    stop_signal: asyncio.Future[signal.Signals] = loop.create_future()
    for sig in stop_signals():
        loop.add_signal_handler(sig, _settle, stop_signal, sig)
    bridge = BridgeServer(node, node.config, dispatcher.counts,
                          full_application_loaded=lambda: _set_aside("full application loaded"))
    admin = _admin_server(node)
    try:
        await _start(node, bridge)
        if admin is not None:
            await admin.start()
        _set_aside("started")
    except ConfigError:
        await _stop(node, bridge, admin, dispatcher)
        raise
    except OSError as exc:
        log.error("cannot start: %s", exc)
        await _stop(node, bridge, admin, dispatcher)
        return 1
    log.info("stopping on %s", (await stop_signal).name)
    try:
        await asyncio.wait_for(_stop(node, bridge, admin, dispatcher), STOP_TIMEOUT)
    except TimeoutError:
        log.error("stopping took over %.0f s; exiting without waiting further", STOP_TIMEOUT)
        return 1
    log.info("stopped")
    return 0


async def _start(node: Node, bridge: BridgeServer) -> None:
    """Start the node, then its bridge. A port the config names but this
    machine cannot give raises ConfigError naming the setting: the fix is in
    the config (or in whatever else holds the port), as for any config error."""
    try:
        await node.start()
    except ListenFailed as exc:
        address = exc.uri.path if exc.uri.scheme == "unix" else exc.uri.host_port
        # scheme and address only: a ?password= in the URI stays out of the message
        raise ConfigError(bind_failure(f"Listen {exc.uri.scheme}://{address}", address, exc, "another port")) from None
    host, port = node.config.bridge_addr, node.config.api_port
    try:
        await bridge.start()
    except OSError as exc:
        if exc.errno is None:
            raise ConfigError(str(exc)) from None
        if node.config.bridge_unix_path is not None:
            setting, address = f"bridge_addr {host}", node.config.bridge_unix_path
        else:
            setting = f"bridge_addr {host}" if exc.errno == errno.EADDRNOTAVAIL else f"api_port {port}"
            address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        raise ConfigError(bind_failure(setting, address, exc, "another api_port")) from None


def bind_failure(setting: str, address: str, exc: OSError, remedy: str) -> str:
    """One line naming the setting and its value, the address, and what to do."""
    if exc.errno == errno.EADDRINUSE:
        return f"{setting}: {address} is already in use (another axl-node?); stop what holds it or choose {remedy}"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{setting}: {address} is not an address of this machine; use 127.0.0.1, 0.0.0.0 or a local address"
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    return f"{setting}: cannot listen on {address}: {reason}"


def _set_aside(moment: str) -> None:
    """Freeze what is alive now out of the cycle collector's way (axl.gctuning)."""
    log.debug("%s: %d objects set aside from the cycle collector", moment, freeze_survivors())


async def _trim_heap(heap: HeapTuning) -> None:
    while heap.active:
        await asyncio.sleep(TRIM_INTERVAL)
        heap.release_free_memory()


def _admin_server(node: Node) -> AdminServer | None:
    """The admin socket when AdminListen asks for one (the module loads only then)."""
    address = parse_admin_listen(node.config.admin_listen)
    if address is None:
        return None
    from axl.admin import AdminServer
    return AdminServer(node, address)


async def _stop(node: Node, bridge: BridgeServer, admin: AdminServer | None,
                dispatcher: InboundDispatcher) -> None:
    if admin is not None:
        await admin.stop()
    await bridge.stop()
    await node.stop()
    await dispatcher.close()
