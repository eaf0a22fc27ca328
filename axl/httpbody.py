"""Request bodies for every bridge route: a size limit and a deadline.

Shared by the core routes (/send) and the agent routes (/mcp, /a2a), so an
oversized or trickled upload is refused the same way wherever it arrives.

A 413 must reach the client. A client that is still writing its body when
the server closes (urllib, http.client, requests) sees a broken pipe or a
reset instead of the answer. So: a client that sent `Expect: 100-continue`
gets the 413 before it sends any body; a body of at most DISCARD_MAX bytes
is read and thrown away (within the body deadline) before the 413; only a
larger one is answered at once and cut off, as reading it would cost more
than the client's comfort is worth.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import HttpVersion11, web

from axl.budgets import DISCARD_MAX
from axl.errors import MessageTooLarge

READ_CHUNK = 1 << 20


class BodyTimeout(Exception):
    """The client did not deliver its whole body in time (a slow-loris upload)."""


class ClientLeft(ConnectionResetError):
    """The client closed its connection before its body was whole: nobody is
    left to answer, and nothing of the request happened."""


async def read_limited_body(request: web.Request, limit: int, timeout: float) -> bytes:
    """Read at most `limit` bytes within `timeout` seconds, or raise MessageTooLarge.

    The deadline covers the whole body, so a client trickling a byte at a
    time cannot hold a handler (and its memory) open forever. The chunks
    are taken as aiohttp received them (read(n) would first join them into
    a copy of up to n bytes) and joined once at the end: a 16 MiB body is
    copied once. An oversized body of at most DISCARD_MAX bytes is first read to
    its end (and dropped), so that the client can read the 413.
    """
    declared = request.content_length
    content = request.content
    if content.is_eof() and (declared is None or declared <= limit):
        # The whole body came with the headers (any small /send does): take
        # it as it is, with no deadline to arm and no chunk loop to run.
        body = content.read_nowait()
        if len(body) > limit:
            raise MessageTooLarge(f"payload exceeds max_message_size {limit}")
        return body
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):
            if declared is not None and declared > limit:
                await _discard_rest(request, declared, 0)
                raise MessageTooLarge(f"payload of {declared} bytes exceeds max_message_size {limit}")
            async for chunk, _ in request.content.iter_chunks():
                size += len(chunk)
                if size > limit:
                    await _discard_rest(request, declared, size)
                    raise MessageTooLarge(f"payload exceeds max_message_size {limit}")
                chunks.append(chunk)
    except TimeoutError:
        if declared is not None and declared > limit or size > limit:
            raise MessageTooLarge(f"payload exceeds max_message_size {limit}") from None
        raise BodyTimeout(f"request body not received within {timeout:g}s") from None
    except (ConnectionError, RuntimeError):
        # aiohttp's stream raises ConnectionResetError when the client leaves
        # mid-body, or RuntimeError("Connection closed.") when it left first
        if request.transport is None or request.transport.is_closing():
            raise ClientLeft("the client left before its body was whole") from None
        raise
    return b"".join(chunks)


async def _discard_rest(request: web.Request, declared: int | None, already: int) -> None:
    """Read and drop the rest of a body that is refused, if it is at most DISCARD_MAX bytes.

    A declared length over the bound is not read at all; a chunked body is
    read until it ends or passes the bound.
    """
    if declared is not None and declared > DISCARD_MAX:
        return
    size = already
    async for chunk in request.content.iter_chunked(READ_CHUNK):
        size += len(chunk)
        if size > DISCARD_MAX:
            return


def refuse_oversized_early(limit: int) -> Callable[[web.Request], Awaitable[web.StreamResponse | None]]:
    """An aiohttp expect handler: `Expect: 100-continue` with a length over `limit` gets 413 at once.

    The client then never sends the body. Otherwise it does what aiohttp's
    default does: tell the client to go on.
    """
    async def expect(request: web.Request) -> web.StreamResponse | None:
        if request.version != HttpVersion11:
            return None
        if request.headers.get("Expect", "").lower() != "100-continue":
            raise web.HTTPExpectationFailed(text=f"unknown Expect: {request.headers.get('Expect')}\n")
        if request.content_length is not None and request.content_length > limit:
            refusal = MessageTooLarge(f"payload of {request.content_length} bytes exceeds max_message_size {limit}")
            response = web.Response(status=413, text=f"{refusal}\n")
            response.force_close()
            return response
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0
        return None

    return expect


async def answer_and_close(request: web.Request, response: web.Response) -> web.Response:
    """Send `response`, then close the connection: any unread body is never read.

    aiohttp would otherwise keep reading (and discarding) an unread body for
    its lingering time, which is exactly what a 2 GiB upload must not get.
    """
    response.force_close()
    if request.transport is None or request.transport.is_closing():
        return response  # the client left: aiohttp drops the answer quietly
    await response.prepare(request)
    await response.write_eof()
    if request.transport is not None:
        request.transport.close()
    return response
