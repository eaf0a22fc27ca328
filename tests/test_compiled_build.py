"""The compiled build runs only when it matches the source, and says which build runs.

CI runs the whole suite twice: once where `make install` built the compiled
modules, once with AXL_BUILD=pure. These tests hold in both runs: they check
that the modules imported are the build `axl.BUILD` names.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import axl
from axl import compiled
from axl.compiled import COMPILED_MODULES, MANIFEST, PURE_ENV, BuildChoice, choose

REPO = Path(__file__).resolve().parent.parent


def python(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=REPO)


def test_the_modules_imported_are_the_build_it_names():
    for name in COMPILED_MODULES:
        file = importlib.import_module(name).__file__
        assert file is not None
        assert file.endswith(".py") != axl.BUILD.compiled, (name, file, axl.BUILD)


def test_version_says_which_build_runs():
    out = python("-m", "axl.cli", "--version").stdout
    assert out.strip().endswith(f"; {axl.BUILD.describe()})")
    pure = python("-m", "axl.cli", "--version", env={**os.environ, PURE_ENV: "pure"}).stdout
    assert pure.strip().endswith(f"; pure Python: {PURE_ENV}=pure)")
    if axl.BUILD.compiled:
        assert "compiled build: " in out


def test_a_pure_process_imports_every_module_from_its_source():
    probe = ("import importlib, axl.compiled as c; "
             "print(all(importlib.import_module(m).__file__.endswith('.py') for m in c.COMPILED_MODULES))")
    result = python("-c", probe, env={**os.environ, PURE_ENV: "pure"})
    assert result.stdout.strip() == "True", result.stderr


@pytest.fixture
def unforced(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without AXL_BUILD, which CI's pure pass sets for the whole suite."""
    monkeypatch.delenv(PURE_ENV, raising=False)


def manifest_for(build_dir: Path, **changes: object) -> None:
    build_dir.mkdir(exist_ok=True)
    manifest = {"interpreter": compiled.interpreter_tag(),
                "sources": {name: compiled.source_digest(name) for name in COMPILED_MODULES}}
    manifest.update(changes)
    (build_dir / MANIFEST).write_text(json.dumps(manifest))


def test_no_build_folder_means_pure_and_says_how_to_build(tmp_path, unforced):
    choice = choose(tmp_path / "nothing")
    assert choice == BuildChoice(False, "no compiled build (`make install` makes one where a C compiler is found)")


def test_a_source_edited_after_the_build_means_pure_and_names_the_file(tmp_path, unforced):
    sources = {name: compiled.source_digest(name) for name in COMPILED_MODULES}
    sources["axl.tcp.stack"] = "0" * 64
    manifest_for(tmp_path, sources=sources)
    choice = choose(tmp_path)
    assert not choice.compiled
    assert choice.reason == "axl/tcp/stack.py changed since the compiled build; `make compile` rebuilds it"


def test_a_build_for_another_python_means_pure(tmp_path, unforced):
    manifest_for(tmp_path, interpreter="cpython-39.cpython-39-x86_64-linux-gnu.so")
    assert choose(tmp_path).reason == "the compiled build is for another Python; `make compile` rebuilds it"


def test_an_unreadable_manifest_means_pure(tmp_path, unforced):
    (tmp_path / MANIFEST).write_text("{not json")
    assert choose(tmp_path).reason.startswith("the compiled build's manifest is unreadable (")


def test_a_pure_choice_leaves_the_import_system_as_it_was(tmp_path, monkeypatch):
    before = list(sys.meta_path)
    choose(tmp_path / "nothing")
    monkeypatch.setenv(PURE_ENV, "pure")
    manifest_for(tmp_path)
    assert choose(tmp_path) == BuildChoice(False, f"{PURE_ENV}=pure")
    assert sys.meta_path == before


def test_without_a_c_compiler_the_build_says_the_node_runs_pure(tmp_path):
    """`make compile` on a machine with no compiler: one line, exit 0, no build."""
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}
    probe = "import sys, axl.compiled as c; sys.exit(c.main())"
    result = python("-c", probe, env=env)
    assert result.returncode == 0, result.stderr
    compiler = result.stdout.strip()
    assert compiler.startswith("axl.compiled: no C compiler (")
    assert compiler.endswith("): the node will run as pure Python (slower, same behaviour)")


@pytest.mark.parametrize("module", COMPILED_MODULES)
def test_every_compiled_module_is_a_source_file_of_the_package(module):
    assert compiled.source_path(module).is_file()


def calls_in_slice_bounds(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
            bounds = [part for part in (node.slice.lower, node.slice.upper, node.slice.step) if part]
            if any(isinstance(inner, (ast.Call, ast.NamedExpr, ast.Await)) for part in bounds
                   for inner in ast.walk(part)):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_compiled_module_computes_a_slice_bound_with_a_call():
    """mypyc 2.4 evaluates a memoryview slice's bound twice: `view[conn.send(data):]`
    sent the data twice. Compiled modules bind a bound to a name first."""
    found = [line for module in COMPILED_MODULES for line in calls_in_slice_bounds(compiled.source_path(module))]
    assert found == []


# Made for every message or packet: a dataclass's generated __init__ stays
# interpreted in the compiled build (378 ns a call against 52 for a compiled
# one), so these define their own.
PER_MESSAGE_CLASSES = [
    "axl.packets.ipv6.IPv6Header", "axl.packets.device.DeliverPacket", "axl.packets.device.SendIPv6",
    "axl.routing.frames.Traffic", "axl.routing.actions.SendTraffic", "axl.routing.actions.DeliverTraffic",
    "axl.tcp.segment.TcpSegment", "axl.tcp.segment.TcpPacket",
    "axl.sessions.manager.DeliverPlaintext", "axl.sessions.manager.SendPacket",
    "axl.link.protocol.FrameReceived", "axl.node.journal.InboxMessage", "axl.node.journal._Staged",
    "axl.node.msgstream.Message", "axl.node.msgstream.Ack", "axl.node.msgstream.Answered",
    "axl.bridge.http1.RequestHead", "axl.bridge.http1.Answer",
    "axl.datagrams.layer.SendMessage", "axl.datagrams.layer.DeliverIPv6",
]


@pytest.mark.parametrize("name", PER_MESSAGE_CLASSES)
def test_a_class_made_per_message_has_an_init_of_its_own(name):
    module, _, cls_name = name.rpartition(".")
    cls = getattr(importlib.import_module(module), cls_name)
    assert cls.__dataclass_params__.init is False, f"{name}: the dataclass generates its __init__"
    init = cls.__dict__["__init__"]
    # compiled, a method is no Python function; as Python, it is the class's own source
    assert not hasattr(init, "__code__") if axl.BUILD.compiled else init.__code__.co_filename.endswith(".py")
