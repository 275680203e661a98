"""The array daemon: one process per array, holding its lab (FUSE mount, loop device,
member disks, lab VM) for as long as the array exists. What it builds is up to the host
object of the architecture's family (raidlab.service.hosts: engine layouts, caching
architectures, md baselines); the daemon owns the lab session and the control socket.

Why a daemon: `raidlab create` must return with a block device the user can mkfs and
mount, and that device is a loop device over the file `volume` of a FUSE mount this
process serves; the FUSE server, the member disks' service tasks and the architecture's
background work all live in this one trio run. The CLI talks to it in two ways:

* at start, over an inherited pipe (`--ready-fd`): JSON lines {"status": ...} while it
  builds (the SA-RAID probe takes a while), then {"ready": {...}} or {"error": ...};
* afterwards, over a Unix socket in the abstract namespace (no path length limit, gone
  when the process dies): one JSON request per connection, answered by JSON lines —
  {"progress": [done, total]} for long operations, then {"ok": true, "result": ...} or
  {"ok": false, "error": ...}. Ops: status, capture, settle and stop here; the rest (fail,
  replace, check for the engine family) are the host's op_NAME methods.

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
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import trio

from raidlab.disks import catalog
from raidlab.errors import LabInterrupted, RaidlabError, UsageError, leaf_exceptions
from raidlab.lab import open_lab, process_cpu
from raidlab.service.hosts import host_class
from raidlab.service.spec import RUNTIME_FILE, ArraySpec, control_address
from raidlab.traces.capture import capture_op
from raidlab.vm.hosted import start_hosted_vm

class Daemon:
    """Owns the lab session and the control socket; the architecture is built and served by
    a host object of its family (raidlab.service.hosts)."""

    def __init__(self, spec: ArraySpec, mode: str, home: str | None, ready_fd: int | None):
        self.spec = spec
        self.mode = mode
        self.home = home
        self.ready = os.fdopen(ready_fd, "w", buffering=1) if ready_fd is not None else None
        self.host = None
        self.session = None
        self.device: str | None = None
        self.guest_device: str | None = None  # the array as the lab VM sees it (--runner vm)
        self.vm = None  # raidlab.vm.hosted.HostedVM with --runner vm

    # -- talking to the CLI that started us ------------------------------------------

    def tell(self, **message: Any) -> None:
        line = json.dumps(message)
        print(f"raidlab-daemon: {line}", file=sys.stderr, flush=True)
        if self.ready is not None:
            try:
                self.ready.write(line + "\n")
            except (BrokenPipeError, OSError):
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

    # -- the lab -----------------------------------------------------------------------

    async def run(self) -> None:
        spec = self.spec
        async with open_lab(spec.name, home=self.home, status=self.status) as session:
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
            (session.lab.path / RUNTIME_FILE).write_text(json.dumps(runtime))
            session.push_sync("runtime file", lambda: _unlink(session.lab.path / RUNTIME_FILE))
            self.tell(ready={**runtime, "arch": spec.arch})
            self.close_ready()
            await trio.sleep_forever()

    # -- control socket ----------------------------------------------------------------

    async def serve_control(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        await sock.bind(control_address(self.session.lab.path))
        sock.listen(16)
        listener = trio.SocketListener(sock)
        task_status.started()
        await trio.serve_listeners(self.handle, [listener])

    def handler_for(self, op: str):
        """The host's op_NAME, else the daemon's own (status wrapper, capture, stop)."""
        if not isinstance(op, str) or not op.isidentifier():
            return None
        if op != "status" and self.host is not None and hasattr(self.host, f"op_{op}"):
            return getattr(self.host, f"op_{op}")
        if self.vm is not None and op in ("exec", "put", "get"):
            return getattr(self.vm, f"op_{op}")
        return getattr(self, f"op_{op}", None)

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
            request = json.loads(raw)
            op = request.get("op")
            handler = self.handler_for(op)
            if handler is None:
                await send({"ok": False, "error": f"{self.spec.arch} does not support operation {op!r}"})
                return
            result = await handler(request, send)
            await send({"ok": True, "result": result})
        except RaidlabError as exc:
            await _quiet(send, {"ok": False, "error": str(exc)})
        except OSError as exc:
            await _quiet(send, {"ok": False, "error": exc.strerror or str(exc)})
        except Exception as exc:  # a bug: keep serving, tell the client, log the traceback
            traceback.print_exc()
            await _quiet(send, {"ok": False, "error": f"internal error: {exc!r}"})
        finally:
            await stream.aclose()

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

    async def op_stop(self, request, send) -> dict:
        self.session.work_scope.cancel()
        return {"stopping": True}


async def _quiet(send, obj) -> None:
    try:
        await send(obj)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass


def _unlink(path: Path) -> str:
    try:
        path.unlink()
    except FileNotFoundError:
        return "already gone"
    return "removed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="raidlab-daemon")
    parser.add_argument("lab_dir")
    parser.add_argument("mode", choices=["create", "assemble"])
    parser.add_argument("--ready-fd", type=int)
    parser.add_argument("--home")
    args = parser.parse_args(argv)
    spec = ArraySpec.load(Path(args.lab_dir))
    daemon = Daemon(spec, args.mode, args.home, args.ready_fd)
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
