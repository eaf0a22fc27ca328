"""LAN discovery: the beacon byte-exact against Go's capture, the schedule,
the config, and (in network namespaces the test creates) nodes finding each
other. Nothing here sends multicast on the host's own interfaces."""

from __future__ import annotations


import pytest

import vectors
from axl.config import ConfigError, config_from_dict
from axl.identity import NodeIdentity
from axl.link.multicast import (BEACON_LEN, MulticastRule, beacon_hash, decode_beacon,
                                encode_beacon, next_interval)


@pytest.mark.parametrize("case", vectors.load("links")["multicast_beacon"]["cases"],
                         ids=lambda c: "password=" + repr(c["input"]["password"]))
def test_beacon_matches_go(case: dict) -> None:
    key = bytes.fromhex(case["input"]["public_key"])
    password = case["input"]["password"].encode()
    port = case["input"]["multicast_interface_config"]["Port"]
    expected = bytes.fromhex(case["beacon_hex"])
    assert encode_beacon(key, port, password) == expected
    assert len(expected) == BEACON_LEN
    beacon = decode_beacon(expected)
    assert beacon is not None and (beacon.key, beacon.port) == (key, port)
    assert beacon.hash == beacon_hash(key, password)
    assert beacon.hash != bytes.fromhex(case["wrong_way_round_blake2b512_msg_password_key_pubkey"])


def test_other_versions_and_short_datagrams_are_ignored() -> None:
    beacon = encode_beacon(bytes(32), 1, b"")
    assert decode_beacon(beacon[:39]) is None
    assert decode_beacon(b"\x00\x00\x00\x04" + beacon[4:]) is None
    assert decode_beacon(beacon + b"x") is None


def test_beacon_gap_grows_to_fifteen_seconds() -> None:
    gaps = [0.0]
    for _ in range(20):
        gaps.append(next_interval(gaps[-1]))
    assert gaps[:4] == [0, 1, 2, 3] and max(gaps) == 15


def test_config_rules() -> None:
    config = config_from_dict({"MulticastInterfaces": [
        {"Regex": "eth", "Beacon": False, "Listen": True, "Port": 7, "Priority": 3, "Password": "p"}]})
    (rule,) = config.multicast_interfaces
    assert rule == MulticastRule("eth", False, True, 7, 3, "p")
    assert rule.matches("veth0") and not rule.matches("wlan0")
    assert config_from_dict({}).multicast_interfaces == []
    with pytest.raises(ConfigError, match=r"MulticastInterfaces\[0\].Priority"):
        config_from_dict({"MulticastInterfaces": [{"Priority": "high"}]})
    with pytest.raises(ConfigError, match="Port must be"):
        config_from_dict({"MulticastInterfaces": [{"Port": 70000}]})


async def test_discovery_survives_an_unexpected_error_in_one_tick(monkeypatch, caplog) -> None:
    """Only the loop is exercised: no socket is opened and nothing is sent."""
    import asyncio
    import logging

    from axl.link.multicast import Discovery

    discovery = Discovery(NodeIdentity.generate(), [], manager=None)
    ticks = []
    again = asyncio.Event()

    async def refresh(_interfaces) -> None:
        ticks.append(1)
        if len(ticks) == 1:
            raise RuntimeError("unexpected failure in one tick")
        again.set()

    monkeypatch.setattr(discovery, "_refresh", refresh)
    with caplog.at_level(logging.ERROR, logger="axl.multicast"):
        task = asyncio.ensure_future(discovery._run())
        try:
            await asyncio.wait_for(again.wait(), 10)
        finally:
            task.cancel()
    assert "unexpected failure in one tick" in caplog.text
