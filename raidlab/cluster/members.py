"""An array over the cluster, as one node sees the cluster's disks: which disk each member is,
and how the node reaches it.

RAID-x §5: the cooperative disk drivers give every node a single I/O space over all the
cluster's disks; each node reaches its own disk directly and every other node's through the
network. An engine array built "on node K" over cluster C (`raidlab create NAME --cluster C
--node K`) takes ALL of C's disks as members, in node order (node 0's d0, d1, ..., then node
1's, ...), so member m is disk m % D of node m // D for D disks per node: with one disk per
node, the paper's cluster (§4.1), member m is node m's disk. (With several disks per node,
the paper's Fig. 3 stripes across the nodes first, B0..B3 on their first disks and B4..B7
on their second, so that a node's disks pipeline on its bus; node order does not.) Node K
reaches

* its own disks locally: the files node<K>/d<j> of the cluster daemon's FUSE mount, the same
  emulated disks the node's nbdkit serves, without the network;
* every other node's disks over NBD, from inside node K's network namespace, so their
  traffic leaves through node K's cable and arrives through theirs, with the cluster's TLS
  key (raidlab.cluster.tlskey): each record names the key's file and username, and the
  file stays in the cluster's lab, so the array's spec holds no secret.

`members_seen_from` is the pure part (a list of JSON-able records the array's spec keeps);
`resolve` checks the cluster is up and the node exists. The array's daemon attaches the
members (raidlab.service.hosts.nodes); this package only says where they are, since the
service layer sits below it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raidlab.cluster.control import cluster_lab
from raidlab.cluster.hosts import served_here
from raidlab.cluster.plan import (LISTED, NETNS, RUNTIME_FILE, SERVE, ClusterSpec, check_node, namespace_name,
                                  plan_nodes)
from raidlab.cluster.tlskey import load_key
from raidlab.errors import UsageError
from raidlab.tools.nbd import TlsPsk


def members_seen_from(spec: ClusterSpec, node: int, mountpoint: Path | None, psk: TlsPsk) -> list[dict[str, Any]]:
    """Every disk of the cluster in node order, as node `node` reaches it: {"index", "node",
    "export", "model", "size", "uri", "where": "local" | "remote", "path" (local: the disk's
    file in the FUSE mount at `mountpoint`: the cluster's, or for a node list the mount of the
    `cluster serve` lab that serves node `node` here), "namespace" (the namespace the node's
    NBD clients run in; None: this process's own), "tls_psk_file" and "tls_username" (the
    cluster's key `psk`, which a remote disk's NBD client presents)}. With no `mountpoint`,
    every disk is remote (a node list whose node `node` this host does not serve)."""
    check_node(spec, node)
    client = namespace_name(spec.name, node) if spec.kind == NETNS else None
    members = []
    for plan in plan_nodes(spec):
        for disk in plan.disks:
            record: dict[str, Any] = {"index": len(members), "node": plan.index, "export": disk.name,
                                      "model": disk.model, "size": disk.size, "uri": disk.uri,
                                      "namespace": client, "tls_psk_file": psk.path,
                                      "tls_username": psk.username}
            if plan.index == node and mountpoint is not None:
                # A node list's node is served here by a `cluster serve` lab: its node 0.
                directory = "node0" if spec.kind == LISTED else plan.disk_dir
                record.update(where="local", path=str(mountpoint / directory / disk.name))
            else:
                record.update(where="remote")
            members.append(record)
    return members


def resolve(name: str, node: int, *, home: str | None) -> tuple[ClusterSpec, list[dict[str, Any]]]:
    """Cluster `name`'s spec and its disks as node `node` reaches them; UsageError, one line,
    for a cluster that does not exist or is not up, or a node it does not have."""
    lab = cluster_lab(name, home)
    spec = ClusterSpec.load(lab.path)
    if spec.kind == SERVE:
        raise UsageError(f"{name!r} is this host serving its disks, one node of a cluster of hosts",
                         hint="list the hosts in a node list: `raidlab cluster up NAME --node-list FILE`")
    if spec.kind == LISTED:
        # A node list has no daemon; node `node` is reached locally when this host serves it.
        check_node(spec, node)
        listed = plan_nodes(spec)[node]
        return spec, members_seen_from(spec, node, served_here(listed.address, listed.port, home=home),
                                       load_key(lab.path, name))
    if not lab.in_use() or not (lab.path / RUNTIME_FILE).exists():
        raise UsageError(f"cluster {name!r} is not up",
                         hint=f"bring it up with `raidlab cluster up {name} --nodes N`")
    return spec, members_seen_from(spec, node, lab.mountpoint, load_key(lab.path, name))


__all__ = ["members_seen_from", "resolve"]
