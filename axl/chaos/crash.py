"""The crash run: the receiving node killed with SIGKILL, again and again,
under a flood from several senders; then every acknowledged message is
looked for (`make crash`).

A star of nodes: the receiver in the middle, each sender peered with it.
Every sender posts its messages one after another and posts a message again
(as a new attempt, with its own number) until `/send` answers 200. A reader
takes messages with `/recv` all along. Each time the senders together have
a further share of the messages acknowledged, and then a random moment
more (up to KILL_JITTER), the receiver is killed and started again at once,
with the same key and inbox. Messages are up to 1 KiB, or all of `size`
bytes; with messages large enough to be kept in files of their own, every
other kill (at random) waits instead for one such file half written. The
receiver's `inbox_sync` is "normal" or "full".

Over /ws (`over_ws`), each sender keeps WS_WINDOW messages in flight on one
socket and posts again (as new attempts) those whose ack is not 200 or never
came; the reader takes messages from a /ws?recv=1 socket and says "done" to
each. The receiver then commits a hundred messages or more at once, which
with "normal" it keeps in a row file of its own (axl.node.store): the run
counts the row files it saw.

Afterwards, per sender: every acknowledged attempt must have been read
(none lost), no attempt twice under two inbox ids (none duplicated), and
the attempts in the order they were sent. A message the reader got, whose
deletion the killed node had not committed yet, comes again with the same
`X-Message-Id` after the restart: the reader counts those redeliveries and
keeps the first.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from axl.chaos.mesh import http
from axl.node.store import APART_BYTES
from axl.testnet import Testnet, TestnetNode

# Short timeouts: an attempt that fails is reported soon and posted again.
CRASH_NODE_CONFIG = {"send_timeout_secs": 10, "lookup_timeout_secs": 5, "max_inbox_messages": 100_000}
RECEIVER = 0
RECV_WAIT = 1.0
RUN_TIMEOUT = 600.0
# Each kill comes this long at most after its share of acknowledgements, at random.
KILL_JITTER = 0.5
# How long a kill waits for a payload file being written, at most.
MID_PAYLOAD_WAIT = 2.0
# Over /ws: messages in flight per sender, how long an ack may take before
# the socket is given up (its messages posted again), and the reader's window.
WS_WINDOW = 256
WS_ACK_TIMEOUT = 30.0
WS_READ_WINDOW = 1024


@dataclass
class Sender:
    """One sending node: its attempts in the order posted, and their fates."""

    name: str
    node: TestnetNode
    count: int
    statuses: dict[int, int] = field(default_factory=dict)
    message_of: dict[int, int] = field(default_factory=dict)  # attempt -> message number
    read: list[int] = field(default_factory=list)  # attempts, in the order read
    done: bool = False
    # how many attempts were acknowledged so far: what the killing thread
    # reads while the sending one writes (statuses changes size meanwhile)
    acknowledged_count: int = 0

    def settle(self, attempt: int, status: int) -> None:
        """Attempt `attempt` was answered `status` (0: no answer came)."""
        self.statuses[attempt] = status
        if status == 200:
            self.acknowledged_count += 1

    @property
    def acknowledged(self) -> list[int]:
        """The attempts acknowledged (once the sending is over)."""
        return [attempt for attempt, status in self.statuses.items() if status == 200]


@dataclass
class CrashReport:
    path: str
    size: int | None
    sync: str
    messages: int
    senders: int
    kills: int
    kills_mid_payload: int
    attempts: int
    acknowledged: int
    distinct_read: int
    lost: int
    duplicated: int
    out_of_order: int
    delivered_unacknowledged: int
    redelivered_same_id: int
    forged_sender: int
    status_counts: dict[int, int]
    seconds: float
    over_ws: bool = False
    row_files_seen: int = 0

    def ok(self) -> bool:
        return (self.lost == 0 and self.duplicated == 0 and self.out_of_order == 0
                and self.forged_sender == 0 and self.distinct_read == self.messages)

    def text(self) -> str:
        return "\n".join([
            f"{self.path} path{', over /ws' if self.over_ws else ''}, {_size_text(self.size)} messages, "
            f"inbox_sync {self.sync}: {self.messages} "
            f"messages from {self.senders} senders, receiver SIGKILLed {self.kills} times"
            + (f" ({self.kills_mid_payload} while writing a payload file)" if (self.size or 0) >= APART_BYTES else "")
            + f", {self.seconds:.1f}s",
            f"attempts {self.attempts}, acknowledged {self.acknowledged}, distinct messages read "
            f"{self.distinct_read}, lost {self.lost}, duplicated {self.duplicated}, out of order "
            f"{self.out_of_order}, forged sender {self.forged_sender}",
            f"delivered but not acknowledged (the sender posted them again): {self.delivered_unacknowledged}; "
            f"read again with the same id after a crash: {self.redelivered_same_id}",
            f"{'/ws ack' if self.over_ws else '/send'} statuses: {json.dumps(self.status_counts, sort_keys=True)}; "
            f"row files seen in the receiver's payload folder: {self.row_files_seen}",
        ])


def _size_text(size: int | None) -> str:
    if size is None:
        return "up to 1 KiB"
    return f"{size >> 20} MiB" if size >= 1 << 20 and size % (1 << 20) == 0 else f"{size} byte"


def _payload(sender: Sender, attempt: int, number: int, rng: random.Random, size: int | None) -> bytes:
    """Attempt `attempt` at message `number`: up to 1 KiB, or `size` bytes."""
    sender.message_of[attempt] = number
    head = f"{sender.name}:{attempt}:{number}:".encode()
    return head + rng.randbytes(rng.randrange(16, 1024) if size is None else max(0, size - len(head)))


def _send_all(sender: Sender, dest: str, seed: int, timeout: float, size: int | None) -> None:
    rng = random.Random(seed)
    attempt = 0
    for number in range(sender.count):
        while True:
            attempt += 1
            payload = _payload(sender, attempt, number, rng, size)
            status, _, _ = http("POST", sender.node.bridge_url + "/send", payload,
                                {"X-Destination-Peer-Id": dest}, timeout=timeout)
            sender.settle(attempt, status)
            if status == 200:
                break
            time.sleep(0.1)
    sender.done = True


class _Reader:
    """Takes the receiver's messages while it lives, through its restarts."""

    def __init__(self, node: TestnetNode, senders: dict[str, Sender]) -> None:
        self.node = node
        self.senders = senders
        self.seen_ids: set[int] = set()
        self.redelivered = 0
        self.forged = 0

    def read_once(self, wait: float) -> bool:
        """One /recv; False when nothing came (empty, or the node is down)."""
        status, headers, body = http("GET", f"{self.node.bridge_url}/recv?wait={wait:g}", timeout=wait + 10)
        if status != 200:
            return False
        self.got(int(headers["X-Message-Id"]), headers.get("X-From-Peer-Id"), body)
        return True

    def got(self, message_id: int, from_peer: str | None, body: bytes) -> None:
        """One message read: a redelivery (the same id again), or the next of its sender's."""
        if message_id in self.seen_ids:
            self.redelivered += 1
            return
        self.seen_ids.add(message_id)
        name, attempt, _ = body.split(b":", 2)
        sender = self.senders[name.decode()]
        sender.read.append(int(attempt))
        if from_peer != sender.node.peer_id:
            self.forged += 1

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            if not self.read_once(RECV_WAIT):
                stop.wait(0.05)

    def drain(self) -> None:
        while self.read_once(0.5):
            pass


