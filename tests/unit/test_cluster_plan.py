"""The cluster's pure parts: names, the address plan, link shapes and the tbf command line,
the spec's refusals, the parsers of tc's and nbdinfo's JSON, and the identity checks of the
network releases (with the host's links and namespaces faked). No root, no network.
"""

from __future__ import annotations

import json

import pytest

from raidlab.cluster import plan
from raidlab.cluster.plan import ClusterSpec, LinkShape
from raidlab.errors import UsageError
from raidlab.lab import cleanup
from raidlab.tools import ip as ip_tool
from raidlab.tools import nbd
from raidlab.units import format_link_rate, parse_link_rate


def test_names_of_a_cluster_fit_interface_names_and_never_overlap():
    longest = "abcdefgh"
    assert plan.bridge_name(longest) == "rlx-abcdefgh"
    assert plan.veth_name(longest, plan.MAX_NODES - 1) == "rlv-abcdefgh-63"
    assert len(plan.veth_name(longest, plan.MAX_NODES - 1)) == ip_tool.IFNAME_MAX
    assert plan.namespace_name("c", 2) == "rlx-c-2"
    # Two clusters whose names share a prefix plan disjoint objects.
    a = {plan.bridge_name("a")} | {plan.veth_name("a", k) for k in range(plan.MAX_NODES)}
    b = {plan.bridge_name("a-1")} | {plan.veth_name("a-1", k) for k in range(plan.MAX_NODES)}
    assert not a & b
    na = {plan.namespace_name("a", k) for k in range(plan.MAX_NODES)}
    nb = {plan.namespace_name("a-1", k) for k in range(plan.MAX_NODES)}
    assert not na & nb


@pytest.mark.parametrize("bad", ["", "abcdefghi", "-x", "a b", "a/b", "a.b"])
def test_bad_cluster_names_are_refused(bad):
    with pytest.raises(UsageError, match="cluster name"):
        plan.check_cluster_name(bad)


def test_address_plan_node_k_is_host_k_plus_one():
    addrs = plan.node_addresses("10.77.0.0/24", 3)
    assert [str(a) for a in addrs] == ["10.77.0.1/24", "10.77.0.2/24", "10.77.0.3/24"]
    assert [str(a) for a in plan.node_addresses("192.168.5.0/30", 2)] == ["192.168.5.1/30", "192.168.5.2/30"]
    with pytest.raises(UsageError, match="room for 2 nodes, not 3"):
        plan.node_addresses("192.168.5.0/30", 3)
    with pytest.raises(UsageError, match="not an IPv4 network"):
        plan.node_addresses("10.77.0.5/24", 2)  # host bits set
    with pytest.raises(UsageError, match="not an IPv4 network"):
        plan.node_addresses("fd00::/64", 2)


def test_plan_nodes_gives_namespaces_addresses_and_nbd_uris():
    spec = ClusterSpec("c", 2, disks_per_node=2, disk_model="none,hdd-7200", disk_size=16 << 20)
    nodes = plan.plan_nodes(spec)
    assert [n.namespace for n in nodes] == ["rlx-c-0", "rlx-c-1"]
    assert [n.veth for n in nodes] == ["rlv-c-0", "rlv-c-1"]
    assert nodes[1].cidr == "10.77.0.2/24" and nodes[1].disk_dir == "node1"
    assert [(d.name, d.model, d.uri) for d in nodes[1].disks] == [
        ("d0", "none", "nbds://10.77.0.2/d0"), ("d1", "hdd-7200", "nbds://10.77.0.2/d1")]
    doc = nodes[0].as_json()
    assert doc["interface"] == "eth0" and doc["nbd_port"] == 10809 and len(doc["disks"]) == 2


