"""The private parts of dependencies AXL uses (docs/security.md, "Dependencies'
private surfaces"): each is still there in the installed version, so an
upgrade that drops one fails here rather than on a running node, and each
one's absence gives what that section promises (a slower public path, or
one line and exit status 2)."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
import renamedoffset
from aiohttp import web

from axl import dependencies
from axl.dependencies import UnsupportedDependency, check_private_surfaces
from axl.supported import SUPPORTED, installed_version
from axl.observe.httpstats import HttpStats
from axl.observe.web import request_recorder
from axl.sessions import crypto

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
NODE_WITH_RENAMED_OFFSET = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
import renamedoffset
renamedoffset.rename()
from axl.cli import main
sys.exit(main(sys.argv[1:]))
"""
"""axl-node under an aioquic whose stream sender has no _buffer_stop."""


def aioquic_line(missing: str) -> str:
    return (f"aioquic {installed_version('aioquic')} lacks {missing}; "
            "AXL supports aioquic >=1.0,<2 (pip install 'aioquic<2')")


@pytest.fixture
def stream_sender_without_offset():
    """aioquic's stream sender as a release without `_buffer_stop` would make it."""
    from axl.link import quic

    undo = renamedoffset.rename()
    quic.missing_private_field.cache_clear()
    yield
    undo()
    quic.missing_private_field.cache_clear()


# --- pyproject.toml ------------------------------------------------------------------

def test_each_package_reached_into_is_capped_below_its_next_major():
    dependencies_listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for package, supported in SUPPORTED.items():
        assert f"{package.lower()}{supported}" in dependencies_listed


def test_aiohttp_still_has_the_websocket_masking_function():
    from aiohttp._websocket.mask import _websocket_mask_cython

    data = bytearray(b"payload")
    _websocket_mask_cython(b"\x01\x02\x03\x04", data)
    assert data == bytes(byte ^ (1, 2, 3, 4)[index % 4] for index, byte in enumerate(b"payload"))


def test_the_masking_function_loads_without_aiohttps_package():
    """A node that never loaded aiohttp does not import it for its first
    /ws frame (a hundred modules, the loop stopped a quarter of a second);
    aiohttp imported afterwards finds the same module and works."""
    code = """
import sys
from axl.bridge import wsframes
print(wsframes.unmask(b"\\x01\\x02\\x03\\x04", b"\\x01\\x02\\x03\\x04\\x05") == b"\\x00\\x00\\x00\\x00\\x04")
print("aiohttp" in sys.modules)
import aiohttp.web
from aiohttp._websocket.mask import _websocket_mask_cython
print(wsframes._MASKERS == [_websocket_mask_cython])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.stdout.splitlines() == ["True", "False", "True"], out


def test_without_it_frames_are_unmasked_with_tables():
    """A child interpreter whose aiohttp lacks the function: the first frame
    logs one warning naming it, and the payload still comes out right."""
    code = """
import logging, sys
logging.basicConfig(stream=sys.stdout, format="%(levelname)s %(message)s")
import aiohttp._websocket.mask as mask
del mask._websocket_mask_cython
from axl.bridge import wsframes
print(wsframes.unmask(b"\\x01\\x02\\x03\\x04", b"\\x01\\x02\\x03\\x04\\x05") == b"\\x00\\x00\\x00\\x00\\x04")
print(wsframes._MASKERS == [wsframes.mask_in_place])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    lines = out.stdout.splitlines()
    assert lines[-2:] == ["True", "True"], out
    warning = [line for line in lines if line.startswith("WARNING")]
    assert len(warning) == 1 and "lacks aiohttp._websocket.mask._websocket_mask_cython" in warning[0]
    assert "AXL supports aiohttp >=3.9,<4" in warning[0]


def test_uvicorn_still_has_the_signal_hook_the_a2a_server_replaces():
    """`uvicorn.Server.capture_signals` is not documented; the A2A server
    replaces it so that its caller owns SIGINT and SIGTERM."""
    import uvicorn

    from axl.adapters.a2a_server import _QuietServer
    assert callable(getattr(uvicorn.Server, "capture_signals", None))
    assert _QuietServer.capture_signals is not uvicorn.Server.capture_signals
    agents = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["agents"]
    assert "uvicorn>=0.30,<1" in agents


# --- PyNaCl: nacl._sodium ------------------------------------------------------------

def test_pynacl_still_has_the_libsodium_calls_packets_use():
    assert crypto.missing_private_call() is None
    assert (crypto.seal, crypto.open_parts) == (crypto.seal_in_place, crypto.open_in_place)


