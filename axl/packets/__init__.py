"""The IPv6 packet device between the local TCP stack and the overlay."""

from axl.packets.device import Action, DeliverPacket, IPv6Device, Lookup, SendIPv6

__all__ = ["Action", "DeliverPacket", "IPv6Device", "Lookup", "SendIPv6"]
