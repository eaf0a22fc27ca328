"""`python -m axl.bench.instructions`: instructions per message, counted by
valgrind's callgrind, for changes too small for a clock to see.

On a shared machine the CPU time of a message moves by a fifth from run to
run; a change that saves 3 % of it cannot be told from the spread. The count
of instructions barely moves (repeated, 0.02 % for the cores, 5 % for the
frame reader, whose memory layout changes more). The first two run twice under
callgrind, with a few messages and with many, and the difference is divided
by the difference in messages, so start-up and imports cancel out:

- `core`: two node cores on one link in memory, on a virtual clock (as the
  tests join them), 1 KiB messages in batches of 100, each answered: the
  sender's and the receiver's work together, from the send to the
  acknowledgement (routing, sessions, encryption, TCP, the message stream),
  without the event loop, the sockets or the inbox.
- `wsframes`: the front door's `/ws` frame reader over masked 1 KiB frames,
  half of them read from one piece, half from two (as from a socket).
- `ws-nodes`: two real node processes, each under callgrind, and the
  bench's `/ws` rounds between them (`make bench`'s sending socket and
  receiving `MessageStream`): after a warm-up round the counters are
  zeroed, WS_ROUNDS rounds of WS_ROUND messages run, and each node's count
  is divided by the messages. Everything a node does per message is in it:
  the event loop, TLS, the front door, the durable inbox's commits. Slowed
  down fifty times, the nodes batch more than at full speed, so the count
  is for comparing builds, not for CPU time.

The count covers whichever build is imported (`--version` of axl-node says
which): the compiled one is what a node runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import aiohttp

from axl import BUILD
from axl.bench.procs import BenchNode
from axl.bench.scenarios import LoopBench, Sizes
from axl.harness import default_node_command
from axl.bridge.wsframes import FrameReader, unmask
from axl.node.corepair import CorePair
from axl.node.messages import Acknowledged, InboundMessage, MessageEvent, MessageSettings

WORKLOADS = ("core", "wsframes", "ws-nodes")
WS_ROUND, WS_ROUNDS, WS_WARM_UP = 500, 6, 1_000
# valgrind's start-up of a node takes tens of seconds
NODE_START_SECONDS = 240.0
BATCH = 100
PAYLOAD = bytes(1024)
# messages in the short run and in the long one
FEW, MANY = 200, 2_200
_COLLECTED = re.compile(r"Collected : (\d+)")


class AnsweringPair(CorePair):
    """A core pair whose receiver answers each message it is given, counting
    the sender's acknowledgements."""

    def __init__(self) -> None:
        settings = MessageSettings(lookup_timeout=5.0, send_timeout=10.0)
        super().__init__((settings, settings))
        self.acknowledged = 0

    def on_event(self, index: int, event: MessageEvent) -> None:
        if isinstance(event, InboundMessage):
            self.cores[index].answer_inbound(event.handle, True, None, self.now, flush=False)
        elif isinstance(event, Acknowledged):
            self.acknowledged += 1

    def pump(self) -> bool:
        """Answers go out together after each pass, as a node answers a
        commit's messages in one go."""
        moved = super().pump()
        self.cores[1].flush(self.now)
        return moved

    def send_batch(self) -> None:
        sender, dest = self.cores[0], self.keys[1]
        for _ in range(BATCH):
            sender.send_message(dest, PAYLOAD, self.now)
        self.run(0.01)


