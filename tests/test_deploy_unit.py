"""deploy/axl-node.service, the systemd unit docs/deploying.md installs:
`systemd-analyze verify` accepts it, it keeps its hardening, and its key
step makes a key once and leaves it alone afterwards."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
UNIT = REPO / "deploy" / "axl-node.service"
INSTALLED = "/opt/axl/bin/axl-node"
HARDENING = ("DynamicUser=yes", "StateDirectory=axl-node", "ProtectSystem=strict", "ProtectHome=yes",
             "NoNewPrivileges=yes", "CapabilityBoundingSet=", "PrivateTmp=yes", "PrivateDevices=yes",
             "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK", "SystemCallFilter=@system-service")


def settings(unit: str) -> list[str]:
    return [line.strip() for line in unit.splitlines() if "=" in line and not line.lstrip().startswith("#")]


def here_installed(unit: str) -> str:
    """The unit with this checkout's axl-node where an install puts it: verify
    checks that the programs it names exist."""
    return unit.replace(INSTALLED, str(Path(sys.executable).parent / "axl-node"))


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed (no systemd)")
def test_systemd_analyze_verifies_the_unit(tmp_path):
    unit = tmp_path / UNIT.name
    unit.write_text(here_installed(UNIT.read_text()))
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr


def test_the_unit_is_hardened_and_runs_the_installed_node():
    lines = settings(UNIT.read_text())
    assert [line for line in HARDENING if line not in lines] == []
    assert f"ExecStart={INSTALLED} --config /etc/axl-node/node-config.json" in lines


def test_the_key_step_makes_a_key_once(tmp_path):
    """ExecStartPre as systemd runs it, STATE_DIRECTORY set: a key on the first
    start, the same key (and no error) on the next."""
    (command,) = [line.split("=", 1)[1] for line in settings(here_installed(UNIT.read_text()))
                  if line.startswith("ExecStartPre=")]
    environment = {**os.environ, "STATE_DIRECTORY": str(tmp_path)}
    first = subprocess.run(shlex.split(command), env=environment, capture_output=True, text=True, timeout=60)
    key = (tmp_path / "private.pem").read_bytes()
    again = subprocess.run(shlex.split(command), env=environment, capture_output=True, text=True, timeout=60)
    assert (first.returncode, again.returncode, again.stderr) == (0, 0, "")
    assert b"PRIVATE KEY" in key and (tmp_path / "private.pem").read_bytes() == key
    assert (tmp_path / "private.pem").stat().st_mode & 0o077 == 0
