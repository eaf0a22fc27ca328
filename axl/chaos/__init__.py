"""Chaos, soak and API-fuzz drivers for a local network of real nodes.

The node promises that a message acknowledged by `/send` (HTTP 200) is in the
destination's queue, exactly once and in order, whatever happens to the
relays and links on the way. These drivers check that promise the only
convincing way: real processes on loopback, relays killed with SIGKILL and
restarted, links cut by TCP proxies placed in every peering, while senders
stream numbered messages; then every acknowledged number is looked for.

    python -m axl.chaos chaos --duration 300      # long chaos run (make chaos)
    python -m axl.chaos crash --messages 10000    # receiver SIGKILLed 3 times (make crash)
    python -m axl.chaos soak --duration 600       # RSS and fds over time (make soak)
    python -m axl.chaos fuzz-api --max-time 300   # schemathesis on a live bridge (make fuzz-api)
    python -m axl.chaos hostile                   # attacks on the node's budgets (make hostile)

Only loopback is used. `proxy` holds the link proxies and manglers, `mesh`
the chaos run, `crash` the crash run (the durable inbox), `soak` the soak
run, `fuzzapi` the schemathesis run, `hostile` the attacks on budgets.
"""

from axl.chaos.crash import run_crash
from axl.chaos.fuzzapi import fuzz_schema_text, run_fuzz_api
from axl.chaos.mesh import run_chaos
from axl.chaos.proxy import BitFlipper, FrameReplayer, ProxyHub, Reorderer
from axl.chaos.soak import run_soak

__all__ = ["BitFlipper", "FrameReplayer", "ProxyHub", "Reorderer", "fuzz_schema_text",
           "run_chaos", "run_crash", "run_fuzz_api", "run_soak"]
