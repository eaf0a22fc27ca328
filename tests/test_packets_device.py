import pytest

from axl.identity import NodeIdentity, key_for_address_bytes
from axl.packets import DeliverPacket, IPv6Device, Lookup, SendIPv6
from axl.packets.ipv6 import (
    NEXT_HEADER_ICMPV6, build_packet, internet_checksum, parse_header, pseudo_header,
)

T0 = 1000.0
ME = NodeIdentity.from_seed(bytes([1]) * 32)
PEER = NodeIdentity.from_seed(bytes([2]) * 32)
OTHER = NodeIdentity.from_seed(bytes([3]) * 32)


def in_subnet(ident: NodeIdentity, host: int = 7) -> bytes:
    return ident.subnet + host.to_bytes(8, "big")


def packet(src: bytes, dst: bytes, size: int = 60) -> bytes:
    return build_packet(src, dst, 6, bytes(size - 40))


def device(**kwargs) -> IPv6Device:
    return IPv6Device(ME, **kwargs)


# --- write path ---------------------------------------------------------

@pytest.mark.parametrize("bad", [b"", bytes(39), b"\x40" + bytes(59)])
def test_write_rejects_non_ipv6_and_short(bad):
    dev = device()
    assert dev.write(bad, T0) == []
    assert dev.dropped["write_malformed"] == 1


def test_write_rejects_foreign_source():
    dev = device()
    assert dev.write(packet(PEER.address, PEER.address), T0) == []
    assert dev.dropped["write_bad_source"] == 1


def test_write_rejects_destination_outside_200_7():
    dev = device()
    assert dev.write(packet(ME.address, b"\xfd" + bytes(15)), T0) == []
    assert dev.dropped["write_bad_destination"] == 1


def test_unknown_address_buffers_newest_and_looks_up_every_time():
    dev = device()
    first, second = packet(ME.address, PEER.address, 60), packet(in_subnet(ME), PEER.address, 80)
    lookup = Lookup(key_for_address_bytes(PEER.address))
    assert dev.write(first, T0) == [lookup]
    assert dev.write(second, T0 + 1) == [lookup]
    assert dev.path_found(PEER.public_key, T0 + 2) == [SendIPv6(PEER.public_key, second)]
    assert dev.path_found(PEER.public_key, T0 + 3) == []


def test_subnet_destination_uses_subnet_map_and_subnet_lookup():
    dev = device()
    to_subnet = packet(ME.address, in_subnet(PEER))
    to_address = packet(ME.address, PEER.address)
    assert dev.write(to_subnet, T0) == [Lookup(key_for_address_bytes(PEER.subnet))]
    assert dev.write(to_address, T0) == [Lookup(key_for_address_bytes(PEER.address))]
    actions = dev.path_found(PEER.public_key, T0 + 1)
    assert actions == [SendIPv6(PEER.public_key, to_address), SendIPv6(PEER.public_key, to_subnet)]
    assert dev.write(to_subnet, T0 + 2) == [SendIPv6(PEER.public_key, to_subnet)]


def test_pending_packet_expires_after_two_minutes():
    dev = device()
    dev.write(packet(ME.address, PEER.address), T0)
    assert dev.path_found(PEER.public_key, T0 + 121) == []


def test_key_cache_expires_and_is_reset_by_sending():
    dev = device()
    dev.path_found(PEER.public_key, T0)
    out = packet(ME.address, PEER.address)
    assert dev.write(out, T0 + 100) == [SendIPv6(PEER.public_key, out)]
    assert dev.write(out, T0 + 219) == [SendIPv6(PEER.public_key, out)]
    assert dev.write(out, T0 + 340) == [Lookup(key_for_address_bytes(PEER.address))]


def test_tick_forgets_idle_keys_and_pending():
    dev = device()
    dev.path_found(PEER.public_key, T0)
    dev.write(packet(ME.address, OTHER.address), T0)
    dev.tick(T0 + 121)
    assert not dev._by_key and not dev._by_address and not dev._pending_address


