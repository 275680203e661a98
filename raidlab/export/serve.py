"""`raidlab disk serve`: N emulated disks as loop devices, for a command or until a signal.

The action behind the CLI command (parsing lives in raidlab.cli.export). It is the smallest
complete use of the lab runtime, in the order every lab builds itself and the reverse of the
order it is released in:

    sparse images -> EmulatedDisks (service tasks in the lab nursery) -> FUSE mount
    -> one loop device per disks/dK (direct I/O) -> COMMAND, or wait for Ctrl-C / SIGTERM

The COMMAND sees RAIDLAB_DISKS="/dev/loopX /dev/loopY ...", RAIDLAB_DISK0 ..., RAIDLAB_MOUNT
(the FUSE mount), RAIDLAB_LAB and RAIDLAB_LAB_DIR; its exit status becomes ours.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from raidlab.blockdev import SECTOR
from raidlab.disks import EmulatedDisk, ImageBackend, catalog
from raidlab.disks.disk import SPANS, check_flushes, write_cache_override
from raidlab.disks.scheduler import DISCIPLINES
from raidlab.errors import CapabilityError, NeedsRootError, UsageError
from raidlab.export import BlockExportFS, attach_loop, mount_export
from raidlab.lab import LabSession, open_lab
from raidlab.tools.base import require


@dataclass
class ServedDisk:
    index: int
    name: str
    model: str
    size: int
    image: str
    file: str
    device: str
    direct_io: bool
    target: Any = field(default=None, repr=False, compare=False)  # the EmulatedDisk

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "target"}


@dataclass
class ServeRequest:
    disks: int
    model: str
    size: int
    name: str = "serve"
    discipline: str = "fifo"
    command: list[str] | None = None
    keep_images: bool = False
    home: str | None = None
    # Per-member (model, size) for labs whose disks differ (a caching architecture's cache
    # disk beside its data disks, e.g. VC-RAID Table 1: an IDE cache disk, SCSI array
    # disks). None: `disks` members of `size`, their models from `model`: one name for all,
    # or a comma-separated list, one per member (raidlab.disks.catalog.member_models).
    members: list[tuple[str, int]] | None = None
    # Members that are partitions of whole drives (raidlab.disks.partitions: "b8-c1-d1-e1");
    # `model` is then the drives' one model and `members`' sizes are the partition size.
    partitions: str | None = None
    # One bus every drive shares (raidlab.disks.bus.parse_bus: "shared", "80", "80,serial").
    bus: str | None = None
    # One write-cache setting for every drive: "model" (each model's default), "on" or "off"
    # (raidlab.disks.disk.WRITE_CACHE_SETTINGS).
    write_cache: str = "model"
    # What becomes of the host's flushes and FUA writes at every drive: "honoured" or
    # "dropped" (raidlab.disks.disk.FLUSH_SETTINGS: today's host, or one that sent none).
    flushes: str = "honoured"
    # Where every drive's image lies on the modelled drive: "full" (spread over the whole
    # stroke, the default) or "start" (the drive's first bytes, a partition at its start).
    span: str | None = None
    # Power-loss emulation: every drive keeps an undo log of the writes its write cache holds
    # (raidlab.disks.volatile), so a power cut after a crash can take them back.
    power_loss: bool = False

    def member_specs(self) -> list[tuple[str, int]]:
        if self.members is not None:
            return list(self.members)
        return [(model, self.size) for model in catalog.member_models(self.model, self.disks)]

    def check(self) -> None:
        if self.disks < 1:
            raise UsageError(f"--disks must be at least 1, not {self.disks}")
        for model, _size in self.member_specs():
            catalog.get(model)  # UnknownModelError names the known models
        if self.discipline not in DISCIPLINES:
            raise UsageError(f"unknown queue discipline {self.discipline!r}",
                             hint=f"use one of: {', '.join(DISCIPLINES)}")
        if self.size % SECTOR or self.size <= 0:
            raise UsageError(f"disk size {self.size} is not a positive multiple of {SECTOR}")
        write_cache_override(self.write_cache)
        check_flushes(self.flushes)
        if self.span not in (None, *SPANS):
            raise UsageError(f"unknown span {self.span!r}", hint=f"use one of: {', '.join(SPANS)}")


def check_live_prerequisites(operation: str) -> None:
    """Root and the programs a live lab needs; raise before anything is created."""
    if os.geteuid() != 0:
        raise NeedsRootError(operation)
    for prog in ("losetup", "mount", "umount"):
        require(prog)
    if not Path("/dev/fuse").exists():
        raise CapabilityError("/dev/fuse is missing: the kernel has no FUSE",
                              hint="load the fuse module (modprobe fuse)", capability="fuse")


async def build_disks(session: LabSession, fs: BlockExportFS, req: ServeRequest
                      ) -> list[tuple[str, Any, Path]]:
    """Create the images and EmulatedDisks, add them to `fs` as disks/dK.

    Returns [(relpath, member, image)]: the member is an EmulatedDisk of its own image, or,
    with `req.partitions`, a Partition of a whole drive's image (drives named by the
    partition list's letters: images/drive-b.img ...), so members on one drive share its
    arm. With `req.bus`, every drive books its transfers on one shared Bus; every drive
    has the write cache `req.write_cache` says (the model's default, or on or off for all)."""
    from raidlab.disks.bus import Bus, parse_bus
    from raidlab.disks.volatile import log_path as volatile_log_path

    lab = session.lab
    lab.images_dir.mkdir(parents=True, exist_ok=True)
    specs = req.member_specs()
    bus_spec = parse_bus(req.bus, [model for model, _size in specs])
    bus = Bus(*bus_spec) if bus_spec is not None else None
    write_cache = write_cache_override(req.write_cache)

    def make_disk(name: str, model: str, size: int, image: Path) -> EmulatedDisk:
        resource = lab.record("image", path=str(image), keep=req.keep_images)
        disk = EmulatedDisk(name, model, ImageBackend(image, size), discipline=req.discipline,
                            io_in_thread=True, span=req.span or "full", write_cache=write_cache, bus=bus,
                            flushes=req.flushes)
        # A lab's drive sits behind a block layer, whoever uses it (md over its loop device,
        # an engine array, a command): queued contiguous requests are merged.
        disk.merge_queued_requests()
        if req.power_loss:
            disk.enable_volatile_cache(volatile_log_path(image))
        disk.start(session.nursery)

        def release(disk=disk, image=image):
            disk.close()
            if req.keep_images:
                return "image kept"
            image.unlink(missing_ok=True)
            return "image removed"

        session.push_sync(f"disk {name}", release, resource)
        return disk

    made = []
    if req.partitions:
        from raidlab.disks import partitions

        where = partitions.layout(req.partitions, req.model, len(specs))
        drives = [make_disk(f"drive-{label}", req.model, where.drive_bytes, lab.images_dir / f"drive-{label}.img")
                  for label in where.drive_labels]
        for part in where.members:
            relpath = f"disks/d{part.member}"
            member = drives[part.drive].partition(part.start, part.size, f"d{part.member}")
            fs.add(relpath, member)
            made.append((relpath, member, lab.images_dir / f"drive-{where.drive_labels[part.drive]}.img"))
    else:
        for k, (model, size) in enumerate(specs):
            image = lab.images_dir / f"d{k}.img"
            disk = make_disk(f"d{k}", model, size, image)
            relpath = f"disks/d{k}"
            fs.add(relpath, disk)
            made.append((relpath, disk, image))
    await session.checkpoint("images-created")
    return made


async def serve_disks(req: ServeRequest, *, status: Callable[[str], None] | None = None,
                      on_ready: Callable[[list[ServedDisk], LabSession], None] | None = None,
                      handle_signals: bool = True) -> int:
    """Build the lab, call on_ready(disks), run the command or wait; always release.

    Returns the command's exit status (0 without a command). Raises LabInterrupted after a
    signal, LabError (or another RaidlabError) on failure -- in every case after releasing.
    """
    req.check()
    check_live_prerequisites("raidlab disk serve")
    async with open_lab(req.name, home=req.home, status=status,
                        handle_signals=handle_signals) as session:
        fs = BlockExportFS()
        made = await build_disks(session, fs, req)
        export = await mount_export(session, fs)
        session.status(f"FUSE mount {export.mountpoint}"
                       + (f" (max_background {export.tuning.max_background})"
                          if export.tuning and export.tuning.max_background else ""))
        served = []
        for k, (relpath, disk, image) in enumerate(made):
            dev = await attach_loop(session, export, relpath)
            served.append(ServedDisk(k, disk.name, disk.model.name, disk.size, str(image),
                                     str(export.mountpoint / relpath), dev.device,
                                     dev.direct_io, target=disk))
            if k == 0:
                await session.checkpoint("loop-attached")
        await session.checkpoint("loops-attached")
        if on_ready is not None:
            on_ready(served, session)
        if req.command:
            env = {"RAIDLAB_DISKS": " ".join(d.device for d in served),
                   "RAIDLAB_MOUNT": str(export.mountpoint)}
            env.update({f"RAIDLAB_DISK{d.index}": d.device for d in served})
            rc = await session.run_command(req.command, env)
            session.status(f"command exited with status {rc}")
            return rc
        session.status("serving; press Ctrl-C (or send SIGTERM) to release the disks")
        await trio.sleep_forever()
    return 0  # reached only if the wait was cancelled without a signal
