"""The cluster daemon: one process per cluster, holding its lab -- the network, the emulated
disks, their FUSE mount and every node's nbdkit -- for as long as the cluster is up.

Why a daemon, as for an array (raidlab.service.daemon): `raidlab cluster up` must return
with the cluster running, and the disks' service tasks and the FUSE server behind every
node's NBD exports live in one trio run. The CLI starts it with
raidlab.service.control.start_daemon and talks to it the same way: JSON lines on an
inherited pipe while it builds ({"status"}, then {"ready"} or {"error"}), afterwards one
JSON request per connection on the lab's control socket (ops: status, stop).

Build order, and the reverse release order of the lab's cleanup stack (raidlab.lab):

    bridge -> per node: namespace, cable, addresses, tbf on both ends
    -> emulated disks -> FUSE mount -> per node: nbdkit in its namespace
    -> every node lists its neighbour's exports -> ready

A host that serves its own disks as one node of a cluster of real hosts (`raidlab cluster
serve`, kind SERVE; raidlab.cluster.hosts) is the same daemon without the network: its disks,
the FUSE mount, one nbdkit on the host's own address, which lists its own exports.

SIGTERM, SIGINT and SIGHUP release everything (the lab session turns them into a
cancellation); a SIGKILL leaves what the state file lists, for `raidlab lab cleanup`. The
nbdkit servers die with the daemon in any case (--exit-with-parent).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import trio

from raidlab.cluster.network import build_network, link_counters
from raidlab.cluster.plan import NETNS, RUNTIME_FILE, ClusterSpec, bridge_name, plan_nodes
from raidlab.cluster.serving import build_disks, check_reachable, start_servers
from raidlab.lab import open_lab, process_cpu
from raidlab.service.daemonbase import ControlledDaemon, add_start_arguments, run_daemon
from raidlab.tools import ip as ip_tool


class ClusterDaemon(ControlledDaemon):
    """Holds the cluster's lab (module doc); the pipe and control socket are
    raidlab.service.daemonbase's."""

    prog = "raidlab-cluster"

    def __init__(self, spec: ClusterSpec, home: str | None, ready_fd: int | None,
                 lock_fd: int | None = None):
        super().__init__(home, ready_fd, lock_fd)
        self.spec = spec
        self.nodes = plan_nodes(spec)
        self.disks: dict = {}
        self.nbdkit_pids: dict[int, int] = {}

    # -- the cluster -------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """The cluster as `up` prints it and `status` starts from."""
        spec = self.spec
        netns = spec.kind == NETNS
        return {
            "name": spec.name, "kind": spec.kind, "pid": os.getpid(),
            "bridge": bridge_name(spec.name) if netns else None, "subnet": spec.subnet if netns else None,
            "link": spec.link.as_json() if netns else None, "disks_per_node": spec.disks_per_node,
            "nodes": [{**node.as_json(), "nbdkit_pid": self.nbdkit_pids.get(node.index)}
                      for node in self.nodes],
        }

    async def run(self) -> None:
        async with open_lab(self.spec.name, home=self.home, status=self.status, lock_fd=self.lock_fd) as session:
            self.session = session
            if self.spec.kind == NETNS:
                await build_network(session, self.spec, self.nodes)
            export, self.disks = await build_disks(session, self.spec, self.nodes)
            self.nbdkit_pids = await start_servers(session, export, self.nodes)
            await check_reachable(session, self.nodes)
            await session.nursery.start(self.serve_control)
            ready = self.describe()
            runtime = session.lab.path / RUNTIME_FILE
            runtime.write_text(json.dumps(ready))
            session.push_sync("runtime file", lambda: runtime.unlink(missing_ok=True))
            self.report_ready(ready)
            await trio.sleep_forever()

    # -- control socket ----------------------------------------------------------------

    def unsupported(self, op) -> str:
        return f"a cluster does not support operation {op!r}"

    async def op_status(self, request, send) -> dict[str, Any]:
        """The cluster (describe()), each node's token-bucket counters and its disks'
        statistics, and the CPU this daemon has used (disks, FUSE) beside the servers'."""
        out = self.describe()
        counters = await trio.to_thread.run_sync(
            lambda: [(link_counters(n), ip_tool.link_is_up(n.veth)) if n.veth is not None else (None, None)
                     for n in self.nodes])
        for node, (links, cable_up) in zip(out["nodes"], counters):
            node["links"] = links or {}
            if cable_up is not None:
                node["cable"] = "up" if cable_up else "cut"  # raidlab cluster cut / heal
            node["nbdkit_cpu"] = process_cpu(node["nbdkit_pid"])
            for disk in node["disks"]:
                disk["statistics"] = self.disks[(node["index"], disk["index"])].statistics()
        out["cpu"] = process_cpu(os.getpid())
        return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="raidlab-cluster")
    parser.add_argument("lab_dir")
    parser.add_argument("mode", choices=["up"])
    add_start_arguments(parser)
    args = parser.parse_args(argv)
    return run_daemon(ClusterDaemon(ClusterSpec.load(Path(args.lab_dir)), args.home, args.ready_fd, args.lock_fd))


if __name__ == "__main__":
    sys.exit(main())
