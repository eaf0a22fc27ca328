"""A fresh checkout installs with `make install` into its own virtualenv.

The checkout is copied to a temporary folder (without any .venv or build
leftovers) and installed there the way the README says. The copy's venv
sees this interpreter's site-packages and pip installs only the project
itself (`--no-deps`; setuptools comes from the pip cache or index), so the test and takes seconds; the
Makefile path, the venv, the console scripts and the package metadata are
the real ones a new user gets.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from axl import __version__

REPO = Path(__file__).resolve().parent.parent
LEFTOVERS = shutil.ignore_patterns(".venv", ".git", ".axl-testnet", "*.egg-info", "__pycache__",
                                   ".pytest_cache", ".hypothesis", "build", "dist", "keys")
# What a user's shell has: nothing pointing Python or make at another checkout or venv.
CLEAN_ENV = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "VIRTUAL_ENV")}


def make(checkout: Path, *args: str, env: dict[str, str] = CLEAN_ENV) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "-s", "-C", str(checkout), f"PYTHON={sys.executable}", *args],
                          capture_output=True, text=True, timeout=300, env=env)


def run(*command: object, cwd: Path | str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(part) for part in command], capture_output=True, text=True, timeout=60,
                          env=CLEAN_ENV, cwd=cwd)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("clone") / "axl-py"
    shutil.copytree(REPO, target, ignore=LEFTOVERS)
    return target


def borrow_dependencies(venv_python: Path) -> None:
    """Put this interpreter's site-packages on the new venv's path (after its own)."""
    venv_site = run(venv_python, "-c", "import site; print(site.getsitepackages()[0])").stdout.strip()
    (Path(venv_site) / "borrowed-dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")


def test_targets_ask_for_make_install_first(checkout):
    result = make(checkout, "run")
    assert result.returncode != 0
    assert "run 'make install' first" in result.stderr
    assert not (checkout / "configs" / "keys").exists()


def test_make_install_gives_working_console_scripts(checkout):
    result = make(checkout, "install", "PIP_ARGS=--no-deps -q")
    assert result.returncode == 0, result.stderr
    venv_bin = checkout / ".venv" / "bin"
    borrow_dependencies(venv_bin / "python")
    assert run(venv_bin / "axl-node", "--version").stdout.startswith(f"axl-node {__version__} ")
    usage = run(venv_bin / "axl-node", "--help")
    assert usage.returncode == 0 and "axl-node genkey PATH" in usage.stdout
    where = run(venv_bin / "python", "-c", "import axl; print(axl.__file__)", cwd="/")
    assert where.stdout.strip() == str(checkout / "axl" / "__init__.py")
    metadata = run(venv_bin / "python", "-c",
                   "from importlib.metadata import metadata as m; d = m('axl-py'); "
                   "print(d['Name'], d['Version'], d['License'])")
    assert metadata.stdout.split() == ["axl-py", __version__, "Apache-2.0"]
    keygen = make(checkout, "configs/keys/node1.pem")
    assert keygen.returncode == 0, keygen.stderr
    assert b"PRIVATE KEY" in (checkout / "configs" / "keys" / "node1.pem").read_bytes()


def test_python_without_ensurepip_gets_one_line_with_the_fix(tmp_path):
    target = tmp_path / "axl-py"
    shutil.copytree(REPO, target, ignore=LEFTOVERS)
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "ensurepip.py").write_text("raise ImportError('no ensurepip in this Python')\n")
    result = make(target, "install", env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(shadow)})
    assert result.returncode != 0
    assert result.stderr.splitlines()[0].endswith("apt-get install python3-venv")
    assert not (target / ".venv").exists()
