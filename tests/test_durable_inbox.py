"""The durable inbox with real nodes (SPEC.md section 8): a receiving node
SIGKILLed under a flood, on the message stream and on the Go node's one
connection per message, delivers every acknowledged message exactly once and
in order per sender; a restart keeps what was queued, for a client that
waited through it; a full disk refuses (503) without losing what was taken;
start-up refuses, in one line, a file it cannot use, and changes nothing in it.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiohttp
import pytest

from axl.chaos.crash import run_crash
from axl.harness import free_port, spawn_node
from axl.node.journal import GROUP_ARRIVING_SECONDS, GROUP_MOST
from axl.node.store import APART_BYTES, WAL_CAP_PAGES
from nodes import STARTED, Cluster, NodeProcess, drain, metric_samples, up_peers, wait_until


def test_a_receiver_killed_three_times_in_a_flood_of_10000_loses_and_repeats_nothing(tmp_path: Path) -> None:
    report = run_crash(tmp_path, messages=10_000, senders=4, kills=3)
    print(report.text())
    assert report.kills == 3
    assert report.acknowledged == 10_000 and report.distinct_read == 10_000
    assert (report.lost, report.duplicated, report.out_of_order, report.forged_sender) == (0, 0, 0, 0)


def test_the_same_holds_for_messages_in_payload_files_with_inbox_sync_full(tmp_path: Path) -> None:
    """Messages kept in files of their own (make crash runs 16 MiB ones),
    the receiver killed at random moments and while a file is half written."""
    report = run_crash(tmp_path, messages=120, senders=3, kills=2, size=16 * APART_BYTES, sync="full")
    print(report.text())
    assert report.kills == 2
    assert report.acknowledged == 120 and report.distinct_read == 120
    assert (report.lost, report.duplicated, report.out_of_order, report.forged_sender) == (0, 0, 0, 0)


def test_the_same_holds_on_one_connection_per_message(tmp_path: Path) -> None:
    """Senders with message_streams false send as Go nodes do: the FIN that
    acknowledges each message leaves the receiver only once it is committed."""
    report = run_crash(tmp_path, messages=2_000, senders=4, kills=2, message_streams=False)
    print(report.text())
    assert report.kills == 2
    assert report.acknowledged == 2_000 and report.distinct_read == 2_000
    assert (report.lost, report.duplicated, report.out_of_order, report.forged_sender) == (0, 0, 0, 0)



@pytest.mark.parametrize("sync", ["normal", "full"])
def test_the_same_holds_over_ws_with_a_window_of_messages_in_flight(tmp_path: Path, sync: str) -> None:
    """/ws senders keep hundreds of messages in flight: the receiver commits
    them a hundred or more at once (with "normal" in row files of their own)
    and is killed while it does, at times after its TCP took a window of
    messages it had not answered yet (the senders find that out with a probe
    at the send timeout, 10 s here, and reopen)."""
    report = run_crash(tmp_path, messages=30_000, senders=3, kills=2, over_ws=True, sync=sync)
    print(report.text())
    assert report.kills == 2
    assert report.acknowledged == 30_000 and report.distinct_read == 30_000
    assert (report.lost, report.duplicated, report.out_of_order, report.forged_sender) == (0, 0, 0, 0)
    assert report.row_files_seen > 0 if sync == "normal" else report.row_files_seen == 0

@pytest.fixture
def pair(tmp_path: Path):
    cluster = Cluster(tmp_path)
    receiver = cluster.add("r")
    sender = cluster.add("s", peers=[receiver])
    cluster.start_all()
    wait_until(lambda: sender.send(receiver.peer_id, b"warm-up")[0] == 200, 30, what="a path s -> r")
    drain(receiver)
    yield sender, receiver
    cluster.stop_all()


def restart(node: NodeProcess, sender: NodeProcess) -> None:
    node.start()
    wait_until(lambda: node.peer_id in up_peers(sender), 30, what="s peered with r again")


def poll_through_restart(node: NodeProcess, got: list[tuple[str, bytes]]) -> None:
    """A client's /recv?wait loop: while the node is down it keeps trying,
    as an application would; it stops at the first message."""
    while True:
        try:
            status, headers, body = node.request("GET", "/recv?wait=20", timeout=30)
        except OSError:
            time.sleep(0.05)
            continue
        if status == 200:
            got.append((headers["X-Message-Id"], body))
            return


def test_a_client_waiting_through_a_kill_gets_the_queue_back(pair) -> None:
    sender, receiver = pair
    for number in range(5):
        assert sender.send(receiver.peer_id, b"queued %d" % number)[0] == 200
    receiver.kill()
    got: list[tuple[str, bytes]] = []
    waiting = threading.Thread(target=poll_through_restart, args=(receiver, got))
    waiting.start()
    restart(receiver, sender)
    waiting.join(60)
    assert [body for _, body in got] == [b"queued 0"]
    assert drain(receiver) == [b"queued %d" % number for number in range(1, 5)]
    # A clean stop keeps them too (what arrived is committed before it ends).
    for number in range(3):
        assert sender.send(receiver.peer_id, b"again %d" % number)[0] == 200
    assert receiver.stop() == 0
    restart(receiver, sender)
    assert drain(receiver) == [b"again %d" % number for number in range(3)]


def test_ws_deliveries_not_done_survive_a_kill_with_their_ids(pair) -> None:
    sender, receiver = pair
    for number in range(3):
        assert sender.send(receiver.peer_id, b"w%d" % number)[0] == 200

    async def take_three_say_one_done_and_die() -> list[tuple[int, bytes]]:
        async with aiohttp.ClientSession() as http, http.ws_connect(f"{receiver.url}/ws?recv=1") as ws:
            frames = [await asyncio.wait_for(ws.receive(), 20) for _ in range(3)]
            delivered = [(int.from_bytes(f.data[:8], "big"), f.data[40:]) for f in frames]
            commits_before = commit_count(await (await http.get(f"{receiver.url}/metrics")).text())
            await ws.send_str(json.dumps({"done": delivered[0][0]}))
            # Until the deletion is committed, not only counted: a delivery
            # done just after messages arrived waits a moment for company,
            # and one killed meanwhile comes back (with its id).
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                metrics = await (await http.get(f"{receiver.url}/metrics")).text()
                if "axl_inbox_messages 2.0" in metrics and commit_count(metrics) > commits_before:
                    break
                await asyncio.sleep(0.05)
            assert "axl_inbox_messages 2.0" in metrics and "axl_inbox_durable 1.0" in metrics
            assert commit_count(metrics) > commits_before
            receiver.kill()  # its /ws client still holds two messages not done
            return delivered

    delivered = asyncio.run(take_three_say_one_done_and_die())
    assert [payload for _, payload in delivered] == [b"w0", b"w1", b"w2"]
    restart(receiver, sender)
    again = [receiver.recv(5) for _ in range(2)]
    assert [(int(headers["X-Message-Id"]), body) for _, headers, body in again] == delivered[1:]
    assert receiver.recv(0)[0] == 204


def commit_count(metrics: str) -> float:
    """How many commits the inbox has made, from /metrics."""
    return metric_samples(metrics)[("axl_inbox_commit_seconds_count", ())]


# -- files it will not use ------------------------------------------------------


def start_and_wait(config: Path, log: Path, command: list[str] | None = None) -> subprocess.Popen:
    process = spawn_node(config, log, command=command)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    return process


def write_config(tmp_path: Path, name: str, **fields: object) -> Path:
    key = tmp_path / f"{name}.pem"
    if not key.exists():
        subprocess.run([sys.executable, "-m", "axl.cli", "genkey", str(key)], check=True, capture_output=True)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"PrivateKeyPath": str(key), "api_port": free_port(), **fields}))
    return path


def error_lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith("axl-node: ")]


def test_a_damaged_inbox_stops_start_up_in_one_line_and_is_left_as_it_was(tmp_path: Path) -> None:
    inbox = tmp_path / "axl-inbox.sqlite3"
    inbox.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 64)
    before = inbox.read_bytes()
    log = tmp_path / "n.log"
    process = start_and_wait(write_config(tmp_path, "n"), log)
    assert process.returncode == 1
    [line] = error_lines(log)
    assert "the database is damaged" in line and "nothing in it was changed" in line
    assert "Traceback" not in log.read_text()
    assert inbox.read_bytes() == before


def test_another_nodes_inbox_or_one_in_use_stops_start_up(tmp_path: Path) -> None:
    config = write_config(tmp_path, "first")
    first = NodeProcess("first", config, json.loads(config.read_text())["api_port"], None, tmp_path / "first.log")
    first.start()
    try:
        # Beside the same key folder, a second node gets the same default file: in use.
        log = tmp_path / "second.log"
        process = start_and_wait(write_config(tmp_path, "second"), log)
        assert process.returncode == 1
        [line] = error_lines(log)
        assert "another process has it open" in line and "its own inbox_path" in line
    finally:
        first.stop()
    log = tmp_path / "second-again.log"
    process = start_and_wait(write_config(tmp_path, "second"), log)
    assert process.returncode == 2
    [line] = error_lines(log)
    assert line.startswith(f"axl-node: inbox_path: {tmp_path / 'axl-inbox.sqlite3'} is the inbox of node "
                           f"{first.peer_id[:16]}…, not of this node")


def namespaces_unavailable() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare is not installed"
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True, text=True)
    return f"cannot create a mount namespace here: {probe.stderr.strip()}" if probe.returncode else None


def on_small_disk(folder: Path, size: str) -> list[str]:
    """The node's command, run in its own mount namespace with `folder` a tmpfs of `size`."""
    return ["unshare", "-rm", "sh", "-c", f'mount -t tmpfs -o size={size} tmpfs "$0" && exec "$@"',
            str(folder), sys.executable, "-m", "axl.cli"]


