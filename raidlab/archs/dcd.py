"""DCD, the Disk Caching Disk (Hu & Yang, ISCA 96 §2-4), as an architecture.

The mechanism is raidlab.engine.caches.dcd; the options (names and defaults from the paper)
are raidlab.archs.caching's. This module says which member drives a DCD needs (`plan`) and
builds or assembles it over them (`build`), for both clocks.

Live (`raidlab create --arch dcd --disks 1 --disk-size S`), member images dK, S always the
size of the data disk, the cache-disk in addition:

    cache=physical (Fig. 1)  d0 the data disk (S, --disk-model), d1 the cache-disk
                             (cache_size, cache_model, default --disk-model)
    cache=logical  (Fig. 2)  d0 one drive of cache_size + S; its first cache_size bytes are
                             the cache-disk d0-cache (§4: "we assign the first 80,000 sectors
                             (20 MB) in a disk drive as the logical cache-disk and the
                             remaining partition as the logical data disk"), the rest the
                             data disk d0-data

Virtual time (`raidlab sim`, sim scenarios) lays the drives out as the paper's simulator did,
and its results name them as here:

* physical: "cache", a drive of cache_model of which the cache-disk uses only the first
  cache_size bytes (span "start": "the same disk parameters are used for both the cache-disk
  and the data disk except for the capacity difference", §3.2, so its seeks are those of a
  C2200A that uses 20 MB, not of a whole drive squeezed into 20 MB; live, the image spans the
  drive), and "data": S bytes, or the whole drive of the model without --disk-size.
* logical: "drive", with the partitions "cache" and "data". Without --disk-size the drive is
  the model's whole capacity and the volume what the cache-disk leaves (§4's split of one
  C2200A; `dcd_volume_size`). Two partitions of one drive share its queue and arm, as the
  paper's two logical disks do; each reports its own share of the drive's busy time
  (raidlab.disks.disk.Partition), so utilisation means the same for both kinds of cache-disk.
* A write the RAM buffer takes first crosses the host-to-controller link (§3.2,
  raidlab.engine.caches.dcd.HostLink, at the drive model's bus rate): the replayed target is
  the link in front of the DCD. Without it an immediate-report write would take no time at
  all, where the paper's take their transfer time (0.1-0.8 ms, §4.1). A live volume has a
  real host in front of it, and no link.
* statistics(): live, the DCD's own (with its cache-disk's and data disk's); virtual, the
  DCD's without those two (the replay reports each disk itself), with `cache`, `destage`, the
  link's rate and busy seconds, and for a logical DCD the shared drive's busy seconds and
  deepest queue.

Served live by the cache family's host: `raidlab status` lines and what a DCD survives are
`serving` below (raidlab.archs.caching.Serving). In the campaigns, a DCD runs the crash test
in both report modes with a cache smaller than the untar (level-2 destage during it, and cut
inside it), and the fault campaign fails its data disk and its cache-disk.
"""

from __future__ import annotations

from typing import Any

from collections.abc import Iterable

from raidlab.archs.base import (LIVE, VIRTUAL, Architecture, BuildContext, Built, Config, CrashPreset, DamageTarget,
                                Drive, FaultCell)
from raidlab.archs.caching import (DCD_OPTIONS, FAMILY, Serving, arch_options, check_whole_sectors, destage_policy_of,
                                   idle_threshold_of, option_list, options_of, sim_options)
from raidlab.archs.layouts import drive_size
from raidlab.archs.words import kib, pct
from raidlab.disks import catalog
from raidlab.engine.caches.dcd import HostLink, assemble_dcd, check_dcd_config, create_dcd
from raidlab.errors import UsageError


def dcd_volume_size(drive_bytes: int, options: dict[str, Any]) -> int:
    """The DCD's volume on a drive of `drive_bytes` when no --disk-size is given: the whole
    drive (physical), or what the logical cache-disk leaves of it (DCD §4)."""
    opts = sim_options("dcd", options)
    return drive_bytes if opts["cache"] == "physical" else drive_bytes - opts["cache_size"]


def volume(config: Config, clock: str) -> int:
    """The volume a DCD of `config` serves: --disk-size, or what `dcd_volume_size` leaves of
    the model's whole drive."""
    drive = drive_size(Config("dcd", 1, config.disk_size, None, disk_model=config.disk_model), clock)
    return dcd_volume_size(drive, config.options) if config.disk_size is None else drive


