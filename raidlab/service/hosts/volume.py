"""How the engine and cache hosts serve an architecture of the registry as one `volume`.

Both do the same around their own build: the member images the architecture's `plan`
names (each drive its own model and size) are made, or reopened, under the lab and served
by a block export; the host builds its architecture over them and adds it to the export as
`volume`; the export is mounted. Natively `volume` is attached as a loop device, the array's
device; with the VM runner the file itself is the lab VM's disk (QEMU opens it with O_DIRECT
and Linux AIO, raidlab.export says why). The md host differs: it serves the member disks
themselves, for mdadm.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import trio

from raidlab import archs
from raidlab.disks import EmulatedDisk, ImageBackend
from raidlab.disks.volatile import log_path as volatile_log_path
from raidlab.errors import LabError, RaidlabError
from raidlab.export import BlockExportFS, attach_loop, mount_export
from raidlab.export.serve import ServeRequest, build_disks
from raidlab.lab import LabSession
from raidlab.service.spec import FORCE_ENV, NO_RESYNC_ENV


def arch_config(spec: Any) -> archs.Config:
    """The registry's Config of the array `spec` (a raidlab.service.spec.ArraySpec)."""
    return archs.Config(spec.arch, spec.disks, spec.disk_size, spec.chunk, dict(spec.options), spec.disk_model,
                        spec.discipline, partitions=spec.partitions, bus=spec.bus, write_cache=spec.write_cache,
                        span=spec.span, flushes=spec.flushes)


async def make_drives(session: LabSession, daemon: Any,
                      config: archs.Config) -> tuple[BlockExportFS, list[tuple[str, EmulatedDisk, Path]]]:
    """The block export for the daemon's array and the member images the architecture's
    plan for `config` names, made or reopened in it: (fs, [(relpath, disk, image), ...])."""
    spec = daemon.spec
    drives = archs.get(spec.arch).plan(config, archs.LIVE)
    fs = BlockExportFS()
    req = ServeRequest(disks=len(drives), model=spec.disk_model, size=spec.disk_size, name=spec.name,
                       discipline=spec.discipline, keep_images=True, home=daemon.home,
                       members=[(drive.model, drive.size) for drive in drives],
                       partitions=spec.partitions, bus=spec.bus, write_cache=spec.write_cache, span=spec.span,
                       flushes=spec.flushes, power_loss=spec.power_loss)
    return fs, await build_disks(session, fs, req)


async def serve_volume(session: LabSession, fs: BlockExportFS, *, loop: bool = True) -> tuple[Path, str | None]:
    """Mount `fs`, which serves `volume`, and (with `loop`) attach `volume` as a loop device.
    Returns the path of the `volume` file and the loop device (None without `loop`)."""
    export = await mount_export(session, fs)
    device = (await attach_loop(session, export, "volume")).device if loop else None
    return export.mountpoint / "volume", device


def stripe_cache_bytes(array: Any) -> int:
    """Memory the stripe cache of an engine Array holds when full (0 without one)."""
    cache = getattr(array, "stripe_cache", None)
    return cache.bytes_for(len(array.members)) if cache is not None else 0


async def replace_drive(session: LabSession, spec: Any, old: EmulatedDisk, index: int, fill, send) -> EmulatedDisk:
    """A fresh image for drive dK, filled by `await fill(new_drive, progress)` (a rebuild or a
    copy) while {"progress": [done, total]} lines go to the client; the new image then takes
    the old one's name and the old drive is closed. The new drive has the old one's model,
    size, queue, bus, write cache and span."""
    images = session.lab.images_dir
    new_image = images / f"d{index}.new.img"
    new_image.unlink(missing_ok=True)
    disk = EmulatedDisk(old.name, old.model, ImageBackend(new_image, old.size), discipline=spec.discipline,
                        io_in_thread=True, span=old.span, write_cache=old.write_cache, bus=old.bus,
                        flushes=old.flushes)
    disk.merge_queued_requests()
    if old.volatile is not None:
        disk.enable_volatile_cache(volatile_log_path(new_image))
    disk.start(session.nursery)
    session.push_sync(f"disk {old.name} (replacement)", lambda: disk.close() or "closed")
    state = [0, old.size]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(report_progress, send, state)
        await fill(disk, lambda done, total: state.__setitem__(slice(0, 2), [done, total]))
        nursery.cancel_scope.cancel()
    await send({"progress": [state[1], state[1]]})
    old.close()
    os.replace(new_image, images / f"d{index}.img")
    if disk.volatile is not None:  # its undo log follows the image's name
        os.replace(disk.volatile.path, volatile_log_path(images / f"d{index}.img"))
        disk.volatile.path = volatile_log_path(images / f"d{index}.img")
    return disk


