"""The compiled build: the modules every message crosses, compiled with mypyc.

The Python source is the one source of truth. `make compile` (which
`make install` runs) compiles the modules below into `build/compiled/` beside
the package, with a manifest of the sources it compiled. At import, `axl`
loads those extension modules only if the manifest matches the sources as
they are now; otherwise (no C compiler when installed, an edited module, a
different interpreter, or AXL_BUILD=pure) every module runs as Python.
The choice is all or nothing: compiled modules call each other directly, so
one Python module among them would not be the code that runs.

`describe()` says which build runs; `axl-node --version` and a node's first
log line print it.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import shutil
import sys
import sysconfig
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

# The modules a message crosses, from the link's bytes to the HTTP answer.
# Left as Python: package __init__ files, and axl.tcp.events (its exception
# derives from ConnectionError, which a compiled class cannot).
COMPILED_MODULES = (
    "axl.eventloop", "axl.readbuffer", "axl.wire",
    "axl.datagrams.layer", "axl.adapters.envelopes", "axl.adapters.inbound",
    "axl.node.stats", "axl.node.deadlines", "axl.link.liveness",
    "axl.observe.httpstats", "axl.observe.series", "axl.bridge.guard",
    "axl.packets.device", "axl.packets.ipv6",
    "axl.tcp.buffers", "axl.tcp.connection", "axl.tcp.framing", "axl.tcp.recovery",
    "axl.tcp.segment", "axl.tcp.stack",
    "axl.sessions.crypto", "axl.sessions.handshake", "axl.sessions.manager",
    "axl.routing.actions", "axl.routing.frames", "axl.routing.pathfinder", "axl.routing.router",
    "axl.link.connection", "axl.link.framing", "axl.link.protocol",
    "axl.node.core", "axl.node.events", "axl.node.inbox", "axl.node.inboxrows", "axl.node.journal",
    "axl.node.messages", "axl.node.msgstream", "axl.node.node", "axl.node.store",
    "axl.node.streams", "axl.node.streamsessions",
    "axl.bridge.api", "axl.bridge.front", "axl.bridge.handoff", "axl.bridge.http1",
    "axl.bridge.streaming", "axl.bridge.wsframes", "axl.bridge.wsnative", "axl.bridge.gathering",
)
# mypyc's group: its runtime and all the modules' code, one extension module.
GROUP = "axl.compiled"
GROUP_MODULE = f"{GROUP}__mypyc"
MANIFEST = "manifest.json"
PURE_ENV = "AXL_BUILD"

PACKAGE_DIR = Path(__file__).resolve().parent
PROJECT_DIR = PACKAGE_DIR.parent
BUILD_DIR = PROJECT_DIR / "build" / "compiled"


@dataclass(frozen=True)
class BuildChoice:
    """Which build this process runs, and why it is not the compiled one."""

    compiled: bool
    reason: str = ""

    def describe(self) -> str:
        if self.compiled:
            return f"compiled build: {len(COMPILED_MODULES)} modules (mypyc)"
        return f"pure Python: {self.reason}"


def source_path(module: str) -> Path:
    return PROJECT_DIR.joinpath(*module.split(".")).with_suffix(".py")


def source_digest(module: str) -> str:
    return hashlib.sha256(source_path(module).read_bytes()).hexdigest()


def interpreter_tag() -> str:
    """Which interpreter a build's extension modules load into."""
    return sys.implementation.cache_tag + importlib.machinery.EXTENSION_SUFFIXES[0]


def _extension_file(module: str) -> str:
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return str(Path(*module.split(".")).with_suffix("")) + suffix


def _check_manifest(build_dir: Path) -> str:
    """Why the build in `build_dir` cannot run here; empty if it can."""
    try:
        manifest = json.loads((build_dir / MANIFEST).read_text())
    except FileNotFoundError:
        return "no compiled build (`make install` makes one where a C compiler is found)"
    except (OSError, ValueError) as exc:
        return f"the compiled build's manifest is unreadable ({exc}); `make compile` rebuilds it"
    if manifest.get("interpreter") != interpreter_tag():
        return "the compiled build is for another Python; `make compile` rebuilds it"
    sources = manifest.get("sources", {})
    for module in COMPILED_MODULES:
        if sources.get(module) != source_digest(module):
            path = source_path(module).relative_to(PROJECT_DIR)
            return f"{path} changed since the compiled build; `make compile` rebuilds it"
    return ""


