"""Replay builders for the caching architectures: `raidlab sim --arch dcd|vcraid -o KEY=VALUE`.

Why here: the mechanisms live in raidlab.engine.caches (DCD, VC-RAID; another helper owns
them); what a *simulation* needs on top is how to lay them out on emulated drives the way
the papers' simulators did, and that is a replay concern. So this module only builds
(`create_dcd`, `create_vcraid`) and registers the builders with raidlab.runners.virtual.

Options are the live host's (raidlab.archs.caching.arch_options: the same names,
defaults and one-line errors as `raidlab create --arch dcd|vcraid -o ...`), so one scenario's
[[arch]] options mean the same thing live and in a replay; `destage=on|off` (DCD Table 4) is
handled here if the host does not take it. Layouts follow the live host's `plan_members`,
except where the paper's simulator differs:

* DCD `cache=physical` (Fig. 1): the cache-disk is a second drive of the same model ("the same
  disk parameters are used for both the cache-disk and the data disk except for the capacity
  difference", §3.2). We emulate it as a drive of that model whose image covers only the first
  `cache_size` bytes (span "start"), so its seeks are those of a real C2200A that uses 20 MB,
  not of a whole drive squeezed into 20 MB (the live host's image spans the drive).
* DCD `cache=logical` (Fig. 2): one drive; "we assign the first 80,000 sectors (20 MB) in a
  disk drive as the logical cache-disk and the remaining partition as the logical data disk"
  (§4). Two partitions of one EmulatedDisk share its queue and arm, as the paper's two logical
  disks do. With --disk-size S the drive is cache_size + S (as live); without it the drive is
  the model's capacity and the volume what the cache-disk leaves (§4's split of one C2200A).
* `cache_size` defaults, for dcd in a replay, to 80,000 of the C2200A's 256-byte sectors =
  20,480,000 bytes (§4, Table 1) rather than the live host's 20 MiB; `ram_buffer` 512 KB (§4).
* `destage=off` (§4.3, Table 4: "we deliberately disable the destage process"): the idle
  detector's threshold is set beyond any trace (1e9 s), so no idle destage ever starts. The
  DCD still destages when its log is full (raidlab.engine.caches.dcd: "an emulator must not
  stop"); the paper instead ran "shorter traces until the cache-disk is full". The report's
  `forced_destages` says whether that happened.
* VC-RAID (He & Yang §2-3): `config=scd` a raid5 of --disks drives plus one cache drive (span
  "start", as above); `config=mcd` the first `cache_disks` drives carry a cache partition after
  their raid5 bytes, as live; with `cache_models` (§4.1: one partition on each IDE disk) each
  listed model is a separate cache drive of cache_size / len(cache_models) (span "start", as
  scd's), the raid5 drives holding no cache, as live.

A DCD's writes into its RAM buffer first cross the host-to-controller link (§3.2: 10 MB/s;
the drive model's bus rate), see raidlab.engine.caches.dcd.HostLink: without it an immediate-report write would
take no time at all, where the paper's take their transfer time (0.1-0.8 ms, §4.1).

Logical layouts put two partitions on one drive; the replay reports each partition as a
"disk" with its own share of the drive's busy time (Partition.statistics), so utilisation
means the same for logical and physical cache-disks.
"""

from __future__ import annotations

from typing import Any

import trio

from raidlab.archs import caching
from raidlab.archs.caching import sim_options
from raidlab.errors import UsageError



async def build_dcd(spec, nursery: trio.Nursery):
    from raidlab.disks.disk import EmulatedDisk
    from raidlab.engine.caches import create_dcd
    from raidlab.engine.caches.dcd import HostLink
    from raidlab.archs import Built
    from raidlab.runners.virtual import DiscardBackend, MeteredTarget, member_disk_size

    if spec.disks not in (None, 1):
        raise UsageError(f"dcd has one data disk, not {spec.disks}",
                         hint="drop --disks (the cache-disk comes with -o cache=physical|logical)")
    opts = sim_options("dcd", spec.options)
    cache_size = opts["cache_size"]
    drive = member_disk_size(spec)
    extra: dict[str, Any] = {}
    if opts["cache"] == "physical":
        cache_model = opts["cache_model"] or spec.disk_model
        cache = EmulatedDisk("cache", cache_model, DiscardBackend(cache_size), discipline=spec.discipline,
                             span="start")
        data = EmulatedDisk("data", spec.disk_model, DiscardBackend(drive), discipline=spec.discipline)
        cache.start(nursery)
        data.start(nursery)
        cache_target, data_target = MeteredTarget(cache), MeteredTarget(data)
    else:
        if opts["cache_model"] is not None:
            raise UsageError("a logical DCD's cache-disk is part of the data drive: it has no cache_model")
        # --disk-size is the data disk (as for `raidlab create`); without it the drive is
        # the model's whole capacity and the data disk what the cache-disk leaves (§4).
        data_size = spec.disk_size if spec.disk_size is not None else drive - cache_size
        if data_size <= 0:
            raise UsageError(f"logical cache-disk of {cache_size} bytes does not fit on a {drive}-byte drive")
        disk = EmulatedDisk("drive", spec.disk_model, DiscardBackend(cache_size + data_size),
                            discipline=spec.discipline)
        disk.start(nursery)
        cache_target = MeteredTarget(disk.partition(0, cache_size, "cache"))
        data_target = MeteredTarget(disk.partition(cache_size, data_size, "data"))
        extra["drive"] = disk
    dcd = await create_dcd("sim-dcd", cache_target, data_target, ram_buffer=opts["ram_buffer"],
                           report=opts["report"], idle_threshold=opts["idle_threshold"],
                           destage_segment=opts["destage_segment"], large_write=opts["large_write"])
    dcd.start(nursery)
    from raidlab.disks import catalog

    link = HostLink(dcd, catalog.get(spec.disk_model).bus_mb_s)

    def statistics() -> dict[str, Any]:
        stats = dcd.statistics()
        stats["host_link_mb_s"] = link.mb_s
        stats["host_link_busy_s"] = link.busy
        stats.pop("cache_disk", None)  # reported per disk by the replay
        stats.pop("data_disk", None)
        stats["cache"] = opts["cache"]
        stats["destage"] = opts["destage"]
        if "drive" in extra:
            drive_stats = extra["drive"].statistics()
            stats["drive_busy_s"] = drive_stats["busy_time"]
            stats["drive_max_queue_length"] = drive_stats["max_queue_length"]
        return stats

    return Built(link, [cache_target, data_target], statistics)


