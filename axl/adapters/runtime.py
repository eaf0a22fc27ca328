"""Process plumbing shared by the bundled services' command lines."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def port_number(text: str) -> int:
    """argparse type: a port, 0..65535 (0: the system picks one)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port number (0..65535)")
    return port


def positive_seconds(text: str) -> float:
    """argparse type: a duration in seconds, more than 0."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not seconds > 0:  # NaN too
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return seconds


def service_parser(prog: str, description: str, default_port: int, timeout_help: str) -> argparse.ArgumentParser:
    """The options every bundled service takes: where to listen, how long to wait, how much to log."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=port_number, default=default_port,
                        help=f"port to listen on (default {default_port})")
    parser.add_argument("--timeout", type=positive_seconds, default=30.0, help=f"{timeout_help} (default 30)")
    parser.add_argument(
        "--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS, help="log verbosity (default INFO)"
    )
    return parser


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def run_until_signalled(main: Callable[[asyncio.Event], Awaitable[None]]) -> int:
    """Run ``main(stop)``, setting ``stop`` on SIGINT/SIGTERM; start-up errors print one line (exit 1)."""

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await main(stop)

    try:
        asyncio.run(runner())
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
