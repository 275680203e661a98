"""The caching architectures as architectures: DCD (Hu & Yang, ISCA 96) and VC-RAID (He & Yang).

The mechanisms are raidlab.engine.caches.dcd / vcraid / perdisk / mirror. What this module
declares is how a user names them: their options (names and defaults from the papers), the
member drives they need, and the checks that refuse an impossible configuration before any
drive is made.

How `--disks N` and `--disk-size S` map to member images (images/dK.img), chosen so that
S is always the size of one *data* member and the caches come in addition. --disk-model is
one model for every data member, or a comma-separated list with one model per data member
d0..d{N-1} in order (VC-RAID Table 1's four different SCSI drives; a cache disk's model is
cache_model, default the first data member's):

    dcd    cache=physical (Fig. 1)  N = 1: d0 data disk (S, --disk-model),
                                            d1 cache-disk (cache_size, cache_model)
           cache=logical  (Fig. 2)  N = 1: d0 one drive of cache_size + S; the log is its
                                            first cache_size bytes (§4: the first 80,000
                                            sectors), the data disk the rest
    vcraid config=scd  (Fig. 1a)    N >= 3 raid5 disks d0..d{N-1} (S each), and
                                            d{N} the dedicated cache disk (cache_size, cache_model)
           config=mcd  (Fig. 1b)    N >= 3 drives; the first `cache_disks` (default 2, as in
                                            the paper) hold one cache partition each of
                                            cache_size / cache_disks after their S bytes of raid5
           config=mcd, cache_models=[m0, m1, ...] (§4.1: "two logical partitions, one from
                                            each of the IDE disks"): N >= 3 raid5 disks
                                            d0..d{N-1} (S each, no cache on them) and one cache
                                            drive per listed model, d{N}, d{N+1}, ..., each
                                            holding one partition of cache_size / len(cache_models);
                                            served and assembled like scd's cache disk
           config=scd, mirrored_cache=on (§3.4): also d{N+1}, the backup cache disk written in
                                            parallel (raidlab.engine.caches.mirror)
           config=1c|1d (Fig. 1c/1d)       N >= 3 data disks d0..d{N-1} (S each) and N cache
                                            disks d{N}..d{2N-1} (cache_size / N each, cache_model);
                                            1d splits the RAM buffer evenly too
                                            (raidlab.engine.caches.perdisk)

Arch options (-o), named after the papers:
    dcd:    cache=physical|logical, report=immediate|after-complete (§2.4), ram_buffer (512K),
            cache_size (80,000 x 256 B, §4), idle_threshold (0.05 s or 50ms, §2.3),
            destage=on|off (§4.3), destage_segment (128K), large_write (64K, §2.1),
            cache_model (physical only; default: --disk-model, its first model if a list)
    vcraid: config=scd|mcd|1c|1d, ram_buffer (4M), cache_size (200M in total), block_size (1K; an
            ext4 block size: 1K, 2K or 4K), level1_write (64K), destage_segment (64K, level 2),
            idle_threshold (0.05 s), destage=on|off, cache_model (scd, 1c, 1d), cache_disks (mcd),
            cache_models (mcd: a list of catalog models, one separate cache drive each; on the
            command line m0,m1; cache_disks is then the list's length), mirrored_cache=on|off
            (scd only)
    The same names and defaults serve `raidlab create` and `raidlab sim`, so a scenario's
    options mean the same live and in virtual time.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from raidlab.archs.base import Architecture, Config, Option
from raidlab.blockdev import SECTOR
from raidlab.disks import catalog
from raidlab.engine import build as engine_build
from raidlab.engine.caches.dcd import check_dcd_config
from raidlab.engine.caches.perdisk import check_perdisk_config
from raidlab.engine.caches.vcraid import check_vcraid_config
from raidlab.engine.layouts import create_layout
from raidlab.engine.metadata import DEFAULT_DATA_OFFSET
from raidlab.errors import UsageError
from raidlab.units import parse_duration, parse_size

KiB, MiB = 1024, 1 << 20
EXT4_BLOCK_SIZES = (1024, 2048, 4096)  # ext4 mounts only block sizes up to the 4 KiB page

# One set of option names and defaults for `raidlab create` and `raidlab sim`.
DCD_CACHE_SIZE = 80_000 * 256  # DCD §4: the first 80,000 (256-byte, Table 1) sectors, "20 MB"
DESTAGE_OFF_THRESHOLD = 1e9    # destage=off (DCD §4.3, Table 4): an idle period never comes
DCD_OPTIONS: dict[str, Any] = dict(cache="physical", report="immediate", ram_buffer=512 * KiB,
                                   cache_size=DCD_CACHE_SIZE, idle_threshold=0.050, destage="on",
                                   destage_segment=128 * KiB, large_write=64 * KiB, cache_model=None)
VCRAID_OPTIONS: dict[str, Any] = dict(config="scd", ram_buffer=4 * MiB, cache_size=200 * MiB,
                                      block_size=1 * KiB, level1_write=64 * KiB, destage_segment=64 * KiB,
                                      idle_threshold=0.050, destage="on", cache_model=None, cache_disks=2,
                                      cache_models=None, mirrored_cache="off")
SIZE_OPTIONS = {"ram_buffer", "cache_size", "destage_segment", "large_write", "block_size",
                "level1_write"}
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
    out["idle_threshold"] = _seconds(out["idle_threshold"])
    if out["destage"] not in ("on", "off"):
        raise UsageError(f"option destage={out['destage']} is neither on nor off")
    if arch == "vcraid":
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


def plan_members(arch: str, disks: int, disk_size: int, disk_model: str, options: dict[str, Any]
                 ) -> list[tuple[str, int]]:
    """(model, size) of each member image d0, d1, ... (module doc); raises UsageError."""
    opts = arch_options(arch, options)
    if arch == "dcd" and disks != 1:
        raise UsageError(f"dcd has one data disk, not {disks}",
                         hint="use --disks 1 (the cache-disk comes with -o cache=physical|logical)")
    # The data members' models: one for all, or one per member ("m0,m1,...").
    models = catalog.member_models(disk_model, disks)
    cache_model = opts["cache_model"] or models[0]
    catalog.get(cache_model)
    if arch == "dcd":
        if opts["cache"] == "physical":
            return [(models[0], disk_size), (cache_model, opts["cache_size"])]
        if opts["cache"] == "logical":
            if opts["cache_model"] is not None:
                raise UsageError("a logical DCD's cache-disk is part of the data drive: it has no cache_model",
                                 hint="use -o cache=physical for a separate cache-disk")
            return [(models[0], opts["cache_size"] + disk_size)]
        raise UsageError(f"unknown DCD cache {opts['cache']!r}", hint="use cache=physical or cache=logical")
    config = opts["config"]
    if config == "scd":
        caches = 2 if opts["mirrored_cache"] == "on" else 1  # the cache disk and its backup (§3.4)
        return [(m, disk_size) for m in models] + [(cache_model, opts["cache_size"])] * caches
    if opts["mirrored_cache"] == "on":
        raise UsageError(f"a mirrored cache disk is built for config=scd only, not {config}",
                         hint="use -o config=scd -o mirrored_cache=on")
    if config in PER_DISK:
        return [(m, disk_size) for m in models] + [(cache_model, mcd_partition(opts["cache_size"], disks))] * disks
    if config == "mcd":
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
        if opts["cache_models"] is not None:  # separate cache drives d{N}.., as scd's cache disk
            for name in opts["cache_models"]:
                catalog.get(name)
            return [(m, disk_size) for m in models] + [(name, part) for name in opts["cache_models"]]
        if k > disks:
            raise UsageError(f"mcd cannot put cache partitions on {k} disks of {disks}",
                             hint=f"use cache_disks of 2..{disks}, or separate cache drives with "
                                  "cache_models=m0,m1,...")
        return [(m, disk_size + (part if i < k else 0)) for i, m in enumerate(models)]
    raise UsageError(f"unknown VC-RAID configuration {config!r}", hint="use config=scd, mcd, 1c or 1d")


def mcd_partition(cache_size: int, k: int) -> int:
    return cache_size // k // SECTOR * SECTOR


def check_configuration(arch: str, disks: int, disk_size: int, chunk: int, options: dict) -> None:
    """Refuse an impossible DCD or VC-RAID configuration (UsageError, one line); start nothing."""
    members = plan_members(arch, disks, disk_size, "none", options)
    opts = arch_options(arch, options)
    if arch == "dcd":
        check_dcd_config(opts["cache_size"], ram_buffer=opts["ram_buffer"], report=opts["report"],
                         idle_threshold=idle_threshold_of(opts), destage_segment=opts["destage_segment"],
                         large_write=opts["large_write"])
        return
    if opts["block_size"] not in EXT4_BLOCK_SIZES:
        raise UsageError(f"block size {opts['block_size']} is not one ext4 uses on this machine",
                         hint="use block_size=1K (the paper's), 2K or 4K")
    if opts["config"] in PER_DISK:
        def fake(size, k):
            return SimpleNamespace(size=size, name=f"d{k}")

        check_perdisk_config(
            opts["config"], [fake(disk_size, k) for k in range(disks)],
            [fake(size, disks + k) for k, (_, size) in enumerate(members[disks:])],
            block_size=opts["block_size"], ram_buffer=opts["ram_buffer"], level1_write=opts["level1_write"],
            destage_segment=opts["destage_segment"], idle_threshold=idle_threshold_of(opts))
        caches = [size for _, size in members[disks:]]
    elif opts["config"] == "scd":
        caches = [opts["cache_size"]]
    else:
        caches = [mcd_partition(opts["cache_size"], opts["cache_disks"])] * opts["cache_disks"]
    check_vcraid_config(opts["config"], caches, block_size=opts["block_size"], ram_buffer=opts["ram_buffer"],
                        level1_write=opts["level1_write"], destage_segment=opts["destage_segment"],
                        idle_threshold=idle_threshold_of(opts))
    engine_build.check_geometry("raid5", disks, disk_size, chunk, {})
    layout = create_layout("raid5", n_disks=disks, disk_size=disk_size, chunk_bytes=chunk,
                           data_offset=DEFAULT_DATA_OFFSET)
    if layout.capacity % opts["block_size"]:
        raise UsageError(f"the raid5's capacity {layout.capacity} is not a multiple of the block size "
                         f"{opts['block_size']}", hint="use a chunk that is a multiple of the block size")
    assert all(size % SECTOR == 0 for _, size in members)


def reserved_ram(arch: str, options: dict[str, Any]) -> int:
    """RAM the paper's machine gave this architecture out of its own: VC-RAID's RAM buffer,
    reserved at boot (§3.1; §4.3.1: 'if the RAM buffer is too large, the remaining system RAM
    used for regular file system becomes small'). Here the buffer lives in the array daemon on
    the host, so a lab VM with an available-memory target (RAIDLAB_VM_AVAILABLE_MIB) gives up
    the same amount instead. 0 for DCD (its buffer is the paper's NVRAM, not system RAM)."""
    if arch != "vcraid":
        return 0
    return arch_options(arch, options)["ram_buffer"]


def _check(config: Config, runner: str) -> None:
    check_configuration(config.arch, config.disks, config.disk_size, config.chunk, dict(config.options))


def _options(defaults: dict[str, Any]) -> tuple[Option, ...]:
    return tuple(Option(name, default) for name, default in defaults.items())


ARCHITECTURES = (
    Architecture(
        name="dcd", family="cache", summary="DCD: RAM buffer + log cache-disk in front of one data disk",
        source="Hu & Yang, DCD (ISCA 96) §2-4", options=_options(DCD_OPTIONS), check=_check),
    Architecture(
        name="vcraid", family="cache",
        summary="VC-RAID: raid5 behind a RAM buffer and cache disk(s) (scd, mcd, 1c, 1d)",
        source="He & Yang, VC-RAID §2-4", options=_options(VCRAID_OPTIONS), check=_check),
)


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


def dcd_volume_size(drive_bytes: int, options: dict[str, Any]) -> int:
    """The DCD's volume on a drive of `drive_bytes` when no --disk-size is given: the whole
    drive (physical), or what the logical cache-disk leaves of it (DCD §4)."""
    opts = sim_options("dcd", options)
    return drive_bytes if opts["cache"] == "physical" else drive_bytes - opts["cache_size"]
