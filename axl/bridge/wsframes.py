"""WebSocket frames (RFC 6455) for the front door's own `GET /ws`, sans-IO.

The front door serves a WebSocket upgrade to /ws itself, as it serves
/send: aiohttp's WebSocket machinery (a reader queue, a writer coroutine
and a task step per frame) cost about as much as the node's own work on
each message. This module holds what a server needs of the protocol and
nothing more: the handshake's accept token, a reader that cuts a client's
bytes into messages, and the server's (unmasked) frames.

The reader is strict where RFC 6455 says a server must fail the
connection: a client's frames are masked; no extension was agreed, so the
reserved bits are zero; control frames are whole and at most 125 bytes; a
fragmented message is continued and ended before another begins. A message
larger than the limit is refused as soon as its frame's head says so, before
its payload is held. Each failure is a FrameError with the close code and
a one-line reason.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Final

from axl.supported import unsupported
from axl.readbuffer import ReadBuffer
from axl.wire import BYTE

log = logging.getLogger("axl.bridge")

CONTINUATION: Final = 0x0
TEXT: Final = 0x1
BINARY: Final = 0x2
CLOSE: Final = 0x8
PING: Final = 0x9
PONG: Final = 0xA
_OPCODES: Final = frozenset((CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG))

NORMAL_CLOSURE: Final = 1000
GOING_AWAY: Final = 1001
PROTOCOL_ERROR: Final = 1002
NO_STATUS: Final = 1005
INVALID_DATA: Final = 1007
POLICY_VIOLATION: Final = 1008
MESSAGE_TOO_BIG: Final = 1009
# The close codes a peer may send (RFC 6455 7.4.1; 1004-1006 and 1015 are never sent).
_SENDABLE_CODES: Final = frozenset((1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014))

CONTROL_MAX: Final = 125
MASK_SIZE: Final = 4
_LONGEST_HEAD: Final = 14  # two bytes, an eight-byte length, the mask
_HANDSHAKE_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_FIN: Final = 0x80
_RESERVED: Final = 0x70
_MASKED: Final = 0x80
# _XOR_TABLES[m] maps each byte to itself XOR m, made when first needed (64
# KiB a node that never serves /ws does not hold).
_XOR_TABLES: Final[list[bytes]] = []
_MASK_MODULE = "aiohttp._websocket.mask"
PRIVATE_MASKER = f"{_MASK_MODULE}._websocket_mask_cython"
# The function unmasking payloads (_choose_masker), once chosen.
_MASKERS: Final[list[Callable[[bytes, bytearray], None]]] = []


class FrameError(Exception):
    """The client broke the protocol: close with `code`, saying `reason`."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def valid_key(key: str) -> bool:
    """Whether `key` is a Sec-WebSocket-Key: 16 bytes in base64."""
    try:
        return len(base64.b64decode(key.encode("ascii"), validate=True)) == 16
    except (binascii.Error, UnicodeEncodeError):
        return False


def accept_token(key: str) -> str:
    """The Sec-WebSocket-Accept answering a client's Sec-WebSocket-Key."""
    return base64.b64encode(hashlib.sha1(key.encode("ascii") + _HANDSHAKE_GUID).digest()).decode("ascii")


def frame_head(opcode: int, size: int) -> bytes:
    """A server frame's head: FIN, `opcode`, and the length of an unmasked payload."""
    if size < 126:
        return BYTE[_FIN | opcode] + BYTE[size]
    if size < 1 << 16:
        return BYTE[_FIN | opcode] + BYTE[126] + BYTE[size >> 8] + BYTE[size & 0xFF]
    return BYTE[_FIN | opcode] + BYTE[127] + size.to_bytes(8, "big")


def frame(opcode: int, payload: bytes) -> bytes:
    return frame_head(opcode, len(payload)) + payload


def close_frame(code: int, reason: str) -> bytes:
    """A close frame; the reason is cut to fit a control frame."""
    encoded = reason.encode("utf-8")[:CONTROL_MAX - 2].decode("utf-8", "ignore").encode("utf-8")
    return frame(CLOSE, code.to_bytes(2, "big") + encoded)


def read_close(payload: bytes) -> tuple[int, str]:
    """A client's close frame: its code (NO_STATUS when it gave none) and reason."""
    if not payload:
        return NO_STATUS, ""
    if len(payload) == 1:
        raise FrameError(PROTOCOL_ERROR, "a close frame of one byte")
    code = int.from_bytes(payload[:2], "big")
    if code not in _SENDABLE_CODES and not 3000 <= code <= 4999:
        raise FrameError(PROTOCOL_ERROR, f"close code {code} is not one an endpoint may send")
    try:
        return code, payload[2:].decode("utf-8")
    except UnicodeDecodeError:
        raise FrameError(INVALID_DATA, "a close reason that is not UTF-8") from None


def unmask(mask: bytes, payload: bytes | bytearray) -> bytes:
    """`payload` XOR the four-byte `mask` repeated."""
    return _unmasked(mask, bytearray(payload))


def _unmasked(mask: bytes, payload: bytes | bytearray) -> bytes:
    """`payload` XOR `mask`, masked in place when it is a bytearray (the
    caller's own copy: one copy of a frame fewer)."""
    if not payload:
        return b""
    data = payload if isinstance(payload, bytearray) else bytearray(payload)
    (_MASKERS or _choose_masker())[0](mask, data)
    return bytes(data)


