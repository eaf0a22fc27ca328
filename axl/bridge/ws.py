"""`GET /ws` on a connection the full application holds (aiohttp's WebSocket).

The front door serves a /ws upgrade itself (axl.bridge.wsnative); one
arrives here only on a keep-alive connection that an earlier request
handed to the full application. The session is the same
(axl.bridge.streaming); this module gives it aiohttp's WebSocket as a
MessageSocket, and closes the open ones when the node stops.
"""

from __future__ import annotations

import asyncio
import logging
import weakref

from aiohttp import ClientConnectionError, WSCloseCode, WSMsgType, web

from axl.bridge.api import BridgeNode, ClientWatch, InFlightBoard, ReceiverSlot
from axl.bridge.streaming import STOP_CLOSE_TIMEOUT, StreamingSession, StreamRefused, max_frame, session_window
from axl.bridge.wsframes import BINARY, CLOSE, TEXT

log = logging.getLogger("axl.bridge")

NODE = web.AppKey("node", BridgeNode)
CLIENTS = web.AppKey("clients", ClientWatch)
RECEIVER = web.AppKey("receiver", ReceiverSlot)
OPEN_STREAMS = web.AppKey("ws_open_streams", weakref.WeakSet)
IN_FLIGHT = web.AppKey("ws_in_flight", InFlightBoard)
_ENDS = (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR)


class AiohttpSocket:
    """aiohttp's server WebSocket as a session's MessageSocket: frames
    queued by the write methods are sent by `drain`."""

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws
        # text frames as str, binary ones as bytes, in the order written
        self._queued: list[str | bytes] = []

    @property
    def closed(self) -> bool:
        return self.ws.closed

    def poll(self) -> tuple[int, bytes] | None:
        return None

    async def receive(self) -> tuple[int, bytes]:
        while True:
            message = await self.ws.receive()
            if message.type == WSMsgType.BINARY:
                return BINARY, message.data
            if message.type == WSMsgType.TEXT:
                return TEXT, message.data.encode()
            if message.type in _ENDS:
                return CLOSE, b""

    def write_text(self, text: str) -> None:
        self._queued.append(text)

    def write_binary(self, data: bytes) -> None:
        self._queued.append(data)

    async def drain(self) -> None:
        queued, self._queued = self._queued, []
        try:
            for frame in queued:
                if isinstance(frame, str):
                    await self.ws.send_str(frame)
                else:
                    await self.ws.send_bytes(frame)
        except ClientConnectionError as exc:
            raise ConnectionError(str(exc)) from None

    async def close(self, code: int, reason: str) -> None:
        await self.ws.close(code=code, message=reason.encode())


def track_streams(app: web.Application, in_flight: InFlightBoard) -> None:
    """Keep the open /ws connections, so that a stopping node closes them
    (1001, going away) instead of waiting for their clients to leave, and
    what their sends hold, for /metrics."""
    app[OPEN_STREAMS] = weakref.WeakSet()
    app[IN_FLIGHT] = in_flight
    app.on_shutdown.append(_close_streams)


async def _close_streams(app: web.Application) -> None:
    open_streams: weakref.WeakSet[web.WebSocketResponse] = app[OPEN_STREAMS]
    closing = [asyncio.ensure_future(_close_one(ws)) for ws in list(open_streams)]
    if closing:
        await asyncio.wait(closing)


async def _close_one(ws: web.WebSocketResponse) -> None:
    if not ws.prepared:
        return  # its upgrade was refused (a plain GET /ws): nothing to close
    try:
        await asyncio.wait_for(ws.close(code=WSCloseCode.GOING_AWAY, message=b"node stopping"),
                               STOP_CLOSE_TIMEOUT)
    except (TimeoutError, ConnectionError, ClientConnectionError):
        log.info("a /ws client did not answer the node's close")


async def handle_ws(request: web.Request) -> web.StreamResponse:
    node = request.app[NODE]
    slot = request.app[RECEIVER]
    receiving = request.query.get("recv") == "1"
    try:
        window = session_window(receiving, request.query.get("window"), slot)
    except StreamRefused as exc:
        return web.Response(status=exc.status, text=f"{exc}\n")
    # The close handshake is answered only after the undone messages are back
    # in the queue and the slot is free: a client that reconnects as soon as
    # its close completes finds both.
    ws = web.WebSocketResponse(max_msg_size=max_frame(node), autoclose=False)
    request.app[OPEN_STREAMS].add(ws)
    # None: the client has already gone, and prepare() below fails.
    gone = request.app[CLIENTS].gone(request.transport) or asyncio.Event()
    if receiving:
        slot.holder = ws
    try:
        await ws.prepare(request)
        session = StreamingSession(node, AiohttpSocket(ws), window, gone, request.app[IN_FLIGHT])
        await session.run()
    finally:
        if slot.holder is ws:
            slot.holder = None
    await ws.close()
    await session.finish_sends()
    return ws
