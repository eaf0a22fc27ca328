"""The SOCKS5 replies a proxy sends to a socks:// or sockstls:// dialer
(axl.link.socks). The proxy is not ours: whatever it answers, in whatever
pieces, the negotiation ends with SocksError or a tunnel, never waits for
bytes once the proxy has closed, and never reads past the reply (what
follows is the tunnel's first bytes, a TLS handshake say).

The negotiation runs on the event loop's socket calls; here a stand-in
loop serves the reply from memory, so each run completes in one step and a
run that would wait shows up as a coroutine that did not finish."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from axl.link.socks import SocksError, _negotiate
from fuzzing import FUZZ, chunkings, noise_or_mutation


class ReplyLoop:
    """Serves `chunks` to sock_recv (at most what is asked), then end of stream."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = [chunk for chunk in chunks if chunk]
        self.sent: list[bytes] = []

    async def sock_sendall(self, sock: object, data: bytes) -> None:
        self.sent.append(data)

    async def sock_recv(self, sock: object, size: int) -> bytes:
        if not self.chunks:
            return b""
        chunk = self.chunks.pop(0)
        if len(chunk) > size:
            self.chunks.insert(0, chunk[size:])
        return chunk[:size]

    def unread(self) -> bytes:
        return b"".join(self.chunks)


def _negotiate_with(chunks: list[bytes], user: str) -> tuple[bool, ReplyLoop]:
    """Run the negotiation on the reply; True when it opened the tunnel."""
    loop = ReplyLoop(chunks)
    coroutine = _negotiate(loop, None, ("example.org", 443), user, "secret")
    try:
        coroutine.send(None)
    except StopIteration:
        return True, loop
    except SocksError:
        return False, loop
    coroutine.close()
    raise AssertionError("the negotiation waits for bytes after the proxy closed")


ADDRESSES = st.one_of(
    st.binary(min_size=4, max_size=4).map(lambda a: b"\x01" + a),
    st.binary(min_size=16, max_size=16).map(lambda a: b"\x04" + a),
    st.binary(max_size=255).map(lambda name: b"\x03" + bytes([len(name)]) + name),
)


@st.composite
def replies(draw: st.DrawFn) -> tuple[str, bytes]:
    """A user name (empty: no password offered) and a proxy's whole successful reply."""
    user = draw(st.sampled_from(["", "alice"]))
    method = draw(st.sampled_from([b"\x05\x00", b"\x05\x02"] if user else [b"\x05\x00"]))
    auth = b"\x01\x00" if method == b"\x05\x02" else b""
    bound = draw(ADDRESSES) + struct.pack(">H", draw(st.integers(0, 0xFFFF)))
    return user, method + auth + b"\x05\x00\x00" + bound


VALID = [b"\x05\x00\x05\x00\x00\x01\x7f\x00\x00\x01\x01\xbb", b"\x05\x02\x01\x00\x05\x00\x00\x03\x03abc\x00\x50",
         b"\x05\x00\x05\x00\x00\x04" + bytes(18)]


@FUZZ
@given(replies(), st.binary(max_size=20), st.data())
def test_a_valid_reply_in_any_pieces_opens_the_tunnel_and_leaves_what_follows(reply, after, data):
    user, whole = reply
    opened, loop = _negotiate_with(data.draw(chunkings(whole + after)), user)
    assert opened
    assert loop.unread() == after


@FUZZ
@given(noise_or_mutation(VALID, 64).flatmap(chunkings), st.sampled_from(["", "alice"]))
def test_any_reply_ends_in_a_tunnel_or_socks_error_reading_no_more_than_it_needs(chunks, user):
    opened, loop = _negotiate_with(chunks, user)
    if opened:
        # What it read opens the tunnel alone, and nothing shorter does.
        read = b"".join(chunks)[:len(b"".join(chunks)) - len(loop.unread())]
        assert _negotiate_with([read], user)[0]
        assert not _negotiate_with([read[:-1]], user)[0]


@pytest.mark.parametrize("reply, message", [
    (b"\x04\x5a", "not SOCKS5"), (b"\x05\xff", "none of our"), (b"\x05\x00\x05\x05\x00\x01\x00", "refused"),
    (b"\x05\x00\x05\x00\x00\x07\x00", "unknown address type"), (b"\x05\x00\x05\x00\x00\x03\x10abc", "closed"),
])
def test_refusals_and_short_replies_are_socks_errors(reply, message):
    loop = ReplyLoop([reply])
    with pytest.raises(SocksError, match=message):
        _negotiate(loop, None, ("example.org", 443), "", "").send(None)
