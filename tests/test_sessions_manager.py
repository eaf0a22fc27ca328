"""Two session managers talking through a function: handshakes, ratchets,
loss of state, and hostile input."""

import random
from dataclasses import dataclass, field

import pytest

from axl.identity import NodeIdentity
from axl.sessions import DeliverPlaintext, KeyPair, Rekeyed, SendPacket, SessionManager
from axl.sessions.handshake import TYPE_ACK, TYPE_INIT, TYPE_TRAFFIC, open_handshake
from axl.wire import decode_uvarint

T0 = 1_700_000_000.0


def seeded_keys(seed: int):
    rng = random.Random(seed)
    return lambda: KeyPair.from_private(rng.randbytes(32))


def node(n: int, **kwargs) -> SessionManager:
    ident = NodeIdentity.from_seed(bytes([n]) * 32)
    return SessionManager(ident, key_pairs=seeded_keys(n), **kwargs)


@dataclass
class Net:
    """Delivers SendPacket actions to the other manager until nothing moves."""

    nodes: dict[bytes, SessionManager]
    delivered: list[tuple[bytes, bytes, bytes]] = field(default_factory=list)
    packets: list[tuple[bytes, bytes, bytes]] = field(default_factory=list)
    rekeyed: list[tuple[bytes, bytes]] = field(default_factory=list)

    def run(self, sender: bytes, actions, now: float) -> None:
        queue = [(sender, a) for a in actions]
        while queue:
            source, action = queue.pop(0)
            if isinstance(action, DeliverPlaintext):
                self.delivered.append((source, action.source_key, action.message))
                continue
            if isinstance(action, Rekeyed):
                self.rekeyed.append((source, action.remote_key))
                continue
            self.packets.append((source, action.dest_key, action.packet))
            dest = self.nodes[action.dest_key]
            queue += [(action.dest_key, a) for a in dest.receive(source, action.packet, now)]

    def messages_at(self, key: bytes) -> list[bytes]:
        return [m for at, _, m in self.delivered if at == key]


def pair(**kwargs):
    a, b = node(1, **kwargs), node(2, **kwargs)
    return a, b, Net({a.identity.public_key: a, b.identity.public_key: b})


def key(m: SessionManager) -> bytes:
    return m.identity.public_key


def handshake(a, b, net, now=T0):
    net.run(key(a), a.send(key(b), b"hello", now), now)
    assert net.messages_at(key(b)) == [b"hello"]


def test_a_head_arrives_before_its_message_whether_sealed_at_once_or_buffered():
    a, b, net = pair()
    net.run(key(a), a.send(key(b), b"buffered", T0, head=b"\x01"), T0)
    net.run(key(a), a.send(key(b), memoryview(b"sealed at once"), T0 + 1, head=b"\x01"), T0 + 1)
    assert net.messages_at(key(b)) == [b"\x01buffered", b"\x01sealed at once"]


def test_handshake_and_data_both_ways():
    a, b, net = pair()
    handshake(a, b, net)
    kinds = [p[2][0] for p in net.packets]
    assert kinds[:2] == [TYPE_INIT, TYPE_ACK]
    assert all(len(p[2]) == 193 for p in net.packets if p[2][0] in (TYPE_INIT, TYPE_ACK))
    net.run(key(b), b.send(key(a), b"reply", T0 + 1), T0 + 1)
    net.run(key(a), a.send(key(b), b"again", T0 + 2), T0 + 2)
    assert net.messages_at(key(a)) == [b"reply"]
    assert net.messages_at(key(b)) == [b"hello", b"again"]
    assert a.session_keys() == [key(b)] and b.session_keys() == [key(a)]


def test_long_conversation_ratchets_at_most_once_a_minute():
    a, b, net = pair()
    handshake(a, b, net)
    seqs = []
    for step in range(1, 200):
        now = T0 + step * 2
        sender, receiver = (a, b) if step % 2 else (b, a)
        net.run(key(sender), sender.send(key(receiver), b"m%d" % step, now), now)
        seqs.append((now, a._sessions[key(b)].local_key_seq))
    assert len(net.delivered) == 200
    changes = [now for (now, s), (_, prev) in zip(seqs[1:], seqs) if s != prev]
    assert len(changes) >= 5
    assert all(later - earlier > 60 for earlier, later in zip(changes, changes[1:]))
    assert sum(1 for p in net.packets if p[2][0] != TYPE_TRAFFIC) == 3


def test_reordered_packet_is_dropped_silently():
    a, b, net = pair()
    handshake(a, b, net)
    [first] = a.send(key(b), b"one", T0 + 1)
    [second] = a.send(key(b), b"two", T0 + 1)
    assert b.receive(key(a), second.packet, T0 + 1) == [DeliverPlaintext(key(a), b"two")]
    assert b.receive(key(a), first.packet, T0 + 1) == []
    assert b.dropped["replay"] == 1


