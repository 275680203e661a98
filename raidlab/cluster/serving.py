"""A cluster's disks and their NBD servers: what the paper's cooperative disk drivers did.

RAID-x §5 gives every node access to every disk of the cluster through cooperative disk
drivers (CDD): a node's CDD serves its local disk to the others and reaches theirs, below
the file system. Here that is NBD: each node serves its disks with nbdkit inside its own
network namespace, on its own address, and any node reaches any disk as nbds://ADDRESS/dJ.
Every server requires TLS with the cluster's pre-shared key (raidlab.cluster.tlskey), and
every client started here presents it: the paper's CDDs served a private cluster network,
while a node's address here is reachable by every user of the host and, for a host serving
its disks, by every machine of its network. The CDD's lock-based consistency module (§5.3)
is not part of it: NBD moves blocks, and which node may write where is the business of the
arrays built over the cluster.

The disks themselves are emulated here, in the cluster daemon's one trio run, like every
other lab's: EmulatedDisks over sparse images, with the catalog's timing models, exported as
files of the lab's one FUSE mount (node0/d0, node1/d0, ...). Each node's nbdkit serves the
files of its node's directory (nbdkit-file-plugin `dir=`), started with `nsenter --net` so
it listens inside the node's namespace but sees the FUSE mount of the root mount namespace.

The FUSE files are opened in direct-I/O mode (FOPEN_DIRECT_IO): nbdkit's file plugin reads
and writes them through the page cache otherwise, and a re-read would be answered from the
host's memory instead of the modelled disk. The kernel holds a direct-I/O file's inode lock
across a synchronous write, so one disk's writes reach it one at a time, as a disk serves
them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import trio

from raidlab.cluster.plan import ClusterSpec, NodePlan
from raidlab.cluster.tlskey import load_key
from raidlab.disks import EmulatedDisk, ImageBackend
from raidlab.errors import LabError
from raidlab.export import BlockExportFS, FuseExport, mount_export
from raidlab.lab import LabSession, ServerProcess
from raidlab.tools import ip as ip_tool
from raidlab.tools import nbd
from raidlab.tools.base import require, run

SERVER_START_TIMEOUT = 30.0   # seconds for an nbdkit to listen
PROBE_TIMEOUT = 20.0          # seconds for one node to list another's exports


async def build_disks(session: LabSession, spec: ClusterSpec, nodes: list[NodePlan]
                      ) -> tuple[FuseExport, dict[tuple[int, int], EmulatedDisk]]:
    """Every node's disks as EmulatedDisks (scratch images, removed when released), exported
    as node<k>/d<j> of the lab's FUSE mount. Returns the export and the disks by (node, j)."""
    lab = session.lab
    lab.images_dir.mkdir(parents=True, exist_ok=True)
    fs = BlockExportFS(direct_io_open=True)
    disks: dict[tuple[int, int], EmulatedDisk] = {}
    for node in nodes:
        for plan in node.disks:
            image = lab.images_dir / f"node{node.index}-{plan.name}.img"
            resource = lab.record("image", path=str(image), keep=False)
            disk = EmulatedDisk(f"node{node.index}/{plan.name}", plan.model,
                                ImageBackend(image, plan.size), io_in_thread=True)
            # What reaches the disk comes through the node's block layer in the paper's
            # cluster (the CDD sits below it): queued contiguous requests are merged.
            disk.merge_queued_requests()
            disk.start(session.nursery)

            def release(disk=disk, image=image):
                disk.close()
                image.unlink(missing_ok=True)
                return "image removed"

            session.push_sync(f"disk {disk.name}", release, resource)
            fs.add(f"{node.disk_dir}/{plan.name}", disk)
            disks[(node.index, plan.index)] = disk
    export = await mount_export(session, fs)
    session.status(f"{len(disks)} disks in {export.mountpoint}")
    return export, disks


