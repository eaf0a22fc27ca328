"""Deterministic in-memory simulators: many routers (`Network`, the routing
layer at scale) and many full nodes (`StackNetwork`, the daemon's NodeCore and
LinkConnection over virtual links)."""

from axl.sim.network import Network, SimLink, SimNode, sim_identity
from axl.sim.stack import StackNetwork

__all__ = ["Network", "SimLink", "SimNode", "StackNetwork", "sim_identity"]
