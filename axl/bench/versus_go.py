"""`python -m axl.bench.versus_go` (`make bench-go`): our node and Go AXL on one probe.

Two nodes of each kind on loopback, b peered with a. SENDERS clients POST
1 KiB messages to a's /send for b while POLLERS clients take them from b's
/recv. Rounds alternate between the kinds, so that both meet the same
machine. Per round: messages acknowledged per second, those acknowledged
and never read, and each node's CPU (user + system, from /proc) per
acknowledged message, counted from the first send until the receiver has
handed out every acknowledged message or none for QUIET_SECONDS: Go
acknowledges before it delivers, so its work goes on after the senders end.
Go's /recv answers at once, so a poller of either kind that finds the queue
empty asks again after POLL_PAUSE; ours is given no long poll either.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import struct
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from axl import BUILD
from axl.bench.procs import BenchNode, GoBenchNode, cpu_seconds, go_axl_binary
from axl.bench.scenarios import SEND_HEADER

SENDERS = 8
POLLERS = 4
SIZE = 1024
POLL_PAUSE = 0.005
QUIET_SECONDS = 1.0
DRAIN_SECONDS = 20.0
WARM_UP_SECONDS = 30.0
_ID = struct.Struct("!Q")


@dataclass(frozen=True)
class RoundFigures:
    """One round of one kind of node."""

    kind: str
    rate: float
    acknowledged: int
    lost: int
    failed: int
    cpu_sender_ms: float
    cpu_receiver_ms: float

    def line(self) -> str:
        return (f"{self.kind:5} {self.rate:7.0f} acknowledged/s, {self.lost} of {self.acknowledged} never read, "
                f"{self.failed} refused; CPU per message: sender {self.cpu_sender_ms:.3f} ms, "
                f"receiver {self.cpu_receiver_ms:.3f} ms")


@dataclass
class Pair:
    """A sending node and a receiving one of one kind, peered and warm."""

    kind: str
    source: BenchNode
    dest: BenchNode

    @classmethod
    async def start(cls, http: aiohttp.ClientSession, workdir: Path, kind: str, go: Path | None) -> Pair:
        def node(name: str, peers: list[BenchNode]) -> BenchNode:
            if go is None:
                return BenchNode(f"{kind}-{name}", workdir, "uvloop", peers=peers)
            return GoBenchNode(f"{kind}-{name}", workdir, "asyncio", peers=peers, binary=go)

        listening = node("b", [])
        listening.spawn()
        await listening.wait_bridge(http)
        dialing = node("a", [listening])
        dialing.spawn()
        await dialing.wait_bridge(http)
        await dialing.wait_peers(http, {listening.peer_id})
        pair = cls(kind, dialing, listening)
        await pair.warm_up(http)
        return pair

    async def warm_up(self, http: aiohttp.ClientSession) -> None:
        """Until one message goes through: the path and the session are made."""
        deadline = time.monotonic() + WARM_UP_SECONDS
        while await post(http, self.source, self.dest.peer_id, b"warm-up") != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.kind}: no message went through in {WARM_UP_SECONDS:g} s")
            await asyncio.sleep(0.2)
        while time.monotonic() < deadline and await recv(http, self.dest) is None:
            await asyncio.sleep(POLL_PAUSE)

    def stop(self) -> None:
        self.source.stop()
        self.dest.stop()


async def post(http: aiohttp.ClientSession, node: BenchNode, dest: str, payload: bytes) -> int:
    async with http.post(node.url + "/send", data=payload, headers={SEND_HEADER: dest}) as resp:
        await resp.read()
        return resp.status


async def recv(http: aiohttp.ClientSession, node: BenchNode) -> bytes | None:
    async with http.get(node.url + "/recv") as resp:
        body = await resp.read()
        return body if resp.status == 200 else None


async def run_round(http: aiohttp.ClientSession, pair: Pair, count: int) -> RoundFigures:
    source, dest = pair.source, pair.dest
    filler = bytes(SIZE - _ID.size)
    numbers = iter(range(count))
    acknowledged: set[int] = set()
    received: set[int] = set()
    failed = 0
    last_read = ended = time.monotonic()
    sending = True

    async def sender() -> None:
        nonlocal failed
        for number in numbers:
            if await post(http, source, dest.peer_id, _ID.pack(number) + filler) == 200:
                acknowledged.add(number)
            else:
                failed += 1

    def drained() -> bool:
        now = time.monotonic()
        return not sending and (acknowledged <= received or now - last_read > QUIET_SECONDS
                                or now - ended > DRAIN_SECONDS)

    async def poller() -> None:
        nonlocal last_read
        while not drained():
            body = await recv(http, dest)
            if body is None:
                await asyncio.sleep(POLL_PAUSE)
            elif len(body) == SIZE:
                received.add(_ID.unpack_from(body)[0])
                last_read = time.monotonic()

    cpu_before = (cpu_seconds(source.pid), cpu_seconds(dest.pid))
    pollers = [asyncio.create_task(poller()) for _ in range(POLLERS)]
    start = time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(SENDERS)))
    elapsed = time.perf_counter() - start
    ended = last_read = time.monotonic()
    sending = False
    await asyncio.gather(*pollers)
    cpu = [after - before for before, after in zip(cpu_before, (cpu_seconds(source.pid), cpu_seconds(dest.pid)))]
    done = max(len(acknowledged), 1)
    return RoundFigures(pair.kind, len(acknowledged) / elapsed, len(acknowledged), len(acknowledged - received),
                        failed, cpu[0] / done * 1000, cpu[1] / done * 1000)


def summary(rounds: list[RoundFigures]) -> list[str]:
    """Each figure's median per kind, and ours as a share of Go's, beside issue 37's targets."""
    ours = [r for r in rounds if r.kind == "ours"]
    go = [r for r in rounds if r.kind == "go"]
    lines = [f"{'median of ' + str(len(ours)) + ' rounds':34} {'ours':>9} {'Go AXL':>9} {'ours/Go':>8}  target"]
    for label, figure, target in [("acknowledged/s", "rate", ">= 1.2"),
                                  ("CPU per message, sender (ms)", "cpu_sender_ms", "<= 0.5"),
                                  ("CPU per message, receiver (ms)", "cpu_receiver_ms", "<= 0.5")]:
        mine = statistics.median(getattr(r, figure) for r in ours)
        theirs = statistics.median(getattr(r, figure) for r in go)
        lines.append(f"{label:34} {mine:9.3f} {theirs:9.3f} {mine / theirs:8.2f}  {target}")
    lines.append(f"{'acknowledged and never read':34} {sum(r.lost for r in ours):9d} {sum(r.lost for r in go):9d}")
    return lines


