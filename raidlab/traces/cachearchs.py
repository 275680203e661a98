"""Replay builders for the caching architectures: `raidlab sim --arch dcd|vcraid -o KEY=VALUE`.

Why here: the mechanisms live in raidlab.engine.caches (DCD, VC-RAID; another helper owns
them); what a *simulation* needs on top is how to lay them out on emulated drives the way
the papers' simulators did, and that is a replay concern. So this module only builds
(`create_dcd`, `create_vcraid`) and registers the builders with raidlab.traces.replay.

DCD layouts (Hu & Yang, ISCA 96, §3.2 and §4):

* `cache=physical` (Fig. 1): the cache-disk is a second drive of the same model ("the same
  disk parameters are used for both the cache-disk and the data disk except for the
  capacity difference"). We emulate it as a drive of the same model whose image covers only
  the first `cache_size` bytes (span "start"), so its seeks are those of a real C2200A that
  uses 20 MB, not of a whole drive squeezed into 20 MB. The data disk is a whole drive.
* `cache=logical` (Fig. 2): one drive; "we assign the first 80,000 sectors (20 MB) in a disk
  drive as the logical cache-disk and the remaining partition as the logical data disk"
  (§4). Two partitions of one EmulatedDisk share its queue and arm, as the paper's two
  logical disks do. The volume is then the remaining partition (capacity - cache_size).
* `cache_size` defaults to 80,000 of the C2200A's 256-byte sectors = 20,480,000 bytes (§4,
  Table 1); `ram_buffer` to 512 KB (§4).
* `report=immediate|after-complete` (§2.1, §2.4) is the DCD's own option.
* `destage=off` (§4.3, Table 4: "we deliberately disable the destage process"): the idle
  detector's threshold is set beyond any trace (1e9 s), so no idle destage ever starts. The
  DCD still destages when its log is full (raidlab.engine.caches.dcd: "an emulator must not
  stop"); the paper instead ran "shorter traces until the cache-disk is full". The result
  reports `forced_destages`, so a run where that happened can be recognised.

VC-RAID (He & Yang §2-3): a raid5 of `disks` drives behind a RAM buffer and a log cache disk
(`config=scd`: one separate drive of `cache_size`, laid out like the physical DCD cache-disk;
`config=mcd`: a `cache_size` partition at the start of every member drive, the raid5 over the
rest of each drive).

Values may be strings (from `-o KEY=VALUE`) or typed (from a scenario TOML file); sizes take
suffixes (512K, 20M). Unknown keys are a UsageError naming them.
"""

from __future__ import annotations

from typing import Any

import trio

from raidlab.blockdev import SECTOR
from raidlab.errors import UsageError

DCD_CACHE_SIZE = 80_000 * 256  # DCD §4: first 80,000 (256-byte, Table 1) sectors, "20 MB"
DCD_RAM_BUFFER = 512 * 1024  # DCD §4
DESTAGE_OFF_THRESHOLD = 1e9  # seconds: longer than any trace (see module doc)

DCD_OPTIONS = ("cache", "report", "destage", "ram_buffer", "cache_size", "idle_threshold",
               "destage_segment", "large_write")
VCRAID_OPTIONS = ("config", "cache_size", "ram_buffer", "block_size", "level1_write", "destage_segment",
                  "idle_threshold", "destage")


def _size(value: Any, key: str) -> int:
    if isinstance(value, bool):
        raise UsageError(f"option {key}={value!r} is not a size")
    if isinstance(value, int):
        if value <= 0 or value % SECTOR:
            raise UsageError(f"option {key}={value} is not a positive multiple of {SECTOR} bytes")
        return value
    from raidlab.export.serve import parse_size

    try:
        return parse_size(str(value))
    except UsageError as exc:
        raise UsageError(f"option {key}: {exc}") from None


def _seconds(value: Any, key: str) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"option {key}={value!r} is not a number of seconds") from None
    if not seconds > 0:
        raise UsageError(f"option {key}={value!r} must be positive")
    return seconds


def _choice(value: Any, key: str, choices: tuple[str, ...]) -> str:
    text = str(value).lower() if not isinstance(value, bool) else ("on" if value else "off")
    if text not in choices:
        raise UsageError(f"option {key}={value!r}: use one of {', '.join(choices)}")
    return text


def _check_keys(arch: str, options: dict[str, Any], known: tuple[str, ...]) -> None:
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise UsageError(f"unknown option(s) for --arch {arch}: {', '.join(unknown)}",
                         hint=f"known: {', '.join(known)}")