def run_crash(base_dir: Path, messages: int = 10_000, senders: int = 4, kills: int = 3,
              message_streams: bool = True, seed: int = 1, log_level: str = "info",
              size: int | None = None, sync: str = "normal", over_ws: bool = False) -> CrashReport:
    """`messages` in all from `senders` nodes to one receiver, killed `kills`
    times; each message up to 1 KiB, or of `size` bytes; through /send and
    /recv, or over /ws (`over_ws`)."""
    config = {**CRASH_NODE_CONFIG, "message_streams": message_streams, "inbox_sync": sync}
    net = Testnet(senders + 1, "star", base_dir, log_level=log_level, extra_config=config)
    try:
        net.start()
        net.wait_converged(60)
        receiver = net.nodes[RECEIVER]
        share, extra = divmod(messages, senders)
        flows = [Sender(f"s{i}", net.nodes[i], share + (1 if i <= extra else 0)) for i in range(1, senders + 1)]
        by_name = {flow.name: flow for flow in flows}
        timeout = config["send_timeout_secs"] + config["lookup_timeout_secs"] + 10
        reader = _Reader(receiver, by_name)
        stop_reading = threading.Event()
        if over_ws:
            threads = [threading.Thread(target=asyncio.run, args=(_ws_traffic(flows, receiver.peer_id, seed, size,
                                                                              reader, stop_reading),),
                                        daemon=True)]
        else:
            threads = [threading.Thread(target=_send_all, args=(flow, receiver.peer_id, seed * 100 + i, timeout, size),
                                        daemon=True) for i, flow in enumerate(flows)]
            threads.append(threading.Thread(target=reader.run, args=(stop_reading,), daemon=True))
        rows = _RowFileCount(_payloads_folder(receiver))
        start = time.monotonic()
        for thread in threads:
            thread.start()
        rows.start()
        payloads = None if size is None or size < APART_BYTES else rows.folder
        killed, mid_payload = _kill_along(net, flows, messages, kills, start, random.Random(seed), payloads, size)
        while not all(flow.done for flow in flows) and time.monotonic() - start < RUN_TIMEOUT:
            time.sleep(0.05)
        stop_reading.set()
        for thread in threads:
            thread.join(max(1.0, RUN_TIMEOUT - (time.monotonic() - start)))
        seconds = time.monotonic() - start
        rows.stop()
        if not over_ws:
            reader.drain()
        report = _report("stream" if message_streams else "one connection per message", size, sync,
                         messages, flows, killed, mid_payload, reader, seconds)
        report.over_ws = over_ws
        report.row_files_seen = len(rows.seen)
        return report
    finally:
        net.stop()


