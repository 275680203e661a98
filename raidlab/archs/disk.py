"""One plain drive: the DCD paper's "traditional disk", for virtual time.

A replay's baseline: the drive model alone, no array and no cache (`raidlab sim --arch disk`).
"""

from __future__ import annotations

from raidlab.archs.base import Architecture, BuildContext, Built, Config, Drive, Family
from raidlab.archs.layouts import drive_size
from raidlab.errors import UsageError

FAMILY = Family("disk")  # virtual time only: no live host, no doctor runner


def check(config: Config, runner: str) -> None:
    if config.disks not in (None, 1):
        raise UsageError(f"architecture 'disk' is one disk, not {config.disks}", hint="drop --disks")


def plan(config: Config, clock: str) -> list[Drive]:
    check(config, "sim")
    return [Drive("d0", config.disk_model, drive_size(config, clock))]


def volume(config: Config, clock: str) -> int:
    return drive_size(config, clock)


async def build(ctx: BuildContext) -> Built:
    (drive,) = ctx.drives
    return Built(drive, [drive], lambda: {"arch": "disk", "model": ctx.config.disk_model})


ARCHITECTURES = (
    Architecture(name="disk", family=FAMILY.name, summary="one drive, no array (the DCD paper's traditional disk)",
                 source="Hu & Yang, DCD §4", runners=("sim",), check=check, plan=plan, build=build,
                 volume=volume, one_disk=True),
)
