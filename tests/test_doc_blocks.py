"""Every shell block in the repository's Markdown runs as written, or says why not.

A ```sh block is either run here, against real nodes, or preceded by
``<!-- not run: reason -->`` (it starts a long-running foreground program, needs
another machine, or is the test suite itself). Blocks that a document runs
"in another terminal" after ``make run3`` or ``make testnet`` get that setup
first, as a reader would have it. Each scenario runs in one bash process in a
fresh network namespace, so the documents' fixed ports (9001, 9002, ...) are
free and nothing leaves it; its PID namespace ends every process the blocks
started in the background when the script ends.

Every scenario's folder has a `.venv` (the virtualenv running this test), as
a checkout after `make install` has. Most documents ask for it to be active;
a scenario with ``fresh_shell`` runs as a new terminal would, without it on
PATH, so its blocks must name `.venv/bin/...` themselves.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHELL_BLOCK = re.compile(r"(?:<!-- not run: (?P<reason>[^>]+?) -->\s*\n)?```(?:sh|bash|shell)\n(?P<body>.*?)```", re.S)
SCENARIO_TIMEOUT = 240

# What a reader has running in another terminal before the block.
RUN3 = """
mkdir -p configs/keys
for n in 1 2 3; do axl-node genkey configs/keys/node$n.pem >/dev/null; done
axl-testnet --run configs/node1.json configs/node2.json configs/node3.json >run3.log 2>&1 &
until [ "$(curl -s localhost:9002/topology | python3 -c 'import json,sys; print(sum(p["up"] for p in json.load(sys.stdin)["peers"]))' 2>/dev/null)" = 2 ]; do sleep 0.3; done
"""
PORT_9112_TAKEN = """
python3 -m http.server 9112 --bind 127.0.0.1 >/dev/null 2>&1 &
until curl -s -o /dev/null 127.0.0.1:9112; do sleep 0.2; done
"""
TESTNET = """
.venv/bin/axl-testnet -n 5 >testnet.log 2>&1 &
until grep -q "Ctrl-C stops all nodes" testnet.log; do sleep 0.5; done
"""


@dataclass(frozen=True)
class Block:
    doc: str
    line: int
    body: str
    not_run: str | None


@dataclass(frozen=True)
class Scenario:
    """Runnable blocks ``blocks`` (0-based, among the document's runnable ones) of ``doc``."""

    doc: str
    blocks: tuple[int, ...]
    setup: str
    expect: tuple[str, ...]
    fresh_shell: bool = False


SCENARIOS = [
    Scenario("README.md", (0,), RUN3, ("X-Sent-Bytes: 5", "X-From-Peer-Id", "hello")),
    Scenario("docs/operations.md", (0,), RUN3, ("X-Sent-Bytes: 5", "X-From-Peer-Id", "hello")),
    Scenario("docs/operations.md", (1, 2), RUN3, ('{"peers": []}', '"up": true', '"our_public_key"',
                                                "this bridge needs 'Authorization: Bearer <token>'",
                                                "'uri': 'tls://127.0.0.1:9001'")),
    Scenario("README.md", (1,), TESTNET, ("total = 5 from 5 nodes", "MB/s", "delivery ratio         1.0000"),
             fresh_shell=True),
    # The walkthroughs beside the README's own nodes, as a reader who left `make run3` running has them.
    Scenario("examples/mcp/README.md", (0, 1, 2, 3), RUN3, ("node B is ", '"name":"get_forecast"', "Lyon")),
    Scenario("examples/a2a/README.md", (0, 1, 2, 3, 4), RUN3,
             ("node B is ", '"skills"', "TASK_STATE_COMPLETED", "Lyon")),
    Scenario("examples/mcp/README.md", (0,), PORT_9112_TAKEN,
             ("nodes A and B did not start (ports 9101, 9102 or 9112 taken?): see a.log and b.log",)),
]


def markdown_files() -> list[Path]:
    return sorted(path for path in REPO.rglob("*.md")
                  if not any(part.startswith(".") for part in path.relative_to(REPO).parts))


def shell_blocks(path: Path) -> list[Block]:
    text = path.read_text()
    doc = path.relative_to(REPO).as_posix()
    return [Block(doc, text[:match.start()].count("\n") + 1, match["body"], match["reason"])
            for match in SHELL_BLOCK.finditer(text)]


def runnable(doc: str) -> list[Block]:
    return [block for block in shell_blocks(REPO / doc) if block.not_run is None]


def test_every_shell_block_is_run_here_or_says_why_not():
    covered = {(scenario.doc, index) for scenario in SCENARIOS for index in scenario.blocks}
    found = {(block.doc, index) for path in markdown_files()
             for index, block in enumerate(runnable(path.relative_to(REPO).as_posix()))}
    unplanned = sorted(found - covered)
    assert not unplanned, f"shell blocks neither run by this test nor marked <!-- not run: why -->: {unplanned}"
    assert not covered - found, f"scenarios name blocks that are not there: {sorted(covered - found)}"


def namespaces_unavailable() -> str | None:
    for tool in ("unshare", "ip", "curl", "openssl"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    probe = subprocess.run(["unshare", "-rnpf", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot create namespaces here: {probe.stderr.strip()}"
    return None


def scenario_script(scenario: Scenario) -> str:
    blocks = runnable(scenario.doc)
    parts = ["set -e -o pipefail", "ip link set lo up", scenario.setup]
    for index in scenario.blocks:
        parts += [f"echo '--- {scenario.doc} line {blocks[index].line}'", blocks[index].body]
    return "\n".join(parts)


def shell_environment(fresh: bool) -> dict[str, str]:
    """This process's environment with the virtualenv's tools first on PATH,
    or, for a fresh shell, without them and without VIRTUAL_ENV. PYTHONPATH
    stays: it says which checkout is under test, as CI sets it."""
    venv_bin = Path(sys.executable).parent
    if not fresh:
        return {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}"}
    path = [entry for entry in os.environ["PATH"].split(os.pathsep)
            if entry and Path(entry).resolve() != venv_bin.resolve()]
    env = {key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"}
    return {**env, "PATH": os.pathsep.join(path)}


@pytest.mark.skipif(bool(namespaces_unavailable()), reason=namespaces_unavailable() or "")
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: f"{s.doc}:{','.join(map(str, s.blocks))}")
def test_document_blocks_run_as_written(tmp_path, scenario):
    (tmp_path / "examples").symlink_to(REPO / "examples")
    (tmp_path / ".venv").symlink_to(sys.prefix)
    shutil.copytree(REPO / "configs", tmp_path / "configs", ignore=shutil.ignore_patterns("keys"))
    env = shell_environment(scenario.fresh_shell)
    result = subprocess.run(["unshare", "-rnpf", "bash", "-c", scenario_script(scenario)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=SCENARIO_TIMEOUT)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    for needle in scenario.expect:
        assert needle in output, f"{needle!r} missing from:\n{output[-4000:]}"


LINK = re.compile(r"\]\((?!https?://|#|mailto:)([^)#\s]+)")
NAMED_DOC = re.compile(r"`([\w./-]+\.md)`")


def test_documents_cite_only_what_the_repository_has():
    """Links resolve inside the checkout and every `something.md` named exists in it."""
    names = {path.name for path in markdown_files()} | {path.relative_to(REPO).as_posix() for path in markdown_files()}
    problems = []
    for path in markdown_files():
        text = path.read_text()
        problems += [f"{path.relative_to(REPO)}: link {target}" for target in LINK.findall(text)
                     if not (path.parent / target).resolve().is_relative_to(REPO)
                     or not (path.parent / target).exists()]
        problems += [f"{path.relative_to(REPO)}: names {name}" for name in NAMED_DOC.findall(text)
                     if name not in names and Path(name).name not in names]
    assert not problems, problems
