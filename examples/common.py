"""A small asyncio client for the AXL node's HTTP bridge, shared by the examples.

Everything an example does with the network goes through four calls:
``topology()``, ``send()``, ``recv()`` and ``peer_id()``. Copy this file
along with an example; it depends only on aiohttp.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

DEFAULT_TESTNET_FILE = ".axl-testnet/testnet.json"
DEFAULT_BRIDGE = "http://127.0.0.1:9002"
REQUEST_MARGIN_SECONDS = 10.0


class BridgeError(RuntimeError):
    """The bridge answered with an error status; ``status`` keeps the HTTP code."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status}: {text.strip()}")
        self.status = status


@dataclass
class Received:
    """One message taken from the node's receive queue."""

    sender: str
    body: bytes


class Bridge:
    """One node's HTTP bridge. Use as ``async with Bridge(url) as bridge``."""

    def __init__(self, url: str, send_timeout: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self.send_timeout = send_timeout
        self._session: aiohttp.ClientSession | None = None
        self._peer_id: str | None = None

    async def __aenter__(self) -> "Bridge":
        self._session = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("use the Bridge inside 'async with'")
        return self._session

    async def topology(self) -> dict[str, Any]:
        timeout = aiohttp.ClientTimeout(total=REQUEST_MARGIN_SECONDS)
        async with self.session.get(f"{self.url}/topology", timeout=timeout) as response:
            if response.status != 200:
                raise BridgeError(response.status, await response.text())
            return await response.json()

    async def peer_id(self) -> str:
        if self._peer_id is None:
            self._peer_id = (await self.topology())["our_public_key"]
        return self._peer_id

    async def send(self, peer: str, body: bytes) -> None:
        """Deliver ``body`` into ``peer``'s receive queue; raises BridgeError if refused."""
        timeout = aiohttp.ClientTimeout(total=self.send_timeout)
        headers = {"X-Destination-Peer-Id": peer}
        async with self.session.post(f"{self.url}/send", data=body, headers=headers, timeout=timeout) as response:
            if response.status != 200:
                raise BridgeError(response.status, await response.text())

    async def recv(self, wait: float = 10.0) -> Received | None:
        """One message, or None when nothing arrived within ``wait`` seconds (long poll)."""
        timeout = aiohttp.ClientTimeout(total=wait + REQUEST_MARGIN_SECONDS)
        params = {"wait": f"{wait:g}"}
        async with self.session.get(f"{self.url}/recv", params=params, timeout=timeout) as response:
            if response.status == 204:
                return None
            if response.status != 200:
                raise BridgeError(response.status, await response.text())
            return Received(response.headers["X-From-Peer-Id"], await response.read())


def load_testnet(path: str | Path = DEFAULT_TESTNET_FILE) -> list[dict[str, Any]]:
    """The node list written by ``axl-testnet`` (index, bridge, peer_id, ...)."""
    return json.loads(Path(path).read_text())["nodes"]


def add_bridge_arguments(parser: argparse.ArgumentParser) -> None:
    """--bridge URL, or --testnet FILE with --node I (default node 0)."""
    parser.add_argument("--bridge", help=f"node bridge URL (e.g. {DEFAULT_BRIDGE})")
    parser.add_argument("--testnet", default=DEFAULT_TESTNET_FILE,
                        help=f"node list written by axl-testnet [{DEFAULT_TESTNET_FILE}]")
    parser.add_argument("--node", type=int, default=0, help="which testnet node to use [0]")


def chosen_bridge(args: argparse.Namespace) -> str:
    if args.bridge:
        return args.bridge
    return load_testnet(args.testnet)[args.node]["bridge"]


def run_main(main: Coroutine[Any, Any, Any]) -> Any:
    """asyncio.run for an example's main: network failures end in one line, not a traceback."""
    try:
        return asyncio.run(main)
    except KeyboardInterrupt:
        sys.exit(130)
    except (aiohttp.ClientError, BridgeError, TimeoutError, OSError, ValueError) as error:
        print(f"{Path(sys.argv[0]).name}: {error}", file=sys.stderr)
        sys.exit(1)
