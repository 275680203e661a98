"""Zone-aware statically adaptive RAID0 (saz): the technique McCormick leaves for later.

McCormick §4: "Designs have been done to implement a statically adaptive RAID system that
considers the differing bandwidth between zones for a given disk. This technique has not been
implemented at this time but is the logical next step"; §5 again: "another statically
adaptive technique that accounts for the differences in bandwidth across multiple zones of a
single disk". The paper gives no design; this is raidlab's, and a labelled extra.

Why SA3 is not enough: SA3 measures each member once (in the middle of its data area) and
uses those shares for the whole device. But the rows of a member are not equally fast: on a
member that spans zones, its first rows lie in outer zones and its last in inner ones, and a
member with a larger share moves through its rows faster than the others, so the disks'
relative speeds at the same logical offset drift away from the measured ones.

The design (all static, fixed at creation like SA1-3, §2.2):
* Probe: each member is measured at `probe_points` places spread evenly over its data area
  (write then read, as SA1-3's probe, `probe_bytes` split between the points), giving a
  bandwidth curve per member: the k-th point stands for the fraction (k + 0.5) / points.
* Regions: the logical device is a sequence of regions, each with its own 100-entry virtual
  device array built by SA3's stride scheduling from the members' bandwidths *where their
  next rows lie* (each curve read at the member's next free row, linearly interpolated). A
  region holds whole cycles: as many as make the member with the largest share advance
  about 1/`regions` of its rows, and never more than every member can still hold; then
  every member's next free row moves on by its share times the cycles. Regions follow until
  a cycle no longer fits on some member.
* Mapping inside a region is SA3's (§2.2.1) from the region's first row on each member:
  row = base(disk, region) + cycles x share(disk, region) + rank.

With members that each lie inside one zone (the paper's 128 MB partitions) every curve is
flat, every region has SA3's array, and saz maps as SA3 does; it differs where members span
zones. Mapping is pure and deterministic in the curves, which the superblock keeps.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Sequence
from functools import cached_property
from typing import Any, ClassVar

from raidlab.blockdev import SECTOR
from raidlab.engine.layouts.base import ChunkMappedLayout
from raidlab.engine.layouts.sa import VIRTUAL_DEVICES, bandwidth_shares, build_sa3, probe_members
from raidlab.errors import UsageError

MiB = 1 << 20
DEFAULT_PROBE_POINTS = 8
DEFAULT_PROBE_BYTES = 16 * MiB


@dataclasses.dataclass(frozen=True)
class Region:
    """Chunks [start, start + cycles x 100) of the device: one virtual device array, each
    member's share of it and the row where the member's part of the region begins."""

    start: int
    cycles: int
    array: tuple[int, ...]
    shares: tuple[int, ...]
    base: tuple[int, ...]

    @property
    def chunks(self) -> int:
        return self.cycles * VIRTUAL_DEVICES


def curve_at(curve: Sequence[float], fraction: float) -> float:
    """A bandwidth curve (point k at fraction (k + 0.5) / points) read at `fraction`,
    linearly interpolated, flat beyond the first and last points."""
    points = len(curve)
    x = fraction * points - 0.5
    if x <= 0:
        return float(curve[0])
    if x >= points - 1:
        return float(curve[-1])
    low = math.floor(x)
    t = x - low
    return float(curve[low]) * (1 - t) + float(curve[low + 1]) * t


def build_regions(curves: Sequence[Sequence[float]], chunks_per_disk: int, regions: int) -> tuple[Region, ...]:
    """The regions of the module doc (pure)."""
    n = len(curves)
    rows = [0] * n
    out: list[Region] = []
    start = 0
    target = max(1, chunks_per_disk // regions)
    while True:
        bandwidths = [curve_at(curve, rows[d] / chunks_per_disk) for d, curve in enumerate(curves)]
        shares = bandwidth_shares(bandwidths)
        fit = min((chunks_per_disk - rows[d]) // shares[d] for d in range(n))
        if fit == 0:
            break
        cycles = min(fit, max(1, target // max(shares)))
        out.append(Region(start, cycles, build_sa3(shares), tuple(shares), tuple(rows)))
        for d in range(n):
            rows[d] += cycles * shares[d]
        start += cycles * VIRTUAL_DEVICES
    return tuple(out)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ZoneAwareLayout(ChunkMappedLayout):
    """RAID0 through one SA3 virtual device array per region, each built from the members'
    bandwidth where the region lies on them (module doc)."""

    bandwidth_curves: tuple[tuple[float, ...], ...] | None = None
    regions: int = 8

    name: ClassVar[str] = "saz"
    # Every member's probe curve is kept twice in the superblock's 4 KiB slot (the geometry's
    # curves and the creation record): four members fit, five do not. The paper's arrays have four.
    max_disks: ClassVar[int | None] = 4
    summary: ClassVar[str] = "zone-aware statically adaptive RAID0: an SA3 array per region (raidlab's design, SA-RAID §4)"
    min_disks: ClassVar[int] = 1
    failure_rule: ClassVar[str] = "no failure survives: RAID0"
    source: ClassVar[str] = "SA-RAID paper §4 (future work), raidlab's design"
    option_help: ClassVar[dict[str, str]] = {
        "bandwidth_curves": "per member, bandwidths (bytes/s) at evenly spaced points instead of the probe",
        "regions": "about how many regions the device is cut into (each with its own array)",
    }
    explain_rows: ClassVar[int] = VIRTUAL_DEVICES  # one cycle of a region's virtual device array fits

    def __post_init__(self) -> None:
        if self.bandwidth_curves is not None:
            curves = tuple(tuple(float(x) for x in curve) for curve in self.bandwidth_curves)
            object.__setattr__(self, "bandwidth_curves", curves)
        super().__post_init__()

    @classmethod
    def placeholder_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        """Equal flat curves stand in for the probe's, so the geometry is checked first."""
        if "bandwidth_curves" in params:
            return params
        return {**params, "bandwidth_curves": tuple((1.0,) for _ in range(params["n_disks"]))}

    @classmethod
    def explain_example(cls, n_disks: int, params: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """Without curves: disk 0 twice as fast as the others, each half as fast inside as
        outside, in two regions."""
        if "bandwidth_curves" in params:
            return params, ""
        return ({**params, "bandwidth_curves": ((20.0, 10.0),) + ((10.0, 5.0),) * (n_disks - 1),
                 "regions": params.get("regions", 2)},
                "bandwidth_curves 20:10,10:5,... (an example; -o bandwidth_curves=... to change)")

    @classmethod
    async def prepare(cls, members: Sequence[Any], params: dict[str, Any], *, status=None,
                      probe_bytes: int = DEFAULT_PROBE_BYTES, probe_points: int = DEFAULT_PROBE_POINTS,
                      ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Measure every member at `probe_points` places unless curves are given; the
        measurements go into the superblock's arch_state."""
        if "bandwidth_curves" in params:
            return params, {}
        data_offset, member_size = params["data_offset"], params["disk_size"]
        room = member_size - data_offset
        each = max(SECTOR, min(probe_bytes // probe_points, room // probe_points) // SECTOR * SECTOR)
        places = []
        for k in range(probe_points):
            middle = data_offset + room * (2 * k + 1) // (2 * probe_points)
            places.append(max(data_offset, min(middle - each // 2, member_size - each)) // SECTOR * SECTOR)
        best = await probe_members([((index, k), member, where, each) for index, member in enumerate(members)
                                    for k, where in enumerate(places)], status=status)
        curves, record = [], []
        for index in range(len(members)):
            curve = []
            for k, where in enumerate(places):
                result = best[index, k]
                if result.bandwidth == float("inf"):
                    raise UsageError("saz needs timed members: a disk model `none` member takes no time",
                                     hint="give every member a timed disk model, or pass bandwidth_curves")
                curve.append(result.bandwidth)
                record.append({"member": index, "offset": where, "bytes": each, "bandwidth": result.bandwidth})
            curves.append(tuple(curve))
        return {**params, "bandwidth_curves": tuple(curves)}, {"probe": record}

    def _validate_options(self) -> None:
        curves = self.bandwidth_curves
        if curves is None:
            raise UsageError("saz needs measured bandwidth curves")
        if len(curves) != self.n_disks:
            raise UsageError(f"saz: {len(curves)} bandwidth curves for {self.n_disks} disks")
        for d, curve in enumerate(curves):
            if not curve or any(not math.isfinite(x) or x <= 0 for x in curve):
                raise UsageError(f"saz: the bandwidth curve of disk {d} must be positive numbers, not {curve!r}")
        if isinstance(self.regions, bool) or not isinstance(self.regions, int) or self.regions < 1:
            raise UsageError(f"saz: regions must be a positive integer, not {self.regions!r}")
        if not self.region_table:
            raise UsageError(f"saz: members of {self.chunks_per_disk} chunks hold less than one cycle of the "
                             "virtual device array", hint="use larger disks or a smaller chunk")

    @cached_property
    def region_table(self) -> tuple[Region, ...]:
        return build_regions(self.bandwidth_curves, self.chunks_per_disk, self.regions)

    @cached_property
    def _starts(self) -> list[int]:
        return [r.start for r in self.region_table]

    @cached_property
    def _ranks(self) -> tuple[tuple[int, ...], ...]:
        out = []
        for region in self.region_table:
            seen = [0] * self.n_disks
            ranks = []
            for disk in region.array:
                ranks.append(seen[disk])
                seen[disk] += 1
            out.append(tuple(ranks))
        return tuple(out)

    @cached_property
    def _index_of_rank(self) -> tuple[dict[tuple[int, int], int], ...]:
        return tuple({(disk, rank): index for index, (disk, rank) in enumerate(zip(region.array, ranks))}
                     for region, ranks in zip(self.region_table, self._ranks))

    @cached_property
    def _bases(self) -> tuple[list[int], ...]:
        """Per disk: the row where each region begins on it (increasing)."""
        return tuple([r.base[d] for r in self.region_table] for d in range(self.n_disks))

    def _placement_period(self) -> int:
        return VIRTUAL_DEVICES

    def _capacity(self) -> int:
        last = self.region_table[-1]
        return (last.start + last.chunks) * self.chunk_bytes

    def _chunk_places(self, chunk: int) -> tuple[tuple[int, int, str], ...]:
        k = bisect.bisect_right(self._starts, chunk) - 1
        region = self.region_table[k]
        cycles, index = divmod(chunk - region.start, VIRTUAL_DEVICES)
        disk = region.array[index]
        return ((disk, region.base[disk] + cycles * region.shares[disk] + self._ranks[k][index], "data"),)

    def _chunk_at(self, disk: int, row: int) -> tuple[int, int] | None:
        k = bisect.bisect_right(self._bases[disk], row) - 1
        if k < 0:
            return None
        region = self.region_table[k]
        cycles, rank = divmod(row - region.base[disk], region.shares[disk])
        if cycles >= region.cycles:
            return None
        return region.start + cycles * VIRTUAL_DEVICES + self._index_of_rank[k][(disk, rank)], 0