def plan(config: Config, clock: str) -> list[Drive]:
    """The drives of the module doc: live d0 (and d1), virtual "cache" and "data", or "drive"."""
    opts = options_of("dcd", config.options, clock)
    if config.disks not in (None, 1):
        raise UsageError(f"dcd has one data disk, not {config.disks}",
                         hint="use --disks 1 (the cache-disk comes with -o cache=physical|logical)")
    (model,) = catalog.member_models(config.disk_model, 1)
    cache_model = opts["cache_model"] or model
    catalog.get(cache_model)
    virtual = clock == VIRTUAL
    whole = Config("dcd", 1, config.disk_size, None, disk_model=model)
    if opts["cache"] == "physical":
        data = drive_size(whole, clock)
        if virtual:
            return [Drive("cache", cache_model, opts["cache_size"], span="start"), Drive("data", model, data)]
        return [Drive("d0", model, data), Drive("d1", cache_model, opts["cache_size"])]
    if opts["cache"] == "logical":
        if opts["cache_model"] is not None:
            raise UsageError("a logical DCD's cache-disk is part of the data drive: it has no cache_model",
                             hint="use -o cache=physical for a separate cache-disk")
        if config.disk_size is not None:
            data = config.disk_size
        else:
            drive = drive_size(whole, clock)
            data = dcd_volume_size(drive, config.options)
            if data <= 0:
                raise UsageError(f"logical cache-disk of {opts['cache_size']} bytes does not fit on a "
                                 f"{drive}-byte drive")
        return [Drive("drive" if virtual else "d0", model, opts["cache_size"] + data)]
    raise UsageError(f"unknown DCD cache {opts['cache']!r}", hint="use cache=physical or cache=logical")


def check(config: Config, runner: str) -> None:
    """Refuse an impossible DCD (UsageError, one line) before any drive is made."""
    clock = VIRTUAL if runner == "sim" else LIVE
    check_whole_sectors(plan(config, clock))
    opts = options_of("dcd", config.options, clock)
    check_dcd_config(opts["cache_size"], ram_buffer=opts["ram_buffer"], report=opts["report"],
                     idle_threshold=idle_threshold_of(opts), destage_segment=opts["destage_segment"],
                     large_write=opts["large_write"], **destage_policy_of(opts))


async def build(ctx: BuildContext) -> Built:
    """Create or assemble (crash recovery, §2.5) the DCD over the drives of `plan` and start
    it in ctx.nursery. parts: "mechanism" (the DCD), "drives", "caches" (its cache-disk, a
    drive or a partition), "mirror" (None), "recovered" (what assemble found in the log)."""
    config, virtual = ctx.config, ctx.clock == VIRTUAL
    opts = options_of("dcd", config.options, ctx.clock)
    drive = None
    if opts["cache"] == "physical":
        cache_disk, data_disk = ctx.drives if virtual else reversed(ctx.drives)
    else:
        (drive,) = ctx.drives
        size = opts["cache_size"]
        prefix = "" if virtual else f"{drive.name}-"
        cache_disk = ctx.meter(drive.partition(0, size, f"{prefix}cache"))
        data_disk = ctx.meter(drive.partition(size, drive.size - size, f"{prefix}data"))
    recovered: dict[str, Any] = {}
    if ctx.mode == "create":
        ctx.status(f"creating a {opts['cache']} DCD, report {opts['report']}")
        dcd = await create_dcd(
            ctx.name, cache_disk, data_disk, ram_buffer=opts["ram_buffer"], report=opts["report"],
            idle_threshold=idle_threshold_of(opts), destage_segment=opts["destage_segment"],
            large_write=opts["large_write"], **destage_policy_of(opts))
    else:
        ctx.status("assembling the DCD: scanning the cache-disk log (§2.5)")
        dcd = await assemble_dcd(cache_disk, data_disk, report=opts["report"])
        stats = dcd.statistics()
        recovered = {"log_records": stats["log_records"], "blocks": stats["cache_disk_blocks_mapped"]}
        ctx.status(f"recovered {stats['log_records']} log records mapping {stats['cache_disk_blocks_mapped']} sectors")
    dcd.start(ctx.nursery)
    parts = {"mechanism": dcd, "drives": list(ctx.drives), "caches": [cache_disk], "mirror": None,
             "recovered": recovered}
    if not virtual:
        return Built(dcd, list(ctx.drives), dcd.statistics, parts)

    link = HostLink(dcd, catalog.get(catalog.member_models(config.disk_model, 1)[0]).bus_mb_s)

    def statistics() -> dict[str, Any]:
        stats = dcd.statistics()
        stats["host_link_mb_s"] = link.mb_s
        stats["host_link_busy_s"] = link.busy
        stats.pop("cache_disk", None)  # reported per disk by the replay
        stats.pop("data_disk", None)
        stats["cache"] = opts["cache"]
        stats["destage"] = opts["destage"]
        if drive is not None:
            drive_stats = drive.statistics()
            stats["drive_busy_s"] = drive_stats["busy_time"]
            stats["drive_max_queue_length"] = drive_stats["max_queue_length"]
        return stats

    return Built(link, [cache_disk, data_disk], statistics, parts)


