"""An array over a cluster, its pure parts: which disk each member is and how a node reaches
it (raidlab.cluster.members), the NBD client's and the node sysctl's command lines, and the
refusals `raidlab create --cluster` gives before anything starts. No root, no network.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from raidlab.cli import main
from raidlab.cluster import plan
from raidlab.cluster.members import members_seen_from
from raidlab.cluster.plan import ClusterSpec
from raidlab.errors import UsageError
from raidlab.service.spec import ArraySpec
from raidlab.tools import ip as ip_tool
from raidlab.tools import nbd

PSK = nbd.TlsPsk("/labs/c/tls-psk", "raidlab")


def test_members_are_every_disk_in_node_order_local_on_the_array_node():
    spec = ClusterSpec("c", nodes=3, disks_per_node=2, disk_model="none,hdd-7200", disk_size=32 << 20)
    members = members_seen_from(spec, 1, Path("/labs/c/mnt"), PSK)
    assert [(m["index"], m["node"], m["export"]) for m in members] == [
        (0, 0, "d0"), (1, 0, "d1"), (2, 1, "d0"), (3, 1, "d1"), (4, 2, "d0"), (5, 2, "d1")]
    assert [m["where"] for m in members] == ["remote", "remote", "local", "local", "remote", "remote"]
    assert members[2]["path"] == "/labs/c/mnt/node1/d0" and "path" not in members[0]
    assert members[4]["uri"] == "nbds://10.77.0.3/d0" and members[3]["uri"] == "nbds://10.77.0.2/d1"
    # every record names the cluster's key (its file, never the key itself)
    assert {(m["tls_psk_file"], m["tls_username"]) for m in members} == {("/labs/c/tls-psk", "raidlab")}
    assert {m["namespace"] for m in members} == {"rlx-c-1"}  # every client runs in node 1
    assert [m["model"] for m in members] == ["none", "hdd-7200"] * 3
    assert {m["size"] for m in members} == {32 << 20}


@pytest.mark.parametrize("node", [-1, 3])
def test_a_node_the_cluster_does_not_have_is_refused(node):
    spec = ClusterSpec("c", nodes=3)
    with pytest.raises(UsageError, match=r"--node .*: cluster 'c' has nodes 0\.\.2"):
        members_seen_from(spec, node, Path("/labs/c/mnt"), PSK)


def test_an_array_spec_keeps_its_cluster_and_reads_old_specs(tmp_path):
    members = members_seen_from(ClusterSpec("c", nodes=2), 0, Path("/labs/c/mnt"), PSK)
    ArraySpec("x", "raid10", 2, "none", 256 << 20, 32768, cluster="c", node=0, members=members).save(tmp_path)
    again = ArraySpec.load(tmp_path)
    assert (again.cluster, again.node, again.members) == ("c", 0, members)
    ArraySpec("y", "raid5", 3, "none", 256 << 20, 32768).save(tmp_path)
    assert ArraySpec.load(tmp_path).cluster is None


def test_command_lines_of_the_nbd_client_and_the_node_sysctl():
    argv = nbd.nbdfuse_argv("/lab/nbd/m2.0", "nbds://10.77.0.3/d0", psk=PSK, pidfile="/lab/nbd/m2.0.pid")
    # nbdfuse reaches the TLS export through nbdkit's nbd plugin, which presents the key
    assert argv == ["nbdfuse", "--connections", "1", "--pidfile", "/lab/nbd/m2.0.pid", "/lab/nbd/m2.0",
                    "[", "nbdkit", "--exit-with-parent", "nbd", "hostname=10.77.0.3", "port=10809", "export=d0",
                    "tls=require", "tls-psk=/labs/c/tls-psk", "tls-username=raidlab", "]"]
    assert "hostname=fd00::2" in nbd.nbdfuse_argv("/m", "nbds://[fd00::2]:10900/d1", psk=PSK, pidfile="/p")
    with pytest.raises(ValueError, match="not an nbds:// URI"):
        nbd.nbdfuse_argv("/m", "nbd://10.77.0.3/d0", psk=PSK, pidfile="/p")  # never without TLS
    wrapped = ip_tool.nsenter_argv("rlx-c-0", argv)
    assert wrapped[:3] == ["nsenter", "--net=/run/netns/rlx-c-0", "--"] and wrapped[3:] == argv
    assert plan.PEER_RETRIES == 5  # docs/cluster.md and the live test's failure bound assume it


@pytest.mark.parametrize("args, words", [
    (["--cluster", "c", "--disks", "4"], "--disks does not go with --cluster"),
    (["--cluster", "c", "--disk-size", "64M"], "--disk-size does not go with --cluster"),
    (["--cluster", "c", "--runner", "vm"], "--runner does not go with --cluster"),
    (["--cluster", "c", "--arch", "dcd"], "engine's layouts; dcd is of the cache family"),
    (["--node", "1", "--disks", "4"], "--node needs --cluster"),
    (["--cluster", "c"], "no cluster named 'c'"),
])
def test_create_over_a_cluster_refuses_in_one_line(args, words, tmp_path, capsys):
    if "--arch" not in args:
        args = [*args, "--arch", "raidx"]
    assert main(["create", "x", *args, "--home", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "labs" / "x").exists()


# -- node lists (clusters of real hosts) ----------------------------------------------------------

def _listed(nodes: int, *, disks: int = 1, size: int = 32 << 20, model: str = "none") -> ClusterSpec:
    return plan.listed_spec("c", [{"address": f"192.168.10.{k + 1}", "port": 10809 + (k == 2), "model": model,
                                   "disks": [{"name": f"d{j}", "size": size} for j in range(disks)]}
                                  for k in range(nodes)])


def test_a_node_list_file_is_read_in_order_with_its_defaults(tmp_path):
    path = tmp_path / "nodes.toml"
    path.write_text('[[node]]\naddress = "pc01.lab"\n\n[[node]]\naddress = "192.168.10.2"\nport = 10900\n'
                    'disks = ["d1", "d0"]\nmodel = "hdd-7200"\n')
    assert plan.read_node_list(path) == [
        {"address": "pc01.lab", "port": 10809, "disks": None, "model": "none"},
        {"address": "192.168.10.2", "port": 10900, "disks": ["d1", "d0"], "model": "hdd-7200"}]


def test_members_over_a_node_list_are_remote_but_for_the_node_served_here():
    spec = _listed(4, disks=2)
    everywhere = members_seen_from(spec, 0, None, PSK)
    assert [m["where"] for m in everywhere] == ["remote"] * 8
    assert {m["namespace"] for m in everywhere} == {None}  # clients run in this host's namespace
    assert [m["uri"] for m in everywhere][3:6] == ["nbds://192.168.10.2/d1", "nbds://192.168.10.3:10810/d0",
                                                   "nbds://192.168.10.3:10810/d1"]
    here = members_seen_from(spec, 2, Path("/labs/h/mnt"), PSK)
    assert [m["where"] for m in here] == ["remote"] * 4 + ["local"] * 2 + ["remote"] * 2
    # the serving lab is one node of its own: its disks are in its node0 directory
    assert here[4]["path"] == "/labs/h/mnt/node0/d0" and here[5]["path"] == "/labs/h/mnt/node0/d1"


def test_a_node_list_must_be_uniform_to_carry_an_array():
    with pytest.raises(UsageError, match="different numbers of disks"):
        plan.check_node_list([*_listed(1, disks=2).node_list, *_listed(1).node_list])
    with pytest.raises(UsageError, match="differ in size"):
        plan.check_node_list([*_listed(1).node_list, *_listed(1, size=64 << 20).node_list])
    spec = _listed(3, model="hdd-7200")
    assert (spec.kind, spec.nodes, spec.disks_per_node, spec.disk_size, spec.disk_model) == (
        plan.LISTED, 3, 1, 32 << 20, "hdd-7200")
    assert plan.collisions(spec, {"rlx-c"}, {"rlx-c-0"}) == []  # it builds nothing here


def test_a_serving_host_is_one_node_on_its_address_with_no_namespace():
    spec = ClusterSpec("h", 1, 2, "none", 16 << 20, kind=plan.SERVE, address="10.1.2.3", port=10900)
    spec.check()
    (node,) = plan.plan_nodes(spec)
    assert (node.namespace, node.veth, node.address, node.port) == (None, None, "10.1.2.3", 10900)
    assert [d.uri for d in node.disks] == ["nbds://10.1.2.3:10900/d0", "nbds://10.1.2.3:10900/d1"]
    with pytest.raises(UsageError, match="neither an IP address nor a host name"):
        ClusterSpec("h", 1, kind=plan.SERVE, address="a b").check()


def test_an_ipv6_host_is_written_in_brackets_in_its_uri():
    assert nbd.nbd_uri("fd00::2", "d0") == "nbds://[fd00::2]/d0"
    assert nbd.nbd_uri("fd00::2", "d1", 10900) == "nbds://[fd00::2]:10900/d1"
    assert nbd.nbd_uri("10.0.0.1", "d0", 10900) == "nbds://10.0.0.1:10900/d0"
    assert nbd.split_uri("nbds://[fd00::2]:10900/d1") == ("fd00::2", 10900, "d1")
    assert nbd.client_uri("nbds://[fd00::2]:10900/d1", PSK) == (
        "nbds://raidlab@[fd00::2]:10900/d1?tls-psk-file=/labs/c/tls-psk")
