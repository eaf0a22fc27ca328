"""The official A2A client (a2a-sdk) as the tests use it: one text message to
the agent behind a bridge URL, answered by one task."""

from __future__ import annotations

import httpx
from a2a.client import ClientConfig, create_client
from a2a.helpers import new_text_message
from a2a.types import Role, SendMessageRequest, Task


async def run_task(agent_url: str, text: str, timeout: float = 20) -> Task:
    """Resolve the card at `agent_url`, send `text`, and return the last event's task."""
    async with httpx.AsyncClient(timeout=timeout) as http:
        client = await create_client(agent_url, ClientConfig(httpx_client=http))
        message = new_text_message(text, role=Role.ROLE_USER)
        events = [event async for event in client.send_message(SendMessageRequest(message=message))]
    return events[-1].task