async def build_vcraid(spec, nursery: trio.Nursery):
    from raidlab.disks.disk import EmulatedDisk
    from raidlab.engine.caches import create_vcraid
    from raidlab.archs.caching import mcd_partition as _mcd_partition
    from raidlab.engine.metadata import DEFAULT_DATA_OFFSET
    from raidlab.archs import Built
    from raidlab.runners.virtual import DiscardBackend, MeteredTarget, member_disk_size

    opts = sim_options("vcraid", spec.options)
    n = spec.disks or 4
    if n < 3:
        raise UsageError(f"vcraid's raid5 needs at least 3 disks, not {n}")
    chunk = spec.chunk or 64 * 1024
    if spec.disk_size is not None:
        size = spec.disk_size
    else:  # the drive's capacity, trimmed to whole chunks after the metadata
        size = DEFAULT_DATA_OFFSET + (member_disk_size(spec) - DEFAULT_DATA_OFFSET) // chunk * chunk
    if opts["config"] == "scd":
        cache_model = opts["cache_model"] or spec.disk_model
        cache = EmulatedDisk("cache", cache_model, DiscardBackend(opts["cache_size"]), discipline=spec.discipline,
                             span="start")
        cache.start(nursery)
        cache_targets = [MeteredTarget(cache)]
        members = []
        for index in range(n):
            disk = EmulatedDisk(f"d{index}", spec.disk_model, DiscardBackend(size), discipline=spec.discipline)
            disk.start(nursery)
            members.append(MeteredTarget(disk))
    elif opts["config"] == "mcd" and opts["cache_models"] is not None:
        # As the live host lays it out: one separate cache drive per model (§4.1's two IDE
        # disks), each holding one partition; the raid5 drives hold no cache.
        if opts["cache_model"] is not None:
            raise UsageError("mcd has no cache_model: name its cache drives with cache_models")
        k = opts["cache_disks"]
        if k < 2:
            raise UsageError(f"mcd needs cache partitions on at least two disks, not {k}",
                             hint="use config=scd for one cache disk")
        part = _mcd_partition(opts["cache_size"], k)
        cache_targets, members = [], []
        for index, model in enumerate(opts["cache_models"]):
            cache = EmulatedDisk(f"cache{index}", model, DiscardBackend(part), discipline=spec.discipline,
                                 span="start")
            cache.start(nursery)
            cache_targets.append(MeteredTarget(cache))
        for index in range(n):
            disk = EmulatedDisk(f"d{index}", spec.disk_model, DiscardBackend(size), discipline=spec.discipline)
            disk.start(nursery)
            members.append(MeteredTarget(disk))
    elif opts["config"] == "mcd":
        # As the live host lays it out: the first `cache_disks` drives carry a cache
        # partition after their raid5 bytes.
        k = opts["cache_disks"]
        if not 2 <= k <= n:
            raise UsageError(f"mcd needs cache partitions on 2..{n} disks, not {k}")
        part = _mcd_partition(opts["cache_size"], k)
        cache_targets, members = [], []
        for index in range(n):
            if index < k:
                disk = EmulatedDisk(f"drive{index}", spec.disk_model, DiscardBackend(size + part),
                                    discipline=spec.discipline)
                disk.start(nursery)
                members.append(MeteredTarget(disk.partition(0, size, f"d{index}")))
                cache_targets.append(MeteredTarget(disk.partition(size, part, f"c{index}")))
            else:
                disk = EmulatedDisk(f"d{index}", spec.disk_model, DiscardBackend(size), discipline=spec.discipline)
                disk.start(nursery)
                members.append(MeteredTarget(disk))
    else:
        raise UsageError(f"unknown VC-RAID configuration {opts['config']!r}", hint="use config=scd or config=mcd")
    vc = await create_vcraid("sim-vcraid", members, cache_targets, config=opts["config"],
                             block_size=opts["block_size"], ram_buffer=opts["ram_buffer"],
                             level1_write=opts["level1_write"], destage_segment=opts["destage_segment"],
                             idle_threshold=opts["idle_threshold"], chunk=chunk)
    vc.start(nursery)

    def statistics() -> dict[str, Any]:
        stats = vc.statistics()
        for key in ("array", "cache_disks", "members"):
            stats.pop(key, None)  # members are reported per disk by the replay
        stats["destage"] = opts["destage"]
        return stats

    return Built(vc, cache_targets + members, statistics)


BUILDERS = {"dcd": build_dcd, "vcraid": build_vcraid}