def mask_in_place(mask: bytes, data: bytearray) -> None:
    """XOR `data` with `mask` repeated, a table lookup per byte: each of the
    four interleaved strides is translated with one table."""
    tables = _XOR_TABLES or _make_xor_tables()
    for offset in range(MASK_SIZE):
        data[offset::MASK_SIZE] = data[offset::MASK_SIZE].translate(tables[mask[offset]])


def _make_xor_tables() -> list[bytes]:
    _XOR_TABLES.extend([bytes([value ^ mask for value in range(256)]) for mask in range(256)])
    return _XOR_TABLES


def _choose_masker() -> list[Callable[[bytes, bytearray], None]]:
    """aiohttp's compiled masking function (a private name: docs/security.md,
    "Dependencies' private surfaces"; a word at a time, 0.5 us a KiB where
    the tables take 3.5 us), else mask_in_place, said once in the log."""
    compiled_masker = getattr(_load_mask_module(), "_websocket_mask_cython", None)
    if compiled_masker is None:
        log.warning("%s; unmasking /ws frames with tables instead, several times slower",
                    unsupported("aiohttp", PRIVATE_MASKER))
        _MASKERS.append(mask_in_place)
    else:
        _MASKERS.append(compiled_masker)
    return _MASKERS


def _load_mask_module() -> ModuleType | None:
    """aiohttp's masking module: the one imported, else its extension file
    loaded alone. Importing it by name imports aiohttp's package first, about
    a hundred modules: a quarter of a second with the loop stopped, at a
    session's first frame. The file alone loads in 2 ms. None when aiohttp
    has no compiled module there (a pure-Python install)."""
    module = sys.modules.get(_MASK_MODULE)
    if module is not None:
        return module
    package = importlib.util.find_spec("aiohttp")
    folders = package.submodule_search_locations if package is not None else None
    for folder in folders or ():
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(folder, "_websocket", "mask" + suffix)
            if os.path.isfile(path):
                return _load_extension(path)
    return None


def _load_extension(path: str) -> ModuleType | None:
    spec = importlib.util.spec_from_file_location(_MASK_MODULE, path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError:
        return None
    return module


class FrameReader:
    """A client's bytes in, its messages out: (opcode, payload) for each
    whole data message (fragments joined) and each control frame."""

    def __init__(self, max_message: int) -> None:
        self.max_message = max_message
        self._buffer = ReadBuffer()
        # the fragments of a message not yet ended, and its opcode (0: none)
        self._parts: list[bytes] = []
        self._part_bytes = 0
        self._fragmented = CONTINUATION

    def __len__(self) -> int:
        """Bytes held, whole frames and parts of messages together."""
        return len(self._buffer) + self._part_bytes

    def feed(self, data: bytes) -> None:
        self._buffer.append(data)

    def next_message(self) -> tuple[int, bytes] | None:
        """The next message or control frame, or None until more bytes come."""
        while True:
            frame_read = self._next_frame()
            if frame_read is None:
                return None
            final, opcode, payload = frame_read
            if opcode >= CLOSE:
                return opcode, payload
            if opcode == CONTINUATION:
                if self._fragmented == CONTINUATION:
                    raise FrameError(PROTOCOL_ERROR, "a continuation frame with no message to continue")
                self._parts.append(payload)
                self._part_bytes += len(payload)
                if not final:
                    continue
                whole = (self._fragmented, b"".join(self._parts))
                self._parts = []
                self._part_bytes = 0
                self._fragmented = CONTINUATION
                return whole
            if self._fragmented != CONTINUATION:
                raise FrameError(PROTOCOL_ERROR, "a new message began before the last one ended")
            if final:
                return opcode, payload
            self._fragmented = opcode
            self._parts = [payload]
            self._part_bytes = len(payload)

    def _next_frame(self) -> tuple[bool, int, bytes] | None:
        """The next whole frame (final, opcode, unmasked payload), or None."""
        buffer = self._buffer
        available = len(buffer)
        if available < 2:
            return None
        # One slice of the head, read as bytes: each index into the buffer
        # itself (bytes or bytearray) would be a generic call.
        data, front = buffer.data, buffer.front
        head = bytes(data[front:front + _LONGEST_HEAD])
        first, second = head[0], head[1]
        opcode = first & 0x0F
        final = bool(first & _FIN)
        if first & _RESERVED:
            raise FrameError(PROTOCOL_ERROR, "reserved bits set, and no extension was agreed")
        if opcode not in _OPCODES:
            raise FrameError(PROTOCOL_ERROR, f"unknown opcode {opcode}")
        if not second & _MASKED:
            raise FrameError(PROTOCOL_ERROR, "a client frame that is not masked")
        size = second & 0x7F
        head_size = 2
        if size == 126:
            head_size = 4
            if available < head_size:
                return None
            size = head[2] << 8 | head[3]
        elif size == 127:
            head_size = 10
            if available < head_size:
                return None
            size = int.from_bytes(head[2:10], "big")
        if opcode >= CLOSE:
            if not final or size > CONTROL_MAX:
                raise FrameError(PROTOCOL_ERROR, "a control frame fragmented or over 125 bytes")
        elif size + self._part_bytes > self.max_message:
            raise FrameError(MESSAGE_TOO_BIG, f"a message over {self.max_message} bytes")
        start = front + head_size + MASK_SIZE
        end = start + size
        if available < end - front:
            return None
        payload = _unmasked(head[head_size:head_size + MASK_SIZE], data[start:end])
        buffer.skip(end - front)
        return final, opcode, payload
