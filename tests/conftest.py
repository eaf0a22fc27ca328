import sys
from pathlib import Path

import pytest

import axl

sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "replaces_compiled_method: the test swaps a method of an object whose class the "
        "compiled build compiles (it cannot be swapped there); it runs on the pure-Python build")


def pytest_collection_modifyitems(config, items):
    """CI runs the suite on both builds: these tests run in the pure-Python pass."""
    if not axl.BUILD.compiled:
        return
    skip = pytest.mark.skip(reason="swaps a method of a compiled class: runs on the pure-Python build")
    for item in items:
        if "replaces_compiled_method" in item.keywords:
            item.add_marker(skip)


def pytest_sessionfinish(session, exitstatus):
    from nodes import stop_leftovers

    stop_leftovers()
