"""Another instance of an array over a cluster, on another node (`raidlab create NAME
--cluster C --node K --join ARRAY`; docs/cluster.md, "Clients on other nodes").

The paper's cluster is serverless: each client node's driver reaches every disk. An
instance joined to array X on node K is a lab of its own (its daemon, its nbdfuse
connections from node K's namespace, its loop device) whose engine assembles X's members in
mode "join" (raidlab.engine.build.assemble_array): it reads X's superblocks and never writes
them. This module checks that a join makes sense and builds its spec; the caller starts
the daemon in mode "join".
"""

from __future__ import annotations

from raidlab.cluster.control import arrays_over
from raidlab.cluster.members import resolve
from raidlab.errors import LabError, UsageError
from raidlab.lab import Lab
from raidlab.service.spec import SPEC_FILE, ArraySpec


def _spec_of(name: str, home: str | None) -> ArraySpec | None:
    try:
        lab = Lab(name, home=home)
    except LabError:
        return None
    if not (lab.path / SPEC_FILE).exists():
        return None
    try:
        return ArraySpec.load(lab.path)
    except (UsageError, ValueError, TypeError):
        return None


def joined_to(name: str, home: str | None) -> str | None:
    """The array that array `name` is another instance of, or None."""
    spec = _spec_of(name, home)
    return spec.joins if spec is not None else None


def instances_of(array: str, cluster: str, home: str | None) -> list[tuple[str, bool]]:
    """The instances joined to `array` over `cluster`: (name, whether its daemon runs)."""
    return [(other, running) for other, running in arrays_over(cluster, home=home) if joined_to(other, home) == array]


def plan_join(name: str, arch: str | None, joins: str, cluster: str, node: int,
              home: str | None) -> ArraySpec:
    """The spec of instance `name` of array `joins` on `node`; UsageError, in one line, unless
    `joins` is an array of its own over `cluster` (not itself joined) that runs, `node` is
    none of the nodes an instance of it runs on, and `arch` (when given) is its layout."""
    owner = _spec_of(joins, home)
    if owner is None:
        raise UsageError(f"no array {joins!r} to join", hint="see `raidlab list`")
    if owner.cluster != cluster:
        raise UsageError(f"array {joins!r} is not over cluster {cluster!r}",
                         hint=f"it is over {owner.cluster}" if owner.cluster else "it is not over a cluster")
    if owner.joins is not None:
        raise UsageError(f"{joins!r} is itself an instance of {owner.joins!r}", hint=f"join {owner.joins!r}")
    if arch is not None and arch != owner.arch:
        raise UsageError(f"--arch {arch}: {joins!r} is a {owner.arch}", hint=f"use --arch {owner.arch}")
    if not Lab(joins, home=home).in_use():
        raise UsageError(f"array {joins!r} is not running", hint=f"`raidlab assemble {joins}` first")
    others = (_spec_of(other, home) for other, _running in instances_of(joins, cluster, home))
    taken = {owner.node} | {spec.node for spec in others if spec is not None}
    if node in taken:
        raise UsageError(f"node {node} runs an instance of {joins!r} already", hint="choose another --node")
    _cluster, members = resolve(cluster, node, home=home)
    return ArraySpec(name, owner.arch, owner.disks, owner.disk_model, owner.disk_size, owner.chunk,
                     options=dict(owner.options), cluster=cluster, node=node, members=members, joins=joins)
