"""Export block targets as block devices: one FUSE mount per lab, loop devices over its files.

    fs = BlockExportFS(); fs.add("disks/d0", disk0) ...
    export = await mount_export(session, fs)              # <lab>/mnt, served by this trio run
    dev = await attach_loop(session, export, "disks/d0")  # /dev/loopN, direct I/O

Natively every consumer goes through the loop device: the loop driver sends the FUSE file
asynchronous direct-I/O kiocbs, which FUSE keeps in flight together, reads and writes alike.

The lab VM's QEMU opens the files themselves, with O_DIRECT (cache=none) and Linux AIO
(aio=native), which also gives FUSE asynchronous kiocbs. Two things this avoids:
* QEMU's thread pool (aio=threads) issues synchronous pwritev, and the kernel holds a FUSE
  file's inode lock across a synchronous direct write until the server answers (unless the
  server replies FOPEN_PARALLEL_DIRECT_WRITES, which pyfuse3 cannot), so every guest write
  waited for the one before: measured on an engine raid5 under fio at iodepth 8, one write
  in flight at `volume` and the random-write IOPS of iodepth 1, where md's raid5 doubled.
* A host loop device between QEMU and the file would split requests by its queue limits
  (128 segments of at most 64 KiB): a guest's 1 MiB write made of scattered 4 KiB pages
  reaches the engine as pieces of 516-596 KiB, or whole, depending on where the guest's
  buffer lies in memory; measured through one, an engine raid0 wrote 0.80-1.01 of md's
  raid0 from one VM boot to the next. FUSE builds its requests from the pages themselves
  (up to max_write), so the file gets what the guest sent.
A file opened with O_DIRECT refuses I/O that is not in whole sectors (BlockExportFS), as a
block device does; otherwise QEMU's alignment probe, which any size passes, falls back to
4 KiB and turns every 1 KiB guest write into a 4 KiB read-modify-write.

Both register their release on the lab session's cleanup stack and record the kernel object
in the lab's state file (raidlab.lab), so they are released on success, failure, signals,
and -- after a SIGKILL -- by the next run or `raidlab lab cleanup`.

Blocking steps (losetup, mount) run in worker threads: losetup opens a file that this very
trio run serves, so blocking the loop there would deadlock.
"""

from __future__ import annotations

from pathlib import Path

import trio

from raidlab.export.fuse import BlockExportFS, FuseExport, tune_connection
from raidlab.export.loop import attach_and_wait
from raidlab.export.passthrough import ImageFileTarget, create_sparse_image
from raidlab.lab import LabSession, detach_loops_under, release_fuse_mount, unmount_users_of
from raidlab.lab.cleanup import recorded_backing_names
from raidlab.tools.losetup import LoopDevice, detach_and_wait, serves

__all__ = ["BlockExportFS", "FuseExport", "ImageFileTarget", "LoopDevice", "attach_loop", "attach_loop_file",
           "create_sparse_image", "mount_export"]


async def mount_export(session: LabSession, fs: BlockExportFS, *,
                       tune: bool = True) -> FuseExport:
    """Mount `fs` at the lab's mount point and serve it in the session's nursery."""
    lab = session.lab
    export = FuseExport(fs, lab.mountpoint, fsname=f"raidlab:{lab.name}")
    resource = lab.record("fuse_mount", path=str(lab.mountpoint), pid=_pid())
    try:
        await session.nursery.start(export.serve)
    except BaseException:
        lab.forget(resource)
        raise

    async def release():
        # Loops over our files that are not on the cleanup stack (a COMMAND may attach its
        # own): detach them while we still serve, or they would outlive the mount.
        others = await trio.to_thread.run_sync(detach_loops_under, lab.mountpoint)
        note = f" after detaching {', '.join(others)}" if others else ""
        if await export.stop_and_wait():
            return "unmounted" + note
        # The server did not stop (a handler stuck in a target): abort and lazy-unmount.
        return await trio.to_thread.run_sync(release_fuse_mount, str(lab.mountpoint),
                                             str(lab.fusectl_dir))

    session.push(f"FUSE mount {lab.mountpoint}", release, resource)
    session.fuse_export = export
    if tune:
        export.tuning = await trio.to_thread.run_sync(tune_connection, lab.mountpoint,
                                                      lab.fusectl_dir)
    await session.checkpoint("fuse-mounted")
    return export


async def attach_loop(session: LabSession, export: FuseExport, relpath: str) -> LoopDevice:
    """losetup --direct-io=on the exported file `relpath`; wait until the device is ready."""
    return await attach_loop_file(session, export.mountpoint / relpath, relpath, mountpoint=export.mountpoint)


async def attach_loop_file(session: LabSession, path: Path, label: str, *,
                           mountpoint: Path | None = None) -> LoopDevice:
    """losetup --direct-io=on the file `path` (of the FUSE mount at `mountpoint`, or a plain
    file of the host), recorded in the lab and released with it; wait until it is ready."""
    device, wait = await trio.to_thread.run_sync(attach_and_wait, path)
    resource = session.lab.record("loop", device=device.device, backing_file=str(path),
                                  **({"mountpoint": str(mountpoint)} if mountpoint is not None else {}))
    session.status(f"{device.device} -> {label}: ready after {wait.seconds * 1000:.0f} ms "
                   f"({wait.events_seen} {wait.source} event(s)), direct I/O "
                   f"{'on' if device.direct_io else 'OFF'}")

    def release():
        names = recorded_backing_names(resource.fields)
        if not serves(device.device, names):   # released already; the number may be another's now
            return "already detached"
        unmounted = unmount_users_of(device.device)
        released = detach_and_wait(device.device, backing=names)
        note = f"unmounted {', '.join(unmounted)}; " if unmounted else ""
        if not released:
            raise RuntimeError(f"{device.device} is still open (autoclear pending)")
        return note + "detached"

    session.push_sync(f"loop device {device.device}", release, resource)
    return device


def _pid() -> int:
    import os

    return os.getpid()
