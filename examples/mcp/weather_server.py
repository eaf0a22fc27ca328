"""A weather-style MCP server that registers itself with the node's MCP router.

    python examples/mcp/weather_server.py [--port 7100] [--router http://127.0.0.1:9003] [--service weather]

It runs stateless with JSON responses: the mode that every caller can use,
including Go AXL nodes whose router cannot follow MCP sessions or event
streams. It registers on start and deregisters on exit (Ctrl-C or SIGTERM).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import common  # noqa: E402, F401  (first: a missing module ends in one line, see common.py)
import httpx  # noqa: E402
import uvicorn  # noqa: E402
from mcp.server.mcpserver import MCPServer  # noqa: E402

FORECASTS = {
    "lyon": "sunny, 24 C, light wind from the north",
    "london": "overcast, 15 C, showers in the afternoon",
    "tokyo": "humid, 29 C, thunderstorms in the evening",
}

weather = MCPServer("weather", instructions="Forecasts and alerts for a few cities.")


@weather.tool()
def get_forecast(city: str) -> str:
    """Today's forecast for a city."""
    return f"{city}: {FORECASTS.get(city.lower(), 'clear skies, 20 C (no station data, showing a default)')}"


@weather.tool()
def get_alerts(city: str) -> list[str]:
    """Active weather alerts for a city (empty when there are none)."""
    return ["thunderstorm watch until 22:00"] if city.lower() == "tokyo" else []


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: main() handles them so it can deregister."""

    def capture_signals(self):  # type: ignore[override]
        return contextlib.nullcontext()


def check_port(port: int) -> None:
    """uvicorn reports a port in use by exiting from inside its task, which
    ends the loop with a traceback: say it in one line first."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise SystemExit(f"error: cannot listen on 127.0.0.1:{port}: {exc.strerror}") from None


async def run(port: int, router: str, service: str) -> None:
    check_port(port)
    app = weather.streamable_http_app(stateless_http=True, json_response=True)
    server = _Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
    while not server.started and not serving.done():
        await asyncio.sleep(0.05)
    if serving.done():
        raise SystemExit(f"error: cannot listen on 127.0.0.1:{port}")
    endpoint = f"http://127.0.0.1:{port}/mcp"
    async with httpx.AsyncClient(timeout=5) as http:
        try:
            (await http.post(f"{router}/register", json={"service": service, "endpoint": endpoint})).raise_for_status()
        except httpx.HTTPError as exc:
            server.should_exit = True
            await serving
            raise SystemExit(f"error: cannot register with the router at {router}: {exc!r}") from None
        print(f"MCP service '{service}' at {endpoint}, registered with {router}", flush=True)
        try:
            await serving
        finally:
            with contextlib.suppress(httpx.HTTPError):
                await http.delete(f"{router}/register/{service}")
            print(f"deregistered '{service}'", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=7100, help="port for the MCP endpoint (default 7100)")
    parser.add_argument("--router", default="http://127.0.0.1:9003", help="MCP router URL (default %(default)s)")
    parser.add_argument("--service", default="weather", help="name to register under (default weather)")
    args = parser.parse_args()
    asyncio.run(run(args.port, args.router.rstrip("/"), args.service))


if __name__ == "__main__":
    sys.exit(main())