class _CompiledFinder(importlib.abc.MetaPathFinder):
    """Finds the compiled modules in the build folder before the source."""

    def __init__(self, build_dir: Path) -> None:
        self._files = {module: build_dir / _extension_file(module)
                       for module in (*COMPILED_MODULES, GROUP_MODULE)}

    def find_spec(self, fullname: str, path: object = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        file = self._files.get(fullname)
        if file is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(file))
        return importlib.util.spec_from_file_location(fullname, file, loader=loader)


def choose(build_dir: Path = BUILD_DIR) -> BuildChoice:
    """Run the compiled modules if the build is whole and current (done once, by `axl`)."""
    if os.environ.get(PURE_ENV) == "pure":
        return BuildChoice(False, f"{PURE_ENV}=pure")
    reason = _check_manifest(build_dir)
    if reason:
        return BuildChoice(False, reason)
    sys.meta_path.insert(0, _CompiledFinder(build_dir))
    return BuildChoice(True)


def _missing_tools() -> str:
    """What the build needs and this machine lacks; empty if nothing."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler})"
    if not Path(sysconfig.get_paths()["include"], "Python.h").exists():
        return "no Python headers (Python.h; on Debian/Ubuntu: apt-get install python3-dev)"
    if importlib.util.find_spec("mypyc") is None:
        return "no mypyc (pip install mypy)"
    return ""


def build(build_dir: Path = BUILD_DIR) -> None:
    """Compile COMPILED_MODULES into `build_dir`, then write its manifest.

    The manifest is written last: a build that fails leaves no manifest,
    and so no half build that `choose` would load."""
    from mypyc.build import mypycify
    from setuptools import setup

    shutil.rmtree(build_dir, ignore_errors=True)
    work = build_dir / "work"
    os.chdir(PROJECT_DIR)  # mypyc names modules by their paths from here
    digests = {module: source_digest(module) for module in COMPILED_MODULES}
    paths = [str(source_path(module).relative_to(PROJECT_DIR)) for module in COMPILED_MODULES]
    # --warn-unreachable: code mypy thinks unreachable, mypyc may leave out.
    options = ["--follow-imports=silent", "--ignore-missing-imports", "--warn-unreachable",
               "--cache-dir", str(work / "mypy-cache")]
    extensions = mypycify(paths + options, group_name=GROUP, target_dir=str(work / "c"))
    # setuptools reads the project's pyproject.toml from here, and warns that
    # its [tool.setuptools] table is beta; nothing in it concerns this build.
    warnings.filterwarnings("ignore", message=".*is still \\*beta\\*")
    setup(name="axl-compiled", ext_modules=extensions,
          script_args=["--quiet", "build_ext", "--build-lib", str(build_dir),
                       "--build-temp", str(work / "objects")])
    shutil.rmtree(work)
    manifest = {"interpreter": interpreter_tag(), "sources": digests}
    (build_dir / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")


def main() -> int:
    """`make compile`: build if this machine can, else say why and go on pure."""
    missing = _missing_tools()
    if missing:
        print(f"axl.compiled: {missing}: the node will run as pure Python (slower, same behaviour)")
        return 0
    print(f"axl.compiled: compiling {len(COMPILED_MODULES)} modules with mypyc into {BUILD_DIR} (two or three minutes)")
    try:
        build()
    except SystemExit:  # mypyc and setuptools exit on errors they have printed above
        print("axl.compiled: the compiled build failed (errors above); the node will run as pure Python")
        return 1
    except Exception as exc:  # a compiler's failure, whatever it raises
        print(f"axl.compiled: the compiled build failed ({exc}); the node will run as pure Python")
        return 1
    reason = _check_manifest(BUILD_DIR)
    print(f"axl.compiled: done; {BuildChoice(not reason, reason).describe()}")
    return 0
