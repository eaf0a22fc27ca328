"""The Yggdrasil core's datagram layer: IPv6 and protocol messages in sessions."""

from axl.core.datagrams import (
    Action, Core, DebugReplyReceived, DeliverIPv6, NodeInfoReceived, SendMessage,
    debug_request, go_json, nodeinfo_request,
)

__all__ = [
    "Action", "Core", "DebugReplyReceived", "DeliverIPv6", "NodeInfoReceived", "SendMessage",
    "debug_request", "go_json", "nodeinfo_request",
]