async def report_progress(send, state) -> None:
    """Send {"progress": [done, total]} every half second until cancelled."""
    while True:
        await trio.sleep(0.5)
        await send({"progress": list(state)})


async def run_with_progress(send, name: str, work) -> tuple[Any, int]:
    """`await work(progress=...)` (a scrub, a resync) with {"progress"} lines to the client; a
    drive failing under it is said in one line (LabError). Returns (its result, the total
    it reported)."""
    state = [0, 1]
    failure: OSError | None = None
    result = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(report_progress, send, state)
        try:
            result = await work(progress=lambda d, t: state.__setitem__(slice(0, 2), [d, t]))
        except OSError as exc:  # a drive failed under it: a finding, said in one line
            failure = exc
        finally:
            nursery.cancel_scope.cancel()
    if failure is not None:
        raise LabError(failure.strerror or str(failure), hint=f"see `raidlab status {name}`")
    await send({"progress": state})
    return result, state[1]


class UncleanStop:
    """What an engine array (an architecture's own, or the raid5 under VC-RAID) needs when its
    superblock says its last run did not end cleanly, as md does it at assembly:

    * a parity array with a member failed may hold stripes whose data and parity disagree,
      with no copy left to tell which is right: the missing member's blocks would be
      computed wrong (the write hole). md refuses to start such an array ("cannot start
      dirty degraded array") unless forced; so does `refuse_if_dirty_degraded`, unless
      `assemble --force` (FORCE_ENV);
    * a redundant array with every member in service is resynced in the background while it
      serves (`start_resync`), unless `assemble --no-resync` (NO_RESYNC_ENV); until the
      resync finishes the array stays dirty (`pending`), so a stop before then resyncs again.

    Neither with a write journal (its replay made every journalled stripe whole, as md's
    does), nor in a joined instance (the owner resyncs)."""

    def __init__(self, name: str, array: Any, keeper: Any, status, busy: trio.Lock, *, part: str | None = None):
        self.name, self.array, self.keeper, self.status, self.busy = name, array, keeper, status, busy
        self.what = f"{name}'s {part}" if part else name   # VC-RAID's raid5: "v's raid5"
        self.pending = False

    def _dirty(self, mode: str) -> bool:
        return mode == "assemble" and not self.keeper.stopped_cleanly and self.array.journal is None

    def refuse_if_dirty_degraded(self, mode: str) -> None:
        r = self.array.layout.redundancy
        if (self._dirty(mode) and self.array.failed and r.copies == 1 and r.any_failures > 0
                and os.environ.get(FORCE_ENV) != "1"):
            failed = ", ".join(f"d{i}" for i in sorted(self.array.failed))
            raise RaidlabError(
                f"{self.what} was not stopped cleanly and is degraded ({failed} failed): its parity may "
                f"not match its data, so the blocks of {failed} could be computed wrong; not started",
                hint=f"`raidlab assemble {self.name} --force` starts it anyway (as mdadm --assemble "
                     "--force); then replace the member and run `raidlab check`")

    def start_resync(self, mode: str, nursery, *, joined: bool = False) -> bool:
        """Start the background resync if this assembly needs one; whether it started."""
        r = self.array.layout.redundancy
        if not (self._dirty(mode) and not joined and not self.array.failed and (r.any_failures > 0 or r.copies > 1)
                and os.environ.get(NO_RESYNC_ENV) != "1"):
            return False
        self.pending = True
        self.status(f"{self.what} was not stopped cleanly: resync started (every stripe made consistent from its "
                    "data, as md does; the array serves meanwhile)")
        nursery.start_soon(self._resync)
        return True

    async def _resync(self) -> None:
        async with self.busy:
            try:
                await self.array.resync()
            except OSError as exc:  # a member failed meanwhile: the resync ends, the array serves degraded
                self.status(f"resync stopped: {exc.strerror or exc}")
                return
            self.pending = False
            self.status("resync after the unclean stop finished")

    async def mark_clean(self) -> str:
        """The clean stop's superblock update, or why the array is left dirty."""
        if self.pending:
            # md keeps an array whose resync did not finish dirty, so the next assembly
            # resyncs again; its failure set is on the members already (on_failure).
            return "left active: the resync after an unclean stop did not finish"
        await self.keeper.mark_clean(self.array.failed)
        return f"generation {self.keeper.superblock.generation}, state clean"


async def write_back_drives(drives: list) -> int:
    """Where the host's flushes never reach the drives (the papers' world, raidlab.disks.disk
    "Flushes"), let each drive write its cache back on its own, as an idle drive does: the
    end of a settle (a cold start), which a flush ends in today's world. Returns the drives
    written back."""
    done = []
    for drive in drives:
        disk = getattr(drive, "disk", drive)  # a partition's drive
        if getattr(disk, "flushes", "honoured") == "dropped" and disk not in done:
            await disk.write_back()
            done.append(disk)
    return len(done)
