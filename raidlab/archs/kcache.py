"""The kernel's caches as architectures: dm-writecache, bcache and dm-cache, today's
descendants of two of the papers' ideas, built by the kernel's own tools over the same
emulated drives the engine's architectures use.

    dm-writecache  DCD's descendant: writes go to a cache device and are written back to
                   the data disk later (device mapper's writecache target, SSD mode, so
                   the cache is a block device as DCD's cache-disk is).
    bcache         DCD's other descendant: a cache device in front of a backing disk,
                   here in write-back mode (make-bcache --writeback).
    dm-cache       TSS's descendant: hot blocks on a fast device, the rest on a dense one,
                   moved by a policy (smq). As in TSS (RAID 1 for hot data, RAID 5 for
                   cold), the fast device is md RAID 1 over two drives and the origin md
                   RAID 5 over the members.

Live drives (images dK; --disk-size is a data drive's size, --disk-model its model):

    dm-writecache, bcache   d0 the data disk, d1 the cache device (cache_size, cache_model,
                            default --disk-model)
    dm-cache                d0 .. d(N-1) the origin's RAID 5 members (--disks N, --chunk as
                            md's), dN and dN+1 the fast RAID 1's drives (cache_size each,
                            cache_model); the RAID 1's first `metadata` bytes hold the
                            cache's mapping (a linear device), the rest its blocks

They run in the lab VM only (this toolkit's host kernel has no device mapper and no
bcache; the VM's Debian kernel has both, loaded when an array of this family starts),
served by raidlab.service.hosts.kcache with the command lines of raidlab.baselines.kcache.
Each option left unset keeps the kernel's default, and the status shows what the kernel
chose. Fresh images are all zeros: dm-writecache and dm-cache take a zeroed cache or
metadata device as empty, and md's arrays under dm-cache are built --assume-clean.

In the campaigns: dm-writecache and bcache run the crash test (a write-back cache is where
an acknowledged write can be lost if the kernel's promise is not kept); the fault campaign
fails none of their drives (faulttest injects faults under the engine's hosts).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from raidlab.archs.base import LIVE, Architecture, Config, CrashPreset, Drive, Family, Option
from raidlab.baselines import kcache, mdadm
from raidlab.disks import catalog
from raidlab.errors import UsageError
from raidlab.units import parse_size

FAMILY = Family("kcache", {"vm": "vm"}, host="raidlab.service.hosts.kcache:KernelCacheHost")
MIN_DATA_BYTES = 8 << 20
MIN_CACHE_BYTES = 16 << 20  # bcache's default 512 KiB buckets: it wants some dozens

COMMON = (Option("cache_size", "64M", "the cache device's size (dm-cache: each fast drive's)"),
          Option("cache_model", None, "the cache device's catalog model (default: --disk-model)"))
OPTIONS = {
    "dm-writecache": COMMON + (
        Option("block_size", 4096, "the cache's block in bytes (512, 1024, 2048, 4096)"),
        Option("high_watermark", None, "start writing back at this percent of the cache used (kernel: 50)"),
        Option("low_watermark", None, "stop writing back at this percent used (kernel: 45)"),
        Option("writeback_jobs", None, "most blocks under write-back at once (kernel: unlimited)")),
    "bcache": COMMON + (
        Option("cache_mode", "writeback", "writeback, writethrough, writearound or none"),
        Option("bucket", None, "the cache's bucket (make-bcache: 512K; the kernel needs more than 512)"),
        Option("sequential_cutoff", None, "sequential I/O past this many bytes bypasses the cache (kernel: 4M)"),
        Option("writeback_percent", None, "keep this percent of the cache dirty before writing back (kernel: 10)")),
    "dm-cache": COMMON + (
        Option("block", "64K", "the cache's block (a multiple of 32K)"),
        Option("mode", "writeback", "writeback, writethrough or passthrough"),
        Option("metadata", "8M", "the part of the fast RAID 1 that holds the cache's mapping")),
}
SUMMARIES = {
    "dm-writecache": "the kernel's dm-writecache over a data disk and a cache device (DCD's descendant)",
    "bcache": "the kernel's bcache in write-back mode over a data disk and a cache device (DCD's descendant)",
    "dm-cache": "the kernel's dm-cache (smq) with md RAID 1 as fast device over md RAID 5 (TSS's descendant)",
}
SOURCES = {
    "dm-writecache": "Linux device mapper, writecache target (Documentation/admin-guide/device-mapper/writecache.rst)",
    "bcache": "Linux bcache (Documentation/admin-guide/bcache.rst), bcache-tools' make-bcache",
    "dm-cache": "Linux device mapper, cache target with the smq policy (device-mapper/cache.rst, cache-policies.rst)",
}
FAST_DRIVES = 2  # dm-cache's fast RAID 1


@dataclasses.dataclass(frozen=True)
class Serving:
    """What the kcache host (raidlab.service.hosts.kcache) asks of an architecture: how it is
    built (`kind`: "writecache" or "cache", the device-mapper target of that name, or
    "cache-set", bcache's backing device and cache set), the kernel modules it loads, and
    the device it serves in the guest."""

    kind: str
    modules: tuple[str, ...]
    device: str


SERVING = {"dm-writecache": Serving("writecache", ("dm_writecache",), kcache.dm_path("wc")),
           "bcache": Serving("cache-set", ("bcache",), kcache.BCACHE_DEVICE),
           "dm-cache": Serving("cache", ("dm_cache", "dm_cache_smq"), kcache.dm_path("cache"))}


def options_of(arch: str, options: dict[str, Any]) -> dict[str, Any]:
    """`options` over the defaults of `arch`, sizes in bytes; UsageError for an unknown key or
    a value the kernel would refuse."""
    known = {o.name: o.default for o in OPTIONS[arch]}
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise UsageError(f"{arch} has no option {unknown[0]!r}", hint=f"its options: {', '.join(known)}")
    out = {**known, **options}
    for key in ("cache_size", "block", "metadata", "bucket"):
        if out.get(key) is not None:
            out[key] = parse_size(str(out[key]), key)
    if out["cache_model"] is not None:
        catalog.get(out["cache_model"])
    if arch == "dm-writecache":
        out["block_size"] = int(out["block_size"])
        kcache.writecache_table(1, "o", "c", out["block_size"], out)
        for key in ("high_watermark", "low_watermark"):
            if out[key] is not None and not 0 <= int(out[key]) <= 100:
                raise UsageError(f"dm-writecache's {key} is a percent (0-100), not {out[key]}")
    elif arch == "bcache":
        kcache.make_bcache("b", "c", out["cache_mode"])
        kcache.check_bcache_buckets(out["cache_size"], out["bucket"])
    else:
        kcache.cache_table(1, "m", "c", "o", out["block"], out["mode"])
        if out["metadata"] * 2 > out["cache_size"]:
            raise UsageError(f"dm-cache's metadata of {out['metadata']} bytes is more than half its fast "
                             f"device of {out['cache_size']}", hint="give a larger cache_size or a smaller metadata")
    return out


def check(config: Config, runner: str) -> None:
    opts = options_of(config.arch, config.options)
    if config.disk_size is not None and config.disk_size < MIN_DATA_BYTES:
        raise UsageError(f"{config.arch}'s data drives of {config.disk_size} bytes are too small",
                         hint="use --disk-size 8M or more")
    if opts["cache_size"] < MIN_CACHE_BYTES:
        raise UsageError(f"{config.arch}'s cache device of {opts['cache_size']} bytes is too small",
                         hint=f"give at least cache_size={MIN_CACHE_BYTES >> 20}M")
    if config.arch == "dm-cache":
        mdadm.check_md_config("md-raid5", config.disks or 0, config.chunk or mdadm.MD_DEFAULT_CHUNK, {})
    elif config.disks not in (None, 1):
        raise UsageError(f"{config.arch} has one data disk, not {config.disks}", hint="use --disks 1")


def plan(config: Config, clock: str) -> list[Drive]:
    """The drives of the module doc, in order (live only)."""
    opts = options_of(config.arch, config.options)
    if config.arch == "dm-cache":
        models = catalog.member_models(config.disk_model, config.disks)
        cache_model = opts["cache_model"] or models[0]
        return ([Drive(f"d{i}", model, config.disk_size) for i, model in enumerate(models)]
                + [Drive(f"d{config.disks + i}", cache_model, opts["cache_size"]) for i in range(FAST_DRIVES)])
    model = catalog.member_models(config.disk_model, 1)[0]
    return [Drive("d0", model, config.disk_size), Drive("d1", opts["cache_model"] or model, opts["cache_size"])]


CRASH = {"dm-writecache": (CrashPreset("dm-writecache", 1, {"cache_size": "16M"}),),
         "bcache": (CrashPreset("bcache", 1, {"cache_size": "16M", "bucket": "16K"}),),
         "dm-cache": ()}

ARCHITECTURES = tuple(
    Architecture(name=name, family=FAMILY.name, summary=SUMMARIES[name], source=SOURCES[name], options=OPTIONS[name],
                 runners=("vm",), check=check, plan=plan, one_disk=name != "dm-cache",
                 crash_presets=CRASH[name], fault_cells=(), serving=SERVING[name])
    for name in OPTIONS
)

__all__ = ["ARCHITECTURES", "FAMILY", "LIVE", "Serving", "options_of"]
