"""The engine's layouts as architectures: raid0, raid1, raid10, raid5, chained, raidx, sa1-3.

Each is an Array of its layout (raidlab.engine.layouts) over N equal member drives, with the
engine's superblock on every member (raidlab.engine.build). Options are the layout
dataclass's own fields (raid10's `layout`, raid5's `algorithm`, SA-RAID's `bandwidths` or
`virtual_device_array`); creation-time work such as SA-RAID's bandwidth probe is the
layout's (raidlab.engine.layouts.sa), so a new layout needs only its module in
raidlab.engine.layouts and nothing here. One option is the array's, not the layout's: raid5's
`journal`, a write journal (raidlab.engine.journal) on one more drive after the members.

Live, member drives are d0..d{N-1} of --disk-size each. In virtual time without a disk size,
each member is the drive model's capacity trimmed so the data area is whole chunks.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from raidlab.archs.base import VIRTUAL, Architecture, BuildContext, Built, Config, Drive, Option
from raidlab.disks import catalog
from raidlab.engine import build as engine_build
from raidlab.engine.layouts import DEFAULT_CHUNK, LAYOUTS, Layout
from raidlab.engine.metadata import DEFAULT_DATA_OFFSET
from raidlab.errors import UsageError
from raidlab.units import parse_size

# Layout fields that come from the geometry (flags), not from -o options.
GEOMETRY_FIELDS = ("n_disks", "disk_size", "chunk_bytes", "data_offset", "member_data_size")
DEFAULT_DISKS = 4  # virtual time, when --disks is not given
DEFAULT_DISK_SIZE_WITHOUT_GEOMETRY = 1 << 30  # drive models with no capacity (none, ssd)
JOURNALLED = ("raid5",)  # layouts with a `journal` option (raidlab.engine.journal)
JOURNAL_MIN = 4 << 20  # at least twice the largest plan: a 1 MiB request and its parity



def layout_options(cls: type[Layout]) -> tuple[Option, ...]:
    return tuple(Option(f.name, f.default if f.default is not dataclasses.MISSING else None,
                        cls.option_help.get(f.name, ""))
                 for f in dataclasses.fields(cls) if f.init and f.name not in GEOMETRY_FIELDS)


def drive_capacity(model: str) -> int:
    """Bytes of one whole drive of `model` (whole sectors), for virtual time without a size."""
    capacity = catalog.get(model).media_capacity_bytes if model != "none" else 0
    return (capacity // 512 * 512) if capacity else DEFAULT_DISK_SIZE_WITHOUT_GEOMETRY


def drive_size(config: Config, clock: str) -> int:
    """--disk-size; in virtual time without one, the whole drive of the model."""
    if config.disk_size is not None:
        return config.disk_size
    if clock != VIRTUAL:
        raise UsageError(f"{config.arch} needs a member size", hint="give --disk-size")
    return drive_capacity(config.disk_model)


def member_size(config: Config, clock: str) -> int:
    """An array member's bytes: --disk-size, or in virtual time the whole drive trimmed so
    that the data area after the metadata is whole chunks."""
    if config.disk_size is not None:
        return config.disk_size
    chunk = config.chunk or DEFAULT_CHUNK
    return DEFAULT_DATA_OFFSET + (drive_size(config, clock) - DEFAULT_DATA_OFFSET) // chunk * chunk


def journal_bytes(options: dict[str, Any]) -> int | None:
    """The `journal` option (raid5): the size of the write journal's drive, or None."""
    value = options.get("journal")
    if value in (None, "off", False):
        return None
    try:
        size = parse_size(str(value), "journal")
    except UsageError:
        raise UsageError(f"option journal={value} is not a size", hint="write it like journal=16M") from None
    if size < JOURNAL_MIN:
        raise UsageError(f"a journal of {size} bytes is too small", hint=f"give at least {JOURNAL_MIN >> 20}M")
    return size


def _architecture(cls: type[Layout]) -> Architecture:
    name = cls.name
    journals = name in JOURNALLED

    def layout_of(options: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in options.items() if k != "journal"}

    def check(config: Config, runner: str) -> None:
        arch.check_option_names(config.options)
        journal_bytes(config.options)
        engine_build.check_geometry(name, config.disks or DEFAULT_DISKS, member_size(config, VIRTUAL),
                                    config.chunk or DEFAULT_CHUNK, layout_of(config.options))

    def plan(config: Config, clock: str) -> list[Drive]:
        models = catalog.member_models(config.disk_model, config.disks or DEFAULT_DISKS)
        size = member_size(config, clock)
        drives = [Drive(f"d{index}", model, size) for index, model in enumerate(models)]
        journal = journal_bytes(config.options) if journals else None
        if journal is not None:  # the journal's own drive after the members, of the first member's model
            drives.append(Drive(f"d{len(drives)}", models[0], journal, keeps_data=True))
        return drives

    async def build(ctx: BuildContext) -> Built:
        config = ctx.config
        journal = journal_bytes(config.options) if journals else None
        members = list(ctx.drives[:-1] if journal is not None else ctx.drives)
        labels = ctx.labels[:len(members)] if ctx.labels else ctx.labels
        if ctx.mode == "create":
            array, keeper = await engine_build.create_array(
                ctx.name, name, members, chunk=config.chunk or DEFAULT_CHUNK, options=layout_of(config.options),
                status=ctx.status, nursery=ctx.nursery)
        else:
            joining = ctx.mode == "join"
            ctx.status(f"{'joining' if joining else 'assembling'} {ctx.name} from {len(members)} member images")
            array, keeper = await engine_build.assemble_array(members, labels=labels, status=ctx.status,
                                                              nursery=ctx.nursery, join=joining)
            if array.layout.name != name:
                raise UsageError(f"member images hold a {array.layout.name} array, the lab records {name}")
        if journal is not None:
            await engine_build.attach_journal(array, ctx.drives[-1], keeper.superblock.array_uuid,
                                              create=ctx.mode == "create", status=ctx.status)

        def statistics() -> dict[str, Any]:
            stats = array.statistics()
            if ctx.clock == VIRTUAL:
                stats.pop("members", None)  # virtual time reports each member disk itself
            return stats

        return Built(array, list(ctx.drives), statistics, {"array": array, "keeper": keeper})

    options = layout_options(cls)
    if journals:
        options += (Option("journal", None, "a write journal of this size on one more drive (md's "
                                            "--write-journal: data and parity journalled first, the write hole "
                                            "closed); e.g. journal=16M"),)
    arch = Architecture(
        name=name, family="engine", summary=cls.summary, source=cls.source,
        options=options, check=check, plan=plan, build=build)
    return arch


ARCHITECTURES = tuple(_architecture(cls) for cls in LAYOUTS.values())
