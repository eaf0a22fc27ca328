"""The soak run: steady traffic on a ring of nodes, RSS and open files sampled
each interval; resources must stay flat (`make soak`)."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from axl.chaos.mesh import CHAOS_NODE_CONFIG, Flow, receive_loop, send_loop, summarise
from axl.testnet import Testnet


@dataclass
class ResourceSample:
    elapsed_secs: float
    rss_kib: list[int]
    open_fds: list[int]


def process_resources(pid: int) -> tuple[int, int]:
    """(resident set in KiB, open file descriptors) of a live process, from /proc."""
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def is_flat(samples: list[ResourceSample]) -> tuple[bool, list[str]]:
    """Flat: after the first sample (warm-up), RSS grows < 25 % (or 16 MiB) and fds by < 16."""
    if len(samples) < 2:
        return True, ["too few samples to judge"]
    first, last = samples[0], samples[-1]
    notes, flat = [], True
    for index, (rss0, rss1, fd0, fd1) in enumerate(zip(first.rss_kib, last.rss_kib,
                                                         first.open_fds, last.open_fds)):
        grew_rss = rss1 > max(rss0 * 1.25, rss0 + 16 * 1024)
        grew_fds = fd1 >= fd0 + 16
        flat = flat and not grew_rss and not grew_fds
        notes.append(f"node {index}: RSS {rss0}->{rss1} KiB, fds {fd0}->{fd1}"
                     + (" (growing)" if grew_rss or grew_fds else ""))
    return flat, notes


def run_soak(base_dir: Path, duration: float, interval: float = 60.0, nodes: int = 5,
             seed: int = 1) -> tuple[bool, list[ResourceSample], list[str]]:
    """Steady traffic on a ring; RSS and fds of every node sampled every `interval` seconds."""
    net = Testnet(nodes, "ring", base_dir, extra_config=CHAOS_NODE_CONFIG)
    stop = threading.Event()
    try:
        net.start()
        net.wait_converged(40)
        flows = [Flow(f"f{i}", net.nodes[i], net.nodes[(i + 2) % nodes]) for i in range(nodes)]
        by_name = {flow.name: flow for flow in flows}
        threads = [threading.Thread(target=send_loop, args=(flow, stop, seed + i, 60.0))
                   for i, flow in enumerate(flows)]
        threads += [threading.Thread(target=receive_loop, args=(node, by_name, stop)) for node in net.nodes]
        for thread in threads:
            thread.start()
        samples: list[ResourceSample] = []
        start = time.monotonic()
        while True:
            stop.wait(interval)
            usage = [process_resources(node.process.pid) for node in net.nodes]
            samples.append(ResourceSample(time.monotonic() - start, [u[0] for u in usage], [u[1] for u in usage]))
            print(f"t={samples[-1].elapsed_secs:5.0f}s rss_kib={samples[-1].rss_kib} fds={samples[-1].open_fds} "
                  f"acked={sum(len(f.acknowledged) for f in flows)}", flush=True)
            if time.monotonic() - start >= duration:
                break
        stop.set()
        for thread in threads:
            thread.join()
        report = summarise(flows, [], start, time.monotonic())
        flat, notes = is_flat(samples)
        return flat, samples, [report.text(), *notes]
    finally:
        stop.set()
        net.stop()
