"""The real yggdrasilctl against our node's admin socket and against a
yggdrasil router's (0.5.12 or 0.5.14, whichever AXL_GO_BIN_DIR holds), in one network: the same commands answer with
the same fields, in the same order and of the same kinds, plain and
-json; getNodeInfo and the remote debug commands work both ways; and
addPeer/removePeer change our node's peerings at once.

The network: go (a Go router, the root) <- ours (AdminListen) <- leaf (a
Go router), and private (ours again, with NodeInfoPrivacy) -> go."""

from __future__ import annotations

import json
import time

import pytest

from axl.harness import free_port
from goprocs import listen_uris, yggdrasil_version, yggdrasilctl
from nodes import wait_until

# Each answer's fields in the order of yggdrasil-go's structs (src/admin/*.go; 0.5.14's are 0.5.12's).
FIELDS = {
    "getSelf": ["build_name", "build_version", "key", "address", "routing_entries", "subnet"],
    "getPeers": ["remote", "up", "inbound", "address", "key", "port", "priority", "cost", "bytes_recvd",
                 "bytes_sent", "rate_recvd", "rate_sent", "uptime", "latency", "last_error_time", "last_error"],
    "getTree": ["address", "key", "parent", "sequence"],
    "getPaths": ["address", "key", "path", "sequence"],
    "getSessions": ["address", "key", "bytes_recvd", "bytes_sent", "uptime"],
}
# Go leaves these out when they are zero or empty (`omitempty`).
OMITEMPTY = {"remote", "address", "bytes_recvd", "bytes_sent", "rate_recvd", "rate_sent", "uptime", "latency",
             "last_error_time", "last_error"}
TABLES = {"getPeers": "peers", "getTree": "tree", "getPaths": "paths", "getSessions": "sessions"}


def kind(value) -> str:
    """A JSON value's kind as a Go struct field fixes it (int and float are both numbers)."""
    if isinstance(value, bool):
        return "bool"
    return "number" if isinstance(value, (int, float)) else type(value).__name__


@pytest.fixture(scope="module")
def network(mixed_module):
    return mixed_module


@pytest.fixture(scope="module")
def nodes(network):
    go = network.router("go", root=True, extra={"NodeInfo": {"name": "go"}}).start()
    ours = network.ours("ours", peers=listen_uris(go),
                        extra={"AdminListen": f"unix://{network.base}/ours-admin.sock", "NodeInfo": {"name": "ours"}})
    private = network.ours("private", listen=[], peers=listen_uris(go),
                           extra={"AdminListen": f"unix://{network.base}/private-admin.sock",
                                  "NodeInfo": {"name": "private"}, "NodeInfoPrivacy": True})
    network.cluster.start_all()
    leaf = network.router("leaf", peers=listen_uris(ours)).start()
    ctl = {"go": go.ctl, "ours": ours_ctl(network, ours), "private": ours_ctl(network, private)}
    wait_until(lambda: {p["key"] for p in ctl["ours"]("getPeers")["peers"] if p["up"]} == {go.peer_id, leaf.peer_id},
               30, what="ours peered with both Go routers")
    wait_until(lambda: go.up_peer_keys() == {ours.peer_id, private.peer_id}, 30, what="go's peerings")
    # Our nodes ask each peer its NodeInfo 3 s after peering; a Go request
    # crossing that one can be lost (docs/operations.md), so they go first.
    for node in (ours, private):
        wait_until(lambda: "go" in {p.get("name") for p in node.get_json("/topology")["peers"]}, 30,
                   what=f"{node.name} knowing go's name")
    # NodeInfo both ways opens a session each way, and a path each way.
    ctl["go"]("getNodeInfo", f"key={ours.peer_id}")
    ctl["ours"]("getNodeInfo", f"key={go.peer_id}")
    return {"go": go, "ours": ours, "private": private, "leaf": leaf, "ctl": ctl}


def ours_ctl(network, node):
    endpoint = json.loads(node.config_path.read_text())["AdminListen"]
    return lambda *command, plain=False: yggdrasilctl(network.bin_dir, endpoint, *command, plain=plain)


def entries(answer: dict, command: str) -> list[dict]:
    return [answer] if command == "getSelf" else answer[TABLES[command]]


def check_layout(entry: dict, command: str, who: str) -> None:
    names = list(entry)
    assert names == [name for name in FIELDS[command] if name in entry], f"{who} {command}: order {names}"
    missing = [name for name in FIELDS[command] if name not in entry and name not in OMITEMPTY]
    assert not missing, f"{who} {command}: missing {missing}"


