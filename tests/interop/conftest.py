"""`make interop`: our node against the reference Go programs.

The programs come from AXL_GO_BIN_DIR (default: ../shared/go-peers/bin
beside the repository). Without them every test here is skipped with one
reason, so a fresh clone's suite still passes on its own. Figures the
tests measure are printed at the end of the run."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from goprocs import MixedNetwork, go_bin_dir, stop_leftovers

FIGURES: list[str] = []
HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    if go_bin_dir() is None:
        skip = pytest.mark.skip(reason="no Go reference programs: set AXL_GO_BIN_DIR to a folder "
                                       "with yggdrasil, yggdrasilctl and axl-node")
        for item in items:
            if HERE in Path(item.fspath).parents:
                item.add_marker(skip)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        item.failed_here = True
    return report


def pytest_terminal_summary(terminalreporter):
    if FIGURES:
        terminalreporter.section("interoperability figures")
        for line in FIGURES:
            terminalreporter.write_line(line)


def pytest_sessionfinish(session, exitstatus):
    stop_leftovers()


@pytest.fixture(scope="session")
def figures() -> list[str]:
    """Lines to print in the run's summary: what a test measured."""
    return FIGURES


def network_for(request, base: Path) -> Iterator[MixedNetwork]:
    """A MixedNetwork stopped afterwards; its logs are printed if a test using it failed."""
    network = MixedNetwork(base, go_bin_dir(), seed=zlib.crc32(request.node.name.encode()))
    try:
        yield network
    finally:
        failed = getattr(request.node, "failed_here", False) or any(
            getattr(item, "failed_here", False) for item in getattr(request.node, "items", []))
        if failed or request.session.testsfailed:
            print(network.logs())
        network.stop()


@pytest.fixture
def mixed(tmp_path, request) -> Iterator[MixedNetwork]:
    yield from network_for(request, tmp_path)


@pytest.fixture(scope="module")
def mixed_module(tmp_path_factory, request) -> Iterator[MixedNetwork]:
    """One MixedNetwork shared by a module's tests."""
    yield from network_for(request, tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2]))