async def start_servers(session: LabSession, export: FuseExport, nodes: list[NodePlan]
                        ) -> dict[int, int]:
    """One nbdkit per node, in the node's namespace, serving its directory of the FUSE mount
    on its address, only to clients that hold the cluster's key; returns when every one
    listens. {node index: nbdkit pid}."""
    nbdkit = require("nbdkit")
    psk = load_key(session.lab.path, session.lab.name)
    nsenter = require("nsenter") if any(node.namespace is not None for node in nodes) else "nsenter"
    pids = {}
    for node in nodes:
        pidfile = session.lab.path / f"nbdkit-node{node.index}.pid"
        pidfile.unlink(missing_ok=True)
        argv = nbd.nbdkit_argv(str(export.mountpoint / node.disk_dir), address=node.address, port=node.port,
                               pidfile=str(pidfile), psk_file=psk.path, executable=nbdkit)
        if node.namespace is not None:
            argv = ip_tool.nsenter_argv(node.namespace, argv, executable=nsenter)
        proc = await session.start_server(argv, label=f"nbdkit of node {node.index}")
        await _wait_listening(proc, pidfile, node)
        pids[node.index] = proc.pid
        session.status(f"node {node.index}: nbdkit (pid {proc.pid}) serves "
                       + ", ".join(d.uri for d in node.disks))
    return pids


async def _wait_listening(proc: ServerProcess, pidfile: Path, node: NodePlan) -> None:
    """nbdkit writes its pidfile once it accepts connections."""
    with trio.move_on_after(SERVER_START_TIMEOUT):
        while not pidfile.exists():
            if proc.poll() is not None:
                raise LabError(f"nbdkit of node {node.index} exited with status {proc.returncode} "
                               f"before it listened on {node.address}:{node.port}",
                               hint="its message is in the lab's daemon.log")
            await trio.sleep(0.02)
        return
    raise LabError(f"nbdkit of node {node.index} did not listen on {node.address}:{node.port} "
                   f"within {SERVER_START_TIMEOUT:.0f} s", hint="see the lab's daemon.log")


async def check_reachable(session: LabSession, nodes: list[NodePlan]) -> None:
    """Each node lists the exports of the next one (node k asks node k+1, the last asks node
    0) over the cluster's network: every server, every cable in both directions and the
    bridge are then known to work before the cluster is declared ready. A node that is no
    namespace of this host (a host serving its own disks) lists its own exports at its address.
    Each asks with the cluster's key, so the servers' TLS is known to work too."""
    nbdinfo = require("nbdinfo")
    psk = load_key(session.lab.path, session.lab.name)
    for k, node in enumerate(nodes):
        asker = nodes[(k - 1) % len(nodes)]
        uri = nbd.nbd_uri(node.address, "", node.port)
        argv = nbd.list_exports_argv(uri, psk=psk, executable=nbdinfo)
        if asker.namespace is not None:
            argv = ip_tool.nsenter_argv(asker.namespace, argv, executable=require("nsenter"))
        try:
            proc = await trio.to_thread.run_sync(
                lambda argv=argv: run(argv, check=False, timeout=PROBE_TIMEOUT))
        except subprocess.TimeoutExpired:
            raise LabError(f"node {asker.index} cannot reach node {node.index}'s NBD server "
                           f"at {uri} (no answer within {PROBE_TIMEOUT:.0f} s)",
                           hint="a host firewall that filters bridged traffic "
                                "(br_netfilter with bridge-nf-call-iptables=1) can drop it") from None
        if proc.returncode != 0:
            last = (proc.stderr or proc.stdout).strip().splitlines()
            raise LabError(f"node {asker.index} cannot list the exports of node {node.index} at "
                           f"{uri}: {last[-1] if last else f'exit {proc.returncode}'}")
        names = [e["name"] for e in nbd.parse_list_json(proc.stdout)]
        wanted = [d.name for d in node.disks]
        if sorted(names) != sorted(wanted):
            raise LabError(f"node {node.index} serves {names}, not {wanted}")
    session.status("every node reached its neighbour's NBD server over the bridge" if len(nodes) > 1
                   else f"{nodes[0].address} port {nodes[0].port} lists its exports")
