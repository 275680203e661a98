"""The array daemon: one process per engine array, holding its lab (FUSE mount, loop
device, member disks) for as long as the array exists.

Why a daemon: `raidlab create` must return with a block device the user can mkfs and
mount, and that device is a loop device over the file `volume` of a FUSE mount this
process serves; the FUSE server, the member disks' service tasks and the architecture's
background work all live in this one trio run. The CLI talks to it in two ways:

* at start, over an inherited pipe (`--ready-fd`): JSON lines {"status": ...} while it
  builds (the SA-RAID probe takes a while), then {"ready": {...}} or {"error": ...};
* afterwards, over a Unix socket in the abstract namespace (no path length limit, gone
  when the process dies): one JSON request per connection, answered by JSON lines —
  {"progress": [done, total]} for long operations, then {"ok": true, "result": ...} or
  {"ok": false, "error": ...}. Ops: status, fail, replace, check, stop.

Shutdown is the lab runtime's (raidlab.lab.open_lab): SIGTERM/SIGINT cancel the work,
then the cleanup stack detaches the loop device, unmounts FUSE (flushing through the
array), records the array as cleanly stopped in every superblock, and closes the disks. A
SIGKILL leaves kernel objects behind; the next `raidlab destroy`/`assemble` of the lab
releases them (raidlab.lab.cleanup_stale) — the member images keep every write the array
acknowledged with a flush or FUA, since the member disks write through to their images.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import socket
import sys
import traceback
from pathlib import Path
from typing import Any

import trio

from raidlab.engine import build
from raidlab.errors import RaidlabError, UsageError

SPEC_FILE = "array.json"
RUNTIME_FILE = "runtime.json"


@dataclasses.dataclass
class ArraySpec:
    """What `raidlab create` asked for; kept in the lab directory for `assemble`."""

    name: str
    arch: str
    disks: int
    disk_model: str
    disk_size: int
    chunk: int
    discipline: str = "fifo"
    options: dict[str, Any] = dataclasses.field(default_factory=dict)

    def save(self, lab_path: Path) -> None:
        tmp = lab_path / (SPEC_FILE + ".tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(self), indent=2))
        os.replace(tmp, lab_path / SPEC_FILE)

    @classmethod
    def load(cls, lab_path: Path) -> "ArraySpec":
        try:
            doc = json.loads((lab_path / SPEC_FILE).read_text())
        except FileNotFoundError:
            raise UsageError(f"no array in {lab_path}", hint="create one with `raidlab create`") from None
        return cls(**doc)


def control_address(lab_path: Path) -> str:
    """Abstract-namespace socket name of the lab's daemon."""
    digest = hashlib.sha256(str(lab_path.resolve()).encode()).hexdigest()[:24]
    return f"\0raidlab-{digest}"


