"""The admin socket (AdminListen): yggdrasil's admin protocol on a UNIX
socket (mode 0660, as yggdrasil makes it) or a TCP address, so that the
real `yggdrasilctl` drives this node as it drives a yggdrasil router.

Like yggdrasil's, it has no authentication: whoever can open the socket
can add and remove peers. A UNIX socket is guarded by its file mode; a
TCP one should stay on loopback (the node warns otherwise).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from axl.admin.commands import AdminNode, CommandError, run_command
from axl.admin.protocol import AdminRequest, BadRequest, RequestReader, render
from axl.budgets import ADMIN_REQUEST_TIMEOUT
from axl.config import AdminAddress
from axl.localsocket import bind_unix_socket, is_loopback, remove_socket
from axl.tasks import start_task

log = logging.getLogger("axl.admin")

SOCKET_MODE = 0o660
# A connection that sends nothing for this long is closed.
IDLE_TIMEOUT = 300.0
MAX_CONNECTIONS = 64
READ_SIZE = 16 << 10
RATE_INTERVAL = 1.0


@dataclass
class RateMeter:
    """Bytes each link carried in the last second, sampled once a second as
    yggdrasil samples its links (rate_recvd, rate_sent)."""

    node: AdminNode
    _last: dict[int, tuple[int, int]] = field(default_factory=dict)
    _rates: dict[int, tuple[int, int]] = field(default_factory=dict)

    def sample(self) -> None:
        now: dict[int, tuple[int, int]] = {}
        rates: dict[int, tuple[int, int]] = {}
        for report in self.node.peer_reports():
            if report.link_id is None:
                continue
            now[report.link_id] = (report.rx_bytes, report.tx_bytes)
            before = self._last.get(report.link_id)
            if before is not None:
                rates[report.link_id] = (report.rx_bytes - before[0], report.tx_bytes - before[1])
        self._last, self._rates = now, rates

    def rates(self, link_id: int) -> tuple[int, int]:
        return self._rates.get(link_id, (0, 0))


class AdminServer:
    def __init__(self, node: AdminNode, address: AdminAddress) -> None:
        self.node = node
        self.address = address
        self.rates = RateMeter(node)
        self._server: asyncio.AbstractServer | None = None
        self._sampler: asyncio.Task[None] | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Listen; OSError (naming the address) when it cannot."""
        address = self.address
        try:
            if address.unix_path:
                sock = bind_unix_socket(address.unix_path, SOCKET_MODE)
                self._server = await asyncio.start_unix_server(self._serve, sock=sock)
            else:
                self._server = await asyncio.start_server(self._serve, address.host, address.port)
        except OSError as exc:
            raise OSError(f"admin socket {address}: {exc.strerror or exc}") from None
        if not address.unix_path and not is_loopback(address.host):
            log.warning("admin socket on %s, which is not loopback: anyone who reaches it can "
                        "add and remove peers (it has no authentication, as in yggdrasil)", address)
        self._sampler = start_task(self._sample_rates(), log, "admin rate sampling")
        log.info("admin socket listening on %s", address)

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        if self._sampler is not None:
            self._sampler.cancel()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(self._connections, timeout=1.0)
        if self.address.unix_path:
            remove_socket(self.address.unix_path)
        self._server = None

    async def _sample_rates(self) -> None:
        while True:
            self.rates.sample()
            await asyncio.sleep(RATE_INTERVAL)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._connections) >= MAX_CONNECTIONS:
            log.warning("admin socket: %d connections open; refusing another", MAX_CONNECTIONS)
            writer.close()
            return
        self._connections.add(task)
        try:
            await self._converse(reader, writer)
        except (ConnectionError, asyncio.TimeoutError):
            pass
        finally:
            self._connections.discard(task)
            writer.close()

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer requests in order until one does not ask to keep the connection.
        A request begun must be whole within ADMIN_REQUEST_TIMEOUT."""
        requests = RequestReader()
        loop = asyncio.get_running_loop()
        begun: float | None = None
        while True:
            wait = IDLE_TIMEOUT if begun is None else begun + ADMIN_REQUEST_TIMEOUT - loop.time()
            try:
                data = await asyncio.wait_for(reader.read(READ_SIZE), wait)
            except asyncio.TimeoutError:
                if begun is not None:
                    log.info("admin socket: closed a connection whose request was not whole within %gs "
                             "(%d bytes)", ADMIN_REQUEST_TIMEOUT, requests.pending)
                return
            if not data:
                return
            answered = requests.feed(data)
            for request in answered:
                writer.write(await self._answer(request))
                await writer.drain()
                if isinstance(request, BadRequest) or not request.keepalive:
                    return
            if not requests.pending:
                begun = None
            elif begun is None or answered:
                begun = loop.time()

    async def _answer(self, request: AdminRequest | BadRequest) -> bytes:
        if isinstance(request, BadRequest):
            return render(request.echo, error=request.error)
        try:
            response = await run_command(self.node, self.rates, request.name, request.arguments)
        except CommandError as exc:
            log.debug("admin %s: %s", request.name, exc)
            return render(request.echo, error=str(exc))
        except Exception:
            log.exception("admin command %s failed", request.name)
            return render(request.echo, error=f"{request.name} failed inside the node; see its log")
        return render(request.echo, response)

