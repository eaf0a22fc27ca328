"""Property tests for the session layer: hostile packets never raise, never
deliver anything a peer did not send, and never spoil a live session."""

from __future__ import annotations

import hashlib
import random

from hypothesis import given
from hypothesis import strategies as st

from axl.identity import NodeIdentity
from axl.sessions import DeliverPlaintext, KeyPair, SendPacket, SessionManager
from fuzzing import FUZZ, noise_or_mutation

T0 = 1_700_000_000.0
MESSAGES = [b"hello", b"first withheld", b"second withheld", b""]


def _manager(n: int) -> SessionManager:
    rng = random.Random(n)
    identity = NodeIdentity.from_seed(hashlib.sha256(f"fuzz-sessions/{n}".encode()).digest())
    return SessionManager(identity, key_pairs=lambda: KeyPair.from_private(rng.randbytes(32)))


def _deliver_all(managers: dict[bytes, SessionManager], sender: bytes, actions, now: float) -> None:
    queue = [(sender, action) for action in actions]
    while queue:
        source, action = queue.pop(0)
        if isinstance(action, SendPacket):
            queue += [(action.dest_key, reply)
                      for reply in managers[action.dest_key].receive(source, action.packet, now)]


class _Conversation:
    """A and B with an established session, plus A's packets B has not seen
    yet: traffic on that session and a stranger C's Init."""

    def __init__(self) -> None:
        self.a, self.b, self.c = _manager(1), _manager(2), _manager(3)
        self.keys = [m.identity.public_key for m in (self.a, self.b, self.c)]
        managers = dict(zip(self.keys, (self.a, self.b, self.c)))
        _deliver_all(managers, self.keys[0], self.a.send(self.keys[1], MESSAGES[0], T0), T0)
        self.withheld = [
            (self.keys[0], self._only_packet(self.a.send(self.keys[1], message, T0 + 1)))
            for message in MESSAGES[1:]
        ]
        self.withheld.append((self.keys[2], self._only_packet(self.c.send(self.keys[1], b"c", T0 + 1))))

    @staticmethod
    def _only_packet(actions) -> bytes:
        (action,) = actions
        assert isinstance(action, SendPacket)
        return action.packet


WITHHELD = _Conversation().withheld


def test_withheld_packets_deliver_when_untouched():
    conv = _Conversation()
    got = [conv.b.receive(source, packet, T0 + 2) for source, packet in conv.withheld[:3]]
    assert [[a.message for a in actions if isinstance(a, DeliverPlaintext)] for actions in got] == [
        [m] for m in MESSAGES[1:]
    ]


def _source_and_packet():
    known = st.sampled_from(range(len(WITHHELD))).flatmap(
        lambda i: st.tuples(st.just(WITHHELD[i][0]), noise_or_mutation([WITHHELD[i][1]], 300)))
    strange = st.tuples(st.binary(min_size=0, max_size=40), noise_or_mutation([p for _, p in WITHHELD], 300))
    return st.one_of(known, strange)


@FUZZ
@given(_source_and_packet())
def test_forged_packets_never_raise_deliver_or_spoil_the_session(case):
    source, packet = case
    conv = _Conversation()
    authentic = {(conv.keys[0], m) for m in MESSAGES} | {(conv.keys[2], b"c")}
    actions = conv.b.receive(source, packet, T0 + 2)
    delivered = {(a.source_key, bytes(a.message)) for a in actions if isinstance(a, DeliverPlaintext)}
    assert delivered <= authentic
    assert all(isinstance(a, (DeliverPlaintext, SendPacket)) for a in actions)
    if delivered:
        return
    source, original = conv.withheld[0]
    after = conv.b.receive(source, original, T0 + 3)
    assert [a.message for a in after if isinstance(a, DeliverPlaintext)] == [MESSAGES[1]]
    conv.b.tick(T0 + 4)


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(range(len(WITHHELD))), st.booleans()), max_size=8))
def test_any_order_and_duplication_of_real_packets_delivers_each_at_most_once(order):
    conv = _Conversation()
    counts: dict[bytes, int] = {}
    for index, twice in order:
        source, packet = conv.withheld[index]
        for _ in range(2 if twice else 1):
            for action in conv.b.receive(source, packet, T0 + 2):
                if isinstance(action, DeliverPlaintext):
                    message = bytes(action.message)
                    counts[message] = counts.get(message, 0) + 1
    assert all(count == 1 for count in counts.values())
