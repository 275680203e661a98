"""The caching family's host in the array daemon: DCD (Hu & Yang, ISCA 96) and VC-RAID (He &
Yang) served live as the FUSE file `volume` and a loop device, like the engine arrays.

Why a host of its own: the mechanisms (raidlab.engine.caches.dcd / vcraid) are BlockTargets
over *several kinds* of disk — a data disk or a raid5 behind, a cache disk or partitions in
front, each possibly a different drive model (VC-RAID Table 1 puts an IDE cache disk beside
SCSI array disks) — and they need their background tasks (log writer, idle detector,
destage) started in the daemon's nursery, a drain on a clean stop, and crash recovery on
`assemble`. This module maps `raidlab create --arch dcd|vcraid --disks N -o KEY=VALUE` to
member images, builds or assembles the mechanism, and answers `status` and `bypass`.

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
    The names and defaults are those of `raidlab sim` (raidlab.traces.cachearchs), so a
    scenario's options mean the same in both.

Not built (refused with one line): a mirrored cache for mcd/1c/1d, failure injection for
1c/1d; the DCD's NVRAM RAM buffer. `raidlab fail` works on every drive (refusing,
unless forced, a failure that loses data); `replace` of a cache drive is not built.

Durability as the volume's user sees it: a flush (ext4's journal commits, fsync) returns
only when every write acknowledged before it is on a cache disk or home (the mechanisms'
flush), and the member disks write through to their images, so a SIGKILL of this daemon
loses nothing that was flushed. `assemble` is crash recovery: DCD rebuilds its mapping from
the summary sectors (§2.5); VC-RAID writes every logged block to the raid5 first (§3.4).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raidlab.errors import UsageError

KiB, MiB = 1024, 1 << 20
EXT4_BLOCK_SIZES = (1024, 2048, 4096)  # ext4 mounts only block sizes up to the 4 KiB page

# Option names and defaults as in `raidlab sim` (raidlab.traces.cachearchs), so one scenario's
# options mean the same live and in virtual time.
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
    from raidlab.export.serve import parse_size

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
    text = str(value).strip().lower()
    scale = 1e-3 if text.endswith("ms") else 1.0
    try:
        seconds = float(text.removesuffix("ms").removesuffix("s")) * scale
    except ValueError:
        raise UsageError(f"option idle_threshold={value} is not a time", hint="write it like 0.05 or 50ms") from None
    if seconds <= 0:
        raise UsageError(f"option idle_threshold={value} must be positive")
    return seconds


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
    from raidlab.disks import catalog

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
        return [(m, disk_size) for m in models] + [(cache_model, _mcd_partition(opts["cache_size"], disks))] * disks
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
        part = _mcd_partition(opts["cache_size"], k)
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


def _mcd_partition(cache_size: int, k: int) -> int:
    from raidlab.blockdev import SECTOR

    return cache_size // k // SECTOR * SECTOR


class CacheHost:
    family = "cache"

    @classmethod
    def archs(cls) -> list[str]:
        return ["dcd", "vcraid"]

    @classmethod
    def validate(cls, arch: str, disks: int, disk_size: int, chunk: int, options: dict) -> None:
        from raidlab.blockdev import SECTOR
        from raidlab.engine.caches.dcd import check_dcd_config
        from raidlab.engine.caches.vcraid import check_vcraid_config

        members = plan_members(arch, disks, disk_size, "none", options)
        opts = arch_options(arch, options)
        if arch == "dcd":
            check_dcd_config(opts["cache_size"], ram_buffer=opts["ram_buffer"], report=opts["report"],
                             idle_threshold=idle_threshold_of(opts), destage_segment=opts["destage_segment"],
                             large_write=opts["large_write"])
            return
        from raidlab.service.hosts.engine import EngineHost
        from raidlab.engine.layouts import create_layout
        from raidlab.engine.metadata import DEFAULT_DATA_OFFSET

        if opts["block_size"] not in EXT4_BLOCK_SIZES:
            raise UsageError(f"block size {opts['block_size']} is not one ext4 uses on this machine",
                             hint="use block_size=1K (the paper's), 2K or 4K")
        if opts["config"] in PER_DISK:
            from types import SimpleNamespace

            from raidlab.engine.caches.perdisk import check_perdisk_config

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
            caches = [_mcd_partition(opts["cache_size"], opts["cache_disks"])] * opts["cache_disks"]
        check_vcraid_config(opts["config"], caches, block_size=opts["block_size"], ram_buffer=opts["ram_buffer"],
                            level1_write=opts["level1_write"], destage_segment=opts["destage_segment"],
                            idle_threshold=idle_threshold_of(opts))
        EngineHost.validate("raid5", disks, disk_size, chunk, {})
        layout = create_layout("raid5", n_disks=disks, disk_size=disk_size, chunk_bytes=chunk,
                               data_offset=DEFAULT_DATA_OFFSET)
        if layout.capacity % opts["block_size"]:
            raise UsageError(f"the raid5's capacity {layout.capacity} is not a multiple of the block size "
                             f"{opts['block_size']}", hint="use a chunk that is a multiple of the block size")
        assert all(size % SECTOR == 0 for _, size in members)

    def __init__(self, daemon):
        self.daemon = daemon
        self.spec = daemon.spec
        self.options = arch_options(self.spec.arch, self.spec.options)
        self.target = None          # the DCD or VCRAID
        self.drives: list = []      # the EmulatedDisks, one per image
        self.volume_path: Path | None = None
        self.recovered: dict[str, Any] = {}
        self.mirror = None          # MirroredCacheDisk of scd with mirrored_cache=on
        self.caches: list = []      # the cache disks as drives or partitions (cache_placement)
        self.session = None

    # ------------------------------------------------------------------ build / assemble

    async def open(self, session, mode: str) -> dict:
        from raidlab.export import attach_loop, block_export, mount_export
        from raidlab.export.serve import ServeRequest, build_disks

        spec, status = self.spec, self.daemon.status
        self.session = session
        members = plan_members(spec.arch, spec.disks, spec.disk_size, spec.disk_model, spec.options)
        fs = block_export(spec.runner)
        req = ServeRequest(disks=len(members), model=spec.disk_model, size=spec.disk_size, name=spec.name,
                           discipline=spec.discipline, keep_images=True, home=self.daemon.home,
                           members=members)
        made = await build_disks(session, fs, req)
        self.drives = [disk for _relpath, disk, _image in made]
        if spec.arch == "dcd":
            await self._open_dcd(mode, status)
        else:
            await self._open_vcraid(mode, status)
        self.target.start(session.nursery)
        fs.add("volume", self.target)
        self.fs = fs  # the daemon's op_capture swaps the served target for a recording one

        async def drain():
            # A clean stop: the RAM buffer goes to the cache disk(s) (what a flush does), so
            # `assemble` finds every write; the raid5 under VC-RAID records a clean stop.
            await self.target.flush()
            note = "RAM buffer flushed to the cache disk"
            if spec.arch == "vcraid":
                keeper = self.target.keeper
                await keeper.mark_clean(self.target.array.failed)
                note += f"; raid5 generation {keeper.superblock.generation}, state clean"
            return note

        session.push(f"{spec.arch} RAM buffer", drain)
        export = await mount_export(session, fs)
        self.volume_path = export.mountpoint / "volume"
        device = None
        if spec.runner == "native":
            device = (await attach_loop(session, export, "volume")).device
        return {"device": device, "volume": str(self.volume_path), "capacity": self.target.size,
                "state": self._state(), "recovered": self.recovered}

    async def _open_dcd(self, mode: str, status) -> None:
        from raidlab.engine.caches import assemble_dcd, create_dcd

        spec, opts = self.spec, self.options
        if opts["cache"] == "physical":
            data_disk, cache_disk = self.drives[0], self.drives[1]
        else:
            drive = self.drives[0]
            cache_disk = drive.partition(0, opts["cache_size"], name="d0-cache")
            data_disk = drive.partition(opts["cache_size"], spec.disk_size, name="d0-data")
        self.caches = [cache_disk]
        if mode == "create":
            status(f"creating a {opts['cache']} DCD, report {opts['report']}")
            self.target = await create_dcd(
                spec.name, cache_disk, data_disk, ram_buffer=opts["ram_buffer"], report=opts["report"],
                idle_threshold=idle_threshold_of(opts), destage_segment=opts["destage_segment"],
                large_write=opts["large_write"])
        else:
            status("assembling the DCD: scanning the cache-disk log (§2.5)")
            self.target = await assemble_dcd(cache_disk, data_disk, report=opts["report"])
            stats = self.target.statistics()
            self.recovered = {"log_records": stats["log_records"], "blocks": stats["cache_disk_blocks_mapped"]}
            status(f"recovered {stats['log_records']} log records mapping {stats['cache_disk_blocks_mapped']} sectors")

    async def _open_vcraid(self, mode: str, status) -> None:
        from raidlab.engine.caches import assemble_vcraid, create_vcraid

        spec, opts = self.spec, self.options
        n = spec.disks
        if opts["config"] in PER_DISK:
            from raidlab.engine.caches.perdisk import assemble_perdisk, create_perdisk

            data, caches = self.drives[:n], self.drives[n:]
            self.caches = list(caches)
            if mode == "create":
                status(f"creating VC-RAID {opts['config']}: raid5 over {n} disks, each with its own cache disk")
                self.target = await create_perdisk(
                    spec.name, opts["config"], data, caches, nursery=self.session.nursery,
                    block_size=opts["block_size"], ram_buffer=opts["ram_buffer"], level1_write=opts["level1_write"],
                    destage_segment=opts["destage_segment"], idle_threshold=idle_threshold_of(opts), chunk=spec.chunk)
            else:
                status("assembling VC-RAID: writing each cache disk's blocks to its data disk (§3.4)")
                self.target = await assemble_perdisk(data, caches, nursery=self.session.nursery)
                self.recovered = {"blocks": self.target.statistics()["recovered_blocks"]}
                status(f"recovered {self.recovered['blocks']} blocks from the cache disks")
            return
        if opts["config"] == "scd" and opts["mirrored_cache"] == "on":
            from raidlab.engine.caches.mirror import MirroredCacheDisk

            array_members = self.drives[:n]
            make = MirroredCacheDisk.create if mode == "create" else MirroredCacheDisk.assemble
            self.mirror = await make("cache-mirror", self.drives[n], self.drives[n + 1])
            cache_disks = [self.mirror]
        elif opts["config"] == "scd" or opts["cache_models"] is not None:
            # scd's cache disk d{N}, or mcd's separate cache drives d{N}.. (cache_models)
            array_members, cache_disks = self.drives[:n], self.drives[n:]
        else:
            k = opts["cache_disks"]
            part = _mcd_partition(opts["cache_size"], k)
            array_members = [d.partition(0, spec.disk_size, name=f"{d.name}-array") if i < k else d
                             for i, d in enumerate(self.drives)]
            cache_disks = [self.drives[i].partition(spec.disk_size, part, name=f"d{i}-cache") for i in range(k)]
        self.caches = [self.drives[n], self.drives[n + 1]] if self.mirror is not None else list(cache_disks)
        if mode == "create":
            status(f"creating VC-RAID {opts['config']}: raid5 over {n} disks, {len(cache_disks)} cache disk(s)")
            self.target = await create_vcraid(
                spec.name, array_members, cache_disks, config=opts["config"], block_size=opts["block_size"],
                ram_buffer=opts["ram_buffer"], level1_write=opts["level1_write"],
                destage_segment=opts["destage_segment"], idle_threshold=idle_threshold_of(opts), chunk=spec.chunk)
        else:
            status("assembling VC-RAID: writing the cache disks' blocks to the raid5 (§3.4)")
            self.target = await assemble_vcraid(array_members, cache_disks)
            self.recovered = {"blocks": self.target.statistics()["recovered_blocks"]}
            status(f"recovered {self.recovered['blocks']} blocks from the cache disks")

    def _state(self) -> str:
        if self.spec.arch == "vcraid":
            if self.mirror is not None and self.mirror.failed:
                return f"{self.target.array.state}, cache mirror degraded"
            return self.target.array.state
        return "bypass" if self.target.bypass else "caching"

    def cache_placement(self) -> list[dict[str, Any]]:
        """Which drive holds which cache: a whole drive (scd's cache disk and its backup,
        mcd's cache_models drives, 1c/1d's, a physical DCD's) or a partition of one (mcd's
        partitions on the array drives, a logical DCD's log)."""
        from raidlab.disks.disk import Partition

        out = []
        for cache in self.caches:
            drive = cache.disk if isinstance(cache, Partition) else cache
            out.append({"cache": cache.name, "drive": drive.name, "model": drive.model.name, "bytes": cache.size,
                        "offset": cache.start if isinstance(cache, Partition) else 0,
                        "whole_drive": not isinstance(cache, Partition)})
        return out

    def vm_disks(self) -> list[Path]:
        return [self.volume_path]

    def guest_ram_reserved(self) -> int:
        """Bytes of the lab VM's available memory this architecture gives up (see
        reserved_ram)."""
        return reserved_ram(self.spec.arch, self.options)

    # ------------------------------------------------------------------ ops

    async def op_status(self, request, send) -> dict:
        stats = self.target.statistics()
        report = dcd_report(stats, self.options) if self.spec.arch == "dcd" else vcraid_report(stats, self.options)
        if self.mirror is not None:
            m = self.mirror.statistics()
            sides = ", ".join(f"{label} d{self.spec.disks + i} {'[red]failed[/]' if i in self.mirror.failed else 'ok'}"
                              for i, label in enumerate(("primary", "backup")))
            report.append(f"mirrored cache disk (§3.4): {sides}; {m['mirrored_writes']} mirrored writes, "
                          f"{m['reads_from_backup']} reads from the backup")
        placement = self.cache_placement()
        report.append(placement_line(placement))
        return {
            "kind": "cache",
            "state": self._state(),
            "options": self.options,
            "recovered_at_assemble": self.recovered,
            "statistics": stats,
            "report": report,
            "cache_placement": placement,
            "tables": [disks_table(self.drives)],
            "timeline": [[round(t, 6), event, detail] for t, event, detail in list(self.target.timeline)[-50:]],
        }

    async def op_fail(self, request, send) -> dict:
        """Make drive dK fail (EIO from now on). Refused (unless forced) when data would be
        lost: a DCD drive, an unmirrored cache disk, a raid5 member the array cannot lose."""
        index, force = int(request["disk"]), bool(request.get("force"))
        name, arch = self.spec.name, self.spec.arch
        if not 0 <= index < len(self.drives):
            raise UsageError(f"no drive {index}: {name} has drives 0..{len(self.drives) - 1}")
        drive = self.drives[index]
        if drive.failed:
            raise UsageError(f"drive {index} of {name} has already failed")
        n = self.spec.disks
        if self.mirror is not None and index in (n, n + 1):
            drive.failed = True
            await self.mirror.fail_side(index - n)
            return {"failed_drive": index, "mirror_failed_sides": sorted(self.mirror.failed),
                    "failed_members": self._failed_drives(), "state": self._state()}
        if arch == "vcraid" and self.options["config"] in PER_DISK:
            raise UsageError(f"failure injection is not built for VC-RAID {self.options['config']}",
                             hint="use config=scd or mcd")
        if arch == "vcraid" and index < n:
            array = self.target.array
            holds_cache = (self.options["config"] == "mcd" and self.options["cache_models"] is None
                           and index < self.options["cache_disks"])
            if (not array.layout.survives(array.failed | {index}) or holds_cache) and not force:
                why = "holds a cache partition" if holds_cache else "is one the raid5 cannot lose"
                raise UsageError(f"drive {index} of {name} {why}: failing it would lose data",
                                 hint="use --force to inject the failure anyway")
            drive.failed = True
            await array.fail_member(index)
            return {"failed_drive": index, "raid5_failed_members": sorted(array.failed),
                    "failed_members": self._failed_drives(), "state": self._state()}
        if not force:
            what = "a DCD has no redundancy" if arch == "dcd" else "its cache disk is not mirrored"
            raise UsageError(f"{name}: {what}: failing drive {index} would lose data",
                             hint="use --force to inject the failure anyway (or -o mirrored_cache=on)")
        drive.failed = True
        return {"failed_drive": index, "failed_members": self._failed_drives(), "state": self._state()}

    def _failed_drives(self) -> list[int]:
        """Drives (images dK) failed in this run; `raidlab fail` reports them as members."""
        return [i for i, d in enumerate(self.drives) if d.failed]

    async def op_bypass(self, request, send) -> dict:
        """DCD §3.1: turn the DCD into a plain disk (after draining) or back into a DCD."""
        if self.spec.arch != "dcd":
            raise UsageError(f"{self.spec.name} is a {self.spec.arch}: only a DCD has a bypass mode")
        on = bool(request.get("on", True))
        before = self.target.statistics()
        await self.target.set_bypass(on)
        after = self.target.statistics()
        return {"bypass": self.target.bypass, "state": self._state(),
                "drained_bytes": after["destaged_bytes"] - before["destaged_bytes"]}


# ---------------------------------------------------------------------- status text (pure)


def _kib(n: int) -> str:
    return f"{n / KiB:.0f} KiB" if n < 10 * MiB else f"{n / MiB:.1f} MiB"


def _pct(used: int, total: int) -> str:
    return f"{100 * used / total:.1f}%" if total else "-"


def dcd_report(s: dict[str, Any], opts: dict[str, Any]) -> list[str]:
    """`raidlab status` lines for a DCD (statistics of DCD.statistics())."""
    return [
        f"DCD ({opts['cache']}), report {s['report']}, {'[bold]bypass[/]' if s['bypass'] else 'caching'}; "
        f"idle threshold {opts['idle_threshold'] * 1000:g} ms, destage {opts['destage']}, large writes > {_kib(opts['large_write'])} go to the data disk",
        f"RAM buffer: {_kib(s['ram_used_bytes'])} of {_kib(s['ram_buffer_bytes'])} "
        f"({_pct(s['ram_used_bytes'], s['ram_buffer_bytes'])}); cache-disk log: {_kib(s['cache_disk_used_bytes'])} "
        f"of {_kib(s['cache_disk_bytes'])} ({_pct(s['cache_disk_used_bytes'], s['cache_disk_bytes'])}), "
        f"{s['log_records']} records, {s['cache_disk_blocks_mapped']} sectors mapped",
        f"reads {s['reads']} ({_kib(s['bytes_read'])}); sectors read from RAM {s['read_hits_ram_sectors']}, "
        f"cache-disk {s['read_hits_cache_disk_sectors']}, data disk {s['read_hits_data_disk_sectors']}",
        f"writes {s['writes']} ({_kib(s['bytes_written'])}), flushes {s['flushes']}; large writes to the data disk "
        f"{s['large_writes_to_data_disk']}; log writes {s['log_writes']} ({_kib(s['log_write_bytes'])}); "
        f"waited for a full RAM buffer {s['waited_for_full_buffer']}",
        f"destage (LWFD): {s['destages']} segments ({_kib(s['destaged_bytes'])}), holes dropped "
        f"{s['destage_holes_dropped']}, suspended {s['destages_suspended']}, forced {s['forced_destages']}; "
        f"idle periods found {s['idle_periods_found']}; tombstones {s['tombstones']}; "
        f"recovered at assemble {s['recovered_blocks']} blocks",
    ]


def vcraid_report(s: dict[str, Any], opts: dict[str, Any]) -> list[str]:
    """`raidlab status` lines for a VC-RAID (statistics of VCRAID.statistics())."""
    per_disk = ", ".join(_kib(u) for u in s["cache_disk_used_per_disk"])
    n_caches = len(s["cache_disk_used_per_disk"])
    if s["config"] in PER_DISK:  # the caches sit below the raid5: they count its member requests
        shape = (f"raid5 ({s['array']['state']}) over {n_caches} per-disk caches "
                 + ("sharing one RAM buffer" if s["config"] == "1c" else "with private RAM buffers")
                 + " (counts below are the raid5's requests to its members)")
    else:
        shape = f"raid5 ({s['array']['state']}) behind a RAM buffer and {n_caches} cache disk(s)"
    return [
        f"VC-RAID {s['config']}: {shape}; block {s['block_size']} B, "
        f"idle threshold {opts['idle_threshold'] * 1000:g} ms, destage {opts['destage']}, level-2 segment {_kib(opts['destage_segment'])}",
        f"RAM buffer: {_kib(s['ram_used_bytes'])} of {_kib(s['ram_buffer_bytes'])} "
        f"({_pct(s['ram_used_bytes'], s['ram_buffer_bytes'])}), {s['ram_dirty_blocks']} dirty blocks; "
        f"cache disks: {_kib(s['cache_disk_used_bytes'])} of {_kib(s['cache_disk_bytes'])} "
        f"({_pct(s['cache_disk_used_bytes'], s['cache_disk_bytes'])}; per disk {per_disk}), "
        f"{s['cache_disk_blocks_mapped']} blocks mapped",
        f"reads {s['reads']} ({_kib(s['bytes_read'])}); blocks read from RAM {s['read_hits_ram_blocks']}, "
        f"cache disk {s['read_hits_cache_disk_blocks']}, array {s['read_hits_array_blocks']}",
        f"writes {s['writes']} ({_kib(s['bytes_written'])}), synchronous {s['sync_writes']}, flushes "
        f"{s['flushes']}, partial-block {s['partial_block_writes']}; waited for a full RAM buffer "
        f"{s['waited_for_full_buffer']}",
        f"level-1 destage: {s['level1_destages']} log writes ({_kib(s['level1_bytes'])}), per cache disk "
        f"{'/'.join(str(n) for n in s['level1_per_disk'])}; level-2 destage: {s['level2_destages']} segments ({_kib(s['level2_bytes'])}), "
        f"holes dropped {s['level2_holes_dropped']}, suspended {s['level2_suspended']}, forced {s['level2_forced']}; "
        f"idle periods found {s['idle_periods_found']}; recovered at assemble {s['recovered_blocks']} blocks",
    ]


def reserved_ram(arch: str, options: dict[str, Any]) -> int:
    """RAM the paper's machine gave this architecture out of its own: VC-RAID's RAM buffer,
    reserved at boot (§3.1; §4.3.1: 'if the RAM buffer is too large, the remaining system RAM
    used for regular file system becomes small'). Here the buffer lives in the array daemon on
    the host, so a lab VM with an available-memory target (RAIDLAB_VM_AVAILABLE_MIB) gives up
    the same amount instead. 0 for DCD (its buffer is the paper's NVRAM, not system RAM)."""
    if arch != "vcraid":
        return 0
    return arch_options(arch, options)["ram_buffer"]


def placement_line(placement: list[dict[str, Any]]) -> str:
    """`raidlab status`: where each cache is, e.g. "cache drives: d4 (maxtor-91366u4, 100.0 MiB), ..."
    or "cache partitions: d0-cache on d0 (ibm-dnes-318350) at 1024.0 MiB, 100.0 MiB, ..."."""
    parts = []
    for p in placement:
        if p["whole_drive"]:
            parts.append(f"{p['drive']} ({p['model']}, {_kib(p['bytes'])})")
        else:
            parts.append(f"{p['cache']} on {p['drive']} ({p['model']}) at {_kib(p['offset'])}, {_kib(p['bytes'])}")
    whole = all(p["whole_drive"] for p in placement)
    return ("cache drives: " if whole else "cache partitions: ") + ", ".join(parts)


def disks_table(drives: list) -> dict[str, Any]:
    rows = []
    for d in drives:
        st = d.statistics()
        rows.append([st["name"], st["model"], st["size"] >> 20, st["reads"], st["writes"], st["flushes"],
                     st["bytes_read"] >> 10, st["bytes_written"] >> 10, f"{st['busy_time']:.3f}"])
    return {"title": "drives", "columns": ["drive", "model", "MiB", "reads", "writes", "flushes", "KiB read",
                                           "KiB written", "busy s"], "rows": rows}
