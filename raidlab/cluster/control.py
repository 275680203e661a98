"""Bring a cluster up, ask it for its status, bring it down: the actions behind
`raidlab cluster up|status|down` (parsing and printing live in raidlab.cli.cluster).

Blocking code on purpose, like raidlab.service.control (which starts, asks and stops the
daemon here too): the CLI is a short-lived client; the cluster daemon is the trio program.

A cluster is a lab named after it ($RAIDLAB_HOME/labs/NAME, holding cluster.json), so
`raidlab lab list` shows it and `raidlab lab cleanup NAME` releases what a killed daemon
left. Everything is refused, one line each, before anything is created: a bad spec, a
missing program (or an nbdkit without TLS), a name whose network objects exist already, a
name an array uses, a key file that is not one. The cluster's TLS key (raidlab.cluster.tlskey)
is written into the lab before the daemon starts; `up` and `status` name its file.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from raidlab.cluster import hosts, tlskey
from raidlab.cluster.plan import (CLUSTER_FILE, LISTED, NETNS, RUNTIME_FILE, SERVE, ClusterSpec, check_node,
                                  collisions, listed_spec, veth_name)
from raidlab.errors import CapabilityError, LabError, NeedsRootError, RaidlabError, UsageError
from raidlab.lab import Lab, check_lab_name, labs_dir
from raidlab.service import control
from raidlab.service.spec import SPEC_FILE, ArraySpec
from raidlab.tools import ip as ip_tool
from raidlab.tools import nbd
from raidlab.tools.base import require, run
from raidlab.tools.nbd import TlsPsk

PROGRAMS = ("ip", "tc", "nsenter", "sysctl", "nbdkit", "nbdinfo")
SERVE_PROGRAMS = ("nbdkit", "nbdinfo")


def check_prerequisites(operation: str, kind: str = NETNS) -> None:
    """Root, the programs a cluster runs, network namespaces and FUSE; raise before anything
    is created. A host that serves its disks as one node (kind SERVE) needs no namespaces."""
    if os.geteuid() != 0:
        raise NeedsRootError(operation, needs="network namespaces, links and a FUSE mount",
                             hint="run it with sudo")
    for program in (SERVE_PROGRAMS if kind == SERVE else PROGRAMS):
        require(program)
    if not nbd.has_tls(run([require("nbdkit"), "--dump-config"], check=False, timeout=20).stdout):
        raise CapabilityError("this nbdkit was built without TLS (`nbdkit --dump-config` has no tls=yes); "
                              "a cluster's NBD exports are served only over TLS",
                              hint="install Debian's nbdkit (scripts/system-packages.txt)",
                              capability="nbdkit-tls")
    if kind == NETNS and not Path("/proc/self/ns/net").exists():
        raise CapabilityError("the kernel has no network namespaces", capability="netns")
    if not Path("/dev/fuse").exists():
        raise CapabilityError("/dev/fuse is missing: the kernel has no FUSE",
                              hint="load the fuse module (modprobe fuse)", capability="fuse")


def _existing_lab(name: str, home: str | None) -> Lab | None:
    check_lab_name(name)
    return Lab(name, home=home) if (labs_dir(home) / name).is_dir() else None


def cluster_lab(name: str, home: str | None) -> Lab:
    """The lab of cluster NAME; one that does not exist, or holds an array, is refused."""
    lab = _existing_lab(name, home)
    if lab is None or not (lab.path / CLUSTER_FILE).exists():
        if lab is not None and (lab.path / SPEC_FILE).exists():
            raise UsageError(f"{name!r} is an array, not a cluster",
                             hint=f"see `raidlab status {name}`")
        raise UsageError(f"no cluster named {name!r} in {labs_dir(home)}",
                         hint="bring one up with `raidlab cluster up`")
    return lab


def tls_fields(psk: TlsPsk) -> dict[str, str]:
    """The key a cluster's exports need, as `up` and `status` report it."""
    return {"tls_psk_file": psk.path, "tls_username": psk.username}


