"""Clusters of real hosts: a host that serves its disks as one node (`raidlab cluster serve`),
and a node list that names such hosts (`raidlab cluster up NAME --node-list FILE`).

The RAID-x paper's cluster was sixteen PCs on a switch; a class with a room of machines can run
the same experiment. Each machine serves its emulated disks with `raidlab cluster serve`
(kind SERVE: the cluster daemon without namespaces or cables, nbdkit listening on the host's
own address), and the machine that runs an array lists them all in a node list (kind LISTED).
The URIs have the same shape as a cluster of namespaces (nbds://ADDRESS/dJ), so an array over
either is built, degraded, rebuilt and checked by the same code (raidlab.cluster.members,
raidlab.service.hosts.nodes).

A listed cluster has no daemon: it is the list, probed. `up` asks every host for its exports
(nbdinfo --list, from this host's own network namespace) and records what each serves and how
large it is; `status` asks again; `down` forgets the list. Every host of a cluster of real
machines serves with the same TLS key (raidlab.cluster.tlskey): the first host makes it, the
others are given a copy (`cluster serve --psk-file`), and so is the node list (`cluster up
--node-list --psk-file`), which keeps it in its lab and presents it to every host. What this host builds for it is
nothing, so nothing is left behind. A node of the list that this host serves itself (a
`cluster serve` lab here listening on that address and port) is reached locally, through the
serving lab's FUSE file, as a namespace cluster's own node is.

Not done for real hosts: shaping their links (a real switch port is the link, whatever its
rate) and cutting a cable by command (unplug it, or stop `raidlab cluster serve` on the host).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from raidlab.cluster.plan import CLUSTER_FILE, LISTED, RUNTIME_FILE, SERVE, ClusterSpec, plan_nodes, read_node_list
from raidlab.errors import UsageError
from raidlab.lab import Lab, labs_dir
from raidlab.tools import nbd
from raidlab.tools.base import require, run
from raidlab.tools.nbd import TlsPsk

PROBE_TIMEOUT = 20.0  # seconds for one host to list its exports


def probe(address: str, port: int, psk: TlsPsk) -> list[dict[str, Any]] | str:
    """The exports a host serves ([{"name", "size"}]), asked with the key `psk`, or, when
    it cannot be listed, why."""
    argv = nbd.list_exports_argv(nbd.nbd_uri(address, "", port), psk=psk, executable=require("nbdinfo"))
    try:
        proc = run(argv, check=False, timeout=PROBE_TIMEOUT)
    except subprocess.TimeoutExpired:
        return f"no answer within {PROBE_TIMEOUT:.0f} s"
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()
        return last[-1] if last else f"nbdinfo exited with status {proc.returncode}"
    try:
        return nbd.parse_list_json(proc.stdout)
    except (ValueError, TypeError) as exc:
        return f"nbdinfo's answer is not its JSON: {exc}"


def probe_list(path: Path, psk: TlsPsk) -> list[dict[str, Any]]:
    """Every node of the node list `path` as it serves now, asked with the key `psk`: the
    file's records with "disks" replaced by [{"name", "size"}] of the exports it names (all,
    by name, when it names none). UsageError, one line, for a node that cannot be reached or
    lacks an export."""
    nodes = read_node_list(path)
    for k, node in enumerate(nodes):
        found = probe(node["address"], node["port"], psk)
        if isinstance(found, str):
            raise UsageError(f"node {k} ({node['address']} port {node['port']}) cannot be listed: {found}",
                             hint="is `raidlab cluster serve` running there, with the key of --psk-file, "
                                  "and the address reachable?")
        served = {export["name"]: export["size"] for export in found}
        names = node["disks"] if node["disks"] is not None else sorted(served)
        missing = [name for name in names if name not in served]
        if missing or not names:
            raise UsageError(f"node {k} ({node['address']}) serves {sorted(served) or 'nothing'}, "
                             f"not {missing or names}", hint="name its exports in disks = [...]")
        node["disks"] = [{"name": name, "size": served[name]} for name in names]
    return nodes


def describe_listed(spec: ClusterSpec, psk: TlsPsk, *, probe_now: bool = False) -> dict[str, Any]:
    """A listed cluster as `up` and `status` print it; with probe_now, whether each node
    answers now (to the key `psk`) and what it serves."""
    out: dict[str, Any] = {"name": spec.name, "kind": LISTED, "pid": None, "bridge": None, "subnet": None,
                           "link": None, "disks_per_node": spec.disks_per_node,
                           "tls_psk_file": psk.path, "tls_username": psk.username, "nodes": []}
    for node in plan_nodes(spec):
        record = {**node.as_json(), "nbdkit_pid": None}
        if probe_now:
            found = probe(node.address, node.port, psk)
            record["reachable"] = not isinstance(found, str)
            record["answer"] = found if isinstance(found, str) else [e["name"] for e in found]
        out["nodes"].append(record)
    return out


def served_here(address: str, port: int, *, home: str | None) -> Path | None:
    """The FUSE mount point of a running `cluster serve` lab of this host that serves
    `address`:`port`, or None."""
    base = labs_dir(home)
    if not base.is_dir():
        return None
    for entry in sorted(base.iterdir()):
        if not (entry / CLUSTER_FILE).exists():
            continue
        try:
            spec = ClusterSpec.load(entry)
        except (UsageError, ValueError, TypeError):
            continue
        if spec.kind == SERVE and spec.address == address and spec.port == port:
            lab = Lab(entry.name, home=home)
            if lab.in_use() and (entry / RUNTIME_FILE).exists():
                return lab.mountpoint
    return None


__all__ = ["describe_listed", "probe", "probe_list", "served_here"]
