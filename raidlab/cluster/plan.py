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
serves NBD over TLS on its own address, port 10809 (nbds://ADDRESS/dj: its disk j is the
export dj; the key is the cluster's, raidlab.cluster.tlskey).

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
import re
from pathlib import Path
from typing import Any

from raidlab.disks import catalog
from raidlab.errors import UsageError
from raidlab.lab import saved
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
    namespace: str | None   # None: not a namespace of this host (another host, or this one)
    veth: str | None        # the switch end of the node's cable (None: a real cable)
    address: str
    prefixlen: int
    disks: tuple[DiskPlan, ...]
    port: int = NBD_PORT

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
                "nbd_port": self.port, "disks": [dataclasses.asdict(d) for d in self.disks]}


# What a cluster's nodes are (ClusterSpec.kind; docs/cluster.md, "Several real machines"):
NETNS = "netns"    # network namespaces on this host's bridge (`raidlab cluster up --nodes N`)
SERVE = "serve"    # this host is one node: its disks served on its own address (`cluster serve`)
LISTED = "list"    # the nodes are hosts named in a node list (`raidlab cluster up --node-list F`)
KINDS = (NETNS, SERVE, LISTED)


@dataclasses.dataclass
class ClusterSpec:
    """What `raidlab cluster up` (or `cluster serve`) asked for; kept in the lab directory as
    cluster.json.

    kind NETNS builds every node here; SERVE is one node (`address`, `port`) whose disks this
    host serves; LISTED is a client's view of hosts that serve their disks (`node_list`: one
    record per node, {"address", "port", "model", "disks": [{"name", "size"}]}, as probed
    when it came up)."""

    name: str
    nodes: int
    disks_per_node: int = 1
    disk_model: str = "none"  # one catalog model, or "m0,m1,...": disk j of every node is model j
    disk_size: int = 256 << 20
    link_bits: int = 100 * 10**6
    subnet: str = DEFAULT_SUBNET
    kind: str = NETNS
    address: str | None = None
    port: int = NBD_PORT
    node_list: list[dict[str, Any]] | None = None

    def check(self) -> None:
        """Refuse, in one line each, what cannot be built (before anything is)."""
        check_cluster_name(self.name)
        if self.kind not in KINDS:
            raise UsageError(f"unknown cluster kind {self.kind!r}", hint=f"one of {', '.join(KINDS)}")
        if self.kind == LISTED:
            check_node_list(self.node_list or [])
            return
        if self.kind == SERVE:
            self.nodes = 1
            check_address(self.address, "--address")
            check_port(self.port, "--port")
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
        if self.kind == SERVE:
            return
        node_addresses(self.subnet, self.nodes)
        for name in (bridge_name(self.name), veth_name(self.name, self.nodes - 1)):
            assert len(name) <= IFNAME_MAX, name  # guaranteed by the name rule and MAX_NODES

    @property
    def link(self) -> LinkShape:
        return LinkShape.for_rate(self.link_bits)

    def save(self, lab_path: Path) -> None:
        saved.save(self, lab_path / CLUSTER_FILE)

    @classmethod
    def load(cls, lab_path: Path) -> "ClusterSpec":
        return saved.load(cls, lab_path / CLUSTER_FILE,
                          missing=UsageError(f"no cluster in {lab_path}", hint="bring one up with `raidlab cluster up`"),
                          damaged_hint="restore the file, or release the cluster with `raidlab lab cleanup`")


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
    """Every node: its namespace, cable, address and disks (with their NBD URIs). A node this
    host does not build (kinds SERVE and LISTED) has no namespace and no cable (None)."""
    models = catalog.member_models(spec.disk_model, spec.disks_per_node)
    if spec.kind == SERVE:
        assert spec.address is not None
        disks = tuple(DiskPlan(j, f"d{j}", models[j], spec.disk_size, nbd_uri(spec.address, f"d{j}", spec.port))
                      for j in range(spec.disks_per_node))
        return [NodePlan(0, None, None, spec.address, 32, disks, spec.port)]
    if spec.kind == LISTED:
        return [NodePlan(k, None, None, node["address"], 32,
                         tuple(DiskPlan(j, d["name"], node["model"], d["size"],
                                        nbd_uri(node["address"], d["name"], node["port"]))
                               for j, d in enumerate(node["disks"])), node["port"])
                for k, node in enumerate(spec.node_list or [])]
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
    if spec.kind != NETNS:
        return []
    found = [f"bridge {bridge_name(spec.name)}"] if bridge_name(spec.name) in links else []
    for k in range(spec.nodes):
        if veth_name(spec.name, k) in links:
            found.append(f"link {veth_name(spec.name, k)}")
        if namespace_name(spec.name, k) in namespaces:
            found.append(f"namespace {namespace_name(spec.name, k)}")
    return found


# -- clusters of real hosts ----------------------------------------------------------------------
#
# A node list names hosts that serve their disks (each runs `raidlab cluster serve`), one
# [[node]] table per host, in node order (node order is member order):
#
#     [[node]]
#     address = "192.168.10.1"   # where the host's NBD server listens (required)
#     port = 10809               # optional, NBD's own port by default
#     disks = ["d0"]             # optional: the exports to use, in order (default: all, by name)
#     model = "maxtor-91020d6"   # optional: the catalog model the host serves, for status
#
# `read_node_list` parses and checks the file (pure but for reading it); what each host really
# serves is probed over NBD when the cluster comes up (raidlab.cluster.hosts).

