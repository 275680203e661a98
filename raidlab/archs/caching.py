"""The caching family's options: DCD (Hu & Yang, ISCA 96) and VC-RAID (He & Yang).

The mechanisms are raidlab.engine.caches.dcd / vcraid / perdisk / mirror; the architectures
(their member drives and their one builder for both clocks) are raidlab.archs.dcd and
raidlab.archs.vcraid. What this module holds is what the two share: how a user names their
options (names and defaults from the papers), how a value is read (sizes, times, model
lists), and the one-line errors for an unknown or unreadable option.

Arch options (-o), named after the papers, with what each means: OPTION_HELP below (shown by
`raidlab archs dcd|vcraid`).
The same names and defaults serve `raidlab create` and `raidlab sim`, so a scenario's
options mean the same live and in virtual time. `destage=off` (DCD §4.3, Table 4: "we
deliberately disable the destage process") sets the idle threshold beyond any trace
(DESTAGE_OFF_THRESHOLD), so no idle destage ever starts; a DCD still destages when its log
is full (raidlab.engine.caches.dcd: "an emulator must not stop"), where the paper ran
"shorter traces until the cache-disk is full", and its `forced_destages` says whether that
happened.

Both are served live by the cache family's host (raidlab.service.hosts.cache); what that
host asks of each beyond its plan and build (its options, `raidlab status` lines, what it
survives, why a drive without a copy is not failed or rebuilt, the RAM it holds) is its
declaration's `serving` (`Serving` below).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from raidlab.archs.base import VIRTUAL, Drive, Family, Option
from raidlab.blockdev import SECTOR
from raidlab.engine.caches.log import DESTAGE_ORDERS
from raidlab.errors import UsageError
from raidlab.units import parse_duration, parse_size

KiB, MiB = 1024, 1 << 20

# The cache family: served live by the cache host, natively over loop and FUSE.
FAMILY = Family("cache", {"native": "native-engine", "vm": "vm"}, host="raidlab.service.hosts.cache:CacheHost")


@dataclasses.dataclass(frozen=True)
class Serving:
    """What the cache family's live host (raidlab.service.hosts.cache) asks of one caching
    architecture beyond its plan and build."""

    options: Callable[[dict[str, Any]], dict[str, Any]]  # -o options as the live mechanism reads them
    status_lines: Callable[[dict[str, Any], dict[str, Any]], list[str]]  # `raidlab status`: statistics, options
    # What it survives now: its statistics, where its caches are (the host's cache_placement),
    # the engine array under it (or None), the failed sides of its mirrored cache disk (None: none).
    survival: Callable[[dict[str, Any], list[dict[str, Any]], Any, Iterable[int] | None], str]
    no_copy_fail: str     # why `raidlab fail` of a drive holding the only copy of some data loses it
    no_copy_replace: str  # why `raidlab replace` cannot rebuild such a drive
    reserved_ram: Callable[[dict[str, Any]], int] = lambda options: 0  # see reserved_ram


EXT4_BLOCK_SIZES = (1024, 2048, 4096)  # ext4 mounts only block sizes up to the 4 KiB page

# One set of option names and defaults for `raidlab create` and `raidlab sim`.
DCD_CACHE_SIZE = 80_000 * 256  # DCD §4: the first 80,000 (256-byte, Table 1) sectors, "20 MB"
DESTAGE_OFF_THRESHOLD = 1e9    # destage=off (DCD §4.3, Table 4): an idle period never comes
# Background destage of a full log (raidlab.engine.caches.destage): both architectures.
WATERMARK_OPTIONS: dict[str, Any] = dict(high_watermark=0.9, low_watermark=0.0, destage_batch=1 * MiB)
DCD_OPTIONS: dict[str, Any] = dict(cache="physical", report="immediate", ram_buffer=512 * KiB,
                                   cache_size=DCD_CACHE_SIZE, idle_threshold=0.050, destage="on",
                                   destage_segment=128 * KiB, large_write=64 * KiB, cache_model=None,
                                   destage_order="lwfd", **WATERMARK_OPTIONS)
VCRAID_OPTIONS: dict[str, Any] = dict(config="scd", ram_buffer=4 * MiB, cache_size=200 * MiB,
                                      block_size=1 * KiB, level1_write=64 * KiB, destage_segment=64 * KiB,
                                      idle_threshold=0.050, destage="on", cache_model=None, cache_disks=2,
                                      cache_models=None, mirrored_cache="off", durability="strict",
                                      destage_order="lwfd", **WATERMARK_OPTIONS)
SIZE_OPTIONS = {"ram_buffer", "cache_size", "destage_segment", "large_write", "block_size",
                "level1_write", "destage_batch"}
FRACTION_OPTIONS = {"high_watermark", "low_watermark"}
DURABILITY_MODES = ("paper", "strict")  # raidlab.engine.caches.vcraid
PER_DISK = ("1c", "1d")  # raidlab.engine.caches.perdisk


def _size(key: str, value: Any) -> int:
    if isinstance(value, bool):
        raise UsageError(f"option {key}={value} is not a size", hint=f"write it like {key}=512K")
    if isinstance(value, int):
        return value
    try:
        return parse_size(str(value))
    except UsageError:
        raise UsageError(f"option {key}={value} is not a size in whole sectors",
                         hint=f"write it like {key}=512K") from None


def _seconds(value: Any) -> float:
    """idle_threshold: seconds (0.05) or with a unit (50ms, 0.05s)."""
    try:
        return parse_duration(value)
    except UsageError as exc:
        what = "must be positive" if "positive" in exc.message else "is not a time"
        raise UsageError(f"option idle_threshold={value} {what}", hint="write it like 0.05 or 50ms") from None


def _model_list(value: Any) -> tuple[str, ...]:
    """cache_models: a list of catalog names (scenario TOML, JSON) or "m0,m1" (the CLI)."""
    if isinstance(value, str):
        names = [part.strip() for part in value.split(",")]
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        names = [v.strip() for v in value]
    else:
        raise UsageError(f"option cache_models={value!r} is not a list of disk models",
                         hint="write it like cache_models=maxtor-91366u4,maxtor-91020d6")
    if not all(names):
        raise UsageError(f"option cache_models={value!r} has an empty model name",
                         hint="write it like cache_models=maxtor-91366u4,maxtor-91020d6")
    return tuple(names)


def idle_threshold_of(opts: dict[str, Any]) -> float:
    return DESTAGE_OFF_THRESHOLD if opts["destage"] == "off" else opts["idle_threshold"]


def destage_policy_of(opts: dict[str, Any]) -> dict[str, Any]:
    """The background-destage keywords of create_dcd / create_vcraid, the destage order
    (and VC-RAID's durability): with destage=off no background destage either (a full log
    is then made room for in the write path only, as the paper's destage-off runs stopped
    at a full log)."""
    out = {key: opts[key] for key in WATERMARK_OPTIONS}
    out["destage_order"] = opts["destage_order"]
    if opts["destage"] == "off":
        out["high_watermark"] = 1.0
    if "durability" in opts:
        out["durability"] = opts["durability"]
    return out


def _fraction(key: str, value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"option {key}={value!r} is not a number", hint=f"a fraction of the log, like {key}=0.9") from None
    if isinstance(value, bool) or out < 0:
        raise UsageError(f"option {key}={value!r} is not a fraction", hint=f"write it like {key}=0.9")
    return out


def arch_options(arch: str, options: dict[str, Any]) -> dict[str, Any]:
    """The arch's options with defaults filled in and sizes in bytes; UsageError (one line)
    for an unknown key or an unreadable value."""
    defaults = DCD_OPTIONS if arch == "dcd" else VCRAID_OPTIONS
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise UsageError(f"{arch} has no option {unknown[0]!r}",
                         hint=f"known options: {', '.join(sorted(defaults))}")
    out = {**defaults, **options}
    for key in SIZE_OPTIONS & set(out):
        out[key] = _size(key, out[key])
    for key in FRACTION_OPTIONS & set(out):
        out[key] = _fraction(key, out[key])
    out["idle_threshold"] = _seconds(out["idle_threshold"])
    if out["destage"] not in ("on", "off"):
        raise UsageError(f"option destage={out['destage']} is neither on nor off")
    out["destage_order"] = _choice(out["destage_order"], "destage_order", DESTAGE_ORDERS)
    if arch == "vcraid":
        out["durability"] = _choice(out["durability"], "durability", DURABILITY_MODES)
        mirrored = {True: "on", False: "off"}.get(out["mirrored_cache"], out["mirrored_cache"])
        if mirrored not in ("on", "off"):
            raise UsageError(f"option mirrored_cache={out['mirrored_cache']} is neither on nor off")
        out["mirrored_cache"] = mirrored
        if out["config"] != "mcd":
            # cache_disks counts mcd's cache partitions; the other configs' cache disks follow
            # from the config (scd: one, 1c/1d: one per data disk), so it is None there, not
            # mcd's default shown in their status.
            if options.get("cache_disks") is not None:
                raise UsageError(f"cache_disks is for config=mcd, not config={out['config']}",
                                 hint="scd has one cache disk (mirrored_cache=on adds its backup); "
                                      "1c and 1d have one per data disk")
            out["cache_disks"] = None
        else:
            try:
                out["cache_disks"] = int(out["cache_disks"])
            except (TypeError, ValueError):
                raise UsageError(f"option cache_disks={out['cache_disks']} is not a whole number") from None
        if out["cache_models"] is not None:  # mcd's partitions on separate drives (§4.1)
            names = _model_list(out["cache_models"])
            if out["config"] in ("scd", *PER_DISK):
                raise UsageError(f"cache_models is for config=mcd, not config={out['config']}",
                                 hint="use cache_model for its cache disk(s), or config=mcd")
            if "cache_disks" in options and out["cache_disks"] != len(names):
                raise UsageError(f"cache_disks={out['cache_disks']} conflicts with cache_models, which names "
                                 f"{len(names)} cache drive(s)",
                                 hint="drop cache_disks: with cache_models it is the list's length")
            out["cache_models"], out["cache_disks"] = names, len(names)
    return out


def mcd_partition(cache_size: int, k: int) -> int:
    """Bytes of one of `k` cache partitions (or drives) that share `cache_size`, whole sectors."""
    return cache_size // k // SECTOR * SECTOR


def check_whole_sectors(drives: list[Drive]) -> None:
    """UsageError (one line) for a planned drive that is not whole sectors (a cache_size given
    as a plain number of bytes), before any drive is made."""
    for drive in drives:
        if drive.size % SECTOR:
            raise UsageError(f"drive {drive.name} of {drive.size} bytes is not whole {SECTOR}-byte sectors",
                             hint="give cache_size and --disk-size in whole sectors, like 20M")


def reserved_ram(arch: str, options: dict[str, Any]) -> int:
    """RAM the paper's machine gave this architecture out of its own: VC-RAID's RAM buffer,
    reserved at boot (§3.1; §4.3.1: 'if the RAM buffer is too large, the remaining system RAM
    used for regular file system becomes small'). Here the buffer lives in the array daemon on
    the host, so a lab VM with an available-memory target (RAIDLAB_VM_AVAILABLE_MIB) gives up
    the same amount instead. 0 for DCD (its buffer is the paper's NVRAM, not system RAM).
    Each architecture says it in its declaration's `serving`; 0 without one."""
    from raidlab import archs

    serving = archs.get(arch).serving
    return serving.reserved_ram(options) if serving is not None else 0


OPTION_HELP: dict[str, str] = {
    "cache": "DCD: physical (a separate cache-disk, Fig. 1) or logical (the data drive's first bytes, Fig. 2)",
    "report": "DCD §2.4: immediate (when the RAM buffer has it) or after-complete (when logged)",
    "ram_buffer": "RAM buffer bytes (DCD: 512K NVRAM, §4; VC-RAID: 4M of system RAM, §3.1)",
    "cache_size": "cache-disk bytes in total (DCD: 80,000 x 256 B, §4; VC-RAID: 200M)",
    "idle_threshold": "idle time before destage starts: seconds or 50ms (DCD §2.3)",
    "destage": "on, or off (DCD §4.3, Table 4: no idle destage)",
    "destage_segment": "bytes per destage (DCD: 128K; VC-RAID level-2 destage: 64K)",
    "large_write": "DCD §2.1: writes larger than this go to the data disk directly",
    "cache_model": "drive model of the cache disk(s) (default: the first data member's)",
    "config": "VC-RAID: scd (one cache disk), mcd (partitions on several), 1c or 1d (one per disk)",
    "block_size": "VC-RAID cache block: 1K (the paper's), 2K or 4K, an ext4 block size",
    "level1_write": "VC-RAID level-1 destage: bytes per cache-disk log write",
    "cache_disks": "VC-RAID mcd: how many drives hold a cache partition (2, as in the paper)",
    "cache_models": "VC-RAID mcd: one separate cache drive per listed model (§4.1), m0,m1",
    "mirrored_cache": "VC-RAID scd §3.4: on adds a backup cache disk written in parallel",
    "durability": "VC-RAID: when a cache-disk log write counts as done for a sync write or flush: "
                  "strict (FUA: on the media), paper (a plain write, as Linux 2.0's driver)",
    "high_watermark": "fraction of a cache-disk log that starts its background destage (assumed 0.9; "
                      "1: none)",
    "low_watermark": "fraction of the log the background destage goes down to (0: empty, VC-RAID §3.3.3)",
    "destage_batch": "bytes of log per background destage step, one flush of the array each (assumed 1M)",
    "destage_order": "lwfd (the papers': last write first, the log a stack) or oldest (an ablation, not "
                     "the papers': oldest records first, the log circular)",
}


def option_list(defaults: dict[str, Any]) -> tuple[Option, ...]:
    """The registry's declaration of an architecture's options, from their defaults."""
    return tuple(Option(name, default, OPTION_HELP.get(name, "")) for name, default in defaults.items())


def _choice(value: Any, key: str, choices: tuple[str, ...]) -> str:
    text = str(value).lower() if not isinstance(value, bool) else ("on" if value else "off")
    if text not in choices:
        raise UsageError(f"option {key}={value!r}: use one of {', '.join(choices)}")
    return text


def sim_options(arch: str, options: dict[str, Any]) -> dict[str, Any]:
    """The options of `arch` for virtual time: arch_options' names, defaults and errors, the
    DCD's cache_size defaulting to the paper's 80,000 x 256 bytes, and `idle_threshold` in
    seconds (beyond any trace with destage=off). Pure."""
    options = dict(options)
    defaults = DCD_OPTIONS if arch == "dcd" else VCRAID_OPTIONS
    destage = options.pop("destage", "on") if "destage" not in defaults else options.get("destage", "on")
    destage = _choice(destage, "destage", ("on", "off"))
    if arch == "dcd":
        options.setdefault("cache_size", DCD_CACHE_SIZE)
    out = arch_options(arch, options)
    if arch == "dcd" and out["cache"] not in ("physical", "logical"):
        raise UsageError(f"option cache={out['cache']!r}: use one of physical, logical")
    out["destage"] = destage
    idle = out["idle_threshold"] if "idle_threshold" in out else out["idle_ms"] / 1000
    out["idle_threshold"] = DESTAGE_OFF_THRESHOLD if destage == "off" else float(idle)
    if "destage_segment" not in out:
        out["destage_segment"] = out["segment"]
    return out


def options_of(arch: str, options: dict[str, Any], clock: str) -> dict[str, Any]:
    """The options of `arch` as its builder reads them: `sim_options` in virtual time (whose
    one-line errors a replay reports), `arch_options` live."""
    return sim_options(arch, options) if clock == VIRTUAL else arch_options(arch, options)