def test_replay_is_dropped_silently():
    a, b, net = pair()
    handshake(a, b, net)
    [packet] = a.send(key(b), b"once", T0 + 1)
    assert b.receive(key(a), packet.packet, T0 + 1) == [DeliverPlaintext(key(a), b"once")]
    assert b.receive(key(a), packet.packet, T0 + 1) == []


def test_self_healing_after_restart():
    """The first packet meets a stranger, whose throwaway Init (one second
    below its clock) the sender accepts; the restarted side's Ack, at its
    clock, outranks it, so the sessions agree after that one round trip and
    the sender is told to retransmit. (With Go's equal seqs the sender ignored
    that Ack and the second packet was lost too.)"""
    a, b, net = pair()
    handshake(a, b, net)
    restarted = node(2)
    restarted._new_keys = seeded_keys(99)
    net.nodes[key(b)] = restarted
    for i in range(4):
        now = T0 + 5 + i
        net.run(key(a), a.send(key(b), b"m%d" % i, now), now)
    assert net.messages_at(key(b)) == [b"hello", b"m1", b"m2", b"m3"]
    assert (key(a), key(b)) in net.rekeyed, "the sender learns its session was re-keyed"
    net.run(key(b), restarted.send(key(a), b"back", T0 + 10), T0 + 10)
    assert net.messages_at(key(a)) == [b"back"]


def test_simultaneous_init():
    a, b, net = pair()
    from_a = a.send(key(b), b"from a", T0)
    from_b = b.send(key(a), b"from b", T0)
    net.run(key(a), from_a, T0)
    net.run(key(b), from_b, T0)
    for step in range(1, 5):
        now = T0 + step
        net.run(key(a), a.send(key(b), b"a%d" % step, now), now)
        net.run(key(b), b.send(key(a), b"b%d" % step, now), now)
    assert net.messages_at(key(b))[-3:] == [b"a2", b"a3", b"a4"]
    assert net.messages_at(key(a))[-3:] == [b"b2", b"b3", b"b4"]
    assert b"from a" in net.messages_at(key(b)) and b"from b" in net.messages_at(key(a))


def test_send_buffer_keeps_only_the_newest_and_resends_init():
    a, b, net = pair()
    [init1] = a.send(key(b), b"first", T0)
    [init2] = a.send(key(b), b"second", T0 + 3)
    assert init1.packet != init2.packet and init1.packet[0] == init2.packet[0] == TYPE_INIT
    b_private = b._curve_private
    fields1 = open_handshake(init1.packet, key(a), b_private)
    fields2 = open_handshake(init2.packet, key(a), b_private)
    assert fields1 == fields2 and fields1.seq == int(T0)
    net.run(key(a), [init2], T0 + 3)
    assert net.messages_at(key(b)) == [b"second"]


def test_an_init_sent_again_after_a_lost_ack_is_answered_with_the_same_ack():
    """b made its session from a's Init and answered; the Ack was lost. a's
    next Init (the same one) must be answered again, not ignored as a
    repeat, and with the same keys and seq: an a that had the first Ack
    takes it as a duplicate."""
    a, b, net = pair()
    [init] = a.send(key(b), b"first", T0)
    [lost_ack] = [action for action in b.receive(key(a), init.packet, T0) if isinstance(action, SendPacket)]
    assert lost_ack.packet[0] == TYPE_ACK and b.session_keys() == [key(a)]
    [again] = a.send(key(b), b"second", T0 + 1)
    answers = b.receive(key(a), again.packet, T0 + 1)
    [ack] = [action for action in answers if isinstance(action, SendPacket)]
    assert ack.packet[0] == TYPE_ACK
    a_private = a._curve_private
    assert open_handshake(ack.packet, key(b), a_private) == open_handshake(lost_ack.packet, key(b), a_private)
    net.run(key(b), answers, T0 + 1)
    assert a.session_keys() == [key(b)]
    net.run(key(b), [ack], T0 + 1)
    net.run(key(a), a.send(key(b), b"third", T0 + 2), T0 + 2)
    assert [bytes(m) for m in net.messages_at(key(b))] == [b"second", b"third"]


def test_an_init_repeated_after_traffic_is_not_answered():
    """Once traffic came in the session, the remote has our Ack: a stale
    repeat of its Init gets nothing (as from Go)."""
    a, b, net = pair()
    [init] = a.send(key(b), b"first", T0)
    handshake_packet = init.packet
    net.run(key(a), [init], T0)
    assert net.messages_at(key(b)) == [b"first"]
    assert [action for action in b.receive(key(a), handshake_packet, T0 + 1) if isinstance(action, SendPacket)] == []


