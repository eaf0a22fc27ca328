"""The A2A server: every MCP service registered with the router, offered as an A2A skill.

A remote agent sends ``SendMessage`` whose text is
``{"service": name, "request": <json-rpc>}``; the server routes the request
through the local MCP router and returns the MCP response as the task's
artifact. Built on the official a2a-sdk server classes so that both the 1.0
protocol and 0.3 clients (``enable_v0_3_compat``) are served.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import uvicorn
from a2a.helpers import new_task_from_user_message, new_text_artifact, new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from starlette.applications import Starlette

from axl.adapters.runtime import configure_logging, run_until_signalled, service_parser
from axl.gojson import read_json

log = logging.getLogger(__name__)

DEFAULT_PORT = 9004
DEFAULT_ROUTER = "http://127.0.0.1:9003"
DEFAULT_TIMEOUT = 30.0
# Card refreshes are local and frequent; a stuck router must not stall discovery.
SERVICES_TIMEOUT = 5.0


class RouterError(Exception):
    """The MCP router could not deliver the request; the text says why."""


def _skill_for(service: str) -> AgentSkill:
    example = json.dumps({"service": service, "request": {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}})
    return AgentSkill(
        id=service,
        name=f"{service} (MCP)",
        description=f"MCP service '{service}'. Send {{\"service\", \"request\"}} with a JSON-RPC request as text.",
        tags=[service, "mcp"],
        examples=[example],
    )


_PROXY_SKILL = AgentSkill(
    id="mcp_proxy",
    name="MCP proxy",
    description="No MCP service is registered yet; services registered with the router appear here.",
    tags=["mcp", "proxy"],
)


def build_card(url: str, services: list[str], name: str) -> AgentCard:
    """The agent card: one skill per MCP service, streaming off (the overlay carries one reply)."""
    return AgentCard(
        name=name,
        description="Reaches the MCP services registered with this node's MCP router.",
        supported_interfaces=[AgentInterface(protocol_binding="JSONRPC", url=url, protocol_version="1.0")],
        version="1.0.0",
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["application/json"],
        capabilities=AgentCapabilities(streaming=False, push_notifications=False),
        skills=[_skill_for(service) for service in sorted(services)] or [_PROXY_SKILL],
    )


def parse_mcp_call(text: str) -> tuple[str, Any]:
    """``(service, request)`` from a message text; ValueError with the reason otherwise."""
    try:
        data = read_json(text)
    except ValueError:
        raise ValueError('message text must be JSON: {"service": ..., "request": ...}') from None
    if not isinstance(data, dict):
        raise ValueError('message text must be a JSON object {"service": ..., "request": ...}')
    service = data.get("service")
    if not isinstance(service, str) or not service:
        raise ValueError("message names no service")
    if "request" not in data:
        raise ValueError("message carries no request")
    return service, data["request"]


class RouterClient:
    """The two router calls the A2A server needs: list services, route one request."""

    def __init__(self, router_url: str, timeout: float) -> None:
        self.router_url = router_url.rstrip("/")
        self._http = httpx.AsyncClient(timeout=timeout)

    async def services(self) -> list[str]:
        response = await self._http.get(f"{self.router_url}/services", timeout=SERVICES_TIMEOUT)
        response.raise_for_status()
        listing = response.json()
        return [name for name in listing if isinstance(name, str)] if isinstance(listing, dict) else []

    async def route(self, service: str, request: Any, from_peer_id: str) -> Any:
        try:
            response = await self._http.post(
                f"{self.router_url}/route",
                json={"service": service, "request": request, "from_peer_id": from_peer_id},
            )
        except httpx.HTTPError as exc:
            raise RouterError(f"cannot reach the MCP router at {self.router_url}: {exc!r}") from None
        try:
            answer = response.json()
        except ValueError:
            raise RouterError(f"router returned HTTP {response.status_code} without JSON") from None
        if not isinstance(answer, dict):
            raise RouterError("router returned a non-object answer")
        if answer.get("error"):
            raise RouterError(str(answer["error"]))
        return answer.get("response")

    async def close(self) -> None:
        await self._http.aclose()


class McpRouterExecutor(AgentExecutor):
    """Runs each A2A task as one MCP request through the router."""

    def __init__(self, router: RouterClient) -> None:
        self.router = router

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            if context.message is None:
                raise ValueError("SendMessage without a message")
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        try:
            service, request = parse_mcp_call(context.get_user_input())
            response = await self.router.route(service, request, self._caller(context))
        except (ValueError, RouterError) as exc:
            log.info("task %s failed: %s", task.id, exc)
            await self._finish(event_queue, task, TaskState.TASK_STATE_FAILED, f"Error: {exc}")
            return
        await event_queue.enqueue_event(
            TaskArtifactUpdateEvent(
                task_id=task.id,
                context_id=task.context_id,
                artifact=new_text_artifact(
                    name="mcp_response",
                    text=json.dumps(response, indent=2),
                    description=f"Response from MCP service {service}",
                ),
                append=False,
                last_chunk=True,
            )
        )
        await self._finish(event_queue, task, TaskState.TASK_STATE_COMPLETED, None)

    @staticmethod
    def _caller(context: RequestContext) -> str:
        """The remote peer id the node put in X-From-Peer-Id, when the call came through a node."""
        headers = context.call_context.state.get("headers", {}) if context.call_context else {}
        return headers.get("x-from-peer-id") or "a2a-client"

    @staticmethod
    async def _finish(event_queue: EventQueue, task: Task, state: TaskState, text: str | None) -> None:
        status = TaskStatus(state=state)
        if text is not None:
            status = TaskStatus(
                state=state, message=new_text_message(text, context_id=task.context_id, task_id=task.id)
            )
        await event_queue.enqueue_event(
            TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=status)
        )

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise ValueError("an MCP request cannot be cancelled once sent")


class CardSource:
    """Keeps the card's skills in step with the router's registered services."""

    def __init__(self, router: RouterClient, url: str, name: str) -> None:
        self.router = router
        self.url = url
        self.name = name
        self._services: list[str] = []
        self.card = build_card(url, [], name)

    async def refresh(self, _served: AgentCard | None = None) -> AgentCard:
        try:
            services = sorted(await self.router.services())
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("could not list the router's services, keeping the last card: %r", exc)
            return self.card
        if services != self._services:
            self._services = services
            self.card = build_card(self.url, services, self.name)
            log.info("agent card now lists %d skill(s): %s", len(services), ", ".join(services) or "none")
        return self.card


def create_app(router: RouterClient, public_url: str, name: str) -> tuple[Starlette, CardSource]:
    """The Starlette app: agent card at the well-known path, JSON-RPC at ``/``."""
    cards = CardSource(router, public_url, name)
    handler = DefaultRequestHandler(
        agent_executor=McpRouterExecutor(router),
        task_store=InMemoryTaskStore(),
        agent_card=cards.card,
    )
    routes = [
        *create_agent_card_routes(cards.card, card_modifier=cards.refresh),
        *create_jsonrpc_routes(handler, rpc_url="/", enable_v0_3_compat=True),
    ]
    return Starlette(routes=routes), cards


class _QuietServer(uvicorn.Server):
    """uvicorn without its own signal handling: the caller owns SIGINT/SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve(host: str, port: int, router_url: str, timeout: float, name: str, stop: asyncio.Event) -> None:
    """Serve until ``stop`` is set; the socket is bound first so a busy port is a plain OSError."""
    listener = socket.create_server((host, port))
    router = RouterClient(router_url, timeout)
    app, cards = create_app(router, f"http://{host}:{port}/", name)
    server = _QuietServer(uvicorn.Config(app, log_level="warning", lifespan="off"))
    try:
        await cards.refresh()
        serving = asyncio.create_task(server.serve(sockets=[listener]))
        log.info("A2A server on http://%s:%d (router %s)", host, port, router_url)
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        server.should_exit = True
        await serving
    finally:
        await router.close()
        listener.close()


def main(argv: list[str] | None = None) -> int:
    parser = service_parser(
        "axl-a2a-server",
        "Serve the MCP services registered with an AXL MCP router as A2A skills. "
        'A message whose text is {"service": ..., "request": <JSON-RPC>} is routed to that service.',
        DEFAULT_PORT,
        "seconds to wait for the router's answer",
    )
    parser.add_argument("--router", default=DEFAULT_ROUTER, help=f"MCP router base URL (default {DEFAULT_ROUTER})")
    parser.add_argument("--name", default="AXL MCP agent", help="agent name shown in the card")
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return run_until_signalled(
        lambda stop: serve(args.host, args.port, args.router, args.timeout, args.name, stop)
    )


if __name__ == "__main__":
    sys.exit(main())
