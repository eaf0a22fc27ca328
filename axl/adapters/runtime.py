"""Process plumbing shared by the bundled services' command lines."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def add_log_level_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS, help="log verbosity (default INFO)"
    )


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