def test_session_and_buffer_expire():
    a, b, net = pair()
    handshake(a, b, net)
    assert a.tick(T0 + 59) == [] and a.session_keys() == [key(b)]
    a.tick(T0 + 61)
    assert a.session_keys() == []
    a.send(key(b), b"buffered", T0 + 100)
    assert key(b) in a._buffers
    a.tick(T0 + 161)
    assert not a._buffers


def test_expired_session_is_not_used_before_tick():
    a, b, net = pair()
    handshake(a, b, net)
    [action] = a.send(key(b), b"late", T0 + 61)
    assert action.packet[0] == TYPE_INIT


def test_traffic_without_session_gets_throwaway_init():
    a, b, net = pair()
    handshake(a, b, net)
    [traffic] = a.send(key(b), b"x", T0 + 1)
    stranger = node(3)
    [reply] = stranger.receive(key(a), traffic.packet, T0 + 1)
    assert reply.dest_key == key(a) and reply.packet[0] == TYPE_INIT
    assert len(reply.packet) == 193
    assert stranger.session_keys() == [] and not stranger._buffers


def test_unknown_key_combination_and_bad_decrypt_send_init():
    a, b, net = pair()
    handshake(a, b, net)
    [traffic] = a.send(key(b), b"x", T0 + 1)
    tampered = bytes(traffic.packet[:-1]) + bytes([traffic.packet[-1] ^ 1])
    [reply] = b.receive(key(a), tampered, T0 + 1)
    assert reply.packet[0] == TYPE_INIT
    unknown_seq = bytes([TYPE_TRAFFIC, 90, 90]) + traffic.packet[3:]
    [reply] = b.receive(key(a), unknown_seq, T0 + 1)
    assert reply.packet[0] == TYPE_INIT


def test_short_traffic_dropped_without_init():
    a, b, net = pair()
    handshake(a, b, net)
    [traffic] = a.send(key(b), b"", T0 + 1)
    assert len(traffic.packet) == 52
    assert b.receive(key(a), traffic.packet[:51], T0 + 1) == []
    assert b.dropped["short"] == 1


def test_nonce_overflow_rotates_keys():
    a, b, net = pair()
    handshake(a, b, net)
    session = a._sessions[key(b)]
    before = session.local_key_seq
    session.send_nonce = (1 << 64) - 1
    [packet] = a.send(key(b), b"wrap", T0 + 1)
    assert session.local_key_seq == before + 1
    offset = 1
    for _ in range(2):
        _, offset = decode_uvarint(packet.packet, offset)
    assert decode_uvarint(packet.packet, offset)[0] == 0


def test_session_table_is_bounded_lru():
    hub = node(10, max_sessions=2)
    others = [node(n) for n in (11, 12, 13)]
    net = Net({key(m): m for m in [hub, *others]})
    for i, other in enumerate(others):
        net.run(key(hub), hub.send(key(other), b"hi", T0 + i), T0 + i)
    assert hub.session_keys() == [key(others[1]), key(others[2])]


def test_buffer_table_is_bounded():
    hub = node(10, max_buffers=2)
    for n in (11, 12, 13):
        hub.send(NodeIdentity.from_seed(bytes([n]) * 32).public_key, b"x", T0)
    assert len(hub._buffers) == 2
    assert hub.buffer_count() == 2 and hub.buffers_evicted == 1


@pytest.mark.parametrize("seed", range(3))
def test_garbage_never_raises(seed):
    rng = random.Random(seed)
    a, b, net = pair()
    handshake(a, b, net)
    for _ in range(400):
        kind = rng.choice([0, 1, 2, 3, 4, 255])
        length = rng.choice([0, 1, 5, 51, 52, 60, 192, 193, 194, 300])
        packet = bytes([kind]) + rng.randbytes(length) if length else b""
        source = rng.choice([key(a), rng.randbytes(32), rng.randbytes(5), bytes(32)])
        for action in b.receive(source, packet, T0 + 1):
            assert isinstance(action, SendPacket)
    overlong = bytes([TYPE_TRAFFIC]) + b"\xff" * 60
    assert b.receive(key(a), overlong, T0 + 1) == []


def test_handshake_seqs_read_the_wall_clock_and_expiry_the_monotonic_one():
    """The node drives sessions with a monotonic `now`; a wall clock stepped back an hour changes only seqs."""
    wall = [T0]
    a, b, net = pair(wall_clock=lambda: wall[0])
    [init] = a.send(key(b), b"hello", 5.0)
    assert open_handshake(init.packet, key(a), b._curve_private).seq == int(T0)
    net.run(key(a), [init], 5.0)
    assert net.messages_at(key(b)) == [b"hello"]
    wall[0] = T0 - 3600
    assert a.tick(5.0 + 59) == [] and a.session_keys() == [key(b)]
    a.tick(5.0 + 61)
    assert a.session_keys() == [], "the session expires on the monotonic clock"
