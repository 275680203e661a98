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
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

from raidlab.archs.base import LIVE, VIRTUAL, Architecture, BuildContext, Built, Config, Drive
from raidlab.archs.caching import (EXT4_BLOCK_SIZES, PER_DISK, VCRAID_OPTIONS, check_whole_sectors,
                                   destage_policy_of, idle_threshold_of, mcd_partition, option_list, options_of)
from raidlab.archs.layouts import DEFAULT_DISKS, member_size
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


ARCHITECTURES = (
    Architecture(
        name="vcraid", family="cache",
        summary="VC-RAID: raid5 behind a RAM buffer and cache disk(s) (scd, mcd, 1c, 1d)",
        source="He & Yang, VC-RAID §2-4", options=option_list(VCRAID_OPTIONS), check=check, plan=plan,
        build=build),
)
