"""An engine array's members over a cluster's disks: node K's own disks through the cluster
daemon's FUSE files, every other node's disks through one nbdfuse each, started in node K's
network namespace. Which disk each member is, and how node K reaches it, comes from the
array's spec (raidlab.cluster.members resolved it at create); this module connects.

Why nbdfuse (libnbd's client, nbdfuse(1)): it serves one NBD export as one file of a FUSE
mount, so a remote disk becomes a file the daemon opens like any other member, and no NBD
protocol code lives here. (libnbd's Python bindings are not in the project's environment,
and the hosts have no nbd kernel module for nbd-client.) Started with `nsenter --net` into
node K's namespace, its TCP connection is node K's -- it leaves through node K's cable and
reaches the server through the serving node's, each shaped by its tbf -- while its file is
in the host's mount namespace, where the array daemon and `raidlab lab cleanup` see it.

The cluster's servers require TLS with the cluster's pre-shared key. The member's record
names the key's file and username (never the key), and nbdfuse reaches the export through
nbdkit's nbd plugin, its subprocess, which presents the key (raidlab.tools.nbd says why
through the plugin); the plugin dies with nbdfuse.

Each remote member's connection:

    mount file   <lab>/nbd/m<index>.<generation>, a regular file nbdfuse mounts over
    recorded     a fuse_mount before nbdfuse starts, nbdfuse as a process (LabSession.start_server)
    ready        when nbdfuse writes its pidfile, within CONNECT_TIMEOUT (20 s): a node that
                 cannot be reached is refused here, in one line, not found out by the array
    released     in reverse: the member's file descriptor, nbdfuse (SIGTERM: it unmounts),
                 the mount (lazily, when nbdfuse died with its connection and left it dead),
                 the file

A replacement (`raidlab replace`) connects again as a new generation, rebuilds onto it and
then releases the old connection (LabSession.release_now). A SIGKILLed daemon leaves the
processes and mounts in the state file; the stale cleanup kills and unmounts them.

When a cable is cut, the connection's unacknowledged data times out (about 14 s, the nodes'
tcp_retries2, raidlab.cluster.plan), the nbd plugin's libnbd fails the requests in flight and
every later request fails at once (ESHUTDOWN; nbdfuse stays, its mount answering errors);
raidlab.disks.nodedisk turns all of it, and a request left unanswered for its deadline, into
EIO, which fails the member.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import trio

from raidlab.disks.nodedisk import NodeDisk
from raidlab.errors import LabError
from raidlab.lab import LabSession, ServerProcess, release_fuse_mount
from raidlab.tools import ip as ip_tool
from raidlab.tools import nbd
from raidlab.tools.base import require
from raidlab.tools.mount import is_mount_point

CONNECT_TIMEOUT = 20.0   # seconds for nbdfuse to connect and mount


@dataclasses.dataclass
class AttachedMember:
    """A member disk and the cleanup entries that release it, oldest first."""

    disk: NodeDisk
    entries: list[Any]


def member_label(member: dict[str, Any]) -> str:
    """How a member is named in messages: node 2's d0 (nbds://10.77.0.3/d0)."""
    return f"node {member['node']}'s {member['export']} ({member['uri']})"


async def attach_members(session: LabSession, spec: Any) -> list[AttachedMember]:
    """Every member of the cluster array `spec` (a raidlab.service.spec.ArraySpec), in order."""
    attached = []
    for member in spec.members:
        attached.append(await attach_member(session, spec, member, generation=0))
    remote = sum(1 for member in spec.members if member["where"] == "remote")
    session.status(f"node {spec.node} of cluster {spec.cluster} reaches {len(attached) - remote} disk(s) "
                   f"locally and {remote} over NBD")
    return attached


