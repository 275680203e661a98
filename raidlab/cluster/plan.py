"""What a cluster is made of, as pure functions: its spec, the names of its network objects,
the address plan, and the shape of its links. No I/O here; raidlab.cluster.network and
raidlab.cluster.serving build what these functions describe.

Names. Interface names are at most 15 characters (IFNAMSIZ), so a cluster's name is short
(at most 8 characters) and every object carries it with a fixed prefix:

    bridge (the switch)            rlx-NAME        root namespace
    node k's namespace             rlx-NAME-k      /run/netns/rlx-NAME-k
    node k's cable, switch end     rlv-NAME-k      a port of the bridge
    node k's cable, node end       eth0            inside the node's namespace

The bridge and the switch ends differ in their prefix, so no node's port can take another
cluster's bridge name; `NAME-k` splits uniquely at its last "-" (k is a number), so two
clusters never plan the same port or namespace.

Addresses. Node k is host k+1 of the subnet (default 10.77.0.0/24: node 0 is 10.77.0.1). The
bridge itself has no address: it is a switch, and the root namespace is no node. Every node
serves NBD on its own address, port 10809; its disk j is the export dj.

Links. The paper's cluster is switched Fast Ethernet in full duplex (RAID-x §4.1: 12.5 MB/s
per port). Each cable is shaped in both directions by a token bucket filter (tc-tbf(8)) on
the egress of each end: the node's eth0 caps what the node sends, the switch end caps what
the switch delivers to it. Three numbers make a tbf:

* rate: the link rate (default 100mbit);
* burst (the bucket): 2 ms of the link rate, at least 16 KiB (ten full Ethernet frames).
  tbf releases packets from a timer; a bucket smaller than what the link sends between two
  timer wake-ups would cap the rate below the one asked for, and it must hold at least one
  whole frame. 2 ms is well above the timer slack of a current kernel, and a burst that
  short does not let a transfer of a few hundred kilobytes beat the rate noticeably;
* limit (the queue): the burst plus 50 ms at the link rate, then tbf drops. The paper gives
  no switch buffer size; 50 ms is the latency tc-tbf(8)'s own examples use, enough for TCP
  to keep a saturated link busy (its losses are TCP's usual congestion signal) while a
  full queue delays a packet by at most 50 ms.

Measured through a cluster with these shapes, one node reading another's disk (model none)
with nbdcopy: 4 MiB at 20mbit in 1.76 s (the rate alone: 1.68 s), 32 MiB at 100mbit in
2.83 s (2.68 s; TCP/IP headers take about 4%); tests/live/test_cluster.py holds the lower
bound.

A dead peer. A node whose cable is cut answers nothing; TCP retransmits to it with an
exponential backoff and, by Linux's default (net.ipv4.tcp_retries2 = 15), gives up after
about fifteen minutes. Every node's namespace sets tcp_retries2 to PEER_RETRIES (5): a
connection whose data stays unacknowledged fails after the retransmission timeouts
0.2 + 0.4 + ... + 6.4 = 12.6 s (from the 200 ms minimum; about 14 s measured with the
connection's own round-trip estimate), and a client on the node sees an error instead of
a wait. Congestion does not trip it: the same segment would have to be lost six times in a
row. The setting is per namespace, so the host's own TCP keeps its default.

Not modelled: propagation delay and its variation (the kernel here has no netem); the
virtual-time twin of the cluster is where latency will be modelled.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import re
from pathlib import Path
from typing import Any

from raidlab.disks import catalog
from raidlab.errors import UsageError
from raidlab.tools.ip import IFNAME_MAX
from raidlab.tools.nbd import NBD_PORT, nbd_uri
from raidlab.units import format_link_rate

CLUSTER_FILE = "cluster.json"
RUNTIME_FILE = "runtime.json"

CLUSTER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,7}$")
# Node numbers in interface names have at most two digits (rlv-NAME-kk is then 15 characters).
MAX_NODES = 64
# The paper's largest plan has eight disks per node (§4.2: 128 nodes, 8 disks each).
MAX_DISKS_PER_NODE = 16
MIN_LINK_BITS = 10**6      # below 1 Mbit/s an NBD handshake alone takes a noticeable while
MAX_LINK_BITS = 100 * 10**9

DEFAULT_LINK = "100mbit"   # Fast Ethernet, the paper's network
DEFAULT_SUBNET = "10.77.0.0/24"
NODE_IFNAME = "eth0"

PEER_RETRIES = 5          # net.ipv4.tcp_retries2 in every node (module doc, "A dead peer")

BURST_SECONDS = 0.002
MIN_BURST_BYTES = 16 * 1024
QUEUE_SECONDS = 0.050


def check_cluster_name(name: str) -> str:
    if not CLUSTER_NAME_RE.match(name):
        raise UsageError(f"bad cluster name {name!r}",
                         hint="use 1 to 8 letters, digits, '_' or '-' (interface names are short)")
    return name


def bridge_name(cluster: str) -> str:
    return f"rlx-{cluster}"


def namespace_name(cluster: str, node: int) -> str:
    return f"rlx-{cluster}-{node}"


def veth_name(cluster: str, node: int) -> str:
    return f"rlv-{cluster}-{node}"


def check_node(spec: "ClusterSpec", node: int, option: str = "--node") -> int:
    """A node number of the cluster, or a UsageError that names the range."""
    if not 0 <= node < spec.nodes:
        raise UsageError(f"{option} {node}: cluster {spec.name!r} has nodes 0..{spec.nodes - 1}")
    return node


@dataclasses.dataclass(frozen=True)
class LinkShape:
    """A tbf on one end of a cable: rate (bit/s), burst and queue limit (bytes)."""

    rate_bits: int
    burst_bytes: int
    limit_bytes: int

    @classmethod
    def for_rate(cls, rate_bits: int) -> "LinkShape":
        rate_bytes = rate_bits / 8
        burst = max(MIN_BURST_BYTES, round(rate_bytes * BURST_SECONDS))
        return cls(rate_bits, burst, burst + round(rate_bytes * QUEUE_SECONDS))

    def as_json(self) -> dict[str, Any]:
        return {"rate": format_link_rate(self.rate_bits), "rate_bits": self.rate_bits,
                "burst_bytes": self.burst_bytes, "limit_bytes": self.limit_bytes}


@dataclasses.dataclass(frozen=True)
class DiskPlan:
    index: int
    name: str      # the export name, d0 ...
    model: str
    size: int
    uri: str


@dataclasses.dataclass(frozen=True)
class NodePlan:
    index: int
    namespace: str
    veth: str      # the switch end of the node's cable
    address: str
    prefixlen: int
    disks: tuple[DiskPlan, ...]

    @property
    def cidr(self) -> str:
        return f"{self.address}/{self.prefixlen}"

    @property
    def disk_dir(self) -> str:
        """The node's directory in the cluster's FUSE mount: its disks, one file each."""
        return f"node{self.index}"

    def as_json(self) -> dict[str, Any]:
        return {"index": self.index, "namespace": self.namespace, "veth": self.veth,
                "interface": NODE_IFNAME, "address": self.address, "cidr": self.cidr,
                "nbd_port": NBD_PORT, "disks": [dataclasses.asdict(d) for d in self.disks]}


@dataclasses.dataclass
class ClusterSpec:
    """What `raidlab cluster up` asked for; kept in the lab directory as cluster.json."""

    name: str
    nodes: int
    disks_per_node: int = 1
    disk_model: str = "none"  # one catalog model, or "m0,m1,...": disk j of every node is model j
    disk_size: int = 256 << 20
    link_bits: int = 100 * 10**6
    subnet: str = DEFAULT_SUBNET

    def check(self) -> None:
        """Refuse, in one line each, what cannot be built (before anything is)."""
        check_cluster_name(self.name)
        if not 1 <= self.nodes <= MAX_NODES:
            raise UsageError(f"--nodes must be between 1 and {MAX_NODES}, not {self.nodes}")
        if not 1 <= self.disks_per_node <= MAX_DISKS_PER_NODE:
            raise UsageError(f"--disks-per-node must be between 1 and {MAX_DISKS_PER_NODE}, "
                             f"not {self.disks_per_node}")
        try:
            catalog.member_models(self.disk_model, self.disks_per_node)
        except UsageError as exc:
            raise UsageError(f"--disk-model: {exc.message}", hint=exc.hint) from None
        if not MIN_LINK_BITS <= self.link_bits <= MAX_LINK_BITS:
            raise UsageError(f"--link {format_link_rate(self.link_bits)} is out of range",
                             hint=f"use {format_link_rate(MIN_LINK_BITS)} to "
                                  f"{format_link_rate(MAX_LINK_BITS)}")
        node_addresses(self.subnet, self.nodes)
        for name in (bridge_name(self.name), veth_name(self.name, self.nodes - 1)):
            assert len(name) <= IFNAME_MAX, name  # guaranteed by the name rule and MAX_NODES

    @property
    def link(self) -> LinkShape:
        return LinkShape.for_rate(self.link_bits)

    def save(self, lab_path: Path) -> None:
        tmp = lab_path / (CLUSTER_FILE + ".tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(self), indent=2))
        os.replace(tmp, lab_path / CLUSTER_FILE)

    @classmethod
    def load(cls, lab_path: Path) -> "ClusterSpec":
        try:
            doc = json.loads((lab_path / CLUSTER_FILE).read_text())
        except FileNotFoundError:
            raise UsageError(f"no cluster in {lab_path}",
                             hint="bring one up with `raidlab cluster up`") from None
        return cls(**doc)


def node_addresses(subnet: str, nodes: int) -> list[ipaddress.IPv4Interface]:
    """Node k's address with the subnet's prefix: host k+1 of `subnet`."""
    try:
        net = ipaddress.IPv4Network(subnet, strict=True)
    except ValueError as exc:
        raise UsageError(f"--subnet {subnet!r} is not an IPv4 network: {exc}",
                         hint="write it like 10.77.0.0/24") from None
    room = net.num_addresses - 2  # without the network and broadcast addresses
    if nodes > room:
        raise UsageError(f"--subnet {subnet} has room for {max(room, 0)} nodes, not {nodes}",
                         hint="choose a larger subnet, e.g. a /24")
    return [ipaddress.IPv4Interface(f"{net.network_address + k + 1}/{net.prefixlen}")
            for k in range(nodes)]


def plan_nodes(spec: ClusterSpec) -> list[NodePlan]:
    """Every node: its namespace, cable, address and disks (with their NBD URIs)."""
    models = catalog.member_models(spec.disk_model, spec.disks_per_node)
    nodes = []
    for k, iface in enumerate(node_addresses(spec.subnet, spec.nodes)):
        address = str(iface.ip)
        disks = tuple(DiskPlan(j, f"d{j}", models[j], spec.disk_size, nbd_uri(address, f"d{j}"))
                      for j in range(spec.disks_per_node))
        nodes.append(NodePlan(k, namespace_name(spec.name, k), veth_name(spec.name, k), address,
                              iface.network.prefixlen, disks))
    return nodes


def collisions(spec: ClusterSpec, links: set[str], namespaces: set[str]) -> list[str]:
    """The network objects this cluster would create that exist already (pure: the caller
    passes the host's link and namespace names)."""
    found = [f"bridge {bridge_name(spec.name)}"] if bridge_name(spec.name) in links else []
    for k in range(spec.nodes):
        if veth_name(spec.name, k) in links:
            found.append(f"link {veth_name(spec.name, k)}")
        if namespace_name(spec.name, k) in namespaces:
            found.append(f"namespace {namespace_name(spec.name, k)}")
    return found