def test_link_shape_burst_and_queue():
    fast = LinkShape.for_rate(100 * 10**6)       # 12.5 MB/s
    assert fast.burst_bytes == 25_000              # 2 ms
    assert fast.limit_bytes == 25_000 + 625_000    # + 50 ms
    slow = LinkShape.for_rate(20 * 10**6)         # 2.5 MB/s: 2 ms is 5000 B, below the floor
    assert slow.burst_bytes == plan.MIN_BURST_BYTES
    assert slow.limit_bytes == plan.MIN_BURST_BYTES + 125_000
    assert fast.as_json()["rate"] == "100mbit"


def test_tbf_argv_in_the_root_namespace_and_in_a_node():
    shape = LinkShape.for_rate(100 * 10**6)
    kwargs = dict(rate_bits=shape.rate_bits, burst_bytes=shape.burst_bytes, limit_bytes=shape.limit_bytes)
    assert ip_tool.tbf_argv("rlv-c-0", **kwargs) == [
        "tc", "qdisc", "replace", "dev", "rlv-c-0", "root", "tbf",
        "rate", "100000000bit", "burst", "25000", "limit", "650000"]
    assert ip_tool.tbf_argv("eth0", netns="rlx-c-0", **kwargs)[:3] == ["tc", "-n", "rlx-c-0"]


def test_nsenter_keeps_the_mount_namespace():
    argv = ip_tool.nsenter_argv("rlx-c-1", ["nbdinfo", "--list", "nbd://10.77.0.1"])
    assert argv == ["nsenter", "--net=/run/netns/rlx-c-1", "--", "nbdinfo", "--list", "nbd://10.77.0.1"]
    assert not any(a.startswith("--mount") for a in argv)


def test_nbdkit_serves_a_directory_on_the_nodes_address_only_over_tls():
    argv = nbd.nbdkit_argv("/lab/mnt/node1", address="10.77.0.2", pidfile="/lab/p", psk_file="/lab/tls-psk")
    assert argv[0] == "nbdkit" and argv[-2:] == ["file", "dir=/lab/mnt/node1"]
    assert argv[argv.index("--ipaddr") + 1] == "10.77.0.2" and "--exit-with-parent" in argv
    assert "--tls=require" in argv and "--tls-psk=/lab/tls-psk" in argv
    assert nbd.nbd_uri("10.77.0.2", "d0") == "nbds://10.77.0.2/d0"
    assert nbd.nbd_uri("10.77.0.2", "d0", port=10810) == "nbds://10.77.0.2:10810/d0"
    # the listing client presents the key: the username as the URI's user, the file in the query
    psk = nbd.TlsPsk("/labs/my lab/tls-psk", "raidlab")
    assert nbd.list_exports_argv(nbd.nbd_uri("10.77.0.2", ""), psk=psk) == [
        "nbdinfo", "--list", "--json", "nbds://raidlab@10.77.0.2/?tls-psk-file=/labs/my%20lab/tls-psk"]


def test_parse_nbdinfo_list_and_tc_statistics():
    listing = {"protocol": "newstyle-fixed", "exports": [
        {"export-name": "d0", "export-size": 16777216}, {"export-name": "d1", "export-size": 4096}]}
    assert nbd.parse_list_json(json.dumps(listing)) == [{"name": "d0", "size": 16777216},
                                                        {"name": "d1", "size": 4096}]
    tc = [{"kind": "tbf", "handle": "8001:", "root": True, "options": {"rate": 12500000, "burst": 25000},
           "bytes": 1102117, "packets": 799, "drops": 3, "overlimits": 1197, "requeues": 0,
           "backlog": 0, "qlen": 0}]
    got = ip_tool.parse_qdisc_json(json.dumps(tc))
    assert got["kind"] == "tbf" and got["bytes"] == 1102117 and got["drops"] == 3
    assert got["options"]["rate"] == 12500000
    assert ip_tool.parse_qdisc_json("") is None
    assert ip_tool.parse_qdisc_json(json.dumps([{**tc[0], "root": False}])) is None


