"""Three attacks on a real node's budgets, each with its memory and /health watched.

Before the budgets, each grew the node by hundreds of MiB (`python -m axl.chaos
hostile` against that build: a 4 GiB WebSocket message +234 MiB, a
window-ignoring MCP flood +168 MiB, pipelined requests never read +488 MiB
with /health taking 8 s). Now each stays within ATTACK_RSS_BUDGET, and
/health, asked on a connection of its own all along, never fails. How fast
/health answers is measured and printed, not asserted: docs/security.md has
the figures.
"""

from __future__ import annotations

from axl.budgets import DISPATCHES_PER_PEER, MAX_READ_AHEAD, READ_AHEAD_PER_NODE, KiB
from axl.chaos.hostile import (ATTACK_RSS_BUDGET, DISPATCH_MESSAGES, PIPELINE_CLIENTS, AttackReport,
                               attack_dispatch_flood, attack_pipeline, attack_pipeline_many, attack_sequence_jump,
                               attack_ws_message)

# What one read can add to a connection's read-ahead before its reading pauses.
READ_SIZE = 256 * KiB


def holds(report: AttackReport) -> None:
    print(report.text())
    assert report.rss_growth < ATTACK_RSS_BUDGET, report.text()
    assert report.health_answers > 0 and not report.health_failures, report.text()


def test_a_giant_websocket_message_closes_the_link_before_it_is_buffered(tmp_path) -> None:
    report = attack_ws_message(tmp_path)
    holds(report)
    assert "the node closed the connection" in report.outcome


def test_a_peer_ignoring_the_stream_window_is_refused_beyond_its_dispatch_budget(tmp_path) -> None:
    """The MCP router holds every request: DISPATCHES_PER_PEER reach it, every
    other envelope is answered 503 at once and its sender reports it, and the
    node's /metrics count the refusals (at the dispatch budget, or already at
    the stream's window when more than it arrive in one read)."""
    report, flood = attack_dispatch_flood(tmp_path)
    holds(report)
    assert flood.arrived_at_router == DISPATCHES_PER_PEER
    assert flood.statuses == {200: DISPATCHES_PER_PEER, 503: DISPATCH_MESSAGES - DISPATCHES_PER_PEER}
    refused = flood.refused["inbound_dispatches", "peer"] + flood.refused["stream_window", "stream"]
    assert refused == DISPATCH_MESSAGES - DISPATCHES_PER_PEER


def test_pipelined_requests_never_read_are_held_back(tmp_path) -> None:
    report = attack_pipeline(tmp_path)
    holds(report)
    assert "held the client back" in report.outcome


def test_many_clients_pipelining_share_the_node_read_ahead_budget(tmp_path) -> None:
    """64 connections together could hold 64 MiB read ahead at 1 MiB each; the
    node's budget stops them near READ_AHEAD_PER_NODE (each connection may
    finish the read that crossed it)."""
    report, held = attack_pipeline_many(tmp_path)
    holds(report)
    assert PIPELINE_CLIENTS * MAX_READ_AHEAD > READ_AHEAD_PER_NODE + PIPELINE_CLIENTS * READ_SIZE
    assert held.read_ahead <= READ_AHEAD_PER_NODE + PIPELINE_CLIENTS * READ_SIZE, held.text()
    assert held.paused_at_node_budget > 0, held.text()


def test_a_sequence_number_jump_resets_the_stream_and_every_sender_is_answered(tmp_path) -> None:
    """A jump of 2**31 on an open session took the receiver from 47 to 593
    MiB (by 2**45 its commit failed and both senders' messages were never
    answered, their inbox room taken for good). Now the jump resets the
    stream (its sender, reopening twice, reports 504), a session starting
    that far up is taken as it is (200, in constant memory), and another
    sender's message is answered 200."""
    report, jumps = attack_sequence_jump(tmp_path)
    holds(report)
    assert jumps.jumped == 504 and jumps.far_start == [200, 200] and jumps.well_behaved == 200, jumps.text()
    assert jumps.refused["stream_seq_window", "stream"] == 3, jumps.text()  # the jump and its two repeats
    assert (tmp_path / "target.log").read_text().count("(outside the window): reset") == 1  # one line per 10 s
