"""SOCKS5 client for `socks://` and `sockstls://` links (RFC 1928, RFC 1929).

The messages are built and parsed by plain functions; `open_tunnel` runs
them over a fresh non-blocking socket and returns that socket, already
connected to the target, for the link to run on (TLS or not).
Like Go's dialer, it offers no-auth and, when the URI names a user, also
username/password; the target goes to the proxy as written, names
unresolved (address type 3), IP literals as types 1 and 4.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import struct

VERSION = 5
AUTH_VERSION = 1
METHOD_NONE = 0x00
METHOD_PASSWORD = 0x02
METHOD_REFUSED = 0xFF
CMD_CONNECT = 1
ATYP_IPV4, ATYP_NAME, ATYP_IPV6 = 1, 3, 4
_ADDRESS_LENGTHS = {ATYP_IPV4: 4, ATYP_IPV6: 16}
REPLY_MESSAGES = {
    1: "general failure", 2: "connection not allowed by ruleset", 3: "network unreachable",
    4: "host unreachable", 5: "connection refused", 6: "TTL expired",
    7: "command not supported", 8: "address type not supported",
}


class SocksError(ConnectionError):
    """The proxy refused or spoke something other than SOCKS5."""


def greeting(with_password: bool) -> bytes:
    methods = [METHOD_NONE, METHOD_PASSWORD] if with_password else [METHOD_NONE]
    return bytes([VERSION, len(methods), *methods])


def password_request(user: str, password: str) -> bytes:
    user_bytes, password_bytes = user.encode(), password.encode()
    if len(user_bytes) > 255 or len(password_bytes) > 255:
        raise SocksError("SOCKS user name or password longer than 255 bytes")
    return (bytes([AUTH_VERSION, len(user_bytes)]) + user_bytes
            + bytes([len(password_bytes)]) + password_bytes)


def connect_request(host: str, port: int) -> bytes:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        name = host.encode("idna")
        if len(name) > 255:
            raise SocksError(f"SOCKS target name too long: {host}") from None
        target = bytes([ATYP_NAME, len(name)]) + name
    else:
        atyp = ATYP_IPV4 if address.version == 4 else ATYP_IPV6
        target = bytes([atyp]) + address.packed
    return bytes([VERSION, CMD_CONNECT, 0]) + target + struct.pack(">H", port)


def check_method(reply: bytes, offered_password: bool) -> int:
    if reply[0] != VERSION:
        raise SocksError(f"proxy is not SOCKS5 (version byte {reply[0]})")
    method = reply[1]
    allowed = (METHOD_NONE, METHOD_PASSWORD) if offered_password else (METHOD_NONE,)
    if method not in allowed:
        raise SocksError("proxy accepts none of our authentication methods")
    return method


def reply_address_length(head: bytes, first: int) -> int:
    """Bytes after the 4-byte reply head: bound address and port.
    `first` is the byte after the head (a name's length for type 3)."""
    if head[0] != VERSION:
        raise SocksError(f"proxy is not SOCKS5 (version byte {head[0]})")
    if head[1] != 0:
        raise SocksError("proxy: " + REPLY_MESSAGES.get(head[1], f"error {head[1]}"))
    atyp = head[3]
    if atyp == ATYP_NAME:
        return 1 + first + 2
    if atyp in _ADDRESS_LENGTHS:
        return _ADDRESS_LENGTHS[atyp] + 2
    raise SocksError(f"proxy replied with unknown address type {atyp}")


async def _recv_exactly(loop: asyncio.AbstractEventLoop, sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = await loop.sock_recv(sock, size - len(data))
        if not chunk:
            raise SocksError("proxy closed the connection")
        data += chunk
    return data


async def _connect_socket(loop: asyncio.AbstractEventLoop, host: str, port: int) -> socket.socket:
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    error: OSError = OSError(f"no address for {host}")
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, address)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error


async def _negotiate(loop: asyncio.AbstractEventLoop, sock: socket.socket, target: tuple[str, int],
                     user: str, password: str) -> None:
    with_password = bool(user)
    await loop.sock_sendall(sock, greeting(with_password))
    method = check_method(await _recv_exactly(loop, sock, 2), with_password)
    if method == METHOD_PASSWORD:
        await loop.sock_sendall(sock, password_request(user, password))
        status = await _recv_exactly(loop, sock, 2)
        if status[1] != 0:
            raise SocksError("proxy refused the user name and password")
    await loop.sock_sendall(sock, connect_request(*target))
    head = await _recv_exactly(loop, sock, 5)
    await _recv_exactly(loop, sock, reply_address_length(head[:4], head[4]) - 1)


async def open_tunnel(proxy: tuple[str, int], target: tuple[str, int],
                      user: str = "", password: str = "") -> socket.socket:
    """A socket connected through the proxy to `target`; the caller owns it."""
    loop = asyncio.get_running_loop()
    sock = await _connect_socket(loop, *proxy)
    try:
        await _negotiate(loop, sock, target, user, password)
    except BaseException:
        sock.close()
        raise
    return sock