def test_link_rates_as_tc_writes_them():
    assert parse_link_rate("100mbit") == 100 * 10**6
    assert parse_link_rate("20Mbit") == 20 * 10**6
    assert parse_link_rate("1.1mbit") == 1_100_000
    assert parse_link_rate("1gbit") == 10**9
    for bad in ("fast", "100", "100mbps", "12.5MB/s", "0mbit", "1.5bit"):
        with pytest.raises(UsageError):
            parse_link_rate(bad, "--link")
    assert format_link_rate(100 * 10**6) == "100mbit"
    assert format_link_rate(1_500_000) == "1500kbit"
    assert format_link_rate(123) == "123bit"


@pytest.mark.parametrize("change, message", [
    (dict(nodes=0), "--nodes must be between 1 and 64, not 0"),
    (dict(nodes=65), "--nodes must be between"),
    (dict(disks_per_node=0), "--disks-per-node must be between"),
    (dict(disk_model="nosuchdrive"), "nosuchdrive"),
    (dict(disks_per_node=2, disk_model="none,none,none"), "--disk-model"),
    (dict(link_bits=10**5), "--link 100kbit is out of range"),
    (dict(subnet="10.77.0.0/30", nodes=3), "room for 2 nodes"),
    (dict(name="toolongname"), "bad cluster name"),
])
def test_spec_check_refuses_in_one_line(change, message):
    spec = ClusterSpec(**{**dict(name="c", nodes=3), **change})
    with pytest.raises(UsageError) as info:
        spec.check()
    assert message in str(info.value) and "\n" not in str(info.value)


def test_spec_round_trips_through_the_lab_directory(tmp_path):
    spec = ClusterSpec("c", 4, disks_per_node=2, disk_model="hdd-7200", disk_size=1 << 30,
                       link_bits=20 * 10**6, subnet="10.9.0.0/24")
    spec.save(tmp_path)
    assert ClusterSpec.load(tmp_path) == spec
    with pytest.raises(UsageError, match="no cluster"):
        ClusterSpec.load(tmp_path / "elsewhere")


def test_collisions_name_what_exists():
    spec = ClusterSpec("c", 3)
    assert plan.collisions(spec, {"eth0", "lo"}, {"other"}) == []
    found = plan.collisions(spec, {"rlx-c", "rlv-c-2"}, {"rlx-c-0"})
    assert found == ["bridge rlx-c", "namespace rlx-c-0", "link rlv-c-2"]


def test_network_releases_leave_a_stranger_alone(monkeypatch):
    """A recorded link or namespace is deleted only while it is the recorded one; a name
    taken by another object since (another index or inode) is left alone, a record made
    just before creation (no identity yet) goes by name."""
    deleted = []
    monkeypatch.setattr(ip_tool, "link_ifindex", lambda name: {"rlv-c-0": 7, "rlx-c": 5}.get(name))
    monkeypatch.setattr(ip_tool, "delete_link", deleted.append)
    monkeypatch.setattr(ip_tool, "netns_inode", lambda name: {"rlx-c-0": 4026532178}.get(name))
    monkeypatch.setattr(ip_tool, "delete_netns", deleted.append)
    assert cleanup.release_link({"name": "rlv-c-0", "ifindex": 7}) == "deleted"
    assert cleanup.release_link({"name": "rlx-c", "ifindex": 9}).endswith("left alone")
    assert cleanup.release_link({"name": "rlx-c"}) == "deleted"
    assert cleanup.release_link({"name": "rlv-c-1", "ifindex": 8}) == "already gone"
    assert cleanup.release_netns({"name": "rlx-c-0", "inode": 1}).endswith("left alone")
    assert cleanup.release_netns({"name": "rlx-c-0", "inode": 4026532178}) == "deleted"
    assert cleanup.release_netns({"name": "rlx-c-1"}) == "already gone"
    assert deleted == ["rlv-c-0", "rlx-c", "rlx-c-0"]
