"""`GET /peers`, `POST /peers`, `DELETE /peers`: the peerings, and peers
added or removed at run time (`{"uri": "tls://host:port?..."}`), as the
admin socket's addPeer and removePeer do. Nothing is written to the
config file; the node logs each change."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from axl.bridge.api import BridgeNode
from axl.errors import PeerAlreadyConfigured, PeerChangeRefused, PeerNotConfigured, RuntimePeersFull
from axl.gojson import read_json

# A peer URI is short; a larger body is not one.
MAX_BODY = 64 << 10


def add_peer_routes(app: web.Application, node: BridgeNode) -> None:
    async def list_peers(_request: web.Request) -> web.Response:
        return web.json_response({"peers": node.peer_list()})

    async def add(request: web.Request) -> web.Response:
        return await _change(request, node.add_peer, PeerAlreadyConfigured, 409)

    async def remove(request: web.Request) -> web.Response:
        return await _change(request, node.remove_peer, PeerNotConfigured, 404)

    app.router.add_get("/peers", list_peers)
    app.router.add_post("/peers", add)
    app.router.add_delete("/peers", remove)


async def _change(request: web.Request, change: Callable[[str], str], conflict: type[PeerChangeRefused],
                  conflict_status: int) -> web.Response:
    """Apply `change` to the body's URI: 200 with the URI as the node reads it,
    400 for a bad body or URI, `conflict_status` when there is nothing to do,
    503 beyond the budget of peers added at run time."""
    if (request.content_length or 0) > MAX_BODY:
        return _refusal(413, f"a /peers body is at most {MAX_BODY} bytes")
    uri = _uri_of(await request.content.read(MAX_BODY + 1))
    if not isinstance(uri, str):
        return _refusal(400, 'expected a JSON body {"uri": "tls://host:port"}')
    try:
        peer = change(uri)
    except conflict as exc:
        return _refusal(conflict_status, str(exc))
    except RuntimePeersFull as exc:
        return _refusal(503, str(exc))
    except PeerChangeRefused as exc:
        return _refusal(400, str(exc))
    return web.json_response({"uri": peer})


def _uri_of(body: bytes) -> Any:
    try:
        document = read_json(body)
    except ValueError:
        return None
    return document.get("uri") if isinstance(document, dict) else None


def _refusal(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text + "\n")
