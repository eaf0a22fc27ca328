"""schemathesis against a live bridge (`make fuzz-api`): every documented
route and status, answered as the OpenAPI document says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from axl.testnet import Testnet


SCHEMA_PATH = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
# Not `not_a_server_error`: 502/503/504 are documented answers of a gateway.
# A 500 is still caught, since no operation documents it.
FUZZ_CHECKS = ("status_code_conformance,content_type_conformance,response_headers_conformance,"
               "response_schema_conformance,missing_required_header")
# Peers the fuzzer would make up are dialed at once: it never adds or removes one
# (the node would reach out to whatever host a random URI names).
NOT_FUZZED = ("--exclude-operation-id", "addPeer", "--exclude-operation-id", "removePeer")
# Unknown peers answer after lookup_timeout_secs, so keep every wait short.
FUZZ_NODE_CONFIG = {"lookup_timeout_secs": 1, "send_timeout_secs": 2, "mcp_timeout_secs": 2,
                    "a2a_timeout_secs": 2}


def fuzz_schema_text(schema_path: Path = SCHEMA_PATH, max_wait: float = 1.0) -> str:
    """The published schema with the long poll capped, so no fuzz case idles for minutes."""
    text = schema_path.read_text()
    capped = text.replace("maximum: 300", f"maximum: {max_wait:g}")
    if capped == text:
        raise ValueError("schema has no `maximum: 300` long-poll bound to cap")
    return capped


def run_fuzz_api(base_dir: Path, max_examples: int, max_time: float | None, seed: int = 1,
                 workers: int = 4, phases: str = "examples,coverage,fuzzing,stateful") -> tuple[int, str]:
    """schemathesis (the checks above) against one live node; (exit code, output)."""
    base_dir.mkdir(parents=True, exist_ok=True)
    schema = base_dir / "openapi-fuzz.yaml"
    schema.write_text(fuzz_schema_text())
    net = Testnet(1, "line", base_dir / "net", extra_config=FUZZ_NODE_CONFIG)
    try:
        net.start()
        net.wait_converged(30)
        command = [sys.executable, "-m", "schemathesis.cli", "run", str(schema),
                   "--url", net.nodes[0].bridge_url, "--checks", FUZZ_CHECKS,
                   "--max-examples", str(max_examples), "--seed", str(seed),
                   "--workers", str(workers), "--request-timeout", "20", "--phases", phases,
                   "--generation-database", "none", "--no-color",
                   "--suppress-health-check", "all", *NOT_FUZZED]
        if max_time is not None:
            command += ["--max-time", str(int(max_time))]
        result = subprocess.run(command, capture_output=True, text=True, cwd=base_dir)
        if net.exited_nodes():
            return 1, result.stdout + "\nthe node exited during fuzzing"
        return result.returncode, result.stdout + result.stderr
    finally:
        net.stop()
