"""The TLS contexts a link manager shares among its links, made on first use
(tls, sockstls and wss dialers share one; tls listeners another)."""

from __future__ import annotations

import ssl

from axl.link.connection import LinkSettings
from axl.link.tls import client_context, server_context


def client_tls(settings: LinkSettings) -> ssl.SSLContext:
    if settings.client_tls is None:
        settings.client_tls = client_context(settings.identity)
    return settings.client_tls


def server_tls(settings: LinkSettings) -> ssl.SSLContext:
    if settings.server_tls is None:
        settings.server_tls = server_context(settings.identity)
    return settings.server_tls
