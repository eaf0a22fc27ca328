"""The bridge token (bridge_token, or AXL_BRIDGE_TOKEN): with one set, every
bridge request must carry `Authorization: Bearer <token>`, else it is
answered 401 with one line saying so. Off by default, so that clients
written for the Go node keep working unchanged.

A browser cannot put a header on the dashboard's page loads and event
stream, so the dashboard alone also accepts a cookie: opening
`/dashboard/?token=<token>` once sets it (HttpOnly, SameSite=Strict,
path /dashboard/) and sends the browser on to the page without the token
in its address. The cookie holds a value derived from the token, which
opens the dashboard's paths and nothing else.

Whatever the token, a web page the operator opens must not drive the
bridge (PageGuard): a request carrying another site's `Origin` is refused
403, and so is one whose `Host` is not a loopback name when the bridge
listens on loopback (DNS rebinding: a page of evil.example whose name
now points at 127.0.0.1). Routes whose body is JSON refuse other content
types (415), which a page's simple requests (a form, a `text/plain`
fetch) would carry. Clients other than browsers send no `Origin` and are
never refused for it. The front door and the full application both ask
PageGuard, so both apply the same rule.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from functools import lru_cache
from typing import Final
from urllib.parse import parse_qsl

from axl.bridge.http1 import Answer, text_answer
from axl.config import NodeConfig
from axl.localsocket import is_loopback

DASHBOARD = "/dashboard/"
COOKIE = "axl_dashboard"
CHALLENGE = (("WWW-Authenticate", 'Bearer realm="axl-node"'),)


class BridgeGuard:
    def __init__(self, token: str) -> None:
        self._expected = token.encode()
        self._cookie = hashlib.sha256(b"axl-dashboard\0" + token.encode()).hexdigest()
        self._token = token.encode()

    def allows(self, authorization: str) -> bool:
        """Whether an Authorization header value carries the token: the
        scheme `Bearer` in any case (RFC 9110 11.1), then the token."""
        scheme, _, credentials = authorization.strip().partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            credentials.lstrip(" ").encode("latin-1", "replace"), self._expected)

    def allows_dashboard(self, path: str, cookie_header: str) -> bool:
        """A dashboard path requested with the dashboard cookie."""
        if not path.startswith(DASHBOARD) and path != DASHBOARD.rstrip("/"):
            return False
        for part in cookie_header.split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE and hmac.compare_digest(value.encode("latin-1", "replace"), self._cookie.encode()):
                return True
        return False

    def sign_in(self, path: str, query: str) -> Answer | None:
        """The answer to `/dashboard/...?token=` with the right token: the
        cookie, and the way to the page without the token in the query."""
        if not path.startswith(DASHBOARD):
            return None
        given = next((value for name, value in parse_qsl(query) if name == "token"), None)
        if given is None or not hmac.compare_digest(given.encode("latin-1", "replace"), self._token):
            return None
        cookie = f"{COOKIE}={self._cookie}; Path={DASHBOARD}; HttpOnly; SameSite=Strict"
        return Answer(303, b"", None, (("Location", path), ("Set-Cookie", cookie)))


def unauthorized(path: str, authorization: str = "") -> Answer:
    """401 with one line saying what is missing, or that the `authorization` sent is
    not the token: a client with a stale token should not hunt for a missing header."""
    where = " (in a browser, open /dashboard/?token=TOKEN once)" if path.startswith(DASHBOARD) else ""
    sent = "the Authorization header sent does not match" if authorization else "the request had none"
    answer = text_answer(401, f"this bridge needs 'Authorization: Bearer <token>' "
                              f"(bridge_token or AXL_BRIDGE_TOKEN); {sent}{where}")
    answer.headers = CHALLENGE
    return answer


# Routes whose body is a JSON document, by path prefix.
JSON_BODY_ROUTES: Final = ("/peers", "/mcp/", "/a2a/")
# Methods that carry a body on those routes.
BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True, slots=True)
class PageGuard:
    """Refuses what a web page could make a browser send to the bridge.

    `loopback`: the bridge listens on a loopback address, so every honest
    request names one in its Host. Off on other addresses (0.0.0.0 is
    reached by its LAN names) and on a UNIX socket, which no page reaches.
    A request without Host (HTTP/1.0) is let through: browsers always send
    one, so its absence cannot be a page's doing.
    """

    loopback: bool

    def refusal(self, method: str, path: str, host: str, origin: str, content_type: str | None) -> Answer | None:
        """403 for a foreign Host or Origin, 415 for a JSON route's other
        content type; None when the request may go on. `host` and `origin`
        are "" when absent, `content_type` None."""
        why = _page_refusal(host, origin, self.loopback)
        if why is not None:
            return text_answer(403, why)
        if method in BODY_METHODS and content_type is not None and path.startswith(JSON_BODY_ROUTES):
            media_type = content_type.partition(";")[0].strip().lower()
            if media_type != "application/json":
                return text_answer(415, f"{path} takes a JSON body: send 'Content-Type: application/json' "
                                        f"(got {media_type or 'an empty one'!r})")
        return None


def page_guard(config: NodeConfig) -> PageGuard:
    """The page guard of the bridge `config` describes."""
    return PageGuard(loopback=config.bridge_unix_path is None and is_loopback(config.bridge_addr))


@lru_cache(maxsize=64)
def _page_refusal(host: str, origin: str, loopback: bool) -> str | None:
    """Why a request with these Host and Origin values comes from a web
    page of another site, or None. The bridge's own origin is http:// and
    the Host the request names (its dashboard's requests carry it)."""
    if loopback and host and not is_loopback(_host_name(host)):
        return (f"refused: Host {host!r} is not a loopback name; this bridge answers requests "
                f"for localhost, 127.0.0.0/8 or [::1] only (DNS rebinding)")
    if origin and (not host or origin.lower() != f"http://{host.lower()}"):
        return (f"refused: Origin {origin!r} is not this bridge's own; "
                f"web pages of other sites may not use the bridge")
    return None


def _host_name(host: str) -> str:
    """A Host header's name or address, without its port or brackets."""
    if host.startswith("["):
        closing = host.find("]")
        return host[1:closing] if closing > 0 else host
    if host.count(":") > 1:  # an IPv6 address without its brackets
        return host
    name, colon, port = host.rpartition(":")
    return name if colon and port.isdigit() else host