@pytest.mark.skipif(bool(namespaces_unavailable()), reason=namespaces_unavailable() or "")
def test_a_full_disk_at_start_up_stops_it_in_one_line(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    command = ["unshare", "-rm", "sh", "-c",
               'mount -t tmpfs -o size=64k tmpfs "$0" && head -c 65536 /dev/zero > "$0/filler"; exec "$@"',
               str(disk), sys.executable, "-m", "axl.cli"]
    log = tmp_path / "n.log"
    process = start_and_wait(write_config(tmp_path, "n", inbox_path=str(disk / "inbox.sqlite3")), log, command)
    assert process.returncode == 1
    [line] = error_lines(log)
    assert "the disk is full" in line


@pytest.mark.skipif(bool(namespaces_unavailable()), reason=namespaces_unavailable() or "")
def test_a_disk_that_fills_up_refuses_new_messages_and_loses_none(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    disk = tmp_path / "disk"
    disk.mkdir()
    receiver = cluster.add("r", extra={"inbox_path": str(disk / "inbox.sqlite3"), "max_inbox_messages": 100_000})
    sender = cluster.add("s", peers=[receiver])
    receiver.process = spawn_node(receiver.config_path, receiver.log_path, command=on_small_disk(disk, "1m"))
    STARTED.append(receiver)
    try:
        wait_until(lambda: receiver.get_json("/topology"), 20, what="r's bridge")
        receiver.peer_id = receiver.get_json("/topology")["our_public_key"]
        sender.start()
        wait_until(lambda: sender.send(receiver.peer_id, b"warm-up")[0] == 200, 30, what="a path s -> r")
        # Half the disk goes to another file; messages fill the rest.
        filler = Path(f"/proc/{receiver.process.pid}/root") / disk.relative_to("/") / "filler"
        filler.write_bytes(bytes(512 << 10))
        accepted, refused = [b"warm-up"], 0
        for number in range(2000):
            payload = b"%05d" % number + bytes(1019)
            status = sender.send(receiver.peer_id, payload)[0]
            if status == 200:
                accepted.append(payload)
            else:
                assert status == 503
                refused += 1
                if refused == 3:
                    break
        assert refused == 3, "the disk never filled up"
        assert "inbox: cannot commit to" in receiver.log_path.read_text()
        filler.unlink()
        wait_until(lambda: sender.send(receiver.peer_id, b"after")[0] == 200, 20, what="a commit again")
        assert drain(receiver) == [*accepted, b"after"]
    finally:
        cluster.stop_all()


def test_a_second_node_given_the_file_by_another_name_stops_at_start_up(tmp_path: Path) -> None:
    """The lock is the file's, whatever name the config gives it: a symbolic
    link to it is the same file, and a hard link (a second name SQLite would
    keep a second WAL beside) is refused outright."""
    inbox = tmp_path / "inbox.sqlite3"
    config = write_config(tmp_path, "first", inbox_path=str(inbox))
    first = NodeProcess("first", config, json.loads(config.read_text())["api_port"], None, tmp_path / "first.log")
    first.start()
    (tmp_path / "elsewhere").mkdir()
    linked = tmp_path / "elsewhere" / "inbox.sqlite3"
    linked.symlink_to(inbox)
    try:
        log = tmp_path / "second.log"
        process = start_and_wait(write_config(tmp_path, "first", inbox_path=str(linked)), log)
        assert process.returncode == 1
        [line] = error_lines(log)
        assert "another process has it open" in line and "its own inbox_path" in line
    finally:
        first.stop()
    hard = tmp_path / "elsewhere" / "hard.sqlite3"
    hard.hardlink_to(inbox)
    log = tmp_path / "third.log"
    process = start_and_wait(write_config(tmp_path, "first", inbox_path=str(hard)), log)
    assert process.returncode == 1
    [line] = error_lines(log)
    assert "the file has 2 names (hard links)" in line


def cpu_seconds(pid: int) -> float:
    """The process's user and system CPU time so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_reader_holding_the_wal_past_its_cap_gets_senders_a_prompt_503_and_costs_no_cpu(tmp_path: Path) -> None:
    """Another process's read transaction (an sqlite3 shell) keeps the WAL
    from starting over; past its cap the node refuses new messages in time,
    retries the checkpoint after a back-off (not back to back), says so in
    one log line, and takes messages again once the reader is gone. With
    "full", whose rows stay in the database however long: the WAL grows."""
    cluster = Cluster(tmp_path)
    node = cluster.add("a", extra={"inbox_sync": "full"})
    node.start()
    try:
        assert node.send(node.peer_id, b"warm-up")[0] == 200
        assert drain(node) == [b"warm-up"]
        reader = sqlite3.connect(cluster.inbox_path("a"), isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM batches").fetchone()
        # Payloads kept in the database (below APART_BYTES), until the WAL is past its cap of 16,000 pages.
        size, statuses = APART_BYTES * 3 // 4, []
        for number in range(WAL_CAP_PAGES * 4096 // size + 40):
            statuses.append(node.send(node.peer_id, number.to_bytes(2, "big") * (size // 2), timeout=20)[0])
            if statuses[-1] == 503:
                break
        assert statuses[-1] == 503, statuses[-3:]
        accepted = statuses.count(200)
        idle_from = cpu_seconds(node.process.pid)
        time.sleep(4)
        assert cpu_seconds(node.process.pid) - idle_from < 1.0  # no checkpoints back to back
        assert node.log_path.read_text().count("cannot be emptied") == 1
        reader.rollback()
        reader.close()
        wait_until(lambda: node.send(node.peer_id, b"after")[0] == 200, 20, what="messages taken again")
        got = drain(node)
        assert [payload[:2] for payload in got[:-1]] == [n.to_bytes(2, "big") for n in range(accepted)]
        assert got[-1] == b"after"
        assert "was emptied: new messages are taken again" in node.log_path.read_text()
    finally:
        cluster.stop_all()


def _receiver_with_16_on_a_full_disk(cluster: Cluster, tmp_path: Path, quiet: bool = True) -> tuple[NodeProcess, Path]:
    """A node whose inbox (on a 2 MiB tmpfs of its own) holds 16 messages,
    then a disk filled to the last block: it can commit nothing more. The
    filler's path is returned so that the test can free the disk again.
    `quiet`: the node has then received nothing for a while."""
    disk = tmp_path / "disk"
    disk.mkdir()
    receiver = cluster.add("r", extra={"inbox_path": str(disk / "inbox.sqlite3")})
    receiver.process = spawn_node(receiver.config_path, receiver.log_path, command=on_small_disk(disk, "2m"))
    STARTED.append(receiver)
    wait_until(lambda: receiver.get_json("/topology"), 20, what="r's bridge")
    receiver.peer_id = receiver.get_json("/topology")["our_public_key"]
    for number in range(16):
        assert receiver.send(receiver.peer_id, b"m%02d" % number)[0] == 200
    filler = Path(f"/proc/{receiver.process.pid}/root") / disk.relative_to("/") / "filler"
    fill = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError, match="No space left"):
            while os.write(fill, bytes(1 << 20)) == 1 << 20:  # quickly
                pass
            while True:  # then to the last block
                os.write(fill, bytes(4096))
    finally:
        os.close(fill)
    if quiet:
        # A delivery's deletion is now committed in its own turn, not held
        # back for the commit of a message that may come.
        time.sleep(GROUP_ARRIVING_SECONDS * 5)
    return receiver, filler


@pytest.mark.skipif(bool(namespaces_unavailable()), reason=namespaces_unavailable() or "")
def test_a_full_disk_stops_recv_handing_out_what_it_cannot_delete(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        receiver, filler = _receiver_with_16_on_a_full_disk(cluster, tmp_path)
        handed_out, answer = [], None
        for _ in range(16):
            status, _headers, body = receiver.recv(0)
            if status != 200:
                answer = (status, body)
                break
            handed_out.append(body)
        assert len(handed_out) <= 2, "/recv handed out messages whose deletions cannot commit"
        assert answer is not None and answer[0] == 503
        assert b"the inbox cannot record deliveries (database or disk is full)" in answer[1]
        filler.unlink()
        wait_until(lambda: receiver.recv(0)[0] != 503, 20, what="/recv hands out messages again")
        assert receiver.log_path.read_text().count("inbox: cannot commit to") == 1
    finally:
        cluster.stop_all()


@pytest.mark.skipif(bool(namespaces_unavailable()), reason=namespaces_unavailable() or "")
def test_a_full_disk_soon_stops_a_keep_alive_recv_client_while_messages_come(tmp_path: Path) -> None:
    """Just after a message came, deliveries' deletions wait (a little) for
    company, and a client on one connection takes a message every few tens
    of microseconds: a held commit gathers at most GROUP_MOST deletions, so
    it hands out at most that many more before /recv refuses."""
    cluster = Cluster(tmp_path)
    try:
        receiver, _filler = _receiver_with_16_on_a_full_disk(cluster, tmp_path, quiet=False)
        connection = http.client.HTTPConnection("127.0.0.1", receiver.api_port, timeout=20)
        handed_out, status = 0, 200
        while status == 200 and handed_out < 16:
            connection.request("GET", "/recv")
            answer = connection.getresponse()
            answer.read()
            status = answer.status
            handed_out += status == 200
        connection.close()
        assert status == 503, "/recv handed out every message on a full disk"
        assert handed_out <= GROUP_MOST + 1, "/recv handed out messages whose deletions cannot commit"
    finally:
        cluster.stop_all()


async def _ws_deliveries(base: str, seconds: float) -> int:
    """How many messages a /ws?recv=1 receiver is handed within `seconds`."""
    handed = 0
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(f"{base}/ws?recv=1") as ws:
            deadline = time.monotonic() + seconds
            while (left := deadline - time.monotonic()) > 0:
                try:
                    frame = await ws.receive(timeout=left)
                except asyncio.TimeoutError:
                    break
                if frame.type != aiohttp.WSMsgType.BINARY:
                    break
                handed += 1
    return handed


@pytest.mark.skipif(bool(namespaces_unavailable()), reason=namespaces_unavailable() or "")
def test_a_full_disk_stops_ws_handing_out_what_it_cannot_delete(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        receiver, _filler = _receiver_with_16_on_a_full_disk(cluster, tmp_path)
        wait_until(lambda: receiver.recv(0)[0] == 503, 20, what="/recv refusing on the full disk")
        assert asyncio.run(_ws_deliveries(receiver.url, 3.0)) == 0, \
            "/ws handed out messages whose deletions cannot commit"
    finally:
        cluster.stop_all()
