"""A WebSocket client's frames, as the tests of the front door's own
reader (axl.bridge.wsframes) write them, and that reader fed any cutting."""

from __future__ import annotations

import os

from axl.bridge.wsframes import FrameReader

LIMIT = 4096


def client_frame(opcode: int, payload: bytes, final: bool = True, mask: bytes | None = None) -> bytes:
    """A frame as a client writes it: masked, with the shortest length form."""
    mask = os.urandom(4) if mask is None else mask
    size = len(payload)
    if size < 126:
        length = bytes([0x80 | size])
    elif size < 1 << 16:
        length = bytes([0x80 | 126]) + size.to_bytes(2, "big")
    else:
        length = bytes([0x80 | 127]) + size.to_bytes(8, "big")
    masked = bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))
    return bytes([(0x80 if final else 0) | opcode]) + length + mask + masked


def read_all(data: bytes, chunks: list[int], limit: int = LIMIT) -> list[tuple[int, bytes]]:
    """Feed `data` cut at the `chunks` sizes (the rest at once), taking messages after each piece."""
    reader = FrameReader(limit)
    messages = []
    position = 0
    for size in chunks + [len(data)]:
        reader.feed(data[position:position + size])
        position += size
        while (message := reader.next_message()) is not None:
            messages.append(message)
    return messages
