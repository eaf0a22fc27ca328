"""Inbound dispatch: hand MCP and A2A envelopes from peers to the local services.

The node calls :meth:`InboundDispatcher.dispatch` for every message that
arrives on its application port. Envelopes for an enabled adapter are
answered here (the reply goes back on the same connection); everything else
is left to the node's ``/recv`` queue.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from axl.adapters.counts import AdapterCounts
from axl.adapters.envelopes import (
    A2aEnvelope,
    McpEnvelope,
    classify,
    dumps,
    encode_a2a_reply,
    encode_mcp_reply,
    go_struct_fields,
    parse_json,
)
from axl.adapters.jsonrpc import clean_header_value
from axl.wire import DecodeError

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger(__name__)

DEFAULT_HTTP_TIMEOUT = 30.0
A2A_VERSION_HEADER = "A2A-Version"
A2A_CURRENT_VERSION = "1.0"


@dataclass(frozen=True)
class DispatchSettings:
    """Where the local adapter services live; the names are the config file's.

    An empty ``router_addr``/``a2a_addr`` turns that adapter off. Addresses
    carry their scheme, e.g. ``http://127.0.0.1``. Each adapter has its own
    timeout (``mcp_timeout_secs``, ``a2a_timeout_secs``): an agent's task may
    take far longer than a tool call.
    """

    router_addr: str = ""
    router_port: int = 9003
    a2a_addr: str = ""
    a2a_port: int = 9004
    mcp_timeout: float = DEFAULT_HTTP_TIMEOUT
    a2a_timeout: float = DEFAULT_HTTP_TIMEOUT

    @property
    def router_url(self) -> str | None:
        return f"{self.router_addr.rstrip('/')}:{self.router_port}/route" if self.router_addr else None

    @property
    def a2a_url(self) -> str | None:
        return f"{self.a2a_addr.rstrip('/')}:{self.a2a_port}" if self.a2a_addr else None


class DispatchKind(enum.Enum):
    NOT_MINE = "not_mine"
    HANDLED = "handled"


@dataclass(frozen=True)
class DispatchResult:
    """What the node does next: queue the payload, or write ``reply`` (if any) back."""

    kind: DispatchKind
    reply: bytes | None = None

    @property
    def handled(self) -> bool:
        return self.kind is DispatchKind.HANDLED


NOT_MINE = DispatchResult(DispatchKind.NOT_MINE)


def a2a_version_for(request: object) -> str | None:
    """The A2A-Version to send when the caller gave none: 1.0, except for 0.3-style ``a/b`` methods."""
    method = request.get("method") if isinstance(request, dict) else None
    if isinstance(method, str) and "/" in method:
        return None
    return A2A_CURRENT_VERSION


def _failure(what: str, exc: BaseException, timeout: float) -> str:
    """Why a local service gave no answer: a timeout (whose text is empty)
    says so with its limit; any other error is named with its text."""
    if isinstance(exc, TimeoutError):
        return f"{what} did not answer within {timeout:g} s"
    return f"failed to contact {what}: {str(exc) or type(exc).__name__}"


class InboundDispatcher:
    """Routes inbound envelopes to the MCP router and the A2A server over HTTP."""

    def __init__(self, settings: DispatchSettings, session: aiohttp.ClientSession | None = None,
                 counts: AdapterCounts | None = None) -> None:
        self.settings = settings
        self.counts = counts or AdapterCounts()
        self._session = session
        self._owns_session = session is None
        # Read for every inbound message: the settings' URLs are formatted on each access.
        self._mcp_on = settings.router_url is not None
        self._a2a_on = settings.a2a_url is not None

    @property
    def enabled(self) -> bool:
        return bool(self.settings.router_url or self.settings.a2a_url)

    def _http(self) -> aiohttp.ClientSession:
        """The HTTP client, made on the first envelope: a node with the adapters
        configured but never called does not load it."""
        if self._session is None:
            import aiohttp
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        if self._session is not None and self._owns_session:
            await self._session.close()
        self._session = None

    def claims(self, payload: bytes) -> bool:
        """Whether ``payload`` is an envelope for an enabled adapter (what
        ``dispatch`` answers); anything else goes straight to /recv."""
        return classify(payload, mcp_enabled=self._mcp_on, a2a_enabled=self._a2a_on) is not None

    async def dispatch(self, from_key: bytes, payload: bytes) -> DispatchResult:
        """Answer an MCP/A2A envelope from ``from_key``, or say the payload is not ours."""
        router_url, a2a_url = self.settings.router_url, self.settings.a2a_url
        envelope = classify(payload, mcp_enabled=router_url is not None, a2a_enabled=a2a_url is not None)
        if isinstance(envelope, McpEnvelope) and router_url is not None:
            response, error = await self._forward_mcp(router_url, from_key.hex(), envelope)
            self.counts.mcp_in.record(error is not None)
            if envelope.is_notification:
                return DispatchResult(DispatchKind.HANDLED)
            return DispatchResult(DispatchKind.HANDLED, encode_mcp_reply(envelope.service, response, error))
        if isinstance(envelope, A2aEnvelope) and a2a_url is not None:
            response, error = await self._forward_a2a(a2a_url, from_key.hex(), envelope)
            self.counts.a2a_in.record(error is not None)
            return DispatchResult(DispatchKind.HANDLED, encode_a2a_reply(response, error))
        return NOT_MINE

    def refusal(self, payload: bytes) -> bytes | None:
        """An error reply for an envelope of an adapter this node has switched off.

        The message still goes to /recv, as the Go AXL node does; the reply only spares
        the calling node a wait for an answer that would never come. Senders
        that expect no reply (``/send``) never read it.
        """
        envelope = classify(payload, mcp_enabled=not self._mcp_on, a2a_enabled=not self._a2a_on)
        if isinstance(envelope, McpEnvelope) and not envelope.is_notification:
            return encode_mcp_reply(envelope.service, None,
                                    "MCP is not enabled on the remote node (no router_addr)")
        if isinstance(envelope, A2aEnvelope):
            return encode_a2a_reply(None, "A2A is not enabled on the remote node (no a2a_addr)")
        return None

    async def _forward_mcp(self, router_url: str, from_peer_id: str,
                           envelope: McpEnvelope) -> tuple[str | None, str | None]:
        """POST the envelope to the router: (the response's JSON text, None), or
        (None, why there is none). A notification wants no response: only
        reaching the router counts."""
        body = (
            f'{{"service":{dumps(envelope.service)},"request":{envelope.request_text},'
            f'"from_peer_id":{dumps(from_peer_id)},"headers":{dumps(envelope.headers or {})}}}'
        )
        import aiohttp
        try:
            async with self._http().post(
                router_url, data=body.encode(), headers={"Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=self.settings.mcp_timeout),
            ) as resp:
                raw, status = await resp.read(), resp.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            failure = _failure("the MCP router", exc, self.settings.mcp_timeout)
            log.warning("service %s: %s", envelope.service, failure)
            return None, failure
        if envelope.is_notification:
            return None, None
        return self._router_answer(raw, status)

    @staticmethod
    def _router_answer(raw: bytes, status: int) -> tuple[str | None, str | None]:
        """The router's ``{"response","error"}`` answer as (response text, error)."""
        try:
            answer = go_struct_fields(raw, {"response": object, "error": str})
        except DecodeError:
            return None, f"failed to parse router response (HTTP {status})"
        error = answer.get("error")
        if error is not None and error.value:
            return None, f"router error: {error.value}"
        response = answer.get("response")
        if response is None:
            return None, "service returned no response"
        return response.text, None

    async def _forward_a2a(self, a2a_url: str, from_peer_id: str,
                           envelope: A2aEnvelope) -> tuple[str | None, str | None]:
        """GET the card or POST the request to the A2A server: (its JSON body's
        text, None), or (None, why there is none)."""
        headers = {"X-From-Peer-Id": from_peer_id}
        import aiohttp
        timeout = aiohttp.ClientTimeout(total=self.settings.a2a_timeout)
        try:
            if envelope.agent_card:
                request = self._http().get(f"{a2a_url}/.well-known/agent-card.json",
                                           headers=headers, timeout=timeout)
            else:
                version = self._a2a_version(envelope)
                if version:
                    headers[A2A_VERSION_HEADER] = version
                headers["Content-Type"] = "application/json"
                request = self._http().post(
                    f"{a2a_url}/", data=envelope.request_text.encode(), headers=headers, timeout=timeout
                )
            async with request as resp:
                raw, status = await resp.read(), resp.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            failure = _failure("the A2A server", exc, self.settings.a2a_timeout)
            log.warning("%s", failure)
            return None, failure
        try:
            answer = parse_json(raw)
        except DecodeError:
            return None, f"a2a server returned non-JSON (HTTP {status})"
        return answer.text, None

    @staticmethod
    def _a2a_version(envelope: A2aEnvelope) -> str | None:
        """The caller's carried version; without carried headers (Go callers) the method decides."""
        if envelope.headers is not None:
            for name, value in envelope.headers.items():
                if name.lower() == A2A_VERSION_HEADER.lower():
                    return clean_header_value(value)
            return None
        return a2a_version_for(envelope.request.value if envelope.request else None)
