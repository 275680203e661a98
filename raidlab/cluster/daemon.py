"""The cluster daemon: one process per cluster, holding its lab -- the network, the emulated
disks, their FUSE mount and every node's nbdkit -- for as long as the cluster is up.

Why a daemon, as for an array (raidlab.service.daemon): `raidlab cluster up` must return
with the cluster running, and the disks' service tasks and the FUSE server behind every
node's NBD exports live in one trio run. The CLI starts it with
raidlab.service.control.start_daemon and talks to it the same way: JSON lines on an
inherited pipe while it builds ({"status"}, then {"ready"} or {"error"}), afterwards one
JSON request per connection on the lab's abstract control socket (ops: status, stop).

Build order, and the reverse release order of the lab's cleanup stack (raidlab.lab):

    bridge -> per node: namespace, cable, addresses, tbf on both ends
    -> emulated disks -> FUSE mount -> per node: nbdkit in its namespace
    -> every node lists its neighbour's exports -> ready

SIGTERM, SIGINT and SIGHUP release everything (the lab session turns them into a
cancellation); a SIGKILL leaves what the state file lists, for `raidlab lab cleanup`. The
nbdkit servers die with the daemon in any case (--exit-with-parent).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import traceback
from pathlib import Path
from typing import Any

import trio

from raidlab.cluster.network import build_network, link_counters
from raidlab.cluster.plan import RUNTIME_FILE, ClusterSpec, bridge_name, plan_nodes
from raidlab.cluster.serving import build_disks, check_reachable, start_servers
from raidlab.errors import LabInterrupted, RaidlabError, leaf_exceptions
from raidlab.lab import open_lab, process_cpu
from raidlab.service.spec import control_address
from raidlab.tools import ip as ip_tool


class ClusterDaemon:
    def __init__(self, spec: ClusterSpec, home: str | None, ready_fd: int | None):
        self.spec = spec
        self.home = home
        self.ready = os.fdopen(ready_fd, "w", buffering=1) if ready_fd is not None else None
        self.nodes = plan_nodes(spec)
        self.session = None
        self.disks: dict = {}
        self.nbdkit_pids: dict[int, int] = {}

    # -- talking to the CLI that started us ------------------------------------------

    def tell(self, **message: Any) -> None:
        line = json.dumps(message)
        print(f"raidlab-cluster: {line}", file=sys.stderr, flush=True)
        if self.ready is not None:
            try:
                self.ready.write(line + "\n")
            except OSError:
                self.ready = None

    def status(self, message: str) -> None:
        self.tell(status=message)

    def close_ready(self) -> None:
        if self.ready is not None:
            try:
                self.ready.close()
            except OSError:
                pass
            self.ready = None

    # -- the cluster -------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """The cluster as `up` prints it and `status` starts from."""
        spec = self.spec
        return {
            "name": spec.name, "pid": os.getpid(), "bridge": bridge_name(spec.name),
            "subnet": spec.subnet, "link": spec.link.as_json(), "disks_per_node": spec.disks_per_node,
            "nodes": [{**node.as_json(), "nbdkit_pid": self.nbdkit_pids.get(node.index)}
                      for node in self.nodes],
        }

    async def run(self) -> None:
        async with open_lab(self.spec.name, home=self.home, status=self.status) as session:
            self.session = session
            await build_network(session, self.spec, self.nodes)
            export, self.disks = await build_disks(session, self.spec, self.nodes)
            self.nbdkit_pids = await start_servers(session, export, self.nodes)
            await check_reachable(session, self.nodes)
            await session.nursery.start(self.serve_control)
            ready = self.describe()
            runtime = session.lab.path / RUNTIME_FILE
            runtime.write_text(json.dumps(ready))
            session.push_sync("runtime file", lambda: runtime.unlink(missing_ok=True))
            self.tell(ready=ready)
            self.close_ready()
            await trio.sleep_forever()

    # -- control socket ----------------------------------------------------------------

    async def serve_control(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        await sock.bind(control_address(self.session.lab.path))
        sock.listen(16)
        task_status.started()
        await trio.serve_listeners(self.handle, [trio.SocketListener(sock)])

    async def handle(self, stream: trio.SocketStream) -> None:
        async def send(obj: dict) -> None:
            await stream.send_all((json.dumps(obj) + "\n").encode())

        try:
            raw = b""
            while not raw.endswith(b"\n"):
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                raw += chunk
            op = json.loads(raw).get("op")
            handler = getattr(self, f"op_{op}", None) if op in ("status", "stop") else None
            if handler is None:
                await send({"ok": False, "error": f"a cluster does not support operation {op!r}"})
                return
            await send({"ok": True, "result": await handler()})
        except RaidlabError as exc:
            await _quiet(send, {"ok": False, "error": str(exc)})
        except OSError as exc:
            await _quiet(send, {"ok": False, "error": exc.strerror or str(exc)})
        except Exception as exc:  # a bug: keep serving, tell the client, log the traceback
            traceback.print_exc()
            await _quiet(send, {"ok": False, "error": f"internal error: {exc!r}"})
        finally:
            await stream.aclose()

    async def op_status(self) -> dict[str, Any]:
        """The cluster (describe()), each node's token-bucket counters and its disks'
        statistics, and the CPU this daemon has used (disks, FUSE) beside the servers'."""
        out = self.describe()
        counters = await trio.to_thread.run_sync(
            lambda: [(link_counters(n), ip_tool.link_is_up(n.veth)) for n in self.nodes])
        for node, (links, cable_up) in zip(out["nodes"], counters):
            node["links"] = links
            node["cable"] = "up" if cable_up else "cut"  # raidlab cluster cut / heal
            node["nbdkit_cpu"] = process_cpu(node["nbdkit_pid"])
            for disk in node["disks"]:
                disk["statistics"] = self.disks[(node["index"], disk["index"])].statistics()
        out["cpu"] = process_cpu(os.getpid())
        return out

    async def op_stop(self) -> dict[str, Any]:
        self.session.work_scope.cancel()
        return {"stopping": True}


async def _quiet(send, obj) -> None:
    try:
        await send(obj)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="raidlab-cluster")
    parser.add_argument("lab_dir")
    parser.add_argument("mode", choices=["up"])
    parser.add_argument("--ready-fd", type=int)
    parser.add_argument("--home")
    args = parser.parse_args(argv)
    daemon = ClusterDaemon(ClusterSpec.load(Path(args.lab_dir)), args.home, args.ready_fd)
    try:
        trio.run(daemon.run)
    except LabInterrupted:
        return 0  # asked to stop: everything released
    except BaseExceptionGroup as group:
        leaves = leaf_exceptions(group)
        error = next((e for e in leaves if isinstance(e, RaidlabError)), None)
        if error is None:
            traceback.print_exception(group)
            daemon.tell(error=f"internal error: {leaves[0]!r}")
            return 1
        daemon.tell(error=str(error))
        return 2
    except RaidlabError as exc:
        daemon.tell(error=str(exc))
        return 2
    except Exception as exc:
        traceback.print_exc()
        daemon.tell(error=f"internal error: {exc!r}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