class _RowFileCount:
    """The row files (`r<first>`) seen in the receiver's payload folder, looked at every few milliseconds."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            try:
                self.seen.update(entry.name for entry in os.scandir(self.folder) if entry.name.startswith("r"))
            except OSError:  # no folder yet, or the receiver is starting again
                pass


async def _ws_traffic(flows: list[Sender], dest: str, seed: int, size: int | None, reader: _Reader,
                      stop: threading.Event) -> None:
    """Every sender's messages over /ws, and the reader on /ws?recv=1 until `stop`, then until the queue is empty."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=5)
    async with aiohttp.ClientSession(timeout=timeout) as http_session:
        reading = asyncio.create_task(_ws_read(http_session, reader, stop))
        await asyncio.gather(*(_ws_send_all(http_session, flow, dest, random.Random(seed * 100 + i), size)
                               for i, flow in enumerate(flows)))
        await reading


async def _ws_send_all(http_session: aiohttp.ClientSession, sender: Sender, dest: str, rng: random.Random,
                       size: int | None) -> None:
    """Post each message over /ws until it is acknowledged, WS_WINDOW in flight;
    one whose ack is not 200, or whose socket went before its ack, goes again
    (a new attempt) after those already waiting."""
    key = bytes.fromhex(dest)
    waiting = deque(range(sender.count))  # message numbers, in the order they go next
    attempt = 0
    while waiting:
        in_flight: dict[int, int] = {}  # the socket's frame number -> attempt
        try:
            async with http_session.ws_connect(sender.node.bridge_url + "/ws") as ws:
                frame = 0
                while waiting or in_flight:
                    while waiting and len(in_flight) < WS_WINDOW:
                        attempt += 1
                        frame += 1
                        in_flight[frame] = attempt
                        await ws.send_bytes(key + _payload(sender, attempt, waiting.popleft(), rng, size))
                    message = await ws.receive(timeout=WS_ACK_TIMEOUT)
                    if message.type is not aiohttp.WSMsgType.TEXT:
                        raise ConnectionError(f"/ws of {sender.name}: {message.type.name}")
                    ack = json.loads(message.data)
                    acked = in_flight.pop(ack["ack"])
                    sender.settle(acked, ack["status"])
                    if ack["status"] != 200:
                        waiting.append(sender.message_of[acked])
        except (aiohttp.ClientError, ConnectionError, TimeoutError):
            for lost in in_flight.values():
                sender.settle(lost, 0)
                waiting.append(sender.message_of[lost])
            await asyncio.sleep(0.1)
    sender.done = True


