"""The Yggdrasil core's datagram layer: IPv6 and protocol messages in sessions."""

from axl.datagrams.layer import (
    IPV6_HEAD, Action, DatagramLayer, DebugReplyReceived, DeliverIPv6, NodeInfoReceived, NodeInfoTooLarge,
    SendMessage, debug_request, nodeinfo_reply_body, nodeinfo_request,
)

__all__ = [
    "IPV6_HEAD", "Action", "DatagramLayer", "DebugReplyReceived", "DeliverIPv6", "NodeInfoReceived",
    "NodeInfoTooLarge", "SendMessage", "debug_request", "nodeinfo_reply_body", "nodeinfo_request",
]
