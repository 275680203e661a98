"""VC-RAID (He & Yang §2-4) as an architecture: a raid5 behind a RAM buffer and cache disk(s).

The mechanisms are raidlab.engine.caches.vcraid (scd, mcd), .perdisk (1c, 1d) and .mirror
(the mirrored cache disk); the options (names and defaults from the paper) are
raidlab.archs.caching's. This module says which member drives each configuration needs
(`plan`) and builds or assembles it over them (`build`), for both clocks.

Live (`raidlab create --arch vcraid --disks N --disk-size S`), member images dK, S always the
size of one raid5 member, the caches in addition. --disk-model is one model for every raid5
member, or a comma-separated list with one model per member d0..d{N-1} in order (Table 1's
four different SCSI drives); a cache disk's model is cache_model, default d0's:

    config=scd  (Fig. 1a)    N >= 3 raid5 disks d0..d{N-1} (S each), and d{N} the dedicated
                             cache disk (cache_size, cache_model)
    config=scd, mirrored_cache=on (§3.4): also d{N+1}, the backup cache disk written in
                             parallel (raidlab.engine.caches.mirror)
    config=mcd  (Fig. 1b)    N >= 3 drives; the first `cache_disks` (default 2, as in the
                             paper) hold one cache partition each of cache_size / cache_disks
                             after their S bytes of raid5 (partitions dK-array, dK-cache)
    config=mcd, cache_models=[m0, m1, ...] (§4.1: "two logical partitions, one from each of
                             the IDE disks"): N >= 3 raid5 disks d0..d{N-1} (S each, no cache
                             on them) and one cache drive per listed model, d{N}, d{N+1}, ...,
                             each of cache_size / len(cache_models); served and assembled like
                             scd's cache disk
    config=1c|1d (Fig. 1c/1d) N >= 3 data disks d0..d{N-1} (S each) and N cache disks
                             d{N}..d{2N-1} (cache_size / N each, cache_model); 1d splits the
                             RAM buffer evenly too (raidlab.engine.caches.perdisk)

Virtual time (`raidlab sim`, sim scenarios) lays the drives out as the replay's results name
them: the separate cache drives first, "cache" (scd; with mirrored_cache its backup
"cache-backup") or "cache0", "cache1", ... (mcd's cache_models, 1c, 1d), each a drive of its
model of which the cache uses only the first bytes (span "start", as the DCD simulator's
cache-disk; live, an image spans its drive); then the raid5 members d0..d{N-1}. mcd's
partitions are on drives "drive0", "drive1", ..., as partitions "d0" (raid5) and "c0"
(cache), reported per partition with its share of the drive's busy time. Without
--disk-size, a member is the drive model's capacity trimmed to whole chunks after the
metadata, and --disks defaults to 4, --chunk to 64K. Every configuration runs in both clocks
(the replay gained 1c, 1d and the mirrored cache disk with this one builder).

statistics(): live, the mechanism's own (with its cache disks' and raid5's); virtual, without
those (the replay reports each disk itself), with `destage`.

Checks: a live array's block size must be one ext4 mounts (1K, 2K, 4K); a replay mounts no
filesystem, so it takes any block size the mechanism does.

Served live by the cache family's host: `raidlab status` lines and what a VC-RAID survives
are `serving` below (raidlab.archs.caching.Serving). In the campaigns: the crash test runs
every configuration with a cache smaller than the untar (level-2 destage during it, and cut
inside it), scd and mcd also in durability `paper` with drives that never get a flush (the
papers' world), where a power cut holds it to the drives' report (`flush_on_media`); the
fault campaign fails a raid5 member and the cache disk, unmirrored and mirrored; failure
injection is not built for 1c and 1d (`check_faults`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

from raidlab.archs.base import (LIVE, VIRTUAL, Architecture, BuildContext, Built, Config, CrashPreset, DamageTarget,
                                Drive, FaultCell)
from raidlab.archs.caching import (EXT4_BLOCK_SIZES, FAMILY, PER_DISK, VCRAID_OPTIONS, Serving, arch_options,
                                   check_whole_sectors, destage_policy_of, idle_threshold_of, mcd_partition,
                                   option_list, options_of)
from raidlab.archs.layouts import DEFAULT_DISKS, member_size
from raidlab.archs.words import kib, pct
from raidlab.archs.words import survival as group_survival
from raidlab.disks import catalog
from raidlab.engine import build as engine_build
from raidlab.engine.caches import assemble_vcraid, create_vcraid
from raidlab.engine.caches.mirror import MirroredCacheDisk
from raidlab.engine.caches.perdisk import assemble_perdisk, check_perdisk_config, create_perdisk
from raidlab.engine.caches.vcraid import check_vcraid_config
from raidlab.engine.layouts import create_layout
from raidlab.engine.metadata import DEFAULT_DATA_OFFSET
from raidlab.errors import UsageError

KiB = 1024
DEFAULT_CHUNK = 64 * KiB  # when --chunk is not given (virtual time)


@dataclasses.dataclass(frozen=True)
class _Part:
    """A raid5 member or a cache disk: drive `drive` of the plan, whole (size None), or its
    partition [start, start + size) called `name`."""

    drive: int
    start: int = 0
    size: int | None = None
    name: str = ""


@dataclasses.dataclass(frozen=True)
class _Layout:
    """The drives `plan` returns, and where on them the raid5 members and cache disks are
    (`caches`: with a mirrored cache disk, the cache disk and its backup)."""

    drives: list[Drive]
    array: list[_Part]
    caches: list[_Part]
    mirrored: bool
    member_size: int


def _layout(config: Config, clock: str, opts: dict[str, Any]) -> _Layout:
    virtual = clock == VIRTUAL
    n = config.disks or DEFAULT_DISKS
    models = catalog.member_models(config.disk_model, n)
    cache_model = opts["cache_model"] or models[0]
    catalog.get(cache_model)
    size = member_size(dataclasses.replace(config, chunk=config.chunk or DEFAULT_CHUNK), clock)
    kind = opts["config"]
    mirrored = opts["mirrored_cache"] == "on"
    if kind == "scd":
        # the cache disk, and with mirrored_cache its backup written in parallel (§3.4)
        cache_drives = [(cache_model, opts["cache_size"])] * (2 if mirrored else 1)
        cache_names = ["cache", "cache-backup"]
    elif mirrored:
        raise UsageError(f"a mirrored cache disk is built for config=scd only, not {kind}",
                         hint="use -o config=scd -o mirrored_cache=on")
    elif kind in PER_DISK:
        cache_drives = [(cache_model, mcd_partition(opts["cache_size"], n))] * n
        cache_names = [f"cache{i}" for i in range(n)]
    elif kind == "mcd":
        if opts["cache_model"] is not None:
            raise UsageError("mcd has no cache_model: its cache partitions are on the array's drives, "
                             "or on the drives cache_models names",
                             hint="name one separate drive per partition with cache_models=m0,m1, "
                                  "or use config=scd for a dedicated cache disk")
        k = opts["cache_disks"]
        if k < 2:
            raise UsageError(f"mcd needs cache partitions on at least two disks, not {k}",
                             hint="use config=scd for one cache disk")
        part = mcd_partition(opts["cache_size"], k)
        if opts["cache_models"] is None:
            if k > n:
                raise UsageError(f"mcd cannot put cache partitions on {k} disks of {n}",
                                 hint=f"use cache_disks of 2..{n}, or separate cache drives with "
                                      "cache_models=m0,m1,...")
            return _mcd_partitions(models, size, k, part, virtual)
        for name in opts["cache_models"]:
            catalog.get(name)
        cache_drives = [(name, part) for name in opts["cache_models"]]
        cache_names = [f"cache{i}" for i in range(k)]
    else:
        raise UsageError(f"unknown VC-RAID configuration {kind!r}", hint="use config=scd, mcd, 1c or 1d")
    data = [Drive(f"d{i}", model, size) for i, model in enumerate(models)]
    if virtual:
        caches = [Drive(name, model, bytes_, span="start") for name, (model, bytes_) in zip(cache_names, cache_drives)]
        drives, first_cache, first_member = caches + data, 0, len(caches)
    else:
        caches = [Drive(f"d{n + i}", model, bytes_) for i, (model, bytes_) in enumerate(cache_drives)]
        drives, first_cache, first_member = data + caches, n, 0
    return _Layout(drives, [_Part(first_member + i) for i in range(n)],
                   [_Part(first_cache + i) for i in range(len(caches))], mirrored, size)


def _mcd_partitions(models: list[str], size: int, k: int, part: int, virtual: bool) -> _Layout:
    """mcd's cache partitions after the raid5 bytes of the first k drives (Fig. 1b)."""
    drives, array, caches = [], [], []
    for i, model in enumerate(models):
        if i >= k:
            drives.append(Drive(f"d{i}", model, size))
            array.append(_Part(i))
            continue
        name = f"drive{i}" if virtual else f"d{i}"
        drives.append(Drive(name, model, size + part))
        array.append(_Part(i, 0, size, f"d{i}" if virtual else f"d{i}-array"))
        caches.append(_Part(i, size, part, f"c{i}" if virtual else f"d{i}-cache"))
    return _Layout(drives, array, caches, False, size)