@pytest.mark.parametrize("command", list(FIELDS))
def test_json_answers_have_the_go_routers_fields(nodes, command, figures):
    ctl = nodes["ctl"]
    go_answer, our_answer = ctl["go"](command), ctl["ours"](command)
    assert list(go_answer) == list(our_answer)
    go_entries, our_entries = entries(go_answer, command), entries(our_answer, command)
    assert go_entries and our_entries
    kinds: dict[str, str] = {}
    for who, found in (("go", go_entries), ("ours", our_entries)):
        for entry in found:
            check_layout(entry, command, who)
            for name, value in entry.items():
                assert kinds.setdefault(name, kind(value)) == kind(value), f"{command}.{name}: {who} {value!r}"
    go_fields = set().union(*map(set, go_entries))
    our_fields = set().union(*map(set, our_entries))
    assert go_fields - OMITEMPTY == our_fields - OMITEMPTY
    figures.append(f"yggdrasilctl {command}: ours {sorted(our_fields)}, Go only {sorted(go_fields - our_fields)}")


def test_both_see_the_same_network(nodes):
    ctl, go, ours, leaf = nodes["ctl"], nodes["go"], nodes["ours"], nodes["leaf"]
    trees = {who: {e["key"]: (e["parent"], e["address"]) for e in ctl[who]("getTree")["tree"]} for who in ("go", "ours")}
    shared = set(trees["go"]) & set(trees["ours"])  # each holds its own ancestry and its peers'
    assert shared >= {go.peer_id, ours.peer_id} and leaf.peer_id in trees["ours"]
    for key in shared:
        assert trees["go"][key] == trees["ours"][key]
    assert trees["ours"][go.peer_id][0] == go.peer_id, "the root is its own parent, as Go writes it"
    at_go = {p["key"]: p for p in ctl["go"]("getPeers")["peers"]}[ours.peer_id]
    at_ours = {p["key"]: p for p in ctl["ours"]("getPeers")["peers"]}
    assert at_go["inbound"] and not at_ours[go.peer_id]["inbound"] and at_ours[leaf.peer_id]["inbound"]
    assert at_ours[go.peer_id]["remote"] == listen_uris(go)[0] and at_go["address"] == ctl["ours"]("getSelf")["address"]
    assert {s["key"] for s in ctl["ours"]("getSessions")["sessions"]} >= {go.peer_id}
    assert {p["key"] for p in ctl["ours"]("getPaths")["paths"]} >= {go.peer_id}


def table_rows(text: str) -> list[list[str]]:
    """yggdrasilctl's plain table as rows of cells: tab-separated up to
    0.5.12, drawn with box borders (│ between cells, ─ rules) from 0.5.13."""
    rows = []
    for line in text.splitlines():
        if "│" in line:
            rows.append([cell.strip() for cell in line.strip().strip("│").split("│")])
        elif line.strip() and not set(line.strip()) <= set("┌┬┐├┼┤└┴┘─"):
            rows.append([cell.strip() for cell in line.split("\t")])
    return rows


@pytest.mark.parametrize("command", list(FIELDS))
def test_plain_tables_have_the_go_routers_columns(nodes, command):
    ctl = nodes["ctl"]
    go_rows, our_rows = (table_rows(ctl[who](command, plain=True)) for who in ("go", "ours"))
    if command == "getSelf":
        assert [row[0].split(":")[0] for row in our_rows] == [row[0].split(":")[0] for row in go_rows]
        return
    assert our_rows[0] == go_rows[0]
    assert len(our_rows) == 1 + len(entries(ctl["ours"](command), command))


def test_list_is_the_go_routers_list(network, nodes):
    """Ours is 0.5.14's list; a 0.5.12 router's lacks getPeers' `sort` only."""
    ctl = nodes["ctl"]
    if yggdrasil_version(network.bin_dir) >= (0, 5, 13):
        assert ctl["ours"]("list") == ctl["go"]("list")
        assert ctl["ours"]("list", plain=True) == ctl["go"]("list", plain=True)
        return
    expected = ctl["go"]("list")
    for entry in expected["list"]:
        if entry["command"] == "getpeers":
            entry["fields"] = ["sort"]
    assert ctl["ours"]("list") == expected


def test_get_peers_sorted_as_the_go_router_sorts(network, nodes):
    """`sort=cost` and `sort=uptime` (0.5.13) order our peers as Go's rules do."""
    if yggdrasil_version(network.bin_dir) < (0, 5, 13):
        pytest.skip("getPeers takes `sort` from yggdrasil 0.5.13")
    ctl = nodes["ctl"]
    by_cost = ctl["ours"]("getPeers", "sort=cost")["peers"]
    assert [(p["cost"], p["key"]) for p in by_cost] == sorted((p["cost"], p["key"]) for p in by_cost)
    go_by_cost = ctl["go"]("getPeers", "sort=cost")["peers"]
    assert [(p["cost"], p["key"]) for p in go_by_cost] == sorted((p["cost"], p["key"]) for p in go_by_cost)