def dcd_settings(options: dict[str, Any]) -> dict[str, Any]:
    """Normalised DCD replay options (pure; raises UsageError naming a bad key)."""
    _check_keys("dcd", options, DCD_OPTIONS)
    out: dict[str, Any] = {
        "cache": _choice(options.get("cache", "physical"), "cache", ("physical", "logical")),
        "report": _choice(options.get("report", "immediate"), "report", ("immediate", "after-complete")),
        "destage": _choice(options.get("destage", "on"), "destage", ("on", "off")),
        "ram_buffer": _size(options.get("ram_buffer", DCD_RAM_BUFFER), "ram_buffer"),
        "cache_size": _size(options.get("cache_size", DCD_CACHE_SIZE), "cache_size"),
    }
    for key in ("destage_segment", "large_write"):
        if key in options:
            out[key] = _size(options[key], key)
    if "idle_threshold" in options:
        out["idle_threshold"] = _seconds(options["idle_threshold"], "idle_threshold")
    return out


def dcd_volume_size(drive_bytes: int, options: dict[str, Any]) -> int:
    """The DCD's volume size on a drive of `drive_bytes`: the whole drive (physical) or
    what the logical cache-disk leaves of it."""
    settings = dcd_settings(options)
    if settings["cache"] == "physical":
        return drive_bytes
    return drive_bytes - settings["cache_size"]


async def build_dcd(spec, nursery: trio.Nursery):
    from raidlab.disks.disk import EmulatedDisk
    from raidlab.engine.caches import create_dcd
    from raidlab.traces.replay import Built, DiscardBackend, MeteredTarget, member_disk_size

    if spec.disks not in (None, 1, 2):
        raise UsageError(f"architecture 'dcd' is a cache-disk and a data disk, --disks {spec.disks} makes no sense",
                         hint="drop --disks; choose -o cache=physical|logical")
    settings = dcd_settings(spec.options)
    drive = member_disk_size(spec)
    cache_size = settings["cache_size"]
    kwargs = {"ram_buffer": settings["ram_buffer"], "report": settings["report"]}
    for key in ("destage_segment", "large_write", "idle_threshold"):
        if key in settings:
            kwargs[key] = settings[key]
    if settings["destage"] == "off":
        kwargs["idle_threshold"] = DESTAGE_OFF_THRESHOLD
    extra: dict[str, Any] = {}
    if settings["cache"] == "physical":
        cache = EmulatedDisk("cache", spec.disk_model, DiscardBackend(cache_size), discipline=spec.discipline,
                             span="start")
        data = EmulatedDisk("data", spec.disk_model, DiscardBackend(drive), discipline=spec.discipline)
        cache.start(nursery)
        data.start(nursery)
        cache_target, data_target = MeteredTarget(cache), MeteredTarget(data)
    else:
        if cache_size >= drive:
            raise UsageError(f"logical cache-disk of {cache_size} bytes does not fit on a {drive}-byte drive")
        disk = _SharedDrive.make("drive", spec.disk_model, drive, spec.discipline)
        disk.start(nursery)
        cache_target = MeteredTarget(_PartitionWithBusy(disk.partition(0, cache_size, "cache")))
        data_target = MeteredTarget(_PartitionWithBusy(disk.partition(cache_size, drive - cache_size, "data")))
        extra["drive"] = disk
    dcd = await create_dcd("sim-dcd", cache_target, data_target, **kwargs)
    dcd.start(nursery)

    def statistics() -> dict[str, Any]:
        stats = dcd.statistics()
        stats.pop("cache_disk", None)  # reported per disk by the replay
        stats.pop("data_disk", None)
        stats["cache"] = settings["cache"]
        stats["destage"] = settings["destage"]
        if "drive" in extra:
            drive_stats = extra["drive"].statistics()
            stats["drive_busy_s"] = drive_stats["busy_time"]
            stats["drive_max_queue_length"] = drive_stats["max_queue_length"]
        return stats

    return Built(dcd, [cache_target, data_target], statistics)


class _SharedDrive:
    """Factory of an EmulatedDisk that also sums busy time per owner (partition), so the
    replay's per-disk utilisation of a logical cache-disk and its data partition means the
    same as for two physical drives. It hooks EmulatedDisk's accounting (`_service` sets the
    owner, `_account` is called synchronously inside it with the request's plan)."""

    @staticmethod
    def make(name, model, size, discipline):
        from raidlab.disks.disk import EmulatedDisk
        from raidlab.traces.replay import DiscardBackend

        class OwnerBusyDisk(EmulatedDisk):
            def __init__(self, *a, **kw):
                super().__init__(*a, **kw)
                self.owner_busy: dict[str, float] = {}
                self._owner = None

            async def _service(self, req):
                self._owner = req.owner.name
                await super()._service(req)

            def _account(self, plan):
                super()._account(plan)
                self.owner_busy[self._owner] = self.owner_busy.get(self._owner, 0.0) + plan.service

        return OwnerBusyDisk(name, model, DiscardBackend(size), discipline=discipline)


