import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from axl.build import build_fields
from axl.config import AdminAddress, ConfigError, config_from_dict, load_config, parse_admin_listen
from axl.harness import free_port


def write(tmp_path, data, name="c.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_defaults_match_go_node():
    config = config_from_dict({})
    assert (config.api_port, config.bridge_addr, config.tcp_port) == (9002, "127.0.0.1", 7000)
    assert (config.router_port, config.a2a_port) == (9003, 9004)
    assert config.max_message_size == 16 * 1024 * 1024
    assert config.max_concurrent_conns == 128
    assert (config.conn_read_timeout_secs, config.conn_idle_timeout_secs) == (60, 300)
    assert config.router_url == "" and config.a2a_url == ""


def test_go_node_config_loads_unchanged(tmp_path):
    config = load_config(write(tmp_path, {
        "PrivateKeyPath": "private.pem",
        "Peers": ["tls://127.0.0.1:9001", "tls://[::1]:9001"],
        "Listen": [],
        "max_message_size": 524288000,
        "conn_read_timeout_secs": 600,
        "IfName": "none",
        "router_addr": "http://127.0.0.1",
        "api_port": 0,
    }))
    assert config.max_message_size == 524288000
    assert config.conn_read_timeout_secs == 600
    assert config.api_port == 9002
    assert config.router_url == "http://127.0.0.1:9003"


def test_unknown_field_warns(caplog):
    config_from_dict({"surprise": 1, "IfName": "none"})
    assert "unknown field surprise" in caplog.text
    assert "IfName is a Yggdrasil setting" in caplog.text


@pytest.mark.parametrize("typo, meant", [
    ("Peer", "Peers"),
    ("PEER", "Peers"),
    ("api_prot", "api_port"),
    ("Api_Prot", "api_port"),
    ("Listn", "Listen"),
    ("PrivateKeyPth", "PrivateKeyPath"),
    ("max_mesage_size", "max_message_size"),
    ("IfNam", "IfName"),
])
def test_near_miss_of_a_known_field_is_an_error_with_a_hint(typo, meant):
    with pytest.raises(ConfigError) as caught:
        config_from_dict({typo: 1})
    assert str(caught.value) == f'unknown field "{typo}" \u2014 did you mean "{meant}"?'


def test_field_names_in_another_case_are_read_as_go_reads_them(caplog):
    config = config_from_dict({"peers": ["tls://127.0.0.1:1"], "API_PORT": 9100, "ifname": "none"})
    assert config.peers == ["tls://127.0.0.1:1"] and config.api_port == 9100
    assert '"peers" read as "Peers"' in caplog.text


@pytest.mark.parametrize("extra", ["surprise", "Metrics", "log_format", "peer_timeout_secs", "Pe"])
def test_unknown_fields_far_from_known_ones_stay_accepted(extra):
    assert config_from_dict({extra: 1, "Peers": ["tls://127.0.0.1:1"]}).peers == ["tls://127.0.0.1:1"]


@pytest.mark.parametrize("raw, field", [
    ({"api_port": "9002"}, "api_port"),
    ({"api_port": 70000}, "api_port"),
    ({"api_port": True}, "api_port"),
    ({"Peers": "tls://x:1"}, "Peers"),
    ({"Peers": [1]}, "Peers"),
    ({"max_message_size": -1}, "max_message_size"),
    ({"router_addr": "127.0.0.1"}, "router_addr"),
    ({"router_addr": "http://127.0.0.1:9003"}, "router_port"),
    ({"router_addr": "http://127.0.0.1/route"}, "router_addr"),
    ({"a2a_addr": "http://a b"}, "a2a_addr"),
    ({"a2a_addr": "http://127.0.0.1:x"}, "a2a_addr"),
    ({"bridge_addr": "not an ip"}, "bridge_addr"),
    ({"AllowedPublicKeys": ["abc"]}, "AllowedPublicKeys"),
    ({"PrivateKey": "zz"}, "PrivateKey"),
    ({"inbox_sync": "off"}, "inbox_sync"),
    ({"inbox_path": 3}, "inbox_path"),
    ({"max_inbox_messages": -1}, "max_inbox_messages"),
])
def test_bad_fields_name_the_field(raw, field):
    with pytest.raises(ConfigError, match=field):
        config_from_dict(raw)


def test_base_urls_and_hosts_that_work_are_accepted():
    config = config_from_dict({"router_addr": "https://tools.example", "a2a_addr": "http://[::1]",
                               "bridge_addr": "::1"})
    assert config.router_url == "https://tools.example:9003"
    assert config.a2a_url == "http://[::1]:9004"
    assert config_from_dict({"bridge_addr": "localhost"}).bridge_addr == "localhost"
    assert config_from_dict({"router_addr": "http://mcp_router"}).router_url == "http://mcp_router:9003"


def test_empty_bridge_addr_keeps_loopback_as_go_keeps_zero_values():
    assert config_from_dict({"bridge_addr": ""}).bridge_addr == "127.0.0.1"


def test_unreadable_and_unparsable_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "none.json")
    not_text = tmp_path / "latin1.json"
    not_text.write_bytes(b'\xff\xfe{"api_port": 1}')
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(not_text)
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(write(tmp_path, "{nope"))
    with pytest.raises(ConfigError, match="JSON object"):
        load_config(write(tmp_path, "[1]"))