def _part_size(layout: _Layout, part: _Part) -> int:
    return layout.drives[part.drive].size if part.size is None else part.size


def plan(config: Config, clock: str) -> list[Drive]:
    """The drives of the module doc, for `clock`."""
    return _layout(config, clock, options_of("vcraid", config.options, clock)).drives


def check(config: Config, runner: str) -> None:
    """Refuse an impossible VC-RAID (UsageError, one line) before any drive is made."""
    clock = VIRTUAL if runner == "sim" else LIVE
    opts = options_of("vcraid", config.options, clock)
    layout = _layout(config, clock, opts)
    check_whole_sectors(layout.drives)
    n, size, chunk = len(layout.array), layout.member_size, config.chunk or DEFAULT_CHUNK
    if clock == LIVE and opts["block_size"] not in EXT4_BLOCK_SIZES:
        raise UsageError(f"block size {opts['block_size']} is not one ext4 uses on this machine",
                         hint="use block_size=1K (the paper's), 2K or 4K")
    caches = [_part_size(layout, part) for part in layout.caches[:1 if layout.mirrored else None]]
    kw = dict(block_size=opts["block_size"], ram_buffer=opts["ram_buffer"], level1_write=opts["level1_write"],
              destage_segment=opts["destage_segment"], idle_threshold=idle_threshold_of(opts),
              **destage_policy_of(opts))
    if opts["config"] in PER_DISK:
        def fake(bytes_, k):
            return SimpleNamespace(size=bytes_, name=f"d{k}")

        check_perdisk_config(opts["config"], [fake(size, k) for k in range(n)],
                             [fake(bytes_, n + k) for k, bytes_ in enumerate(caches)], **kw)
    check_vcraid_config(opts["config"], caches, **kw)
    engine_build.check_geometry("raid5", n, size, chunk, {})
    capacity = create_layout("raid5", n_disks=n, disk_size=size, chunk_bytes=chunk,
                             data_offset=DEFAULT_DATA_OFFSET).capacity
    if capacity % opts["block_size"]:
        raise UsageError(f"the raid5's capacity {capacity} is not a multiple of the block size "
                         f"{opts['block_size']}", hint="use a chunk that is a multiple of the block size")