class Daemon:
    def __init__(self, spec: ArraySpec, mode: str, home: str | None, ready_fd: int | None):
        self.spec = spec
        self.mode = mode
        self.home = home
        self.ready = os.fdopen(ready_fd, "w", buffering=1) if ready_fd is not None else None
        self.array = None
        self.keeper = None
        self.members: list[Any] = []
        self.session = None
        self.device: str | None = None
        self.busy = trio.Lock()  # one repair operation (replace, check) at a time

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
        from raidlab.export import BlockExportFS, attach_loop, mount_export
        from raidlab.export.serve import ServeRequest, build_disks
        from raidlab.lab import open_lab

        spec = self.spec
        async with open_lab(spec.name, home=self.home, status=self.status) as session:
            self.session = session
            fs = BlockExportFS()
            req = ServeRequest(disks=spec.disks, model=spec.disk_model, size=spec.disk_size,
                               name=spec.name, discipline=spec.discipline, keep_images=True,
                               home=self.home)
            made = await build_disks(session, fs, req)
            self.members = [disk for _relpath, disk, _image in made]
            labels = [str(image) for _relpath, _disk, image in made]
            if self.mode == "create":
                self.status(f"creating {spec.arch} over {spec.disks} x {spec.disk_model}")
                self.array, self.keeper = await build.create_array(
                    spec.name, spec.arch, self.members, chunk=spec.chunk, options=spec.options,
                    status=self.status)
            else:
                self.status(f"assembling {spec.name} from {spec.disks} member images")
                self.array, self.keeper = await build.assemble_array(self.members, labels=labels)
                if self.array.layout.name != spec.arch:
                    raise UsageError(f"member images hold a {self.array.layout.name} array, "
                                     f"the lab records {spec.arch}")
            fs.add("volume", self.array)

            async def mark_clean():
                await self.keeper.mark_clean(self.array.failed)
                return f"generation {self.keeper.superblock.generation}, state clean"

            session.push("array metadata", mark_clean)
            export = await mount_export(session, fs)
            loop = await attach_loop(session, export, "volume")
            self.device = loop.device
            await session.nursery.start(self.serve_control)
            runtime = {"pid": os.getpid(), "device": self.device, "volume": str(export.mountpoint / "volume"),
                       "mode": self.mode}
            (session.lab.path / RUNTIME_FILE).write_text(json.dumps(runtime))
            session.push_sync("runtime file", lambda: _unlink(session.lab.path / RUNTIME_FILE))
            self.tell(ready={**runtime, "arch": spec.arch, "capacity": self.array.size,
                             "state": self.array.state})
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
            handler = getattr(self, f"op_{op}", None)
            if handler is None:
                await send({"ok": False, "error": f"unknown operation {op!r}"})
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
        array = self.array
        return {
            "name": self.spec.name,
            "spec": dataclasses.asdict(self.spec),
            "device": self.device,
            "pid": os.getpid(),
            "geometry": array.layout.geometry(),
            "redundancy": dataclasses.asdict(array.layout.redundancy),
            "generation": self.keeper.superblock.generation,
            "arch_state": self.keeper.superblock.arch_state,
            "rebuilding": array._rebuild is not None,
            "statistics": array.statistics(),
        }

    async def op_fail(self, request, send) -> dict:
        index = int(request["disk"])
        array = self.array
        if not 0 <= index < len(array.members):
            raise UsageError(f"no member {index}: {self.spec.name} has members 0..{len(array.members) - 1}")
        if index in array.failed:
            raise UsageError(f"member {index} of {self.spec.name} is already failed",
                             hint=f"replace it with `raidlab replace {self.spec.name} --disk {index}`")
        after = array.failed | {index}
        if not array.layout.survives(after) and not request.get("force"):
            what = ("has no redundancy" if array.layout.redundancy.any_failures == 0
                    else f"cannot survive failed members {sorted(after)}")
            raise UsageError(f"{self.spec.name} ({array.layout.name}) {what}: failing member {index} "
                             f"would lose data", hint="use --force to inject the failure anyway")
        self.members[index].failed = True
        await array.fail_member(index)
        return {"failed_members": sorted(array.failed), "state": array.state}

    async def op_replace(self, request, send) -> dict:
        from raidlab.disks import EmulatedDisk, ImageBackend

        index = int(request["disk"])
        array = self.array
        if index not in array.failed:
            raise UsageError(f"member {index} of {self.spec.name} is not failed",
                             hint=f"fail it first with `raidlab fail {self.spec.name} --disk {index}`")
        if not array.layout.survives(array.failed):
            raise UsageError(f"{self.spec.name} has lost data (failed members {sorted(array.failed)}); "
                             "a rebuild cannot recover it")
        async with self.busy:
            images = self.session.lab.images_dir
            new_image = images / f"d{index}.new.img"
            _unlink(new_image)
            backend = ImageBackend(new_image, self.spec.disk_size)
            disk = EmulatedDisk(f"d{index}", self.spec.disk_model, backend,
                                discipline=self.spec.discipline, io_in_thread=True)
            disk.start(self.session.nursery)
            old = self.members[index]

            async def progress_loop(state):
                while True:
                    await trio.sleep(0.5)
                    await send({"progress": state})

            state = [0, array.layout.member_data_size]
            async with trio.open_nursery() as nursery:
                nursery.start_soon(progress_loop, state)
                await array.rebuild(index, disk, progress=lambda d, t: state.__setitem__(0, d))
                nursery.cancel_scope.cancel()
            await send({"progress": [state[1], state[1]]})
            # The replacement takes the old image's name; the old image is discarded.
            old.close()
            os.replace(new_image, images / f"d{index}.img")
            self.members[index] = disk
            return {"rebuilt_bytes": state[1], "failed_members": sorted(array.failed), "state": array.state}

    async def op_check(self, request, send) -> dict:
        array = self.array
        if array.layout.redundancy.any_failures == 0 and array.layout.redundancy.copies < 2:
            raise UsageError(f"{self.spec.name} ({array.layout.name}) has no redundancy to check")
        async with self.busy:
            state = [0, 1]

            async def progress_loop():
                while True:
                    await trio.sleep(0.5)
                    await send({"progress": state})

            async with trio.open_nursery() as nursery:
                nursery.start_soon(progress_loop)
                mismatches = await array.scrub(progress=lambda d, t: state.__setitem__(slice(0, 2), [d, t]))
                nursery.cancel_scope.cancel()
            await send({"progress": state})
            return {"mismatches": mismatches, "checked_bytes": state[1]}

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
    from raidlab.errors import LabInterrupted

    try:
        trio.run(daemon.run)
    except LabInterrupted:
        return 0  # asked to stop: everything released
    except BaseExceptionGroup as group:
        leaves = list(_leaves(group))
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


def _leaves(exc: BaseException):
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            yield from _leaves(sub)
    else:
        yield exc


if __name__ == "__main__":
    sys.exit(main())
