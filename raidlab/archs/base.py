"""What an architecture declares, and what its builder receives and returns.

An `Architecture` is the one place that says, for one id (`raid5`, `dcd`, `md-raid5`, ...):
its family, its options with their defaults, how to refuse an impossible configuration
before anything starts (`check`), which member drives it needs (`plan`), and how to build
or assemble it over those drives (`build`). Every command reads it: `raidlab create` and
the array daemon (live), `raidlab sim` and sim scenarios (virtual time), scenario loading,
`raidlab crashtest`, `raidlab doctor`.

One builder for both clocks: the caller makes the member drives that `plan` asks for
(live: image files served through the lab's FUSE mount; virtual: drives that keep no data)
and hands them to `build` with the clock's name. The builder is async code over those
drives (time and synchronisation from raidlab.sched), so the same mechanism runs under
trio's real clock and in virtual time. Where the
papers' simulators laid a drive out differently from a live lab (a cache disk that uses the
first bytes of its drive, per-partition busy time), `plan` and `build` see the clock and say
so in their docstrings.

Beyond building it, a declaration says what the rest of raidlab needs to know of the
architecture, so no other module compares its id: its `Family` (the service host that serves
it live and the `raidlab doctor` runners it needs), what it contributes to the campaigns
(`CrashPreset`, `FaultCell`, `DamageTarget`, `WriteHoleCase`), what `raidlab faulttest` may
fail (`drive_role`, `check_faults`), whether a flush is on the media (`flush_on_media`), its
replay metrics (`sim_metrics`), its column of the RAID-x paper's Table 3 (`Peaks`), and
what its family's live host asks of it (`serving`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from raidlab.errors import UsageError

LIVE, VIRTUAL = "live", "virtual"
RUNNERS = ("native", "vm", "sim")  # where an architecture can run: two live runners, virtual time


@dataclasses.dataclass(frozen=True)
class Option:
    """One `-o KEY=VALUE` option: its name, default and a short description."""

    name: str
    default: Any
    help: str = ""


@dataclasses.dataclass
class Config:
    """What the user asked for: `raidlab create` flags, a scenario's [[arch]], `raidlab sim` flags.

    disk_size and chunk may be None only in virtual time (the drive model's capacity and the
    architecture's default chunk are then used)."""

    arch: str
    disks: int | None
    disk_size: int | None
    chunk: int | None
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    disk_model: str = "none"
    discipline: str = "fifo"
    partitions: str | None = None  # members are these partitions of whole drives (raidlab.disks.partitions)
    bus: str | None = None  # one bus every drive shares (raidlab.disks.bus)
    write_cache: str = "model"  # every drive's write cache: model (its default) | on | off
    span: str | None = None  # where every drive's bytes lie on it: full | start (None: as `plan` says)
    flushes: str = "honoured"  # the host's flushes and FUA at every drive: honoured | dropped (disks.disk)


@dataclasses.dataclass(frozen=True)
class Drive:
    """One member drive to make: its name, catalog model, bytes, how the bytes map onto the
    modelled drive ("full": spread over the whole stroke; "start": the first bytes), and
    whether a virtual-time drive must keep what is written (an architecture that reads
    back its own data, as TSS decompresses its stripes; others replay timing only)."""

    name: str
    model: str
    size: int
    span: str = "full"
    keeps_data: bool = False


@dataclasses.dataclass
class BuildContext:
    """What a builder gets: the configuration, the started member drives (one per Drive of
    `plan`, in order), create or assemble, the clock, a nursery for background tasks, a
    status callback, and `meter`, which wraps a target the builder carves out of a drive (a
    partition) so virtual time can report it per disk (live: returns it unchanged). Mode
    "join" (engine layouts over a cluster): assemble another instance of an array that runs
    elsewhere, without writing its metadata (raidlab.engine.build.assemble_array)."""

    name: str
    config: Config
    drives: list[Any]
    mode: str = "create"
    clock: str = LIVE
    nursery: Any = None
    status: Callable[[str], None] = lambda message: None
    labels: list[str] | None = None
    meter: Callable[[Any], Any] = lambda target: target
    # Called with (array, keeper) of an engine array that lies under a cache, right after
    # the builder assembled it and before its recovery writes to it: the service refuses a
    # dirty degraded raid5 there (raidlab.service.hosts.volume.UncleanStop).
    assembled: Callable[[Any, Any], None] = lambda array, keeper: None
    # Virtual time: the run's host (raidlab.disks.host.Host), which an architecture charges
    # for its own processor work (TSS's compression and parity); None: nothing charged.
    host: Any = None


@dataclasses.dataclass
class Built:
    """A built architecture: the block target served as `volume` (or replayed against), the
    targets reported per disk, its own statistics, and handles the service keeps (the array,
    its metadata keeper, cache disks, ...)."""

    target: Any
    members: list[Any]
    statistics: Callable[[], dict[str, Any]]
    parts: dict[str, Any] = dataclasses.field(default_factory=dict)


def _human(nbytes: int) -> str:
    """64 KiB, 1.1 MiB, 2.5 GiB: a size as a person reads it (rounded up, never below it)."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20)):
        if nbytes >= size:
            tenths = -(-nbytes * 10 // size)
            return f"{tenths // 10}.{tenths % 10} {unit}".replace(".0 ", " ")
    return f"{-(-nbytes // 1024)} KiB" if nbytes >= 1024 else f"{nbytes} bytes"


def _flag(nbytes: int) -> str:
    """A size as --disk-size takes it exactly: 8M, 1088K, or bytes."""
    for suffix, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes % size == 0:
            return f"{nbytes // size}{suffix}"
    return str(nbytes)


@dataclasses.dataclass(frozen=True)
class Family:
    """A family of architectures: the service host that serves them live ("module:Class", a
    class of raidlab.service.hosts whose `family` is this name, imported when a daemon of the
    family starts) and, for each live runner they run on, the runner of `raidlab doctor` that
    must be usable for them to run there."""

    name: str
    doctor_runners: dict[str, str] = dataclasses.field(default_factory=dict)  # live runner -> doctor runner
    host: str | None = None  # "module:Class" of the live host; None: virtual time only


@dataclasses.dataclass(frozen=True)
class CrashPreset:
    """A target of `raidlab crashtest` (raidlab.campaigns.crash; `crashtest all` and `raidlab
    reliability` run every architecture's): its name, members, options, whether every third
    point cuts inside a level-2 destage (a cache smaller than the untar), and the drives'
    flush world (raidlab.disks.disk, "Flushes")."""

    name: str
    disks: int
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    in_destage: bool = False
    flushes: str = "honoured"


@dataclasses.dataclass(frozen=True)
class FaultCell:
    """A cell of the fault campaign (raidlab.campaigns.fault, docs/reliability.md): its label,
    members, options, and the drive that goes bad."""

    name: str
    disks: int
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    drive: int = 1


@dataclasses.dataclass(frozen=True)
class DamageTarget:
    """A target of the damaged-metadata campaign (raidlab.campaigns.damage): an architecture
    with state on its drives, and the options that give it that state."""

    name: str
    disks: int
    options: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class WriteHoleCase:
    """A case of the write-hole campaign (raidlab.campaigns.writehole: a power cut on a degraded
    parity array of four drives): its name, options and live runner."""

    name: str
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    runner: str = "native"


@dataclasses.dataclass(frozen=True)
class Peaks:
    """The architecture's column of the RAID-x paper's Table 3 (raidlab.cluster.peaks): its
    heading there, and `cells(n, m, B, R, W)`, the theoretical peaks for n disks, a file of m
    blocks, a disk's bandwidth B and read and write times per block R and W."""

    title: str
    cells: Callable[[int, int, float, float, float], dict[str, Any]]


Check = Callable[[Config, str], None]
Plan = Callable[[Config, str], list[Drive]]
Builder = Callable[[BuildContext], Awaitable[Built]]
Volume = Callable[[Config, str], int]


@dataclasses.dataclass(frozen=True)
class Architecture:
    """One architecture id, declared once (see the module doc)."""

    name: str
    family: str    # its Family's name: the service host that serves it live (engine, cache, tss, md; disk: none)
    summary: str   # one line for `raidlab archs` and `raidlab create --help`
    source: str    # the paper and section it follows
    options: tuple[Option, ...] = ()
    runners: tuple[str, ...] = RUNNERS
    check: Check | None = None
    plan: Plan | None = None
    build: Builder | None = None
    volume: Volume | None = None  # the bytes it serves, known without building it (a replay's trace fits it)
    # One data disk: --disks is 1 or left out and --chunk means nothing (a replay leaves both out).
    one_disk: bool = False
    # The campaigns. Every architecture that runs live says what it contributes to
    # `crashtest all` and the fault campaign, () to take no part; None (nothing said) is
    # refused when the registry is built, so no architecture is left out without a word.
    crash_presets: tuple[CrashPreset, ...] | None = None
    fault_cells: tuple[FaultCell, ...] | None = None
    damage_targets: tuple[DamageTarget, ...] = ()
    write_hole_cases: tuple[WriteHoleCase, ...] = ()
    # `raidlab faulttest`: what drive `disk` of `config` is to the architecture, and whether
    # it keeps every byte without that drive; None: its drives are not failed by faulttest.
    drive_role: Callable[[Config, int], tuple[str, bool]] | None = None
    # Refuse (UsageError) failure injection these options have none of (faulttest, `raidlab fail`).
    check_faults: Callable[[dict[str, Any]], None] | None = None
    # Whether a flush returns only once what it covers is on the media with these options;
    # None: always. A crash test's power cut holds one that does not to the drives' report.
    flush_on_media: Callable[[dict[str, Any]], bool] | None = None
    # A replay's metrics of its own from its statistics: name -> (value, unit).
    sim_metrics: Callable[[dict[str, Any]], dict[str, tuple[Any, str]]] | None = None
    peaks: Peaks | None = None  # its column of the RAID-x paper's Table 3
    # What its family's live host asks of it beyond plan and build (the cache family's:
    # raidlab.archs.caching.Serving); None: nothing.
    serving: Any = None

    def option_names(self) -> list[str]:
        return [option.name for option in self.options]

    def check_option_names(self, options: dict[str, Any]) -> None:
        """UsageError naming the valid options (with their defaults) for an unknown key."""
        known = self.option_names()
        unknown = sorted(set(options) - set(known))
        if unknown:
            listing = ", ".join(f"{o.name} (default {o.default})" for o in self.options) or "none"
            raise UsageError(f"{self.name} has no option {unknown[0]!r}", hint=f"its options: {listing}")

    def smallest_disk_size(self, config: Config, runner: str) -> int | None:
        """The smallest member size, in whole chunks (64 KiB without a chunk), that `check`
        takes with everything else of `config` as it is; None without a disk size or when
        no size up to 1 TiB is taken (the configuration is wrong for another reason)."""
        if self.check is None or config.disk_size is None:
            return None
        grain = config.chunk or 64 << 10

        def fits(size: int) -> bool:
            try:
                self.check(dataclasses.replace(config, disk_size=size), runner)
            except UsageError:
                return False
            return True

        high = grain
        while not fits(high):
            high *= 2
            if high > 1 << 40:
                return None
        low = high // 2 // grain  # in grains: low fails (or is nothing), high passes
        high //= grain
        while high - low > 1:
            middle = (low + high) // 2
            if fits(middle * grain):
                high = middle
            else:
                low = middle
        return high * grain

    def validate(self, config: Config, runner: str) -> None:
        """Refuse an impossible configuration for `runner` before anything starts."""
        if runner not in self.runners:
            where = ", ".join(self.runners)
            raise UsageError(f"{self.name} does not run on the {runner} runner", hint=f"it runs on: {where}")
        for what, value in (("disks", config.disks), ("disk size", config.disk_size), ("chunk", config.chunk)):
            if value is not None and value <= 0:
                raise UsageError(f"{self.name}: {what} {value} is not a positive number")
        if config.chunk is not None and config.chunk % 512:
            raise UsageError(f"{self.name}: chunk {config.chunk} is not a whole number of 512-byte sectors")
        if self.check is not None:
            try:
                self.check(config, runner)
            except UsageError:
                smallest = self.smallest_disk_size(config, runner)
                if smallest is None or config.disk_size is None or config.disk_size >= smallest:
                    raise
                raise UsageError(f"{self.name}: members of {_human(config.disk_size)} are too small: each needs at "
                                 f"least {_human(smallest)}", hint=f"use --disk-size {_flag(smallest)} or more",
                                 disk_size=config.disk_size, smallest=smallest) from None
        if config.partitions is not None and self.plan is not None:
            planned = self.plan(config, VIRTUAL if runner == "sim" else LIVE)
            from raidlab.disks.partitions import parse

            given = len(parse(config.partitions))
            if len(planned) != given:
                names = ", ".join(drive.name for drive in planned)
                raise UsageError(f"{self.name} uses {len(planned)} drives ({names}); the partition list "
                                 f"{config.partitions!r} names {given}",
                                 hint="give one partition per drive the architecture uses, in that order")
