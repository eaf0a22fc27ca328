"""GroupPassword (yggdrasil 0.5.14): the handshake signature is made over
SHA-256("ironwood/encrypted" || 0x00 || password) || the usual signed
bytes, so sessions form only between nodes with the same password."""

import hashlib

import nacl.bindings as sodium
import pytest

from axl.sessions import SessionManager
from axl.sessions.crypto import curve_private_key, open_box, shared_key
from axl.sessions.handshake import HANDSHAKE_SIZE, TYPE_INIT, group_secret, open_handshake
from test_sessions_manager import T0, Net, key, node


def pair(password_a: str, password_b: str) -> tuple[SessionManager, SessionManager, Net]:
    a, b = node(1, group_password=password_a), node(2, group_password=password_b)
    return a, b, Net({key(a): a, key(b): b})


def test_the_secret_is_sha256_of_the_domain_and_the_password():
    assert group_secret("") == b""
    assert group_secret("agents") == hashlib.sha256(b"ironwood/encrypted\x00agents").digest()
    assert group_secret("p\u00e4ss") == hashlib.sha256("ironwood/encrypted\x00p\u00e4ss".encode()).digest()
    # A JSON string may hold a lone surrogate; Go's decoder makes it U+FFFD.
    assert group_secret("a\ud800") == group_secret("a\ufffd")


def test_the_init_is_signed_over_the_secret_then_the_usual_bytes():
    a = node(1, group_password="agents")
    b = node(2)
    [init] = a.send(key(b), b"x", T0)
    packet = bytes(init.packet)
    assert len(packet) == HANDSHAKE_SIZE and packet[0] == TYPE_INIT
    ephemeral = packet[1:33]
    b_private = curve_private_key(b.identity.seed, key(b))
    payload = open_box(packet[33:], 0, shared_key(ephemeral, b_private))
    signature, body = payload[:64], payload[64:]
    secret = hashlib.sha256(b"ironwood/encrypted\x00agents").digest()
    signed = secret + ephemeral + body
    assert sodium.crypto_sign_open(signature + signed, key(a)) == signed
    assert open_handshake(packet, key(a), b_private, group_secret("agents")) is not None
    assert open_handshake(packet, key(a), b_private) is None
    assert open_handshake(packet, key(a), b_private, group_secret("other")) is None


def test_same_password_forms_a_session_both_ways():
    a, b, net = pair("agents", "agents")
    net.run(key(a), a.send(key(b), b"to b", T0), T0)
    net.run(key(b), b.send(key(a), b"to a", T0 + 1), T0 + 1)
    assert net.messages_at(key(b)) == [b"to b"]
    assert net.messages_at(key(a)) == [b"to a"]
    assert not a.awaiting_answer(key(b))


@pytest.mark.parametrize("password_a,password_b", [("agents", "other"), ("agents", ""), ("", "agents")])
def test_another_password_is_dropped_and_never_answered(password_a, password_b, caplog):
    a, b, net = pair(password_a, password_b)
    with caplog.at_level("INFO", logger="axl.sessions.manager"):
        for second in range(3):
            net.run(key(a), a.send(key(b), b"hello", T0 + second), T0 + second)
    assert net.delivered == []
    assert [packet[0] for _, _, packet in net.packets] == [TYPE_INIT] * 3
    assert b.session_keys() == [] and a.session_keys() == []
    assert b.dropped["bad_handshake"] == 3
    assert a.awaiting_answer(key(b))
    notes = [r.getMessage() for r in caplog.records if "does not verify" in r.getMessage()]
    assert len(notes) == 1 and "GroupPassword" in notes[0]
