"""The daemon: a Node and its HTTP bridge, run until SIGINT or SIGTERM.

This sits above both the node and the bridge, so that neither has to know
about the other beyond the bridge's small `BridgeNode` protocol.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import TYPE_CHECKING

from axl.adapters import DispatchSettings, InboundDispatcher
from axl.bridge.server import BridgeServer
from axl.config import NodeConfig, parse_admin_listen
from axl.heap import TRIM_INTERVAL, HeapTuning
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
    """Serve until signalled; 0 on a clean stop, 1 when start-up failed."""
    heap = HeapTuning()
    heap.keep_freed_memory()
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


async def _serve(node: Node, dispatcher: InboundDispatcher) -> int:
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in stop_signals():
        loop.add_signal_handler(sig, stopped.set)
    bridge = BridgeServer(node, node.config)
    admin = _admin_server(node)
    try:
        await node.start()
        await bridge.start()
        if admin is not None:
            await admin.start()
    except OSError as exc:
        log.error("cannot start: %s", exc)
        await _stop(node, bridge, admin, dispatcher)
        return 1
    await stopped.wait()
    log.info("stopping")
    try:
        await asyncio.wait_for(_stop(node, bridge, admin, dispatcher), STOP_TIMEOUT)
    except TimeoutError:
        log.error("stopping took over %.0f s; exiting without waiting further", STOP_TIMEOUT)
        return 1
    return 0


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
    log.info("stopped")
