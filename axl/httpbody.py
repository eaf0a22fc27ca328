"""Request bodies for every bridge route: a size limit and a deadline.

Shared by the core routes (/send) and the agent routes (/mcp, /a2a), so an
oversized or trickled upload is refused the same way wherever it arrives.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from axl.errors import MessageTooLarge

READ_CHUNK = 1 << 20


class BodyTimeout(Exception):
    """The client did not deliver its whole body in time (a slow-loris upload)."""


async def read_limited_body(request: web.Request, limit: int, timeout: float) -> bytes:
    """Read at most `limit` bytes within `timeout` seconds; refuse larger bodies before reading them.

    The deadline covers the whole body, so a client trickling a byte at a
    time cannot hold a handler (and its memory) open forever. Chunks are
    joined once at the end: a 16 MiB body is copied once, not on every append.
    """
    if request.content_length is not None and request.content_length > limit:
        raise MessageTooLarge(f"payload of {request.content_length} bytes exceeds max_message_size {limit}")
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.content.iter_chunked(READ_CHUNK):
                size += len(chunk)
                if size > limit:
                    raise MessageTooLarge(f"payload exceeds max_message_size {limit}")
                chunks.append(chunk)
    except TimeoutError:
        raise BodyTimeout(f"request body not received within {timeout:g}s") from None
    return b"".join(chunks)


async def answer_and_close(request: web.Request, response: web.Response) -> web.Response:
    """Send `response`, then close the connection: the rest of the body is never read.

    aiohttp would otherwise keep reading (and discarding) an unread body for
    its lingering time, which is exactly what a 2 GiB upload must not get.
    """
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    if request.transport is not None:
        request.transport.close()
    return response
