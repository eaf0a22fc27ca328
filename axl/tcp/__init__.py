"""Userspace TCP over the overlay's IPv6 packets, and AXL's message framing.

Everything here is sans-IO: `TcpStack` turns IPv6 packets and the current
time into events and packets to send; the node's asyncio code moves them.
"""
