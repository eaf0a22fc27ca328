"""Baseline processes the node's figures are divided by.

Run as child processes on the same event loop kind as the nodes, so that a
ratio compares the node with what that loop and this machine can do at all:

    python -m axl.bench.baselines tls-sink          # prints its port, reads one stream
    python -m axl.bench.baselines tls-source PORT N # sends N bytes, prints seconds
    python -m axl.bench.baselines noop-http         # prints its port, serves POST /, /send, GET /recv

and one that is another client of a node, apart from the bench's own loop:

    python -m axl.bench.baselines probe URL SECONDS  # GETs URL that often, prints each answer's ms
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import struct
import sys
import time
from urllib.parse import urlsplit

from aiohttp import web

from axl.identity import NodeIdentity
from axl.link.tls import client_context, server_context

LOOPBACK = "127.0.0.1"
CHUNK = 1 << 20
_LENGTH = struct.Struct("!Q")


def announce(value: object) -> None:
    """One JSON line on stdout: how a child hands a port or a result back."""
    print(json.dumps(value), flush=True)


async def tls_sink() -> None:
    """Accept one TLS stream: u64 length, that many bytes, then one ack byte."""
    done = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        remaining = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))[0]
        while remaining:
            chunk = await reader.read(min(remaining, CHUNK))
            if not chunk:
                break
            remaining -= len(chunk)
        writer.write(b"\x01")
        await writer.drain()
        writer.close()
        done.set()

    server = await asyncio.start_server(serve, LOOPBACK, 0,
                                        ssl=server_context(NodeIdentity.generate()))
    announce(server.sockets[0].getsockname()[1])
    async with server:
        await done.wait()


async def tls_source(port: int, total: int) -> None:
    """Stream `total` bytes to a sink; report seconds from connected to acknowledged."""
    reader, writer = await asyncio.open_connection(
        LOOPBACK, port, ssl=client_context(NodeIdentity.generate()))
    block = os.urandom(CHUNK)
    start = time.perf_counter()
    writer.write(_LENGTH.pack(total))
    remaining = total
    while remaining:
        piece = block[:min(remaining, CHUNK)]
        writer.write(piece)
        remaining -= len(piece)
        await writer.drain()
    await reader.readexactly(1)
    announce({"seconds": time.perf_counter() - start, "bytes": total})
    writer.close()


async def noop_http() -> None:
    """An aiohttp server whose handler reads the body and answers 200: the
    ceiling for request rates any aiohttp bridge can reach on this loop.

    It also answers `POST /send` and `GET /recv` as a node would when the
    overlay cost nothing (200 and `X-Sent-Bytes`; a 1 KiB message with
    `X-From-Peer-Id`), so the bench can time its own /send + /recv probe
    against a server that does no work."""
    message = bytes(1024)

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=200)

    async def send(request: web.Request) -> web.Response:
        body = await request.read()
        return web.Response(status=200, headers={"X-Sent-Bytes": str(len(body))})

    async def recv(request: web.Request) -> web.Response:
        return web.Response(body=message, content_type="application/octet-stream",
                            headers={"X-From-Peer-Id": "00" * 32})

    app = web.Application(client_max_size=32 * 1024 * 1024)
    app.router.add_post("/", handle)
    app.router.add_post("/send", send)
    app.router.add_get("/recv", recv)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, LOOPBACK, 0)
    await site.start()
    announce(runner.addresses[0][1])
    await asyncio.Event().wait()


def probe(url: str, interval: float) -> None:
    """GET `url` every `interval` seconds on one connection, until killed,
    announcing each answer's time in ms: how long the node keeps a client waiting."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    announce("probing")
    while True:
        start = time.perf_counter()
        connection.request("GET", parts.path)
        connection.getresponse().read()
        announce((time.perf_counter() - start) * 1000)
        time.sleep(interval)


def run(coro) -> None:
    """Run on the loop AXL_EVENT_LOOP names, exactly as axl-node chooses it."""
    if os.environ.get("AXL_EVENT_LOOP", "").lower() != "asyncio":
        import uvloop
        uvloop.run(coro)
    else:
        asyncio.run(coro)


def main(argv: list[str]) -> int:
    match argv:
        case ["tls-sink"]:
            run(tls_sink())
        case ["tls-source", port, total]:
            run(tls_source(int(port), int(total)))
        case ["noop-http"]:
            run(noop_http())
        case ["probe", url, interval]:
            probe(url, float(interval))
        case _:
            print(__doc__, file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
