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


Check = Callable[[Config, str], None]
Plan = Callable[[Config, str], list[Drive]]
Builder = Callable[[BuildContext], Awaitable[Built]]
Volume = Callable[[Config, str], int]


@dataclasses.dataclass(frozen=True)
class Architecture:
    """One architecture id, declared once (see the module doc)."""

    name: str
    family: str    # which service host serves it live: "engine", "cache", "md"; "disk" is virtual only
    summary: str   # one line for `raidlab archs` and `raidlab create --help`
    source: str    # the paper and section it follows
    options: tuple[Option, ...] = ()
    runners: tuple[str, ...] = RUNNERS
    check: Check | None = None
    plan: Plan | None = None
    build: Builder | None = None
    volume: Volume | None = None  # the bytes it serves, known without building it (a replay's trace fits it)

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