async def build(ctx: BuildContext) -> Built:
    """Create or assemble (crash recovery, §3.4) the VC-RAID over the drives of `plan` and
    start it in ctx.nursery. parts: "mechanism" (the VCRAID, or PerDiskVCRAID for 1c/1d),
    "drives", "caches" (the cache disks as drives or partitions; a mirrored cache disk's two
    sides), "mirror" (the MirroredCacheDisk, or None), "recovered" (blocks assemble wrote home)."""
    config, virtual = ctx.config, ctx.clock == VIRTUAL
    opts = options_of("vcraid", config.options, ctx.clock)
    layout = _layout(config, ctx.clock, opts)
    kind, create, chunk = opts["config"], ctx.mode == "create", config.chunk or DEFAULT_CHUNK

    def target(part: _Part) -> Any:
        drive = ctx.drives[part.drive]
        return drive if part.size is None else ctx.meter(drive.partition(part.start, part.size, part.name))

    array_members = [target(part) for part in layout.array]
    caches = [target(part) for part in layout.caches]
    n = len(array_members)
    kw = dict(block_size=opts["block_size"], ram_buffer=opts["ram_buffer"], level1_write=opts["level1_write"],
              destage_segment=opts["destage_segment"], idle_threshold=idle_threshold_of(opts),
              **destage_policy_of(opts))
    mirror = None
    if kind in PER_DISK:
        if create:
            ctx.status(f"creating VC-RAID {kind}: raid5 over {n} disks, each with its own cache disk")
            vc = await create_perdisk(ctx.name, kind, array_members, caches, nursery=ctx.nursery, chunk=chunk, **kw)
        else:
            ctx.status("assembling VC-RAID: writing each cache disk's blocks to its data disk (§3.4)")
            vc = await assemble_perdisk(array_members, caches, nursery=ctx.nursery, assembled=ctx.assembled)
    else:
        cache_disks = caches
        if layout.mirrored:
            make = MirroredCacheDisk.create if create else MirroredCacheDisk.assemble
            mirror = await make("cache-mirror", caches[0], caches[1])
            cache_disks = [mirror]
        if create:
            ctx.status(f"creating VC-RAID {kind}: raid5 over {n} disks, {len(cache_disks)} cache disk(s)")
            vc = await create_vcraid(ctx.name, array_members, cache_disks, config=kind, chunk=chunk, **kw)
        else:
            ctx.status("assembling VC-RAID: writing the cache disks' blocks to the raid5 (§3.4)")
            vc = await assemble_vcraid(array_members, cache_disks, assembled=ctx.assembled)
    recovered: dict[str, Any] = {}
    if not create:
        recovered = {"blocks": vc.statistics()["recovered_blocks"]}
        ctx.status(f"recovered {recovered['blocks']} blocks from the cache disks")
    vc.start(ctx.nursery)
    parts = {"mechanism": vc, "drives": list(ctx.drives), "caches": caches, "mirror": mirror, "recovered": recovered}
    if not virtual:
        return Built(vc, list(ctx.drives), vc.statistics, parts)

    def statistics() -> dict[str, Any]:
        stats = vc.statistics()
        for key in ("array", "cache_disks", "members"):
            stats.pop(key, None)  # members are reported per disk by the replay
        stats["destage"] = opts["destage"]
        return stats

    return Built(vc, caches + array_members, statistics, parts)