def test_the_first_missing_call_is_named(monkeypatch: pytest.MonkeyPatch):
    import nacl._sodium

    monkeypatch.setattr(nacl._sodium, "lib", SimpleNamespace(crypto_box_easy_afternm=None))
    assert crypto.missing_private_call() == "nacl._sodium.lib.crypto_box_open_easy_afternm"
    monkeypatch.setitem(sys.modules, "nacl._sodium", None)
    assert crypto.missing_private_call() == "nacl._sodium"


def test_without_them_packets_go_through_nacl_bindings():
    probe = ("import nacl.bindings, nacl._sodium, types; nacl._sodium.lib = types.SimpleNamespace(); "
             "from axl.sessions import crypto; "
             "print(crypto.seal is crypto.seal_by_bindings, crypto.open_parts is crypto.open_by_bindings, "
             "crypto.open_box(crypto.seal(b'sealed', 1, bytes(32)), 1, bytes(32)))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=30)
    assert result.stdout.split() == ["True", "True", "b'sealed'"], result.stderr


def test_without_them_start_up_warns_in_one_line(monkeypatch: pytest.MonkeyPatch, caplog):
    monkeypatch.setattr(crypto, "MISSING_PRIVATE_CALL", "nacl._sodium.lib.crypto_box_easy_afternm")
    with caplog.at_level(logging.WARNING, "axl.node"):
        check_private_surfaces(quic_links=False)
    assert caplog.messages == [
        f"PyNaCl {installed_version('PyNaCl')} lacks nacl._sodium.lib.crypto_box_easy_afternm; "
        "AXL supports PyNaCl >=1.6,<2 (pip install 'pynacl<2'); "
        "boxing packets through nacl.bindings instead, with more copies"]


# --- aioquic: the stream sender's buffer offsets -------------------------------------

def test_aioquic_still_has_the_stream_buffer_offsets():
    from axl.link import quic

    quic.missing_private_field.cache_clear()
    assert quic.missing_private_field() is None
    dependencies.check_aioquic()


def test_a_missing_offset_is_named(stream_sender_without_offset):
    with pytest.raises(UnsupportedDependency) as refused:
        check_private_surfaces(quic_links=True)
    assert str(refused.value) == aioquic_line("QuicStreamSender._buffer_stop")
    check_private_surfaces(quic_links=False)


async def test_without_it_quic_links_are_refused_in_one_line(stream_sender_without_offset):
    """A quic:// peer added at run time: each dial fails as a dial does."""
    from axl.link import quic
    from axl.link.uri import parse_listen_uri, parse_peer_uri

    with pytest.raises(ConnectionError) as dialing:
        await quic.dial(parse_peer_uri("quic://127.0.0.1:1"), asyncio.Protocol, None)
    with pytest.raises(ConnectionError) as listening:
        await quic.listen(parse_listen_uri("quic://127.0.0.1:0"), asyncio.Protocol, None)
    assert str(dialing.value) == str(listening.value) == aioquic_line("QuicStreamSender._buffer_stop")


def test_a_node_with_a_quic_link_stops_in_one_line(tmp_path):
    (tmp_path / "c.json").write_text('{"Listen": ["quic://127.0.0.1:0"]}')
    result = subprocess.run([sys.executable, "-c", NODE_WITH_RENAMED_OFFSET, "--config", "c.json"],
                            capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[-1] == "axl-node: " + aioquic_line("QuicStreamSender._buffer_stop")
    assert "Traceback" not in result.stderr


# --- aiohttp: no private field, but an assertion route_of relies on ------------------

async def test_unrouted_requests_are_counted_as_unmatched():
    """aiohttp's `match_info` asserts on a request it never routed (a
    malformed one); route_of must still count it."""
    stats = HttpStats()
    app = web.Application()
    app.router.add_get("/peers/{key}", _answer_ok)
    runner = web.AppRunner(app, access_log_class=request_recorder(stats))
    await runner.setup()
    site = web.SockSite(runner, _loopback_socket())
    await site.start()
    try:
        for request in (b"GET /peers/ab HTTP/1.1\r\n", b"GET /nothing HTTP/1.1\r\n", b"BAD\x00 / HTTP/1.1\r\n"):
            await _exchange(site.name, request + b"Host: x\r\nConnection: close\r\n\r\n")
    finally:
        await runner.cleanup()
    assert stats.requests == {("/peers/{key}", 200): 1, ("unmatched", 404): 1, ("unmatched", 400): 1}


async def _answer_ok(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def _loopback_socket():
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


async def _exchange(url: str, request: bytes) -> bytes:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(request)
    answer = await reader.read()
    writer.close()
    await writer.wait_closed()
    return answer