async def _ws_read(http_session: aiohttp.ClientSession, reader: _Reader, stop: threading.Event) -> None:
    """Take the receiver's messages over /ws?recv=1, through its restarts;
    once `stop` is set, until nothing comes for a second."""
    url = f"{reader.node.bridge_url}/ws?recv=1&window={WS_READ_WINDOW}"
    while True:
        try:
            async with http_session.ws_connect(url) as ws:
                while True:
                    try:
                        message = await ws.receive(timeout=RECV_WAIT)
                    except TimeoutError:
                        if stop.is_set():
                            return
                        continue
                    if message.type is not aiohttp.WSMsgType.BINARY:
                        break
                    data = message.data
                    message_id = int.from_bytes(data[:8], "big")
                    reader.got(message_id, data[8:40].hex(), data[40:])
                    await ws.send_str(json.dumps({"done": message_id}))
        except (aiohttp.ClientError, ConnectionError, TimeoutError):
            pass
        await asyncio.sleep(0.05)


def _payloads_folder(node: TestnetNode) -> Path:
    inbox = json.loads(node.config_path.read_text())["inbox_path"]
    return Path(inbox + ".payloads")


def _kill_along(net: Testnet, flows: list[Sender], messages: int, kills: int, start: float,
                rng: random.Random, payloads: Path | None, size: int | None) -> tuple[int, int]:
    """SIGKILL the receiver each time another 1/(kills+1) of the messages is
    acknowledged, and a random moment more or (with `payloads`, every other
    kill at random) once a payload file is half written, starting it again
    at once; returns how many kills happened, and how many mid-payload."""
    killed = mid_payload = 0
    while killed < kills and time.monotonic() - start < RUN_TIMEOUT:
        if all(flow.done for flow in flows):
            break
        if sum(flow.acknowledged_count for flow in flows) >= messages * (killed + 1) / (kills + 1):
            if payloads is not None and size is not None and rng.random() < 0.5:
                mid_payload += _await_payload_being_written(payloads, size)
            else:
                time.sleep(rng.uniform(0, KILL_JITTER))
            net.kill(RECEIVER, hard=True)
            net.start_node(RECEIVER)
            killed += 1
        time.sleep(0.02)
    return killed, mid_payload


def _await_payload_being_written(folder: Path, size: int) -> bool:
    """Until a file in `folder` holds part of a payload of `size` bytes
    (False if none did within MID_PAYLOAD_WAIT)."""
    deadline = time.monotonic() + MID_PAYLOAD_WAIT
    while time.monotonic() < deadline:
        try:
            if any(0 < entry.stat().st_size < size for entry in os.scandir(folder)):
                return True
        except OSError:  # no folder yet, or the file went meanwhile
            pass
        time.sleep(0.001)
    return False


def _report(path: str, size: int | None, sync: str, messages: int, flows: list[Sender], kills: int,
            kills_mid_payload: int, reader: _Reader, seconds: float) -> CrashReport:
    attempts = acknowledged = distinct = lost = duplicated = out_of_order = unacked = 0
    statuses: dict[int, int] = {}
    for flow in flows:
        for status in flow.statuses.values():
            statuses[status] = statuses.get(status, 0) + 1
        acked = set(flow.acknowledged)
        counts: dict[int, int] = {}
        for attempt in flow.read:
            counts[attempt] = counts.get(attempt, 0) + 1
        attempts += len(flow.statuses)
        acknowledged += len(acked)
        distinct += len({flow.message_of[attempt] for attempt in counts})
        lost += sum(1 for attempt in acked if attempt not in counts)
        duplicated += sum(n - 1 for n in counts.values())
        out_of_order += sum(1 for a, b in zip(flow.read, flow.read[1:]) if b <= a)
        unacked += sum(1 for attempt in counts if attempt not in acked)
    return CrashReport(path, size, sync, messages, len(flows), kills, kills_mid_payload, attempts, acknowledged,
                       distinct, lost, duplicated, out_of_order, unacked, reader.redelivered, reader.forged,
                       statuses, seconds)
