"""NodeCore driven as the daemon drives it, against a peer that behaves like
a Go AXL node: it checks every TCP checksum, listens on `tcp_port` only,
advertises MSS 1220, and answers each segment at once with a bare ACK (as
gVisor does). The daemon feeds every frame one event-loop turn read with
`flush=False` and flushes once at the turn's end; this driver does the same,
on a virtual clock."""

from __future__ import annotations

import dataclasses
import random

import pytest
from test_node_core import SETTINGS

from axl.identity import NodeIdentity
from axl.node.core import NodeCore
from axl.node.messages import Acknowledged, InboundMessage, SendFailed
from axl.routing.frames import split_frame
from axl.tcp.connection import IPV6_DEFAULT_MSS
from axl.tcp.segment import decode_packet

# GoLikePeer swaps the Go-like core's MessageLayer.packet_received.
pytestmark = pytest.mark.replaces_compiled_method

TURN = 0.002
"""Virtual seconds per event-loop turn of our node."""
SETTLE = 10.0
"""Long enough for the tree and both blooms: a first lookup then finds its way."""


class GoLikePeer:
    """Our core and a Go-like one on one link.

    Like gVisor, the Go-like core takes the first data segment of a new
    connection in after the ones behind it when they arrive together: the
    segment that completes the handshake goes through the listener's accept
    path while the others reach the new endpoint directly. The segments
    behind it are answered with duplicate ACKs, and the ACK of everything
    follows at once, so our core reads the duplicates that start fast
    recovery and the ACK that ends it in one turn."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.ours = NodeCore(NodeIdentity.from_seed(b"\x01" * 32), SETTINGS, self.now, rng=random.Random(1))
        self.go = NodeCore(NodeIdentity.from_seed(b"\x02" * 32),
                           dataclasses.replace(SETTINGS, streams=False), self.now, rng=random.Random(2))
        self.go.stack.verify_checksums = True
        self.go.stack.mss_for_remote = lambda address: IPV6_DEFAULT_MSS
        self.ours.link_up(1, self.go.identity.public_key, 0, self.now)
        self.go.link_up(1, self.ours.identity.public_key, 0, self.now)
        self._take_in = self.go.messages.packet_received
        self.go.messages.packet_received = self._accept_path
        self.first_data_seen: set[int] = set()
        self.accepting: list[tuple[bytes, bytes]] = []
        self.events: list = []
        self.received: list[bytes] = []

    @property
    def go_key(self) -> bytes:
        return self.go.identity.public_key

    def _accept_path(self, source_key: bytes, packet: bytes, now: float) -> None:
        segment = decode_packet(packet, verify_checksum=False).segment
        if segment.payload and segment.src_port not in self.first_data_seen:
            self.first_data_seen.add(segment.src_port)
            self.accepting.append((source_key, bytes(packet)))
            return
        self._take_in(source_key, packet, now)

    def turn(self) -> bool:
        """One turn: what we wrote reaches the Go-like core (which answers each
        segment at once); what it wrote reaches ours with flush=False, then ours flushes."""
        arriving = [write.frame for write in self.ours.frames_to_send()]
        for frame in arriving:
            self.go.frame_received(1, *split_frame(frame), self.now)
        while self.accepting:
            self._take_in(*self.accepting.pop(0), self.now)
            self.go.flush(self.now)
        while (event := self.go.next_event()) is not None:
            assert isinstance(event, InboundMessage)
            self.received.append(event.payload)
            self.go.answer_inbound(event.handle, True, None, self.now)
        answers = self.go.frames_to_send()
        for write in answers:
            self.ours.frame_received(1, *split_frame(write.frame), self.now, flush=False)
        self.ours.flush(self.now)
        while (event := self.ours.next_event()) is not None:
            self.events.append(event)
        return bool(arriving or answers)

    def run_until(self, done, limit: float) -> None:
        end = self.now + limit
        while not done() and self.now < end:
            if self.turn():
                self.now += TURN
            else:
                self.now = max(self.now + TURN, min(self.ours.get_timer(), self.go.get_timer()))
            for core in (self.ours, self.go):
                if core.get_timer() <= self.now:
                    core.handle_timer(self.now)


def outcome(peer: GoLikePeer, handle: int):
    for event in peer.events:
        if event.handle == handle and isinstance(event, (Acknowledged, SendFailed)):
            return event
    return None


def test_a_first_send_to_a_go_node_is_refused_on_the_stream_port_and_delivered_on_tcp_port():
    """The stream probe's SYN carries a valid checksum, so a node that checks
    it answers with RST at once and the message takes its own connection."""
    peer = GoLikePeer()
    peer.run_until(lambda: False, SETTLE)
    start = peer.now
    handle = peer.ours.send_message(peer.go_key, b"first contact", peer.now)
    peer.run_until(lambda: outcome(peer, handle) is not None, 20.0)
    assert isinstance(outcome(peer, handle), Acknowledged)
    assert peer.received == [b"first contact"]
    assert peer.now - start < 1.0, "refused by the first SYN, not after its retries"


@pytest.mark.parametrize("size", [20_000, 100_000, 1 << 20, 4 << 20])
def test_transfers_to_a_go_like_peer_never_stall_when_its_acks_are_read_together(size):
    peer = GoLikePeer()
    peer.run_until(lambda: False, SETTLE)
    payload = random.Random(size).randbytes(size)
    handle = peer.ours.send_message(peer.go_key, payload, peer.now)
    peer.run_until(lambda: outcome(peer, handle) is not None, 30.0)
    assert isinstance(outcome(peer, handle), Acknowledged), outcome(peer, handle)
    assert peer.received == [payload]