def up(spec: ClusterSpec, *, home: str | None, on_status: Callable[[str], None] = lambda s: None,
       psk_file: Path | None = None) -> dict[str, Any]:
    """Start the cluster daemon for `spec`; return its ready record once every node serves
    its disks and reaches its neighbour (kind NETNS), or once this host serves its disks on
    its address (kind SERVE, `raidlab cluster serve`). The servers require a new random TLS
    key, or the key in `psk_file` (a host of a cluster of real machines that another host
    made the key for)."""
    spec.check()
    if spec.kind == LISTED:
        raise UsageError("a node list is brought up with up_listed")  # the CLI never gets here
    key_text = tlskey.read_key_file(psk_file) if psk_file is not None else None
    check_prerequisites("raidlab cluster serve" if spec.kind == SERVE else "raidlab cluster up", spec.kind)
    lab = _existing_lab(spec.name, home)
    if lab is not None:
        if (lab.path / SPEC_FILE).exists():
            raise UsageError(f"{spec.name!r} is the name of an array",
                             hint="choose another cluster name")
        if lab.in_use():
            raise UsageError(f"cluster {spec.name!r} is up already",
                             hint=f"see `raidlab cluster status {spec.name}`")
        # What a killed daemon of this cluster left would otherwise read as a collision.
        for line in control.release_leftovers(lab):
            on_status(f"released leftover of a killed run: {line}")
    found = collisions(spec, ip_tool.link_names(), ip_tool.netns_names())
    if found:
        raise UsageError(f"cluster {spec.name!r} would collide with what exists on this host: "
                         + ", ".join(found),
                         hint="choose another name (`ip link`, `ip netns list` show what is taken)")
    lab = Lab(spec.name, home=home, create=True)
    spec.save(lab.path)
    try:
        psk = tlskey.install_key(lab.path, key_text)
        ready = control.start_daemon(lab, "up", home=home, on_status=on_status,
                                     module="raidlab.cluster.daemon", what="cluster")
        return {**ready, **tls_fields(psk)}
    except BaseException:
        # The daemon released what it built, or left it listed; either way the error that
        # stopped it is what the user sees, not a second one from this tidying.
        with contextlib.suppress(RaidlabError):
            control.release_leftovers(lab)
            _remove(lab)
        raise


def up_listed(name: str, node_list: Path, *, psk_file: Path, home: str | None) -> dict[str, Any]:
    """Record cluster `name` as the hosts of `node_list`, each probed over NBD with the TLS
    key in `psk_file` (the key the hosts serve with; raidlab.cluster.hosts), which the lab
    keeps a copy of; return its description. Nothing runs for it on this host."""
    check_lab_name(name)
    require("nbdinfo")
    if _existing_lab(name, home) is not None:
        raise UsageError(f"{name!r} exists already in {labs_dir(home)}",
                         hint=f"`raidlab cluster down {name}` first, or choose another name")
    key_text = tlskey.read_key_file(psk_file)
    given = TlsPsk(os.path.abspath(psk_file), nbd.parse_psk(key_text)[0])
    spec = listed_spec(name, hosts.probe_list(node_list, given))
    spec.check()
    lab = Lab(name, home=home, create=True)
    spec.save(lab.path)
    described = hosts.describe_listed(spec, tlskey.install_key(lab.path, key_text))
    (lab.path / RUNTIME_FILE).write_text(json.dumps(described))
    return described


def status(name: str, *, home: str | None) -> dict[str, Any]:
    """The running cluster's status (raidlab.cluster.daemon.ClusterDaemon.op_status), or a
    listed cluster's nodes as they answer now."""
    lab = cluster_lab(name, home)
    spec = ClusterSpec.load(lab.path)
    if spec.kind == LISTED:
        return hosts.describe_listed(spec, tlskey.load_key(lab.path, name), probe_now=True)
    if not lab.in_use():
        left = lab.resources()
        raise LabError(f"cluster {name!r} is not up"
                       + (f" (a killed run left {len(left)} objects)" if left else ""),
                       hint=(f"`raidlab lab cleanup {name}` releases them" if left
                             else f"`raidlab cluster up {name} --nodes N` brings it up"))
    return {**control.request(lab, "status", timeout=60), **tls_fields(tlskey.load_key(lab.path, name))}


