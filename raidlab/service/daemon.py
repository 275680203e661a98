"""The array daemon: one process per array, holding its lab (FUSE mount, loop device,
member disks, lab VM) for as long as the array exists. What it builds is up to the host
object of the architecture's family (raidlab.service.hosts: engine layouts, caching
architectures, md baselines); the daemon owns the lab session and the control socket.

Why a daemon: `raidlab create` must return with a block device the user can mkfs and
mount, and that device is a loop device over the file `volume` of a FUSE mount this
process serves; the FUSE server, the member disks' service tasks and the architecture's
background work all live in this one trio run. The CLI talks to it with the protocol of
raidlab.service.daemonbase (JSON lines on an inherited pipe while it builds, then one
request per connection on the lab's control socket). Ops: status, capture, settle and stop
here; the rest (fail, replace, check for the engine family) are the host's op_NAME methods.

Shutdown is the lab runtime's (raidlab.lab.open_lab): SIGTERM/SIGINT cancel the work,
then the cleanup stack detaches the loop device, unmounts FUSE (flushing through the
array), records the array as cleanly stopped in every superblock, and closes the disks. A
SIGKILL leaves kernel objects behind; the next `raidlab destroy`/`assemble` of the lab
releases them (raidlab.lab.cleanup_stale) — the member images keep every write the array
acknowledged with a flush or FUA, since the member disks write through to their images.

What the CLI needs to name an array and reach its daemon (ArraySpec, the lab's file names,
the socket address) is raidlab.service.spec, so a CLI start does not import this module.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import trio

from raidlab.disks import catalog
from raidlab.errors import UsageError
from raidlab.lab import open_lab, process_cpu, write_private
from raidlab.service.daemonbase import ControlledDaemon, add_start_arguments, run_daemon
from raidlab.service.hosts import host_class
from raidlab.service.spec import RUNTIME_FILE, ArraySpec
from raidlab.traces.capture import capture_op
from raidlab.vm.hosted import start_hosted_vm


class Daemon(ControlledDaemon):
    """Owns the lab session and the control socket (raidlab.service.daemonbase); the
    architecture is built and served by a host object of its family (raidlab.service.hosts)."""

    def __init__(self, spec: ArraySpec, mode: str, home: str | None, ready_fd: int | None,
                 lock_fd: int | None = None):
        super().__init__(home, ready_fd, lock_fd)
        self.spec = spec
        self.mode = mode
        self.host = None
        self.device: str | None = None
        self.guest_device: str | None = None  # the array as the lab VM sees it (--runner vm)
        self.vm = None  # raidlab.vm.hosted.HostedVM with --runner vm

    # -- the lab -----------------------------------------------------------------------

    async def run(self) -> None:
        spec = self.spec
        async with open_lab(spec.name, home=self.home, status=self.status, lock_fd=self.lock_fd) as session:
            self.session = session
            self.host = host_class(spec.arch)(self)
            opened = await self.host.open(session, self.mode)
            if spec.runner == "vm":
                # The lab VM runner (raidlab.vm.hosted): boot the VM over the host's
                # vm_disks(); its shutdown is on the session's cleanup stack. A host may then
                # finish inside the VM (md: mdadm --create) and name the guest device.
                self.vm = await start_hosted_vm(self, session)
                opened = {**opened, **self.vm.ready_fields()}
                if hasattr(self.host, "vm_ready"):
                    opened.update(await self.host.vm_ready(self.vm))
                opened.setdefault("guest_device", "/dev/vda")
            self.device = opened.get("device")
            self.guest_device = opened.get("guest_device")
            await session.nursery.start(self.serve_control)
            runtime = {"pid": os.getpid(), "mode": self.mode, "runner": spec.runner, **opened}
            write_private(session.lab.path / RUNTIME_FILE, json.dumps(runtime))
            session.push_sync("runtime file", lambda: _unlink(session.lab.path / RUNTIME_FILE))
            self.report_ready({**runtime, "arch": spec.arch})
            await trio.sleep_forever()

    # -- control socket ----------------------------------------------------------------

    def handler_for(self, op: str):
        """The host's op_NAME, else the daemon's own (status wrapper, capture, stop)."""
        if not isinstance(op, str) or not op.isidentifier():
            return None
        if op != "status" and self.host is not None and hasattr(self.host, f"op_{op}"):
            return getattr(self.host, f"op_{op}")
        if self.vm is not None and op in ("exec", "put", "get"):
            return getattr(self.vm, f"op_{op}")
        return getattr(self, f"op_{op}", None)

    def unsupported(self, op) -> str:
        return f"{self.spec.arch} does not support operation {op!r}"

    async def op_status(self, request, send) -> dict:
        """What every family reports (name, spec, device, pid, the model of each data member
        d0..d{disks-1}) plus the host's own status."""
        return {
            "name": self.spec.name,
            "spec": dataclasses.asdict(self.spec),
            "member_models": catalog.member_models(self.spec.disk_model, self.spec.disks),
            "device": self.device,
            "guest_device": self.guest_device,
            "pid": os.getpid(),
            # CPU this daemon (the userspace engine, FUSE and all its threads) has used since it
            # started, and the lab VM's QEMU beside it: on a small host the two compete for
            # the cores, which a run's timings alone do not show.
            "cpu": {"daemon": process_cpu(os.getpid()),
                    **({"vm": process_cpu(self.vm.vm.pid)} if self.vm is not None and self.vm.vm else {})},
            # What the kernel sent each file of the lab's FUSE mount (sizes, peaks in flight).
            "export": export.fs.statistics() if (export := self.session.fuse_export) is not None else {},
            **await self.host.op_status(request, send),
        }

    async def op_capture(self, request, send) -> dict:
        """`raidlab trace capture` (raidlab.traces.capture): record the requests the FUSE file
        `volume` receives, for any host that serves one (its `fs` attribute)."""
        fs = getattr(self.host, "fs", None)
        if fs is None:
            raise UsageError(f"{self.spec.arch} serves no engine volume to capture",
                             hint="capture works on engine and caching architectures")
        return await capture_op(fs, request, describe=f"{self.spec.name} ({self.spec.arch})")

    async def op_settle(self, request, send) -> dict:
        """Bring the array to the state a freshly loaded driver finds before a benchmark: the
        host's settle() (a write-back cache destaged home, pending images written, the
        drives' write caches flushed). The VC-RAID paper (§4.1) unloaded the driver and
        rebooted before every benchmark, so its cache-disk log was empty when one began;
        `raidlab run` calls this between mkfs and the workload, with the file system
        unmounted. Returns {"drained_bytes", "seconds", "note"}."""
        started = time.monotonic()
        done = await self.host.settle()
        return {**done, "seconds": round(time.monotonic() - started, 3)}


def _unlink(path: Path) -> str:
    try:
        path.unlink()
    except FileNotFoundError:
        return "already gone"
    return "removed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="raidlab-daemon")
    parser.add_argument("lab_dir")
    parser.add_argument("mode", choices=["create", "assemble", "join"])
    add_start_arguments(parser)
    args = parser.parse_args(argv)
    spec = ArraySpec.load(Path(args.lab_dir))
    return run_daemon(Daemon(spec, args.mode, args.home, args.ready_fd, args.lock_fd))


if __name__ == "__main__":
    sys.exit(main())