def status_lines(s: dict[str, Any], opts: dict[str, Any]) -> list[str]:
    """`raidlab status` lines for a DCD (statistics of DCD.statistics())."""
    return [
        f"DCD ({opts['cache']}), report {s['report']}, {'[bold]bypass[/]' if s['bypass'] else 'caching'}; "
        f"idle threshold {opts['idle_threshold'] * 1000:g} ms, destage {opts['destage']}, large writes > {kib(opts['large_write'])} go to the data disk",
        f"RAM buffer: {kib(s['ram_used_bytes'])} of {kib(s['ram_buffer_bytes'])} "
        f"({pct(s['ram_used_bytes'], s['ram_buffer_bytes'])}); cache-disk log: {kib(s['cache_disk_used_bytes'])} "
        f"of {kib(s['cache_disk_bytes'])} ({pct(s['cache_disk_used_bytes'], s['cache_disk_bytes'])}), "
        f"{s['log_records']} records, {s['cache_disk_blocks_mapped']} sectors mapped",
        f"reads {s['reads']} ({kib(s['bytes_read'])}); sectors read from RAM {s['read_hits_ram_sectors']}, "
        f"cache-disk {s['read_hits_cache_disk_sectors']}, data disk {s['read_hits_data_disk_sectors']}",
        f"writes {s['writes']} ({kib(s['bytes_written'])}), flushes {s['flushes']}; large writes to the data disk "
        f"{s['large_writes_to_data_disk']}; log writes {s['log_writes']} ({kib(s['log_write_bytes'])}); "
        f"waited for a full RAM buffer {s['waited_for_full_buffer']}",
        f"destage (LWFD): {s['destages']} segments ({kib(s['destaged_bytes'])}), holes dropped "
        f"{s['destage_holes_dropped']}, suspended {s['destages_suspended']}, forced {s['forced_destages']}; "
        f"idle periods found {s['idle_periods_found']}; tombstones {s['tombstones']}; "
        f"recovered at assemble {s['recovered_blocks']} blocks",
    ]


def survival(stats: dict[str, Any], placement: list[dict[str, Any]], array: Any = None,
             mirror_failed: Iterable[int] | None = None) -> str:
    """What a DCD survives now: nothing, for it keeps one copy of everything (its data disk,
    its cache-disk's log), on one drive (logical) or two (physical)."""
    held = f"{kib(stats.get('cache_disk_used_bytes', 0))} in the log now"
    if len(placement) == 1 and not placement[0]["whole_drive"]:
        return f"none: one drive holds the data and the cache-disk log ({held})"
    return f"none: the data disk and the cache-disk each hold the only copy of some data ({held})"


def drive_role(config: Config, disk: int) -> tuple[str, bool]:
    """d0 the data disk, d1 the cache-disk; a DCD keeps its data without neither."""
    return ("data disk", False) if disk == 0 else ("cache disk", False)


def _live_options(options: dict[str, Any]) -> dict[str, Any]:
    return arch_options("dcd", options)


SMALL_CACHE = dict(cache_size="2M", ram_buffer="256K")  # smaller than a crash test's untar

ARCHITECTURES = (
    Architecture(
        name="dcd", family=FAMILY.name, summary="DCD: RAM buffer + log cache-disk in front of one data disk",
        source="Hu & Yang, DCD (ISCA 96) §2-4", options=option_list(DCD_OPTIONS), check=check, plan=plan,
        build=build, volume=volume, one_disk=True,
        crash_presets=(CrashPreset("dcd-immediate", 1, {"report": "immediate", **SMALL_CACHE}, in_destage=True),
                       CrashPreset("dcd-after-complete", 1, {"report": "after-complete", **SMALL_CACHE},
                                   in_destage=True)),
        fault_cells=(FaultCell("dcd-data", 1, drive=0), FaultCell("dcd-cache", 1, drive=1)),
        damage_targets=(DamageTarget("dcd", 1, {"cache_size": "4M", "ram_buffer": "256K"}),),
        drive_role=drive_role,
        serving=Serving(options=_live_options, status_lines=status_lines, survival=survival,
                        no_copy_fail="a DCD has no redundancy", no_copy_replace="a DCD has no redundancy")),
)