class _PartitionWithBusy:
    """A partition whose statistics() carry its share of the shared drive's busy time."""

    def __init__(self, partition) -> None:
        self.partition = partition
        self.name = partition.name
        self.read = partition.read
        self.write = partition.write
        self.flush = partition.flush
        self.trim = partition.trim

    @property
    def size(self) -> int:
        return self.partition.size

    @property
    def failed(self) -> bool:
        return self.partition.failed

    def statistics(self) -> dict[str, Any]:
        stats = self.partition.statistics()
        disk = self.partition.disk
        stats["busy_time"] = disk.owner_busy.get(self.name, 0.0)
        stats["max_queue_length"] = disk.statistics()["max_queue_length"]
        stats["mean_service_ms"] = (stats["busy_time"] / stats["ios"] * 1e3) if stats.get("ios") else 0.0
        return stats


def vcraid_settings(options: dict[str, Any]) -> dict[str, Any]:
    _check_keys("vcraid", options, VCRAID_OPTIONS)
    from raidlab.engine.caches.vcraid import DEFAULTS

    out: dict[str, Any] = {
        "config": _choice(options.get("config", "scd"), "config", ("scd", "mcd")),
        "cache_size": _size(options.get("cache_size", DCD_CACHE_SIZE), "cache_size"),
        "destage": _choice(options.get("destage", "on"), "destage", ("on", "off")),
    }
    for key in ("ram_buffer", "block_size", "level1_write", "destage_segment"):
        out[key] = _size(options.get(key, DEFAULTS[key]), key)
    out["idle_threshold"] = _seconds(options.get("idle_threshold", DEFAULTS["idle_threshold"]), "idle_threshold")
    return out


async def build_vcraid(spec, nursery: trio.Nursery):
    from raidlab.disks.disk import EmulatedDisk
    from raidlab.engine.caches import create_vcraid
    from raidlab.engine.metadata import DEFAULT_DATA_OFFSET
    from raidlab.traces.replay import Built, DiscardBackend, MeteredTarget, member_disk_size

    settings = vcraid_settings(spec.options)
    n = spec.disks or 4
    if n < 3:
        raise UsageError(f"vcraid's raid5 needs at least 3 disks, not {n}")
    chunk = spec.chunk or 64 * 1024
    drive = member_disk_size(spec)
    cache_size = settings["cache_size"]
    idle = DESTAGE_OFF_THRESHOLD if settings["destage"] == "off" else settings["idle_threshold"]

    def whole_chunks(size: int) -> int:
        return DEFAULT_DATA_OFFSET + (size - DEFAULT_DATA_OFFSET) // chunk * chunk

    if settings["config"] == "scd":
        cache = EmulatedDisk("cache", spec.disk_model, DiscardBackend(cache_size), discipline=spec.discipline,
                             span="start")
        cache.start(nursery)
        cache_targets = [MeteredTarget(cache)]
        members = []
        for index in range(n):
            disk = EmulatedDisk(f"d{index}", spec.disk_model, DiscardBackend(whole_chunks(drive)),
                                discipline=spec.discipline)
            disk.start(nursery)
            members.append(MeteredTarget(disk))
    else:
        cache_targets, members = [], []
        for index in range(n):
            disk = _SharedDrive.make(f"d{index}", spec.disk_model, drive, spec.discipline)
            disk.start(nursery)
            cache_targets.append(MeteredTarget(_PartitionWithBusy(disk.partition(0, cache_size, f"c{index}"))))
            members.append(MeteredTarget(_PartitionWithBusy(
                disk.partition(cache_size, whole_chunks(drive - cache_size), f"d{index}"))))
    vc = await create_vcraid("sim-vcraid", members, cache_targets, config=settings["config"],
                             block_size=settings["block_size"], ram_buffer=settings["ram_buffer"],
                             level1_write=settings["level1_write"], destage_segment=settings["destage_segment"],
                             idle_threshold=idle, chunk=chunk)
    vc.start(nursery)

    def statistics() -> dict[str, Any]:
        stats = vc.statistics()
        for key in ("array", "cache_disks", "members"):
            stats.pop(key, None)  # members are reported per disk by the replay
        stats["destage"] = settings["destage"]
        return stats

    return Built(vc, cache_targets + members, statistics)


def register() -> None:
    from raidlab.traces.replay import register_arch

    register_arch("dcd", build_dcd)
    register_arch("vcraid", build_vcraid)
