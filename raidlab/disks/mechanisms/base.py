"""What every member-disk mechanism offers: a Plan per request, and the state around it.

Why pure: the same arithmetic must give the same answer under trio's real clock and on the
virtual clock (raidlab's kernel), and the validation tests (tests/unit/test_disk_model.py)
check it against closed forms. Nothing in a mechanism sleeps, reads a clock or touches data;
`raidlab.disks.disk` calls `plan_*` with `sched.current_time()` and sleeps until the
returned end time.

Why one class per drive kind (hdd, ssd, none): a kind is a whole way of spending time, not
a detail of one request; each class holds only the state its kind has (arm, platter and
buffers for a hard disk; nothing for the others), and `raidlab.disks.mechanisms` picks the
class from `DriveSpec.kind` once, when the disk is built.

Time is in seconds throughout (trio's unit); the catalog gives milliseconds.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import ClassVar

from raidlab.disks.geometry import DriveSpec, Geometry

# The parts of a request's service time a Plan names. What a request's service has beyond
# their sum is time it waited for the arm (the drive writing back its own write cache, or a
# read-ahead stream it joined), which the disk reports as "waiting".
SERVICE_PARTS = ("controller", "seek", "rotation", "transfer", "switches")


@dataclasses.dataclass
class Plan:
    """A request's modelled service: when it ends and what it spent the time on."""

    start: float
    end: float
    controller: float = 0.0
    seek: float = 0.0
    rotation: float = 0.0
    transfer: float = 0.0
    switches: float = 0.0
    cache_hit: bool = False
    destaged_bytes: int = 0

    @property
    def service(self) -> float:
        return self.end - self.start

    def add_parts_to(self, split: dict[str, float]) -> None:
        """Add this plan's parts (SERVICE_PARTS) to a running account of them."""
        for part in SERVICE_PARTS:
            split[part] += getattr(self, part)

    @classmethod
    def overhead(cls, now: float, controller: float) -> Plan:
        """A command that costs only the controller's overhead (no media, no transfer)."""
        return cls(now, now + controller, controller=controller)


class Mechanism(abc.ABC):
    """The state of one modelled drive and its arithmetic.

    `plan_read` / `plan_write` / `plan_flush` / `plan_trim` return a Plan and update the
    state as if the request had been served from `now` to `plan.end`. The caller must serve
    one host request at a time, in time order (a mechanism is the mechanism, not the
    queue); background work such as destaging a write cache is the mechanism's own business.

    span and write_cache mean something only to a drive with a geometry and a write cache
    (raidlab.disks.mechanisms.hdd); the other kinds accept and ignore them, so that every
    kind is built the same way. The base state is that of a drive without an arm or a
    buffer: cylinder 0, nothing dirty, nothing destaged.
    """

    kind: ClassVar[str]
    write_cache_enabled: bool = False  # writes reported from a write cache (a kind with one sets it)

    def __init__(self, spec: DriveSpec, image_bytes: int, *, span: str = "full",
                 write_cache: bool | None = None):
        self.spec = spec
        self.image_bytes = image_bytes
        self.geometry: Geometry | None = None
        self.cylinder = 0
        self.dirty_bytes = 0
        self.destaged_bytes = 0
        self.destage_time = 0.0
        self.destage_split = dict.fromkeys(SERVICE_PARTS, 0.0)  # destage_time by part

    def cylinder_of(self, offset: int) -> int:
        """Target cylinder of a request (0 for drives without geometry); for schedulers."""
        return 0

    @abc.abstractmethod
    def plan_read(self, now: float, offset: int, length: int) -> Plan:
        """Read [offset, offset+length) of the image, arriving at `now`."""

    @abc.abstractmethod
    def plan_write(self, now: float, offset: int, length: int, *, fua: bool = False) -> Plan:
        """Write [offset, offset+length); fua: report only once it is on the media."""

    def plan_flush(self, now: float) -> Plan:
        """SYNCHRONIZE CACHE: ends when every buffered write is on the media (at once
        for a drive without a write cache)."""
        return Plan(now, now)

    @abc.abstractmethod
    def plan_trim(self, now: float, offset: int, length: int) -> Plan:
        """Discard [offset, offset+length)."""

    @classmethod
    @abc.abstractmethod
    def expected_random_read_s(cls, spec: DriveSpec, image_bytes: int, request_bytes: int,
                               span: str = "full") -> dict[str, float]:
        """Closed-form mean of an isolated random read (QD1) on an image, by component;
        "total" is their sum."""