def test_key_cache_is_bounded():
    dev = device(max_entries=2)
    for n in range(3, 6):
        dev.path_found(NodeIdentity.from_seed(bytes([n]) * 32).public_key, T0)
    assert len(dev._by_key) == len(dev._by_address) == len(dev._by_subnet) == 2
    assert dev.key_count() == 2 and dev.evicted["keys"] == 1


# --- read path ----------------------------------------------------------

def test_read_delivers_valid_packet_and_caches_sender():
    dev = device()
    incoming = packet(PEER.address, ME.address)
    assert dev.read(PEER.public_key, incoming, T0) == [DeliverPacket(PEER.public_key, incoming)]
    reply = packet(ME.address, PEER.address)
    assert dev.write(reply, T0) == [SendIPv6(PEER.public_key, reply)]


def test_read_accepts_subnet_source_and_destination():
    dev = device()
    incoming = packet(in_subnet(PEER), in_subnet(ME))
    assert dev.read(PEER.public_key, incoming, T0) == [DeliverPacket(PEER.public_key, incoming)]


@pytest.mark.parametrize("bad", [b"", b"\x40" + bytes(59), b"\x60" + bytes(38)])
def test_read_drops_non_ipv6_and_short(bad):
    dev = device()
    assert dev.read(PEER.public_key, bad, T0) == []
    assert not dev._by_key


def test_read_wrong_destination_dropped_before_cache_update():
    dev = device()
    assert dev.read(PEER.public_key, packet(PEER.address, OTHER.address), T0) == []
    assert dev.dropped["read_bad_destination"] == 1
    assert not dev._by_key


def test_read_spoofed_source_dropped_after_cache_update():
    dev = device()
    assert dev.read(PEER.public_key, packet(OTHER.address, ME.address), T0) == []
    assert dev.dropped["read_bad_source"] == 1
    assert PEER.public_key in dev._by_key


def test_read_cache_update_flushes_pending():
    dev = device()
    waiting = packet(ME.address, PEER.address)
    dev.write(waiting, T0)
    incoming = packet(PEER.address, ME.address)
    assert dev.read(PEER.public_key, incoming, T0 + 1) == [
        SendIPv6(PEER.public_key, waiting), DeliverPacket(PEER.public_key, incoming)]


def test_read_at_exactly_mtu_accepted():
    dev = device()
    incoming = packet(PEER.address, ME.address, 1280)
    assert dev.read(PEER.public_key, incoming, T0) == [DeliverPacket(PEER.public_key, incoming)]


def test_oversize_packet_answered_with_exact_ptb():
    dev = device()
    dev.path_found(PEER.public_key, T0)
    big = packet(PEER.address, ME.address, 1281)
    [action] = dev.read(PEER.public_key, big, T0)
    assert action.key == PEER.public_key
    ptb = action.packet
    assert len(ptb) == 560
    header = parse_header(ptb)
    assert (header.src, header.dst) == (ME.address, PEER.address)
    assert header.next_header == NEXT_HEADER_ICMPV6 and header.hop_limit == 255
    assert header.payload_length == 520 and header.traffic_class == 0 and header.flow_label == 0
    icmp = ptb[40:]
    assert icmp[:2] == b"\x02\x00"
    assert int.from_bytes(icmp[4:8], "big") == 1280
    assert icmp[8:] == big[:512]
    assert internet_checksum(pseudo_header(ME.address, PEER.address, 520, 58) + icmp) == 0


def test_ptb_for_unknown_source_key_goes_through_lookup():
    dev = device()
    [action] = dev.read(PEER.public_key, packet(PEER.address, ME.address, 1500), T0)
    assert action == Lookup(key_for_address_bytes(PEER.address))


def test_oversize_packet_to_foreign_destination_gets_no_ptb():
    dev = device()
    dev.path_found(PEER.public_key, T0)
    assert dev.read(PEER.public_key, packet(PEER.address, OTHER.address, 1500), T0) == []
    assert dev.dropped["read_too_big"] == 1 and dev.dropped["write_bad_source"] == 1


def test_larger_mtu_is_a_constructor_parameter():
    dev = device(mtu=9000)
    incoming = packet(PEER.address, ME.address, 5000)
    assert dev.read(PEER.public_key, incoming, T0) == [DeliverPacket(PEER.public_key, incoming)]
