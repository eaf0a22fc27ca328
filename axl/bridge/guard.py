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
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import parse_qsl

from axl.bridge.http1 import Answer, text_answer

DASHBOARD = "/dashboard/"
COOKIE = "axl_dashboard"
CHALLENGE = (("WWW-Authenticate", 'Bearer realm="axl-node"'),)


class BridgeGuard:
    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()
        self._cookie = hashlib.sha256(b"axl-dashboard\0" + token.encode()).hexdigest()
        self._token = token.encode()

    def allows(self, authorization: str) -> bool:
        """Whether an Authorization header value carries the token."""
        return hmac.compare_digest(authorization.encode("latin-1", "replace"), self._expected)

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
