"""What every process harness shares: loopback ports, and starting and stopping nodes.

The local testnet (``axl.testnet``), the benchmarks (``axl.bench``) and the
end-to-end tests all start real ``axl-node`` processes on loopback. They
need ports that are free now and stay free until the node binds them, a
child whose output goes to its own log, and a stop that cannot hang. One
implementation serves them all; each harness keeps only what it adds
(convergence checks, timings, request helpers).
"""

from __future__ import annotations

import logging
import random
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger("axl.harness")

LOOPBACK = "127.0.0.1"
PORT_SEARCH_FLOOR = 20000
STOP_GRACE_SECONDS = 5.0

# Ports already handed out in this process, so that two calls never agree on
# one port before either node has bound it.
_HANDED_OUT: set[int] = set()
_RNG = random.Random()


class NoFreePort(RuntimeError):
    """No bindable loopback port was found; the text gives the range searched."""


def ephemeral_port_floor() -> int:
    """Lowest port the OS hands out for outgoing connections (Linux; IANA's 49152 elsewhere)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152


def free_port(taken: set[int] | None = None, rng: random.Random | None = None) -> int:
    """A loopback TCP port that is bindable now, not in ``taken``, and below the ephemeral range.

    Ports the OS picked (bind to 0) lie in the ephemeral range, where the
    nodes' own outgoing connections may grab one before the node that should
    listen there has started; ports below that range do not move under us.
    Without ``taken``, every port this process was given before is avoided.
    """
    taken = _HANDED_OUT if taken is None else taken
    rng = rng or _RNG
    ceiling = ephemeral_port_floor()
    floor = min(PORT_SEARCH_FLOOR, ceiling - 1000)
    for _ in range(1000):
        port = rng.randrange(floor, ceiling)
        if port in taken or not port_bindable(port):
            continue
        taken.add(port)
        return port
    raise NoFreePort(f"no free loopback port found in {floor}-{ceiling}")


def port_bindable(port: int, reuse_address: bool = False) -> bool:
    """Whether a listener could bind ``port`` on loopback now.

    ``reuse_address`` probes the way the node's own listeners bind, so that
    connections of a node that just stopped (TIME_WAIT) do not count.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        if reuse_address:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def default_node_command() -> list[str]:
    """This interpreter running axl-node: the code the harness itself imported (PYTHONPATH included)."""
    return [sys.executable, "-m", "axl.cli"]


def spawn_node(config_path: Path, log_path: Path, *, command: Sequence[str] | None = None,
               args: Sequence[str] = (), env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start one node for ``config_path``; its stdout and stderr are appended to ``log_path``.

    The child runs in its own session, so a Ctrl-C meant for the harness
    does not reach it: the harness stops its nodes itself, in order. It
    runs in the config's folder (relative key paths resolve as they would
    for a person starting it there), so the config path is made absolute.
    """
    config_path = config_path.resolve()
    with open(log_path, "ab") as log_file:
        return subprocess.Popen(
            [*(command or default_node_command()), "--config", str(config_path), *args],
            stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
            cwd=config_path.parent, env=env, start_new_session=True,
        )


def stop_process(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM,
                 grace: float = STOP_GRACE_SECONDS) -> int | None:
    """Signal a child and reap it; SIGKILL after ``grace`` seconds.

    Returns its exit code, or None when it had to be killed.
    """
    if process.poll() is not None:
        return process.returncode
    process.send_signal(sig)
    try:
        return process.wait(grace)
    except subprocess.TimeoutExpired:
        log.warning("pid %d ignored signal %d for %.0f s; killing it", process.pid, sig, grace)
        process.kill()
        process.wait()
        return None
