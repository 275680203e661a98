"""How the engine and cache hosts serve an architecture of the registry as one `volume`.

Both do the same around their own build: the member images the architecture's `plan`
names (each drive its own model and size) are made, or reopened, under the lab and served
by a block export; the host builds its architecture over them and adds it to the export as
`volume`; the export is mounted and, natively, `volume` is attached as a loop device (the
lab VM runner attaches the file instead). The md host differs: it serves the member disks
themselves, for mdadm.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raidlab import archs
from raidlab.disks import EmulatedDisk
from raidlab.export import BlockExportFS, attach_loop, block_export, mount_export
from raidlab.export.serve import ServeRequest, build_disks
from raidlab.lab import LabSession


def arch_config(spec: Any) -> archs.Config:
    """The registry's Config of the array `spec` (a raidlab.service.spec.ArraySpec)."""
    return archs.Config(spec.arch, spec.disks, spec.disk_size, spec.chunk, dict(spec.options), spec.disk_model,
                        spec.discipline)


async def make_drives(session: LabSession, daemon: Any,
                      config: archs.Config) -> tuple[BlockExportFS, list[tuple[str, EmulatedDisk, Path]]]:
    """The block export for the daemon's array and the member images the architecture's
    plan for `config` names, made or reopened in it: (fs, [(relpath, disk, image), ...])."""
    spec = daemon.spec
    drives = archs.get(spec.arch).plan(config, archs.LIVE)
    fs = block_export(spec.runner)
    req = ServeRequest(disks=len(drives), model=spec.disk_model, size=spec.disk_size, name=spec.name,
                       discipline=spec.discipline, keep_images=True, home=daemon.home,
                       members=[(drive.model, drive.size) for drive in drives])
    return fs, await build_disks(session, fs, req)


async def serve_volume(session: LabSession, fs: BlockExportFS, runner: str) -> tuple[Path, str | None]:
    """Mount `fs`, which serves `volume`; natively attach `volume` as a loop device.
    Returns the path of the `volume` file and the loop device (None with the VM runner)."""
    export = await mount_export(session, fs)
    device = None
    if runner == "native":
        device = (await attach_loop(session, export, "volume")).device
    return export.mountpoint / "volume", device