def key(name: str, *, home: str | None) -> TlsPsk:
    """The TLS key of cluster `name` (its file, checked, and its username): what another host
    of a cluster of real machines is given a copy of."""
    return tlskey.load_key(cluster_lab(name, home).path, name)


def is_listed(name: str, *, home: str | None) -> bool:
    """Whether cluster `name` is a node list (raidlab.cluster.hosts)."""
    return ClusterSpec.load(cluster_lab(name, home).path).kind == LISTED


def down(name: str, *, home: str | None) -> tuple[bool, list[str]]:
    """Stop the cluster's daemon (it releases everything), release what a killed one left,
    remove the lab directory. Returns (whether a daemon was running, leftovers released)."""
    lab = cluster_lab(name, home)
    if os.geteuid() != 0:
        raise NeedsRootError("raidlab cluster down", needs="network namespaces, links and a FUSE mount",
                             hint="run it with sudo")
    running = [array for array, is_running in arrays_over(name, home=home) if is_running]
    if running:
        raise UsageError(f"array {running[0]!r} runs over cluster {name!r}",
                         hint=f"`raidlab destroy {running[0]}` first")
    stopped = control.stop_daemon(lab)
    released = control.release_leftovers(lab)
    _remove(lab)
    return stopped, released


def cut(name: str, node: int, *, home: str | None) -> str:
    """Cut node `node`'s cable at the switch (its bridge port goes down): the node and its
    disks drop off the cluster, as a node that failed or was unplugged. Returns the port."""
    return _set_cable(name, node, up=False, home=home)


def heal(name: str, node: int, *, home: str | None) -> str:
    """Plug node `node`'s cable back in (its bridge port comes up). Returns the port."""
    return _set_cable(name, node, up=True, home=home)


def _set_cable(name: str, node: int, *, up: bool, home: str | None) -> str:
    lab = cluster_lab(name, home)
    verb = "heal" if up else "cut"
    kind = ClusterSpec.load(lab.path).kind
    if kind != NETNS:
        raise UsageError(f"cluster {name!r} is {'a node list' if kind == LISTED else 'this host serving its disks'}: "
                         "its cables are real ones", hint="unplug the host's cable, or stop `raidlab cluster serve` there")
    if not lab.in_use():
        raise UsageError(f"cluster {name!r} is not up", hint=f"`raidlab cluster up {name} --nodes N` brings it up")
    check_node(ClusterSpec.load(lab.path), node)
    if os.geteuid() != 0:
        raise NeedsRootError(f"raidlab cluster {verb}", needs="the cluster's links", hint="run it with sudo")
    port = veth_name(name, node)
    (ip_tool.set_up if up else ip_tool.set_down)(port)
    return port


def arrays_over(name: str, *, home: str | None) -> list[tuple[str, bool]]:
    """The arrays whose spec records cluster `name`: (array name, whether its daemon runs)."""
    base = labs_dir(home)
    found = []
    if not base.is_dir():
        return found
    for entry in sorted(base.iterdir()):
        if not (entry / SPEC_FILE).exists():
            continue
        try:
            spec = ArraySpec.load(entry)
        except (UsageError, ValueError, TypeError):
            continue  # not an array this version reads; it records no cluster of ours
        if spec.cluster == name:
            found.append((spec.name, Lab(entry.name, home=home).in_use()))
    return found


def _remove(lab: Lab) -> None:
    if lab.resources():
        raise LabError(f"cluster {lab.name!r} still holds {len(lab.resources())} objects",
                       hint=f"run `raidlab lab cleanup {lab.name}`")
    control.remove_lab(lab, keep_images=False)


__all__ = ["arrays_over", "check_prerequisites", "cluster_lab", "cut", "down", "heal", "is_listed", "key", "status",
           "tls_fields", "up", "up_listed"]