def test_missing_key_file_is_a_config_error(tmp_path):
    config = config_from_dict({"PrivateKeyPath": str(tmp_path / "missing.pem")})
    with pytest.raises(ConfigError, match="PrivateKeyPath"):
        config.load_identity()


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "axl.cli", *args], capture_output=True,
                          text=True, timeout=30, cwd=cwd)


@pytest.mark.parametrize("content, needle", [
    ('{"api_port": "x"}', "api_port"),
    ("{broken", "not valid JSON"),
    ('{"Peers": [],\n "api_port": 9002,}', "not valid JSON: Expecting property name enclosed in double quotes "
                                          "at line 2 column 19"),
    ('{"NodeInfo": %s1%s}' % ("[" * 100_000, "]" * 100_000), "not valid JSON: JSON nested too deep"),
    ('{"api_port": %s}' % ("9" * 5000), "not valid JSON: Exceeds the limit (4300 digits)"),
    ('{"NodeInfo": {"deep": %s1%s}}' % ("[" * 600, "]" * 600), "NodeInfo: arrays or objects nested too deep"),
    ('{"NodeInfo": {"big": %s}}' % ("9" * 400), "NodeInfo: a number is beyond the range of a 64-bit float"),
    ('{"Peer": ["tls://127.0.0.1:9001"]}', 'did you mean "Peers"'),
    ('{"Peers": ["ftp://h:1"]}', "Peers"),
    ('{"PrivateKeyPath": "/nonexistent/key.pem"}', "PrivateKeyPath"),
    ('{"Peers": ["tls://exa mple:1"]}', "Peers[0]: bad host"),
    ('{"Peers": ["tls://127.0.0.1:0"]}', "Peers[0]: port 0"),
    ('{"bridge_addr": "not an ip"}', "bridge_addr"),
    ('{"bridge_addr": "unix://relative.sock"}', "bridge_addr: 'unix://relative.sock' needs an absolute socket path"),
    ('{"bridge_token": "two words"}', "bridge_token: must be visible ASCII"),
    ('{"AdminListen": "tcp://127.0.0.1"}', "AdminListen: 'tcp://127.0.0.1' is not an address"),
    ('{"NodeInfo": "me"}', "NodeInfo: expected a JSON object, got str"),
    ('{"NodeInfo": {"blob": "%s"}}' % ("x" * 16400), "NodeInfo: 16"),
    ('{"NodeInfoPrivacy": "yes"}', "NodeInfoPrivacy: expected bool"),
])
def test_cli_bad_config_exits_2_with_one_line(tmp_path, content, needle):
    result = run_cli("-config", str(write(tmp_path, content)))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_cli_bad_token_in_the_environment_exits_2(tmp_path):
    result = subprocess.run([sys.executable, "-m", "axl.cli", "--config", str(write(tmp_path, "{}"))],
                            capture_output=True, text=True, timeout=30,
                            env={**os.environ, "AXL_BRIDGE_TOKEN": "bad token"})
    assert result.returncode == 2 and result.stderr.strip() == \
        "axl-node: AXL_BRIDGE_TOKEN: must be visible ASCII characters without spaces"


def test_operator_fields_load():
    config = config_from_dict({"AdminListen": "unix:///run/axl/admin.sock", "NodeInfo": {"name": "n", "n": 1},
                               "NodeInfoPrivacy": True, "bridge_token": "s3cret", "bridge_addr": "unix:///run/b.sock"})
    assert parse_admin_listen(config.admin_listen) == AdminAddress(unix_path="/run/axl/admin.sock")
    assert parse_admin_listen("127.0.0.1:9001") == AdminAddress(host="127.0.0.1", port=9001)
    assert parse_admin_listen("tcp://[::1]:9001") == AdminAddress(host="::1", port=9001)
    assert parse_admin_listen("none") is None and parse_admin_listen(config_from_dict({}).admin_listen) is None
    assert config.nodeinfo_body() == b'{"n":1,"name":"n"}', "no build fields with NodeInfoPrivacy; 1 as Go writes it"
    assert config.bridge_unix_path == "/run/b.sock" and config_from_dict({}).bridge_unix_path is None
    assert config.take_token_from({}) == "bridge_token" and config.bridge_token == "s3cret"
    assert config.take_token_from({"AXL_BRIDGE_TOKEN": "other"}) == "AXL_BRIDGE_TOKEN"
    assert config.bridge_token == "other"
    assert config_from_dict({}).take_token_from({}) == ""