def status_lines(s: dict[str, Any], opts: dict[str, Any]) -> list[str]:
    """`raidlab status` lines for a VC-RAID (statistics of VCRAID.statistics())."""
    per_disk = ", ".join(kib(u) for u in s["cache_disk_used_per_disk"])
    n_caches = len(s["cache_disk_used_per_disk"])
    if s["config"] in PER_DISK:  # the caches sit below the raid5: they count its member requests
        shape = (f"raid5 ({s['array']['state']}) over {n_caches} per-disk caches "
                 + ("sharing one RAM buffer" if s["config"] == "1c" else "with private RAM buffers")
                 + " (counts below are the raid5's requests to its members)")
    else:
        shape = f"raid5 ({s['array']['state']}) behind a RAM buffer and {n_caches} cache disk(s)"
    return [
        f"VC-RAID {s['config']}: {shape}; block {s['block_size']} B, "
        f"idle threshold {opts['idle_threshold'] * 1000:g} ms, destage {opts['destage']}, level-2 segment {kib(opts['destage_segment'])}",
        f"RAM buffer: {kib(s['ram_used_bytes'])} of {kib(s['ram_buffer_bytes'])} "
        f"({pct(s['ram_used_bytes'], s['ram_buffer_bytes'])}), {s['ram_dirty_blocks']} dirty blocks; "
        f"cache disks: {kib(s['cache_disk_used_bytes'])} of {kib(s['cache_disk_bytes'])} "
        f"({pct(s['cache_disk_used_bytes'], s['cache_disk_bytes'])}; per disk {per_disk}), "
        f"{s['cache_disk_blocks_mapped']} blocks mapped",
        f"reads {s['reads']} ({kib(s['bytes_read'])}); blocks read from RAM {s['read_hits_ram_blocks']}, "
        f"cache disk {s['read_hits_cache_disk_blocks']}, array {s['read_hits_array_blocks']}",
        f"writes {s['writes']} ({kib(s['bytes_written'])}), synchronous {s['sync_writes']}, flushes "
        f"{s['flushes']}, partial-block {s['partial_block_writes']}; waited for a full RAM buffer "
        f"{s['waited_for_full_buffer']}",
        f"level-1 destage: {s['level1_destages']} log writes ({kib(s['level1_bytes'])}), per cache disk "
        f"{'/'.join(str(n) for n in s['level1_per_disk'])}; level-2 destage: {s['level2_destages']} segments ({kib(s['level2_bytes'])}), "
        f"holes dropped {s['level2_holes_dropped']}, suspended {s['level2_suspended']}, forced {s['level2_forced']}; "
        f"idle periods found {s['idle_periods_found']}; recovered at assemble {s['recovered_blocks']} blocks",
    ]