def test_nodeinfo_both_ways(network, nodes):
    ctl, go, ours, private = nodes["ctl"], nodes["go"], nodes["ours"], nodes["private"]
    from_go = ctl["go"]("getNodeInfo", f"key={ours.peer_id}")[ours.peer_id]
    assert from_go["name"] == "ours" and from_go["buildname"] == "axl-py"
    assert set(from_go) == {"name", "buildname", "buildversion", "buildplatform", "buildarch"}
    from_ours = ctl["ours"]("getNodeInfo", f"key={go.peer_id}")[go.peer_id]
    version = ".".join(map(str, yggdrasil_version(network.bin_dir)))
    assert from_ours == {"name": "go", "buildname": "yggdrasil", "buildversion": version,
                         "buildplatform": from_go["buildplatform"], "buildarch": from_go["buildarch"]}
    assert ctl["go"]("getNodeInfo", f"key={private.peer_id}") == {private.peer_id: {"name": "private"}}
    assert ctl["private"]("getNodeInfo", f"key={go.peer_id}")[go.peer_id]["name"] == "go"
    plain_go = ctl["go"]("getNodeInfo", f"key={ours.peer_id}", plain=True)
    plain_ours = ctl["ours"]("getNodeInfo", f"key={ours.peer_id}", plain=True)
    assert json.loads(plain_ours) == json.loads(plain_go) and plain_ours == plain_go, "the same bytes either way"


@pytest.mark.parametrize("command", ["debug_remoteGetSelf", "debug_remoteGetPeers", "debug_remoteGetTree"])
def test_remote_debug_both_ways(nodes, command):
    ctl, go, ours = nodes["ctl"], nodes["go"], nodes["ours"]
    go_sees, ours_sees = ctl["go"](command, f"key={ours.peer_id}"), ctl["ours"](command, f"key={go.peer_id}")
    [(our_address, about_ours)] = go_sees.items()
    [(go_address, about_go)] = ours_sees.items()
    assert our_address == ctl["ours"]("getSelf")["address"] and go_address == ctl["go"]("getSelf")["address"]
    assert list(about_ours) == list(about_go)
    if command == "debug_remoteGetSelf":
        assert about_ours["key"] == ours.peer_id and about_go["key"] == go.peer_id
        assert about_ours["routing_entries"].isdigit() and about_go["routing_entries"].isdigit()
    else:
        assert go.peer_id in about_ours["keys"] and ours.peer_id in about_go["keys"]


def test_add_and_remove_peer_through_yggdrasilctl(network, nodes, figures):
    ctl, ours = nodes["ctl"], nodes["ours"]
    other = network.router("other").start()
    uri = listen_uris(other)[0]
    started = time.monotonic()
    assert ctl["ours"]("addPeer", f"uri={uri}") == {} == ctl["go"]("addPeer", f"uri={uri}")
    wait_until(lambda: ours.peer_id in other.up_peer_keys(), 10, interval=0.02, what="the added peering up")
    figures.append(f"yggdrasilctl addPeer on our node -> the Go router sees the peering up: "
                   f"{time.monotonic() - started:.2f} s")
    with pytest.raises(RuntimeError, match="already configured"):
        ctl["ours"]("addPeer", f"uri={uri}")
    assert ctl["ours"]("removePeer", f"uri={uri}", plain=True) == ctl["go"]("removePeer", f"uri={uri}", plain=True)
    wait_until(lambda: ours.peer_id not in {p["key"] for p in other.ctl("getPeers")["peers"]}, 10,
               what="the removed peering gone at the Go router")
    assert uri not in {p.get("remote") for p in ctl["ours"]("getPeers")["peers"]}
    with pytest.raises(RuntimeError, match="not configured"):
        ctl["ours"]("removePeer", f"uri={uri}")


def test_a_configured_peer_that_is_down_reads_the_same(nodes):
    ctl = nodes["ctl"]
    uri = f"tls://127.0.0.1:{free_port()}"  # nothing listens there
    for who in ("go", "ours"):
        ctl[who]("addPeer", f"uri={uri}")

    def down_entry(who: str) -> dict | None:
        return next((p for p in ctl[who]("getPeers")["peers"] if p.get("remote") == uri and "last_error" in p), None)

    try:
        wait_until(lambda: down_entry("go") and down_entry("ours"), 20, what="both report the failed dial")
        go_entry, our_entry = down_entry("go"), down_entry("ours")
        assert list(our_entry) == list(go_entry)
        assert our_entry["up"] is False and our_entry["key"] == "" and our_entry["last_error_time"] > 0
        assert "refused" in our_entry["last_error"].lower() and "refused" in go_entry["last_error"].lower()
        assert "Down" in ctl["ours"]("getPeers", plain=True)
    finally:
        for who in ("go", "ours"):
            ctl[who]("removePeer", f"uri={uri}")