def test_nodeinfo_gets_the_build_fields_without_privacy():
    body = json.loads(config_from_dict({"NodeInfo": {"name": "n", "buildname": "mine"}}).nodeinfo_body())
    assert body == {"name": "n", **build_fields()}


def test_cli_missing_config_file(tmp_path):
    result = run_cli("--config", str(tmp_path / "absent.json"))
    assert result.returncode == 2 and "cannot read config file" in result.stderr


def test_a_missing_key_file_says_how_to_make_one(tmp_path):
    write(tmp_path, {"PrivateKeyPath": "k.pem"})
    result = run_cli("--config", "c.json", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == ("axl-node: PrivateKeyPath: cannot read key file k.pem: No such file or directory; "
                             "make one with: axl-node genkey k.pem\n")


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port something else listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.mark.parametrize("setting, expected", [
    ("api_port", "api_port {port}: 127.0.0.1:{port} is already in use (another axl-node?); "
                 "stop what holds it or choose another api_port"),
    ("Listen", "Listen tls://127.0.0.1:{port}: 127.0.0.1:{port} is already in use (another axl-node?); "
               "stop what holds it or choose another port"),
])
def test_a_port_in_use_is_named_in_one_line(tmp_path, taken_port, setting, expected):
    config = ({"api_port": taken_port} if setting == "api_port"
              else {"api_port": free_port(), "Listen": [f"tls://127.0.0.1:{taken_port}"]})
    write(tmp_path, config)
    result = run_cli("--config", "c.json", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[-1] == "axl-node: " + expected.format(port=taken_port)
    assert "Traceback" not in result.stderr and "ERROR" not in result.stderr


def test_genkey_writes_a_loadable_key_and_refuses_overwrite(tmp_path):
    path = tmp_path / "k.pem"
    first = run_cli("genkey", str(path))
    assert first.returncode == 0 and len(first.stdout.strip()) == 64
    again = run_cli("genkey", str(path))
    assert again.returncode == 1 and "already exists" in again.stderr
    check = subprocess.run(["openssl", "pkey", "-in", str(path), "-pubout"], capture_output=True)
    assert check.returncode == 0


def test_help_mentions_config_and_endpoints():
    result = run_cli("--help")
    assert result.returncode == 0
    assert "--config" in result.stdout and "/send" in result.stdout


def test_the_message_stream_needs_its_own_port() -> None:
    with pytest.raises(ConfigError, match="message_stream_port: must differ from tcp_port"):
        config_from_dict({"tcp_port": 7100, "message_stream_port": 7100})
    config = config_from_dict({"tcp_port": 7100, "message_stream_port": 7100, "message_streams": False})
    assert config.tcp_port == 7100


def test_the_inbox_lives_beside_the_key_file_unless_told_otherwise(tmp_path) -> None:
    beside = config_from_dict({"PrivateKeyPath": str(tmp_path / "keys" / "node.pem")})
    assert beside.inbox_file() == tmp_path / "keys" / "axl-inbox.sqlite3"
    assert beside.inbox_sync == "normal"
    chosen = config_from_dict({"PrivateKeyPath": "k.pem", "inbox_path": "q/inbox.db", "inbox_sync": "full"})
    assert chosen.inbox_file() == Path("q/inbox.db") and chosen.inbox_sync == "full"
    assert config_from_dict({"PrivateKeyPath": "k.pem", "inbox_path": ""}).inbox_file() is None
    # An ephemeral key (or one written in the config) has no file to sit beside.
    assert config_from_dict({}).inbox_file() is None
    assert config_from_dict({"PrivateKey": "11" * 32}).inbox_file() is None


def test_the_receive_queue_bounds_keep_their_earlier_names(caplog) -> None:
    config = config_from_dict({"recv_queue_max_messages": 8, "recv_queue_max_bytes": 4096})
    assert (config.max_inbox_messages, config.max_inbox_bytes) == (8, 4096)
    assert "recv_queue_max_messages is now called max_inbox_messages" in caplog.text
    assert (config_from_dict({}).max_inbox_messages, config_from_dict({}).max_inbox_bytes) == (1024, 256 << 20)