def survival(stats: dict[str, Any], placement: list[dict[str, Any]], array: Any = None,
             mirror_failed: Iterable[int] | None = None) -> str:
    """What a VC-RAID survives now: its raid5 (the failure groups of the raid5 `array`, state
    and all) and its cache disks: a mirrored cache disk (`mirror_failed`: the sides gone)
    survives one side; any other cache disk or partition is the only copy of what its log
    holds until level 2 takes it home (stats: the bytes in the logs now)."""
    held = f"{kib(stats.get('cache_disk_used_bytes', 0))} in the log now"
    parts = []
    if array is not None:
        layout = array.layout
        members = f"d0-d{layout.n_disks - 1}"
        parts.append(f"raid5 ({members}): " + group_survival(layout.failure_groups(), array.failed, layout.n_disks,
                                                            layout.redundancy.rule))
    if mirror_failed is not None:
        sides = [p["drive"] for p in placement[:2]]
        gone = sorted(set(mirror_failed))
        if not gone:
            parts.append(f"cache disk mirrored on {' and '.join(sides)}: survives one side's failure")
        elif len(gone) == 1:
            left = sides[1 - gone[0]] if len(sides) == 2 else "the other side"
            parts.append(f"cache disk: none left: {sides[gone[0]] if len(sides) == 2 else 'one side'} failed, "
                         f"a failure of {left} loses the writes not yet home ({held})")
        else:
            parts.append("cache disk: both sides failed: the writes not yet home are lost")
        return "; ".join(parts)
    whole = [p["drive"] for p in placement if p["whole_drive"]]
    on_members = [p["drive"] for p in placement if not p["whole_drive"]]
    if whole:
        parts.append(f"cache disk{'s' if len(whole) > 1 else ''} {', '.join(whole)}: no copy, "
                     f"{'each' if len(whole) > 1 else 'its'} failure loses the writes not yet home ({held})")
    if on_members:
        parts.append(f"cache partitions on {', '.join(on_members)}: no copy, a failure of their drive loses the "
                     f"writes its log holds that are not yet home ({held})")
    return "; ".join(parts)