def run_core(count: int) -> None:
    pair = AnsweringPair()
    pair.run(3.0)  # the tree and the paths form
    pair.send_batch()  # the session and the stream open
    pair.acknowledged = 0
    for _ in range(count // BATCH):
        pair.send_batch()
    pair.run(1.0)
    if pair.acknowledged != count // BATCH * BATCH:
        raise SystemExit(f"core: {pair.acknowledged} of {count} acknowledged")


def run_wsframes(count: int) -> None:
    mask = os.urandom(4)
    payload = os.urandom(32) + PAYLOAD
    frame = bytes((0x82, 0x80 | 126)) + len(payload).to_bytes(2, "big") + mask + unmask(mask, payload)
    chunk = frame * BATCH
    reader = FrameReader(1 << 20)
    read = 0
    for turn in range(count // BATCH):
        if turn % 2:
            reader.feed(chunk)
        else:
            reader.feed(chunk[:len(chunk) // 2])
            reader.feed(chunk[len(chunk) // 2:])
        while (message := reader.next_message()) is not None:
            read += message[1] == payload
    if read != count // BATCH * BATCH:
        raise SystemExit(f"wsframes: {read} of {count} frames read back")


class CountedNode(BenchNode):
    """A bench node started under callgrind (or as it is, with no `valgrind`)."""

    def __init__(self, name: str, workdir: Path, peers: list[BenchNode], valgrind: str | None) -> None:
        super().__init__(name, workdir, "uvloop", peers=peers, start_timeout=NODE_START_SECONDS)
        self.valgrind = valgrind

    def launch(self) -> tuple[list[str] | None, list[str]]:
        command, args = super().launch()
        if self.valgrind is None:
            return command, args
        out = self.workdir / f"{self.name}.callgrind"
        return [self.valgrind, "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-instr=no",
                *(command or default_node_command())], args

    def control(self, flag: str) -> None:
        """`callgrind_control -z` (zero the counters) or `-d` (dump them)."""
        done = subprocess.run(["callgrind_control", flag, str(self.pid)], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise SystemExit(f"axl.bench.instructions: callgrind_control {flag} failed for {self.name}")

    def instructions_dumped(self) -> int:
        """The instructions of the last dump (callgrind numbers each: `<file>.1`, ...)."""
        dumps = sorted(self.workdir.glob(f"{self.name}.callgrind.*"), key=lambda path: int(path.suffix[1:]))
        for line in dumps[-1].read_text().splitlines() if dumps else ():
            if line.startswith("totals:"):
                return int(line.split()[1])
        raise SystemExit(f"axl.bench.instructions: no callgrind dump from {self.name}")


def run_ws_nodes(valgrind: str | None) -> tuple[int, int] | None:
    """The `ws-nodes` workload: each node's instructions a message (None
    without valgrind, where it only checks every message arrives)."""
    with tempfile.TemporaryDirectory(prefix="axl-instructions-") as folder:
        return asyncio.run(_ws_nodes(Path(folder), valgrind))


async def _ws_nodes(workdir: Path, valgrind: str | None) -> tuple[int, int] | None:
    sender = CountedNode("sender", workdir, [], valgrind)
    receiver = CountedNode("receiver", workdir, [sender], valgrind)
    bench = LoopBench("uvloop", Sizes.choose(True), workdir)
    bench.nodes = [sender, receiver]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=10)) as http:
        bench.http = http
        try:
            for node in bench.nodes:
                node.spawn()
                await node.wait_bridge(http)
            await receiver.wait_peers(http, {sender.peer_id})
            await _all_arrive(bench, WS_WARM_UP)
            if valgrind is not None:
                for node in bench.nodes:
                    node.control("-z")
            for _ in range(WS_ROUNDS):
                await _all_arrive(bench, WS_ROUND)
            if valgrind is None:
                return None
            for node in bench.nodes:
                node.control("-d")
            return (sender.instructions_dumped() // (WS_ROUNDS * WS_ROUND),
                    receiver.instructions_dumped() // (WS_ROUNDS * WS_ROUND))
        finally:
            for node in bench.nodes:
                node.stop()


async def _all_arrive(bench: LoopBench, count: int) -> None:
    """One /ws round of `count` messages; every one acknowledged and received, or SystemExit."""
    sender, receiver = bench.nodes
    acked, _, lost = await bench.ws_round(sender, receiver, count)
    if acked != count or lost:
        raise SystemExit(f"ws-nodes: {acked} of {count} acknowledged, {lost} of those never received")


def counted(workload: str, count: int, valgrind: str) -> int:
    """Instructions callgrind counted for one run of `workload` over `count` messages."""
    done = subprocess.run(
        [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null",
         sys.executable, "-m", "axl.bench.instructions", "--run", workload, str(count)],
        capture_output=True, text=True, timeout=900)
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"axl.bench.instructions: {workload} failed under valgrind: {tail[0]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m axl.bench.instructions",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", nargs="?", choices=WORKLOADS, help="count only this one (default: all)")
    parser.add_argument("--run", nargs=2, metavar=("WORKLOAD", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run:
        workload, count = args.run
        if workload == "ws-nodes":
            run_ws_nodes(None)
        else:
            (run_core if workload == "core" else run_wsframes)(int(count))
        return 0
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("axl.bench.instructions: valgrind not found (Debian: apt install valgrind)", file=sys.stderr)
        return 2
    print(f"instructions per 1 KiB message, callgrind ({BUILD.describe()})")
    for workload in [args.workload] if args.workload else WORKLOADS:
        if workload == "ws-nodes":
            counts = run_ws_nodes(valgrind)
            assert counts is not None
            print(f"{workload:9} {counts[0]:10,} sending node, {counts[1]:,} receiving node")
            continue
        few, many = (counted(workload, count, valgrind) for count in (FEW, MANY))
        print(f"{workload:9} {(many - few) / (MANY - FEW):10,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