async def attach_member(session: LabSession, spec: Any, member: dict[str, Any], *,
                        generation: int) -> AttachedMember:
    """Open one member: the cluster's FUSE file of a local disk, or a new nbdfuse connection
    to a remote one. What a failure leaves half made is released before the error is raised."""
    entries: list[Any] = []
    try:
        if member["where"] == "local":
            path = member["path"]
            client_pid = None
        else:
            path, proc = await _connect(session, spec, member, generation, entries)
            client_pid = proc.pid
        disk = NodeDisk(f"node{member['node']}/{member['export']}", path, member["size"], model=member["model"],
                        node=member["node"], disk=member["export"], where=member["where"], uri=member["uri"])
        disk.client_pid = client_pid
        entries.append(session.push_sync(f"member {member['index']} ({member_label(member)})",
                                         lambda: disk.close() or "closed"))
        return AttachedMember(disk, entries)
    except BaseException:
        await detach(session, AttachedMember(None, entries))  # type: ignore[arg-type]
        raise


async def detach(session: LabSession, attached: AttachedMember) -> None:
    """Release a member's connection now, newest first (the replaced member of a rebuild)."""
    for entry in reversed(attached.entries):
        await session.release_now(entry)


async def _connect(session: LabSession, spec: Any, member: dict[str, Any], generation: int,
                   entries: list[Any]) -> tuple[str, ServerProcess]:
    psk = _member_key(member)
    lab = session.lab
    directory = lab.path / "nbd"
    directory.mkdir(exist_ok=True)
    mount_file = directory / f"m{member['index']}.{generation}"
    pidfile = directory / f"m{member['index']}.{generation}.pid"
    pidfile.unlink(missing_ok=True)
    mount_file.touch()
    resource = lab.record("fuse_mount", path=str(mount_file))

    def release_mount() -> str:
        outcome = (release_fuse_mount(str(mount_file), lab.fusectl_dir) if is_mount_point(mount_file)
                   else "not mounted")
        mount_file.unlink(missing_ok=True)
        pidfile.unlink(missing_ok=True)
        return outcome

    entries.append(session.push_sync(f"NBD file {mount_file.name}", release_mount, resource))
    argv = nbd.nbdfuse_argv(str(mount_file), member["uri"], psk=psk, pidfile=str(pidfile),
                            executable=require("nbdfuse"), nbdkit=require("nbdkit"))
    if member["namespace"] is not None:  # None: a node list's host, reached from this namespace
        argv = ip_tool.nsenter_argv(member["namespace"], argv, executable=require("nsenter"))
    proc = await session.start_server(argv, label=f"nbdfuse of member {member['index']} ({member['uri']})")
    entries.append(proc.cleanup)
    await _wait_mounted(proc, pidfile, spec, member)
    return str(mount_file), proc


def _member_key(member: dict[str, Any]) -> nbd.TlsPsk:
    """The TLS key a remote member's NBD client presents, as the array's spec records it."""
    if not member.get("tls_psk_file") or not member.get("tls_username"):
        raise LabError(f"the array's spec names no TLS key for {member_label(member)}; the cluster's "
                       "servers require one",
                       hint="destroy the array and create it again over the cluster")
    return nbd.TlsPsk(member["tls_psk_file"], member["tls_username"])


async def _wait_mounted(proc: ServerProcess, pidfile: Path, spec: Any, member: dict[str, Any]) -> None:
    """nbdfuse writes its pidfile once the export is mounted."""
    what = f"node {spec.node} cannot reach {member_label(member)}"
    hint = (f"is node {member['node']}'s cable cut? (`raidlab cluster status {spec.cluster}`); "
            "nbdfuse's message is in the lab's daemon.log")
    with trio.move_on_after(CONNECT_TIMEOUT):
        while not pidfile.exists():
            if proc.poll() is not None:
                raise LabError(f"{what}: nbdfuse exited with status {proc.returncode}", hint=hint)
            await trio.sleep(0.02)
        return
    raise LabError(f"{what}: no connection within {CONNECT_TIMEOUT:.0f} s", hint=hint)
