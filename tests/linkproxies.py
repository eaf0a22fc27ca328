"""Small proxies the link tests put between two nodes, on loopback: a SOCKS5
server (RFC 1928 with RFC 1929 user/password) and a TLS terminator that
plays the reverse proxy in front of a ws:// listener. Each runs its own
event loop in a thread and records what clients sent."""

from __future__ import annotations

import asyncio
import ssl
import struct
import threading
from dataclasses import dataclass, field


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def _splice(a: tuple, b: tuple) -> None:
    await asyncio.gather(_pipe(a[0], b[1]), _pipe(b[0], a[1]))


@dataclass
class ThreadedServer:
    """Runs `handle` for each connection on 127.0.0.1:<port> in a thread."""

    ssl_context: ssl.SSLContext | None = None
    port: int = 0
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    def start(self) -> "ThreadedServer":
        ready = threading.Event()

        async def serve() -> None:
            server = await asyncio.start_server(self.handle, "127.0.0.1", 0, ssl=self.ssl_context)
            self.port = server.sockets[0].getsockname()[1]
            ready.set()

        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(serve(), self.loop)
        assert ready.wait(5), "proxy did not start"
        return self

    def stop(self) -> None:
        """Cancel every connection's task, then stop the loop: a task left
        pending would be collected later, in another test, with a warning."""

        async def cancel_connections() -> None:
            others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cancel_connections(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)


@dataclass
class Socks5Proxy(ThreadedServer):
    """Accepts no-auth, or only user/password when `credentials` is set."""

    credentials: tuple[bytes, bytes] | None = None
    greetings: list[bytes] = field(default_factory=list)
    requests: list[bytes] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._serve(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readexactly(2)
        greeting = head + await reader.readexactly(head[1])
        self.greetings.append(greeting)
        method = 0x02 if self.credentials else 0x00
        if method not in greeting[2:]:
            writer.write(b"\x05\xff")
            writer.close()
            return
        writer.write(bytes([5, method]))
        if self.credentials:
            _, ulen = await reader.readexactly(2)
            user = await reader.readexactly(ulen)
            password = await reader.readexactly((await reader.readexactly(1))[0])
            ok = (user, password) == self.credentials
            writer.write(b"\x01\x00" if ok else b"\x01\x01")
            if not ok:
                writer.close()
                return
        request = await reader.readexactly(4)
        atyp = request[3]
        if atyp == 3:
            size = await reader.readexactly(1)
            address = size + await reader.readexactly(size[0])
            host = address[1:].decode()
        else:
            address = await reader.readexactly(4 if atyp == 1 else 16)
            host = ".".join(map(str, address)) if atyp == 1 else "::1"
        port_bytes = await reader.readexactly(2)
        self.requests.append(request + address + port_bytes)
        upstream = await asyncio.open_connection(host, struct.unpack(">H", port_bytes)[0])
        writer.write(b"\x05\x00\x00\x01" + bytes(6))
        await _splice((reader, writer), upstream)


@dataclass
class TlsTerminator(ThreadedServer):
    """TLS on the outside, plain TCP to `backend_port` on the inside."""

    backend_port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream = await asyncio.open_connection("127.0.0.1", self.backend_port)
        except OSError:
            writer.close()
            return
        await _splice((reader, writer), upstream)
