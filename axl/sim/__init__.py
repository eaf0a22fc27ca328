"""Deterministic in-memory simulator of many routers (the daemon's own Router code)."""

from axl.sim.network import Network, SimLink, SimNode, sim_identity

__all__ = ["Network", "SimLink", "SimNode", "sim_identity"]
