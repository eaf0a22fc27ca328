"""The Yggdrasil core's datagram layer: IPv6 and protocol messages in sessions."""

from axl.core.datagrams import (
    IPV6_HEAD, Action, Core, DebugReplyReceived, DeliverIPv6, NodeInfoReceived, NodeInfoTooLarge,
    SendMessage, debug_request, nodeinfo_reply_body, nodeinfo_request,
)

__all__ = [
    "IPV6_HEAD", "Action", "Core", "DebugReplyReceived", "DeliverIPv6", "NodeInfoReceived",
    "NodeInfoTooLarge", "SendMessage", "debug_request", "nodeinfo_reply_body", "nodeinfo_request",
]
