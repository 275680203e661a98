"""What the timing model knows about a drive, and where each byte of an image lies on it.

Follows Ruemmler & Wilkes, "An introduction to disk drive modeling" (IEEE Computer 27(3),
1994), the model the DCD paper's simulator is built on (DCD section 3.2, reference [17]):
zoned recording (sectors per track per zone), and head and cylinder switches hidden by
track skew. `DriveSpec` is one drive's description (catalog.toml); `Geometry` maps an
image's bytes onto its zones, cylinders, heads and angles.

Why apart from the mechanism: the catalog builds DriveSpecs without any timing state, the
closed forms (`zone_sequential_rate` here, `expected_random_read_s` in
raidlab.disks.mechanisms) and the benches read the geometry without serving a request, and
the hard disk mechanism (raidlab.disks.mechanisms.hdd) asks it where a byte is and how
long the arm takes to get there. Everything here is pure arithmetic.

Where we depart from Ruemmler & Wilkes, and why:
* Spare sectors and slipping are not modelled: every zone is a clean run of cylinders.
* The drive's byte range may be emulated by a smaller (or larger) image. See `Geometry`
  for how an image is mapped onto the drive ("span"). With very small images of very large
  drives (fewer than ~1000 mapped cylinders, e.g. 256 MiB of a 2 TB drive) each mapped
  cylinder stands for a wide band of the stroke and random seeks come out about 1% short;
  give such disks more bytes (images are sparse) when seek accuracy matters.

Time is in seconds throughout (trio's unit); the catalog gives milliseconds (`MS`).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Iterator

from raidlab.disks.seek import SeekCurve

MS = 1e-3


# ----------------------------------------------------------------------------- drive specs


@dataclasses.dataclass(frozen=True)
class Zone:
    """A band of cylinders with the same number of sectors per track."""

    cylinders: int
    sectors_per_track: int


@dataclasses.dataclass(frozen=True)
class DriveSpec:
    """Everything the timing model needs to know about one drive (see catalog.toml).

    kind: "hdd" (mechanical model), "ssd" (fixed latency + bandwidth), "none" (no delay).
    """

    name: str
    kind: str
    description: str = ""
    capacity_bytes: int = 0
    # hdd
    rpm: float = 0.0
    sector_bytes: int = 512
    heads: int = 0
    zones: tuple[Zone, ...] = ()
    seek: SeekCurve | None = None
    head_switch_ms: float = 0.0
    cylinder_switch_ms: float | None = None  # None: seek curve at distance 1
    track_skew: bool = True
    controller_read_ms: float = 0.0
    controller_write_ms: float = 0.0
    bus_mb_s: float = 0.0  # host <-> drive buffer, MB/s (10^6 bytes); 0: instantaneous
    readahead_bytes: int = 0  # 0: no track buffer / read-ahead
    write_cache_bytes: int = 0  # 0: no write cache (writes are reported after the media)
    write_cache_default: bool = False
    # A paper's partition table of this drive: each partition is partition_bytes at the
    # start of zone partition_zones[k-1] (1-based zones), partition k counted from 1
    # (SA-RAID §3.1: b1 ... b8; raidlab.disks.partitions).
    partition_bytes: int = 0
    partition_zones: tuple[int, ...] = ()
    # ssd
    read_latency_ms: float = 0.0
    write_latency_ms: float = 0.0
    read_mb_s: float = 0.0
    write_mb_s: float = 0.0
    # provenance: field -> source text (from the catalog)
    sources: dict = dataclasses.field(default_factory=dict, compare=False, hash=False)

    @property
    def revolution_s(self) -> float:
        return 60.0 / self.rpm if self.rpm else 0.0

    @property
    def cylinders(self) -> int:
        return sum(z.cylinders for z in self.zones)

    @property
    def media_capacity_bytes(self) -> int:
        return sum(z.cylinders * self.heads * z.sectors_per_track for z in self.zones) * (
            self.sector_bytes
        )

    def zone_rate_mb_s(self, zone: Zone) -> float:
        """Media rate within one track (10^6 bytes/s), no switches."""
        return zone.sectors_per_track * self.sector_bytes / self.revolution_s / 1e6

    def cylinder_switch_s(self) -> float:
        if self.cylinder_switch_ms is not None:
            return self.cylinder_switch_ms * MS
        assert self.seek is not None
        return self.seek.seek_ms(1) * MS


# ----------------------------------------------------------------------------- geometry


@dataclasses.dataclass(frozen=True)
class MappedZone:
    """One zone of the drive as seen through an image of some size.

    Image bytes [byte_start, byte_end) lie on cylinders [first_cylinder, first_cylinder +
    cylinders) of this mapping; cylinder k of the zone stands for the drive's physical
    cylinder position `physical_first + (k + 0.5) * physical_step` (for span "start" the
    step is 1 and the +0.5 is dropped: cylinder k *is* physical cylinder k).
    """

    index: int
    byte_start: int
    byte_end: int
    first_cylinder: int
    cylinders: int
    track_bytes: int
    physical_first: float
    physical_step: float
    head_skew: float  # fraction of a revolution between consecutive heads' track starts
    cylinder_skew: float  # fraction of a revolution added per cylinder


@dataclasses.dataclass(frozen=True)
class Location:
    zone: MappedZone
    cylinder: int  # mapped cylinder index (0 = outermost)
    head: int
    byte_in_track: int

    @property
    def track_bytes(self) -> int:
        return self.zone.track_bytes


class Geometry:
    """Where each byte of an image lies on the modelled drive.

    span="full" (default): the image's bytes are spread over the whole stroke, zone by zone
      in proportion to each zone's share of the drive's capacity. Every zone keeps its
      sectors per track (so its transfer rate), every cylinder keeps its heads (so head
      switches happen every track as on the drive), but a zone has fewer (or more)
      cylinders than on the drive. Cylinder k stands for the physical cylinder at its
      proportional position, so a seek between mapped cylinders a and b costs the drive's
      seek over the physical distance between them; neighbouring mapped cylinders are
      neighbours on the drive (a cylinder switch), because data that is contiguous in the
      image is contiguous on the media. Result: a 256 MiB image of a 9 GB drive has the
      drive's random access time (full-stroke seek distribution), its sequential rate in
      every zone, and a partition in the last eighth of the image lies in the inner zones
      and is slow, like SA-RAID's b8.
    span="start": the image is the first bytes of the drive, byte for byte (outer zones
      only, short seeks). Faithful for an image as large as the drive; for a small image it
      models "a small partition at the start of the drive".
    """

    SPANS = ("full", "start")

    def __init__(self, spec: DriveSpec, image_bytes: int, span: str = "full"):
        if span not in self.SPANS:
            raise ValueError(f"span must be one of {self.SPANS}, not {span!r}")
        if spec.kind != "hdd":
            raise ValueError(f"{spec.name} has no geometry (kind {spec.kind})")
        self.spec = spec
        self.image_bytes = image_bytes
        self.span = span
        media = spec.media_capacity_bytes
        if span == "start" and image_bytes > media:
            raise ValueError(
                f"image of {image_bytes} bytes is larger than {spec.name} ({media} bytes); "
                "use span='full' to scale it over the drive"
            )
        zones: list[MappedZone] = []
        byte_at = 0
        cyl_at = 0
        physical_at = 0
        shares = self._zone_bytes(spec, image_bytes) if span == "full" else None
        for i, z in enumerate(spec.zones):
            track_bytes = z.sectors_per_track * spec.sector_bytes
            per_cyl = spec.heads * track_bytes
            if shares is not None:
                # The zone's share of the image, in whole sectors; its last cylinder may
                # be partly used. Each mapped cylinder stands for `step` physical ones.
                size = shares[i]
                if size == 0:
                    physical_at += z.cylinders
                    continue
                n_cyl = -(-size // per_cyl)
                step = z.cylinders / n_cyl
            else:
                n_cyl = z.cylinders
                step = 1.0
                size = n_cyl * per_cyl
            first = float(physical_at)
            head_skew, cyl_skew = track_skews(spec, z.sectors_per_track)
            zones.append(
                MappedZone(
                    index=i,
                    byte_start=byte_at,
                    byte_end=byte_at + size,
                    first_cylinder=cyl_at,
                    cylinders=n_cyl,
                    track_bytes=track_bytes,
                    physical_first=first,
                    physical_step=step,
                    head_skew=head_skew,
                    cylinder_skew=cyl_skew,
                )
            )
            byte_at += size
            cyl_at += n_cyl
            physical_at += z.cylinders
            if byte_at >= image_bytes and span == "start":
                break
        self.zones = zones
        self.cylinders = cyl_at
        self._zone_starts = [z.byte_start for z in zones]
        self._zone_first_cyl = [z.first_cylinder for z in zones]
        # zones whose bytes the image actually uses
        self.used_zones = [z for z in zones if z.byte_start < image_bytes]

    @staticmethod
    def _zone_bytes(spec: DriveSpec, image_bytes: int) -> list[int]:
        """Split the image over the zones in proportion to their capacity (whole sectors;
        the innermost zone takes the rounding remainder)."""
        media = spec.media_capacity_bytes
        sector = 512
        shares = []
        used = 0
        for z in spec.zones[:-1]:
            cap = z.cylinders * spec.heads * z.sectors_per_track * spec.sector_bytes
            n = image_bytes * cap // media // sector * sector
            shares.append(n)
            used += n
        shares.append(image_bytes - used)
        return shares

    # -- addressing -------------------------------------------------------------------

    def zone_of_byte(self, offset: int) -> MappedZone:
        i = bisect.bisect_right(self._zone_starts, offset) - 1
        return self.zones[max(0, min(i, len(self.zones) - 1))]

    def zone_of_cylinder(self, cylinder: int) -> MappedZone:
        i = bisect.bisect_right(self._zone_first_cyl, cylinder) - 1
        return self.zones[max(0, min(i, len(self.zones) - 1))]

    def locate(self, offset: int) -> Location:
        z = self.zone_of_byte(offset)
        rel = offset - z.byte_start
        per_cyl = z.track_bytes * self.spec.heads
        cyl_in_zone, rest = divmod(rel, per_cyl)
        head, in_track = divmod(rest, z.track_bytes)
        return Location(z, z.first_cylinder + cyl_in_zone, head, in_track)

    def cylinder_of(self, offset: int) -> int:
        z = self.zone_of_byte(offset)
        return z.first_cylinder + (offset - z.byte_start) // (z.track_bytes * self.spec.heads)

    def physical_position(self, cylinder: int) -> float:
        z = self.zone_of_cylinder(cylinder)
        k = cylinder - z.first_cylinder
        if self.span == "start":
            return z.physical_first + k
        return z.physical_first + (k + 0.5) * z.physical_step

    def seek_s(self, from_cylinder: int, to_cylinder: int) -> float:
        """Arm movement between mapped cylinders (0 if equal; a cylinder switch between
        neighbours; the drive's curve over the physical distance otherwise)."""
        if from_cylinder == to_cylinder:
            return 0.0
        if abs(from_cylinder - to_cylinder) == 1:
            return self.spec.cylinder_switch_s()
        d = abs(self.physical_position(from_cylinder) - self.physical_position(to_cylinder))
        assert self.spec.seek is not None
        return self.spec.seek.seek_ms(max(1.0, d)) * MS

    def track_start_angle(self, loc: Location) -> float:
        """Angle (fraction of a revolution) at which the track's first byte passes the head."""
        z = loc.zone
        k = loc.cylinder - z.first_cylinder
        heads = self.spec.heads
        turns = (k * (heads - 1) + loc.head) * z.head_skew + k * z.cylinder_skew
        return turns % 1.0

    def byte_angle(self, loc: Location) -> float:
        return (self.track_start_angle(loc) + loc.byte_in_track / loc.track_bytes) % 1.0

    def tracks(self, offset: int, length: int) -> Iterator[tuple[Location, int]]:
        """Split [offset, offset+length) into per-track pieces (location, bytes)."""
        end = offset + length
        while offset < end:
            loc = self.locate(offset)
            n = min(end - offset, loc.track_bytes - loc.byte_in_track)
            yield loc, n
            offset += n

    def mean_random_seek_s(self, request_bytes: int = 0, max_bins: int = 4096) -> float:
        """Expected seek between two independent requests whose offsets are uniform over
        the image, i.e. cylinders weighted by the bytes they hold. This is the "average
        seek" of a random workload on this image, as opposed to the drive maker's
        cylinder-uniform figure (manufacturer_average_seek_ms).

        Exact (all pairs, including the neighbour rule of `seek_s`) up to `max_bins`
        mapped cylinders; above that, cylinders are merged into `max_bins` equal bins and
        distances taken between bin centres (error well below 0.1% for smooth curves).
        numpy is used here only: this is an analysis function, not the engine path.
        """
        import numpy as np

        usable = self.image_bytes - request_bytes
        heads = self.spec.heads
        pos = np.empty(self.cylinders)
        wts = np.empty(self.cylinders)
        for z in self.zones:
            per_cyl = z.track_bytes * heads
            k = np.arange(z.cylinders)
            lo = z.byte_start + k * per_cyl
            hi = np.minimum(lo + per_cyl, min(z.byte_end, usable))
            wts[z.first_cylinder:z.first_cylinder + z.cylinders] = np.maximum(0, hi - lo)
            pos[z.first_cylinder:z.first_cylinder + z.cylinders] = [
                self.physical_position(z.first_cylinder + i) for i in range(z.cylinders)
            ]
        wts = wts / wts.sum()
        curve = self.spec.seek
        assert curve is not None

        def seek_ms(d):
            d = np.maximum(d, 1.0)
            return np.where(d < curve.boundary, curve.short_a + curve.short_b * np.sqrt(d),
                            curve.long_a + curve.long_b * d)

        n = self.cylinders
        if n > max_bins:
            edges = np.linspace(pos.min(), pos.max() + 1e-9, max_bins + 1)
            idx = np.clip(np.searchsorted(edges, pos, side="right") - 1, 0, max_bins - 1)
            bw = np.bincount(idx, weights=wts, minlength=max_bins)
            bp = np.bincount(idx, weights=wts * pos, minlength=max_bins)
            keep = bw > 0
            bpos = bp[keep] / bw[keep]
            bw = bw[keep]
            d = np.abs(bpos[:, None] - bpos[None, :])
            m = seek_ms(d)
            np.fill_diagonal(m, 0.0)
            return float(bw @ m @ bw) * MS
        total = 0.0
        cyl_switch_ms = self.spec.cylinder_switch_s() / MS
        idx = np.arange(n)
        for a0 in range(0, n, 512):
            a = idx[a0:a0 + 512]
            d = np.abs(pos[a][:, None] - pos[None, :])
            m = seek_ms(d)
            gap = np.abs(a[:, None] - idx[None, :])
            m = np.where(gap == 1, cyl_switch_ms, m)
            m = np.where(gap == 0, 0.0, m)
            total += float(wts[a] @ m @ wts)
        return total * MS


def track_skews(spec: DriveSpec, spt: int) -> tuple[float, float]:
    """Track skew (fraction of a revolution) between consecutive heads and added per
    cylinder, in whole sectors, just enough to hide a head / cylinder switch; (0, 0) on a
    drive without skew."""
    if not spec.track_skew:
        return 0.0, 0.0
    rev = spec.revolution_s
    head = math.ceil(spec.head_switch_ms * MS / rev * spt - 1e-9) / spt
    cyl = math.ceil(spec.cylinder_switch_s() / rev * spt - 1e-9) / spt
    return head, cyl


def zone_sequential_rate(spec: DriveSpec, zone_index: int) -> float:
    """Sustained sequential rate (bytes/s) in one zone, switches included: a cylinder of
    `heads` tracks costs `heads` revolutions plus heads-1 head switches and one cylinder
    switch, each rounded up to whole sectors by the track skew."""
    z = spec.zones[zone_index]
    rev = spec.revolution_s
    spt = z.sectors_per_track
    track = spt * spec.sector_bytes
    if spec.track_skew:
        head_skew, cyl_skew = track_skews(spec, spt)
        hs, cs = head_skew * rev, cyl_skew * rev
    else:  # no skew: every switch also misses the rest of a revolution
        hs = cs = rev
    per_cyl = spec.heads * rev + (spec.heads - 1) * hs + cs
    return spec.heads * track / per_cyl