HOSTNAME_RE = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                         r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
EXPORT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
NODE_KEYS = {"address", "port", "disks", "model"}


def check_address(address: Any, where: str) -> str:
    """An IP address or a host name that an NBD URI can carry; UsageError otherwise."""
    if not isinstance(address, str) or not address:
        raise UsageError(f"{where}: an address is needed, e.g. 192.168.10.1")
    try:
        ipaddress.ip_address(address)
        return address
    except ValueError:
        pass
    if not HOSTNAME_RE.match(address):
        raise UsageError(f"{where}: {address!r} is neither an IP address nor a host name")
    return address


def check_port(port: Any, where: str) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise UsageError(f"{where}: port {port!r} is not a number from 1 to 65535")
    return port


def read_node_list(path: Path) -> list[dict[str, Any]]:
    """The nodes of a node list file: [{"address", "port", "disks": [names] or None,
    "model"}], in the file's order; UsageError (one line, naming the file and the node)
    for anything else."""
    import tomllib

    try:
        doc = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UsageError(f"--node-list {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--node-list {path}: cannot read it: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"--node-list {path}: not TOML: {exc}") from None
    extra = set(doc) - {"node"}
    if extra:
        raise UsageError(f"--node-list {path}: unknown table or key {sorted(extra)[0]!r}",
                         hint="the file holds [[node]] tables only")
    entries = doc.get("node")
    if not isinstance(entries, list) or not entries:
        raise UsageError(f"--node-list {path}: no [[node]] table", hint="one [[node]] per host, in node order")
    nodes = []
    for k, entry in enumerate(entries):
        where = f"--node-list {path}, node {k}"
        if not isinstance(entry, dict):
            raise UsageError(f"{where}: not a table")
        unknown = set(entry) - NODE_KEYS
        if unknown:
            raise UsageError(f"{where}: unknown key {sorted(unknown)[0]!r}",
                             hint=f"a node has {', '.join(sorted(NODE_KEYS))}")
        disks = entry.get("disks")
        if disks is not None:
            if (not isinstance(disks, list) or not disks
                    or not all(isinstance(d, str) and EXPORT_RE.match(d) for d in disks)):
                raise UsageError(f"{where}: disks must be a list of export names like [\"d0\"]")
            if len(set(disks)) != len(disks):
                raise UsageError(f"{where}: an export is named twice in disks")
            if len(disks) > MAX_DISKS_PER_NODE:
                raise UsageError(f"{where}: more than {MAX_DISKS_PER_NODE} disks")
        model = entry.get("model", "none")
        if not isinstance(model, str):
            raise UsageError(f"{where}: model must be a catalog model name")
        try:
            catalog.get(model)
        except UsageError as exc:
            raise UsageError(f"{where}: {exc.message}", hint=exc.hint) from None
        nodes.append({"address": check_address(entry.get("address"), where),
                      "port": check_port(entry.get("port", NBD_PORT), where),
                      "disks": list(disks) if disks is not None else None, "model": model})
    if len(nodes) > MAX_NODES:
        raise UsageError(f"--node-list {path}: {len(nodes)} nodes, at most {MAX_NODES}")
    seen: dict[tuple[str, int], int] = {}
    for k, node in enumerate(nodes):
        key = (node["address"], node["port"])
        if key in seen:
            raise UsageError(f"--node-list {path}: nodes {seen[key]} and {k} are the same server "
                             f"({node['address']} port {node['port']})")
        seen[key] = k
    return nodes


def check_node_list(nodes: list[dict[str, Any]]) -> None:
    """A probed node list an array can stripe over: every node with the same number of disks,
    every disk of one size (the layouts place member m as disk m % D of node m // D)."""
    if not nodes:
        raise UsageError("a node list needs at least one node")
    counts = {len(node["disks"]) for node in nodes}
    if len(counts) != 1:
        raise UsageError("the nodes serve different numbers of disks: "
                         + ", ".join(f"node {k} {len(n['disks'])}" for k, n in enumerate(nodes)),
                         hint="list the same number of exports for every node (disks = [...])")
    sizes = {d["size"] for node in nodes for d in node["disks"]}
    if len(sizes) != 1:
        raise UsageError("the nodes' disks differ in size: "
                         + ", ".join(f"node {k} {[d['size'] for d in n['disks']]}" for k, n in enumerate(nodes)),
                         hint="serve disks of one size on every host (`raidlab cluster serve --disk-size`)")


def listed_spec(name: str, nodes: list[dict[str, Any]]) -> ClusterSpec:
    """The spec of a cluster over probed hosts (records as ClusterSpec.node_list says)."""
    check_node_list(nodes)
    models = [n["model"] for n in nodes]
    return ClusterSpec(name, nodes=len(nodes), disks_per_node=len(nodes[0]["disks"]),
                       disk_model=models[0] if len(set(models)) == 1 else "none",
                       disk_size=nodes[0]["disks"][0]["size"], kind=LISTED, node_list=nodes)
