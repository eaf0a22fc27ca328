"""The front door's WebSocket (axl.bridge.wsnative) over a real transport,
one end of a socket pair, with the test as the client on the other end:
frames gathered per turn, pings answered, the close handshake both ways,
and every wait ended by the connection's end or the node's close."""

from __future__ import annotations

import asyncio
import socket

from axl.bridge.wsframes import BINARY, CLOSE, TEXT
from axl.bridge.wsnative import NativeSocket
from wsclient import client_frame


class _Feeding(asyncio.Protocol):
    """The front door's part: bytes to the socket, the end to it too."""

    def __init__(self) -> None:
        self.socket: NativeSocket | None = None

    def data_received(self, data: bytes) -> None:
        assert self.socket is not None
        self.socket.feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.socket is not None:
            self.socket.lost()


async def _socket_pair() -> tuple[NativeSocket, socket.socket]:
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    transport, protocol = await asyncio.get_running_loop().create_connection(_Feeding, sock=ours)
    native = protocol.socket = NativeSocket(transport, 1 << 16)
    return native, theirs


async def _read(sock: socket.socket, count: int) -> bytes:
    data = b""
    loop = asyncio.get_running_loop()
    while len(data) < count:
        chunk = await asyncio.wait_for(loop.sock_recv(sock, count - len(data)), 5)
        assert chunk, "closed"
        data += chunk
    return data


async def test_frames_written_in_a_turn_go_out_together_and_pings_are_answered() -> None:
    native, theirs = await _socket_pair()
    native.write_text('{"ack": 1, "status": 200}')
    native.write_binary(b"delivery")
    await native.drain()
    await asyncio.sleep(0)
    assert await _read(theirs, 27 + 10) == b"\x81\x19" + b'{"ack": 1, "status": 200}' + b"\x82\x08delivery"
    theirs.sendall(client_frame(0x9, b"ping?") + client_frame(0x2, b"payload") + client_frame(0x1, b'{"done": 1}'))
    assert await native.receive() == (BINARY, b"payload")
    assert native.poll() == (TEXT, b'{"done": 1}')
    assert native.poll() is None
    await asyncio.sleep(0)
    assert await _read(theirs, 7) == b"\x8a\x05ping?"
    native.lost()
    theirs.close()


async def test_a_close_ends_a_session_waiting_to_read_and_waits_for_the_clients() -> None:
    native, theirs = await _socket_pair()
    reading = asyncio.ensure_future(native.receive())
    await asyncio.sleep(0)
    closing = asyncio.ensure_future(native.close(1001, "node stopping"))
    assert await asyncio.wait_for(reading, 5) == (CLOSE, b"")
    assert await _read(theirs, 2 + 2 + 13) == b"\x88\x0f\x03\xe9node stopping"
    assert not closing.done()  # the client has not answered yet
    theirs.sendall(client_frame(0x8, b"\x03\xe9"))
    await asyncio.wait_for(closing, 5)
    assert await asyncio.get_running_loop().sock_recv(theirs, 1) == b""  # the node ended the connection
    assert native.closed
    theirs.close()


async def test_a_cancelled_reader_leaves_the_close_its_wait() -> None:
    native, theirs = await _socket_pair()
    reading = asyncio.ensure_future(native.receive())
    await asyncio.sleep(0)
    closing = asyncio.ensure_future(native.close())
    await asyncio.sleep(0)
    reading.cancel()
    await asyncio.sleep(0.05)
    assert not closing.done()
    theirs.sendall(client_frame(0x8, b"\x03\xe8"))
    await asyncio.wait_for(closing, 5)
    theirs.close()


async def test_the_connections_end_ends_every_wait_and_fails_writes() -> None:
    native, theirs = await _socket_pair()
    reading = asyncio.ensure_future(native.receive())
    await asyncio.sleep(0)
    theirs.close()
    assert await asyncio.wait_for(reading, 5) == (CLOSE, b"")
    try:
        native.write_text("late")
    except ConnectionError:
        pass
    else:
        raise AssertionError("a write after the connection ended must fail")


async def test_a_protocol_error_closes_with_its_code() -> None:
    native, theirs = await _socket_pair()
    theirs.sendall(bytes([0x82, 0x03]) + b"abc")  # not masked
    assert await native.receive() == (CLOSE, b"")
    frame = await _read(theirs, 2)
    reason = await _read(theirs, frame[1])
    assert frame[0] == 0x88 and int.from_bytes(reason[:2], "big") == 1002
    assert await asyncio.get_running_loop().sock_recv(theirs, 1) == b""
    theirs.close()