async def run(count: int, rounds: int, go: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="axl-versus-go-") as tmp:
        async with aiohttp.ClientSession() as http:
            pairs: list[Pair] = []
            try:
                print(f"ours: {BUILD.describe()}", flush=True)
                pairs.append(await Pair.start(http, Path(tmp), "ours", None))
                pairs.append(await Pair.start(http, Path(tmp), "go", go))
                figures: list[RoundFigures] = []
                for index in range(rounds):
                    for pair in pairs if index % 2 == 0 else reversed(pairs):
                        figures.append(await run_round(http, pair, count))
                        print(figures[-1].line(), flush=True)
                print("\n".join(summary(figures)))
            finally:
                for pair in pairs:
                    pair.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m axl.bench.versus_go",
        description="Our node and Go AXL (axl-node in AXL_GO_BIN_DIR) on one probe, in alternating "
                    f"rounds: {SENDERS} clients sending 1 KiB messages through /send, {POLLERS} reading "
                    "them from /recv; the rate and each node's CPU per message.")
    parser.add_argument("--count", type=positive, default=3000, help="messages per round (default 3000)")
    parser.add_argument("--rounds", type=positive, default=3, help="rounds of each kind (default 3)")
    parser.add_argument("--quick", action="store_true", help="200 messages, one round each: a smoke run")
    args = parser.parse_args(argv)
    go = go_axl_binary()
    if go is None:
        print("versus Go: skipped (no axl-node in AXL_GO_BIN_DIR)")
        return 0
    count, rounds = (200, 1) if args.quick else (args.count, args.rounds)
    try:
        asyncio.run(run(count, rounds, go))
    except (RuntimeError, OSError, aiohttp.ClientError) as exc:
        print(f"versus Go: {exc}", file=sys.stderr)
        return 1
    return 0


def positive(text: str) -> int:
    """An argparse type: a whole number above 0."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number above 0")
    return value


if __name__ == "__main__":
    sys.exit(main())
