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

Campaigns: a layout takes part in `raidlab crashtest all` and the fault campaign with a
preset and a cell of its own id on max(4, min_disks) members unless CAMPAIGNS below says
otherwise, and `raidlab faulttest` knows from the layout's failure groups whether the array
keeps its data without the drive it fails. So a new layout is crash- and fault-tested from
the moment it is listed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from raidlab.archs.base import (LIVE, VIRTUAL, Architecture, BuildContext, Built, Config, CrashPreset, DamageTarget,
                                Drive, Family, FaultCell, Option, Peaks, WriteHoleCase)
from raidlab.disks import catalog
from raidlab.engine import build as engine_build
from raidlab.engine.layouts import DEFAULT_CHUNK, LAYOUTS, Layout, create_layout
from raidlab.engine.metadata import DEFAULT_DATA_OFFSET
from raidlab.errors import UsageError
from raidlab.units import parse_size

# Layout fields that come from the geometry (flags), not from -o options.
GEOMETRY_FIELDS = ("n_disks", "disk_size", "chunk_bytes", "data_offset", "member_data_size")
DEFAULT_DISKS = 4  # virtual time, when --disks is not given
DEFAULT_DISK_SIZE_WITHOUT_GEOMETRY = 1 << 30  # drive models with no capacity (none, ssd)
JOURNALLED = ("raid5",)  # layouts with a `journal` option (raidlab.engine.journal)
JOURNAL_MIN = 4 << 20  # at least twice the largest plan: a 1 MiB request and its parity

# The engine family: served live by the engine host, natively over loop and FUSE.
FAMILY = Family("engine", {"native": "native-engine", "vm": "vm"}, host="raidlab.service.hosts.engine:EngineHost")

# SA3's member bandwidths in its crash preset and damage target: an uneven mapping, persisted.
UNEVEN_BANDWIDTHS = (40e6, 30e6, 20e6, 10e6)

# What a layout contributes to the campaigns where it is not the default (module doc); keys
# crash, fault, damage, write_hole. The crash presets are the redundant layouts (no state of
# their own beyond the superblock: the contract that a flush returns once acknowledged writes
# are on the members, alone) and those with state of their own: RAID-x's image buffer on
# disk and in memory (pending images are lost in a crash; the data itself is home), SA3's
# persisted virtual device array, which assemble must find again. SA3 stands for SA-RAID's
# layouts in every campaign. raid5 runs the crash test also in the papers' world (no drive
# ever gets a flush or FUA), and the write-hole campaign without and with its journal.
CAMPAIGNS: dict[str, dict[str, tuple]] = {
    "raid0": dict(crash=()),
    "raid1": dict(crash=(CrashPreset("raid1", 2),), fault=(FaultCell("raid1", 2),),
                  damage=(DamageTarget("raid1", 2),)),
    "raid5": dict(crash=(CrashPreset("raid5", 4), CrashPreset("raid5-paper-world", 4, flushes="dropped")),
                  damage=(DamageTarget("raid5", 4),),
                  write_hole=(WriteHoleCase("raid5"), WriteHoleCase("raid5-journal", {"journal": "4M"}))),
    "raidx": dict(crash=(CrashPreset("raidx", 4, {"image_buffer": "disk"}),
                         CrashPreset("raidx-memory", 4, {"image_buffer": "memory"})),
                  damage=(DamageTarget("raidx", 4, {"image_buffer": "disk"}),)),
    "sa1": dict(crash=(), fault=()),
    "sa2": dict(crash=(), fault=()),
    "sa3": dict(crash=(CrashPreset("sa3", 4, {"bandwidths": UNEVEN_BANDWIDTHS}),),
                damage=(DamageTarget("sa3", 4, {"bandwidths": UNEVEN_BANDWIDTHS}),)),
    "saz": dict(crash=(), fault=()),
}

# The RAID-x paper's Table 3 (Hwang, Jin & Ho §3.3-3.4; raidlab.cluster.peaks): for n disks,
# a file of m blocks, a disk's bandwidth B and read and write times per block R and W.
PEAKS: dict[str, Peaks] = {
    "raid10": Peaks("RAID-10", lambda n, m, B, R, W: {
        "read": n * B, "large_write": n * B, "small_write": n * B,
        "large_read_time": m * R / n, "small_read_time": R, "large_write_time": 2 * m * W / n,
        "small_write_time": 2 * W, "fault_coverage": f"{n // 2} disk failures (one per mirror pair)"}),
    "raid5": Peaks("RAID-5", lambda n, m, B, R, W: {
        "read": n * B, "large_write": (n - 1) * B, "small_write": (n - 1) * B / 2,
        "large_read_time": m * R / n, "small_read_time": R, "large_write_time": m * W / (n - 1),
        "small_write_time": R + W, "fault_coverage": "single disk failure"}),
    "chained": Peaks("chained", lambda n, m, B, R, W: {
        "read": n * B, "large_write": n * B, "small_write": n * B,
        "large_read_time": m * R / n, "small_read_time": R, "large_write_time": 2 * m * W / n,
        "small_write_time": 2 * W, "fault_coverage": f"{n // 2} disk failures (no two neighbours)"}),
    "raidx": Peaks("RAID-x", lambda n, m, B, R, W: {
        "read": n * B, "large_write": n * B, "small_write": n * B,
        "large_read_time": m * R / n, "small_read_time": R,
        "large_write_time": m * W / n + m * W / (n * (n - 1)),
        "small_write_time": W, "fault_coverage": "single disk failure"}),
}



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

    def drive_role(config: Config, disk: int) -> tuple[str, bool]:
        """A member, and whether the layout's failure groups keep every byte without it."""
        params = dict(n_disks=config.disks or DEFAULT_DISKS, disk_size=member_size(config, LIVE),
                      chunk_bytes=config.chunk or DEFAULT_CHUNK, data_offset=DEFAULT_DATA_OFFSET,
                      **layout_of(config.options))
        return "member", create_layout(name, **cls.placeholder_params(params)).survives({disk})

    options = layout_options(cls)
    if journals:
        options += (Option("journal", None, "a write journal of this size on one more drive (md's "
                                            "--write-journal: data and parity journalled first, the write hole "
                                            "closed); e.g. journal=16M"),)
    campaigns = CAMPAIGNS.get(name, {})
    disks = max(DEFAULT_DISKS, cls.min_disks)
    arch = Architecture(
        name=name, family=FAMILY.name, summary=cls.summary, source=cls.source,
        options=options, check=check, plan=plan, build=build,
        crash_presets=campaigns.get("crash", (CrashPreset(name, disks),)),
        fault_cells=campaigns.get("fault", (FaultCell(name, disks),)),
        damage_targets=campaigns.get("damage", ()), write_hole_cases=campaigns.get("write_hole", ()),
        drive_role=drive_role, peaks=PEAKS.get(name))
    return arch


ARCHITECTURES = tuple(_architecture(cls) for cls in LAYOUTS.values())