def drive_role(config: Config, disk: int) -> tuple[str, bool]:
    """d0..d{N-1} raid5 members (mcd's first ones holding a cache partition unless its caches
    are drives of their own), then the cache disk(s): with mirrored_cache=on the cache disk
    and its backup, which each keep the log without the other."""
    options, disks = config.options, config.disks or DEFAULT_DISKS
    if disk < disks:  # a raid5 member, unless mcd keeps cache partitions on it
        holds_cache = (options.get("config") == "mcd" and not options.get("cache_models")
                       and disk < int(options.get("cache_disks", 2)))
        return ("raid5 member holding a cache partition", False) if holds_cache else ("raid5 member", True)
    mirrored = str(options.get("mirrored_cache", "off")) in ("on", "True", "true")
    if mirrored and disk in (disks, disks + 1):
        return ("cache disk" if disk == disks else "backup cache disk") + " (mirrored)", True
    return "cache disk", False


def check_faults(options: dict[str, Any]) -> None:
    """Failure injection is built for scd and mcd, not for 1c and 1d."""
    config = str(options.get("config", "scd"))
    if config in PER_DISK:
        raise UsageError(f"failure injection is not built for VC-RAID {config}", hint="use config=scd or mcd")


def flush_on_media(options: dict[str, Any]) -> bool:
    """durability=paper: a sync write or flush counts as done once the drives reported the
    cache disk's log write, which a drive with its write cache on does from the cache."""
    return options.get("durability") != "paper"


def _live_options(options: dict[str, Any]) -> dict[str, Any]:
    return arch_options("vcraid", options)


def _reserved_ram(options: dict[str, Any]) -> int:
    """Its RAM buffer, system RAM of the paper's machine (raidlab.archs.caching.reserved_ram)."""
    return arch_options("vcraid", options)["ram_buffer"]


# The crash presets' caches (smaller than the untar) and the fault cells' (with the crash
# presets' small RAM buffer).
CRASH_CACHE = dict(cache_size="2M", ram_buffer="256K")
PER_DISK_CACHE = dict(cache_size="3M", ram_buffer="384K")
FAULT_CACHE = {"config": "scd", "cache_size": "8M", "ram_buffer": "1M"}


def _crash(name: str, disks: int, config: str, cache: dict[str, str], durability: str = "strict",
           flushes: str = "honoured") -> CrashPreset:
    return CrashPreset(name, disks, dict(config=config, **cache, durability=durability), in_destage=True,
                       flushes=flushes)


ARCHITECTURES = (
    Architecture(
        name="vcraid", family=FAMILY.name,
        summary="VC-RAID: raid5 behind a RAM buffer and cache disk(s) (scd, mcd, 1c, 1d)",
        source="He & Yang, VC-RAID §2-4", options=option_list(VCRAID_OPTIONS), check=check, plan=plan,
        build=build,
        crash_presets=(_crash("vcraid-scd", 3, "scd", CRASH_CACHE),
                       _crash("vcraid-scd-paper", 3, "scd", CRASH_CACHE, "paper", flushes="dropped"),
                       _crash("vcraid-mcd", 4, "mcd", CRASH_CACHE),
                       _crash("vcraid-mcd-paper", 4, "mcd", CRASH_CACHE, "paper", flushes="dropped"),
                       _crash("vcraid-1c", 3, "1c", PER_DISK_CACHE),
                       _crash("vcraid-1d", 3, "1d", PER_DISK_CACHE)),
        fault_cells=(FaultCell("vcraid", 4, FAULT_CACHE, 1),
                     FaultCell("vcraid-mirrored-cache", 4, {**FAULT_CACHE, "mirrored_cache": "on"}, 4),
                     FaultCell("vcraid-cache", 4, FAULT_CACHE, 4)),
        damage_targets=(DamageTarget("vcraid-scd", 3, {"config": "scd", "cache_size": "4M", "ram_buffer": "256K"}),
                        DamageTarget("vcraid-mcd", 4, {"config": "mcd", "cache_size": "4M", "ram_buffer": "256K"})),
        drive_role=drive_role, check_faults=check_faults, flush_on_media=flush_on_media,
        serving=Serving(options=_live_options, status_lines=status_lines, survival=survival,
                        no_copy_fail="its cache disk is not mirrored",
                        no_copy_replace="an unmirrored cache disk's log exists nowhere else",
                        reserved_ram=_reserved_ram)),
)
