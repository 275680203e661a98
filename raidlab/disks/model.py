"""Timing models of member disks: pure functions of (drive, arm state, time, request).

Follows Ruemmler & Wilkes, "An introduction to disk drive modeling" (IEEE Computer 27(3),
1994), the model the DCD paper's simulator is built on (DCD section 3.2, reference [17]):
controller overhead, a two-regime seek curve (a + b*sqrt(d) for short seeks, c + e*d for long
ones), rotational latency from the platter's actual angle, zoned recording (sectors per track
per zone), head and cylinder switches hidden by track skew, and a read-ahead track buffer.
DESIGN.md "Member disks and timing models" asks for exactly these parts.

Why pure: the same arithmetic must give the same answer under trio's real clock and under
MockClock, and the validation tests (tests/unit/test_disk_model.py) check it against closed
forms. Nothing here sleeps, reads a clock or touches data; `raidlab.disks.disk` calls
`DiskMechanism.plan_*` with `trio.current_time()` and sleeps until the returned end time.

Where we depart from Ruemmler & Wilkes, and why:
* The SCSI bus is not modelled as a shared resource; a transfer between host and drive
  buffer costs bytes / bus rate only where the media is not involved (read-ahead hits and
  write-cache acceptance). With media access the bus transfer overlaps the media transfer,
  as R&W's "producer-consumer interlock" does for all but the last sector, which we drop.
* Write settle time is not separated from read settle time (the catalog's seek curves are
  read curves); write cost differs by its controller overhead only.
* Spare sectors and slipping are not modelled: every zone is a clean run of cylinders.
* The drive's byte range may be emulated by a smaller (or larger) image. See `Geometry`
  for how an image is mapped onto the drive ("span"). With very small images of very large
  drives (fewer than ~1000 mapped cylinders, e.g. 256 MiB of a 2 TB drive) each mapped
  cylinder stands for a wide band of the stroke and random seeks come out about 1% short;
  give such disks more bytes (images are sparse) when seek accuracy matters.
* Read-ahead: after a read the drive keeps reading into its buffer (up to
  `readahead_bytes` ahead of the host) until the next request needs the arm; a read that
  continues the stream waits only for the media, so QD1 sequential reads run at the zone
  rate. Writes and destages stop it. Buffer segmentation is not modelled.
* Write cache ("immediate report", DCD's term): a write is reported after controller
  overhead + bus transfer and reaches the media in the background, the extent nearest the
  arm first, coalesced with extents that continue it; a flush (SYNCHRONIZE CACHE) ends when
  all of it is on the media; a read miss waits for at most the destage in progress. R&W
  model write-behind the same way.

Time is in seconds throughout (trio's unit); the catalog gives milliseconds.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Iterator, Sequence

MS = 1e-3
# A drive destages contiguous cached writes as one media write of at most this many bytes.
DESTAGE_MAX_BYTES = 4 << 20
# A rotational wait this close to a full revolution is float noise on "the sector is under
# the head right now" (track skew is sized to make that happen); treat it as no wait.
_ROTATION_EPSILON = 1e-9


# ----------------------------------------------------------------------------- seek curves


@dataclasses.dataclass(frozen=True)
class SeekCurve:
    """Ruemmler-Wilkes seek curve in milliseconds over a distance of d cylinders.

    d < boundary: short_a + short_b * sqrt(d)     (arm accelerates then decelerates)
    d >= boundary: long_a + long_b * d             (arm coasts at top speed)
    d == 0: 0 (no arm movement).
    """

    short_a: float
    short_b: float
    boundary: float
    long_a: float
    long_b: float

    def seek_ms(self, distance: float) -> float:
        d = abs(distance)
        if d <= 0:
            return 0.0
        if d < self.boundary:
            return self.short_a + self.short_b * math.sqrt(d)
        return self.long_a + self.long_b * d


def random_seek_weights(cylinders: int) -> Iterator[tuple[int, float]]:
    """(distance, probability) of |a - b| for a, b independent and uniform over cylinders,
    conditioned on a != b: the "weighted average of all possible seeks" drive makers quote."""
    n = cylinders
    total = n * (n - 1) / 2
    for d in range(1, n):
        yield d, (n - d) / total


def manufacturer_average_seek_ms(curve: SeekCurve, cylinders: int) -> float:
    """Average seek as specification sheets define it (all seek lengths 1..max, weighted by
    how many start/end pairs have that length)."""
    return sum(p * curve.seek_ms(d) for d, p in random_seek_weights(cylinders))


def fit_seek_curve(
    cylinders: int,
    track_to_track_ms: float,
    average_ms: float,
    full_stroke_ms: float,
    boundary_fraction: float = 0.3,
) -> SeekCurve:
    """A Ruemmler-Wilkes curve through a drive's three published seek figures.

    Spec sheets give track-to-track, average and full-stroke seeks, not the curve. With the
    short/long boundary fixed at `boundary_fraction` of the stroke, the four coefficients
    solve four linear equations: seek(1) = track-to-track, seek(max) = full stroke, the
    two regimes meet at the boundary, and the manufacturer's weighted average matches.
    """
    if cylinders < 4:
        raise ValueError("a seek curve needs at least 4 cylinders")
    b = max(2.0, boundary_fraction * (cylinders - 1))
    full = cylinders - 1
    # Unknowns x = (sa, sb, la, lb). Average: sum p(d) * (short or long).
    ps_short = ps_short_sqrt = ps_long = ps_long_d = 0.0
    for d, p in random_seek_weights(cylinders):
        if d < b:
            ps_short += p
            ps_short_sqrt += p * math.sqrt(d)
        else:
            ps_long += p
            ps_long_d += p * d
    rows = [
        ([1.0, 1.0, 0.0, 0.0], track_to_track_ms),
        ([0.0, 0.0, 1.0, float(full)], full_stroke_ms),
        ([1.0, math.sqrt(b), -1.0, -b], 0.0),
        ([ps_short, ps_short_sqrt, ps_long, ps_long_d], average_ms),
    ]
    sa, sb, la, lb = _solve4([r for r, _ in rows], [v for _, v in rows])
    curve = SeekCurve(short_a=sa, short_b=sb, boundary=b, long_a=la, long_b=lb)
    if sb <= 0 or lb < 0:
        raise ValueError(
            f"seek figures {track_to_track_ms}/{average_ms}/{full_stroke_ms} ms over "
            f"{cylinders} cylinders give a non-monotonic curve {curve}"
        )
    return curve


def _solve4(a: list[list[float]], y: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (4x4; no numpy in the engine path)."""
    m = [row[:] + [v] for row, v in zip(a, y)]
    n = len(m)
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        if abs(m[col][col]) < 1e-15:
            raise ValueError("singular seek-curve system")
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * z for x, z in zip(m[r], m[col])]
    return [m[i][n] / m[i][i] for i in range(n)]


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
        rev = spec.revolution_s
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
            head_skew, cyl_skew = self._skews(spec, z.sectors_per_track, rev)
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

    @staticmethod
    def _skews(spec: DriveSpec, spt: int, rev: float) -> tuple[float, float]:
        """Track skew in whole sectors, just enough to hide a head / cylinder switch."""
        if not spec.track_skew:
            return 0.0, 0.0
        head = math.ceil(spec.head_switch_ms * MS / rev * spt - 1e-9) / spt
        cyl = math.ceil(spec.cylinder_switch_s() / rev * spt - 1e-9) / spt
        return head, cyl

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


# ----------------------------------------------------------------------------- requests


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


@dataclasses.dataclass
class _Stream:
    """Read-ahead in progress: the drive keeps reading after a read, track by track.

    `track_offset`/`track_time`: image offset of a track start and the time its first byte
    passes the head (the stream is then reading that whole track). `origin` is where the
    read-ahead began (end of the read that started it), `limit` how far it may go.
    """

    origin: int
    buffer_start: int
    track_offset: int
    track_time: float
    limit: int


class DiskMechanism:
    """The state of one modelled drive (arm, platter phase, buffers) and its arithmetic.

    `plan_read` / `plan_write` / `plan_flush` / `plan_trim` return a Plan and update the
    state as if the request had been served from `now` to `plan.end`. The caller must serve
    one host request at a time, in time order (DiskMechanism is the mechanism, not the
    queue); background destaging of the write cache is the mechanism's own business.
    """

    def __init__(self, spec: DriveSpec, image_bytes: int, *, span: str = "full",
                 write_cache: bool | None = None):
        self.spec = spec
        self.image_bytes = image_bytes
        self.kind = spec.kind
        self.geometry = Geometry(spec, image_bytes, span) if spec.kind == "hdd" else None
        self.cylinder = 0
        self.head = 0
        self._stream: _Stream | None = None
        self.write_cache_enabled = (
            spec.write_cache_default if write_cache is None else bool(write_cache)
        ) and spec.write_cache_bytes > 0
        # (offset, length, accepted_at): written into the drive's buffer, not yet on media
        self.dirty: list[tuple[int, int, float]] = []
        self.dirty_bytes = 0
        self.arm_free_at = float("-inf")  # end of the arm's last media operation
        self.destaged_bytes = 0
        self.destage_time = 0.0

    # -- helpers ----------------------------------------------------------------------

    def cylinder_of(self, offset: int) -> int:
        """Target cylinder of a request (0 for drives without geometry); for schedulers."""
        if self.geometry is None:
            return 0
        return self.geometry.cylinder_of(min(offset, self.image_bytes - 1))

    def platter_angle(self, t: float) -> float:
        """Fraction of a revolution the platter has turned at time t (0 at t = 0)."""
        rev = self.spec.revolution_s
        return (t / rev) % 1.0

    def _bus_s(self, nbytes: int) -> float:
        return nbytes / (self.spec.bus_mb_s * 1e6) if self.spec.bus_mb_s else 0.0

    def _rotational_wait(self, t: float, loc: Location) -> float:
        rev = self.spec.revolution_s
        assert self.geometry is not None
        frac = (self.geometry.byte_angle(loc) - self.platter_angle(t)) % 1.0
        if frac > 1.0 - _ROTATION_EPSILON:
            frac = 0.0
        return frac * rev

    def _media(self, plan: Plan, t: float, offset: int, length: int) -> float:
        """Position and transfer [offset, offset+length) starting at time t; arm moves."""
        g = self.geometry
        assert g is not None
        rev = self.spec.revolution_s
        first = True
        for loc, n in g.tracks(offset, length):
            if first:
                if loc.cylinder != self.cylinder:
                    s = g.seek_s(self.cylinder, loc.cylinder)
                    plan.seek += s
                elif loc.head != self.head:
                    s = self.spec.head_switch_ms * MS
                    plan.switches += s
                else:
                    s = 0.0
                first = False
            else:
                if loc.cylinder != self.cylinder:
                    s = g.seek_s(self.cylinder, loc.cylinder)
                else:
                    s = self.spec.head_switch_ms * MS
                plan.switches += s
            t += s
            w = self._rotational_wait(t, loc)
            plan.rotation += w
            t += w
            x = n / loc.track_bytes * rev
            plan.transfer += x
            t += x
            self.cylinder, self.head = loc.cylinder, loc.head
        return t

    # -- read-ahead stream ------------------------------------------------------------

    def _start_stream(self, end_offset: int, t: float, buffer_start: int) -> None:
        if not self.spec.readahead_bytes or end_offset >= self.image_bytes:
            self._stream = None
            return
        g = self.geometry
        assert g is not None
        loc = g.locate(end_offset)
        # The head is positioned right at end_offset at time t; the track started earlier.
        track_offset = end_offset - loc.byte_in_track
        track_time = t - loc.byte_in_track / loc.track_bytes * self.spec.revolution_s
        limit = min(self.image_bytes, end_offset + self.spec.readahead_bytes)
        self._stream = _Stream(end_offset, max(buffer_start, end_offset - self.spec.readahead_bytes),
                               track_offset, track_time, limit)

    def _advance_stream_to_track(self, stream: _Stream) -> None:
        """Move the stream one track on (switch + rotational alignment), arm follows."""
        g = self.geometry
        assert g is not None
        here = g.locate(stream.track_offset)
        end_of_track = stream.track_time + self.spec.revolution_s
        nxt_off = stream.track_offset + here.track_bytes
        nxt = g.locate(nxt_off)
        if nxt.cylinder != here.cylinder:
            s = g.seek_s(here.cylinder, nxt.cylinder)
        else:
            s = self.spec.head_switch_ms * MS
        t = end_of_track + s
        t += self._rotational_wait(t, nxt)
        stream.track_offset, stream.track_time = nxt_off, t

    def _stream_position(self, stream: _Stream, t: float) -> int:
        """How far (image offset) the read-ahead has read by time t, capped at its limit.
        Moves the stream's track cursor forward; the arm follows the stream."""
        g = self.geometry
        assert g is not None
        rev = self.spec.revolution_s
        while True:
            loc = g.locate(stream.track_offset)
            track_end_off = stream.track_offset + loc.track_bytes
            if track_end_off >= stream.limit or stream.track_time + rev > t:
                break
            self._advance_stream_to_track(stream)
        loc = g.locate(stream.track_offset)
        self.cylinder, self.head = loc.cylinder, loc.head
        if t <= stream.track_time:
            done = stream.track_offset
        else:
            done = stream.track_offset + int((t - stream.track_time) / rev * loc.track_bytes)
        return max(stream.origin, min(done, stream.limit))

    def _stream_arrival(self, stream: _Stream, offset_end: int) -> float:
        """Time at which the read-ahead will have read up to offset_end (<= limit)."""
        g = self.geometry
        assert g is not None
        rev = self.spec.revolution_s
        while True:
            loc = g.locate(stream.track_offset)
            if offset_end <= stream.track_offset + loc.track_bytes:
                break
            self._advance_stream_to_track(stream)
        loc = g.locate(stream.track_offset)
        self.cylinder, self.head = loc.cylinder, loc.head
        return stream.track_time + (offset_end - stream.track_offset) / loc.track_bytes * rev

    # -- requests ---------------------------------------------------------------------

    def plan_read(self, now: float, offset: int, length: int) -> Plan:
        spec = self.spec
        if self.kind == "none":
            return Plan(now, now)
        if self.kind == "ssd":
            x = length / (spec.read_mb_s * 1e6)
            c = spec.read_latency_ms * MS
            return Plan(now, now + c + x, controller=c, transfer=x)
        plan = Plan(now, now)
        t = now + spec.controller_read_ms * MS
        plan.controller = t - now
        end = offset + length
        self._destage_until(t)
        # Write cache: a read entirely inside data not yet destaged comes from the buffer.
        for d_off, d_len, _ in self.dirty:
            if d_off <= offset and end <= d_off + d_len:
                x = self._bus_s(length)
                plan.transfer, plan.end, plan.cache_hit = x, t + x, True
                return plan
        stream = self._stream
        if stream is not None:
            reached = self._stream_position(stream, t)
            if stream.buffer_start <= offset and end <= reached:
                # Read-ahead hit: the data is in the buffer. Read-ahead goes on.
                x = self._bus_s(length)
                plan.transfer, plan.end, plan.cache_hit = x, t + x, True
                stream.buffer_start = max(stream.buffer_start, end - spec.readahead_bytes)
                stream.limit = min(self.image_bytes, max(stream.limit, end + spec.readahead_bytes))
                return plan
            if stream.buffer_start <= offset <= reached and end <= self.image_bytes:
                # The request continues the stream: it ends when the media has read it.
                paused = reached >= stream.limit and self._stream_arrival(stream, reached) < t
                if not paused:
                    stream.limit = min(self.image_bytes, max(stream.limit, end + spec.readahead_bytes))
                    done = self._stream_arrival(stream, end)
                    plan.transfer = done - t
                    plan.end = self.arm_free_at = done
                    plan.cache_hit = True
                    stream.buffer_start = max(stream.buffer_start, end - spec.readahead_bytes)
                    return plan
                # Read-ahead had stopped at its limit: the rest is an ordinary media read
                # from where it stopped (the arm is there; the platter has moved on).
                self._stream = None
                t = self._media(plan, t, reached, end - reached)
                plan.end = self.arm_free_at = t
                self._start_stream(end, t, offset)
                return plan
            # Miss: read-ahead stops where it got to; the arm is there.
            self._stream = None
        t = self._media(plan, max(t, self.arm_free_at), offset, length)
        plan.end = self.arm_free_at = t
        self._start_stream(end, t, offset)
        return plan

    def plan_write(self, now: float, offset: int, length: int, *, fua: bool = False) -> Plan:
        spec = self.spec
        if self.kind == "none":
            return Plan(now, now)
        if self.kind == "ssd":
            x = length / (spec.write_mb_s * 1e6)
            c = spec.write_latency_ms * MS
            return Plan(now, now + c + x, controller=c, transfer=x)
        plan = Plan(now, now)
        t = now + spec.controller_write_ms * MS
        plan.controller = t - now
        self._destage_until(t)
        self._stop_stream(t)
        if self.write_cache_enabled and not fua and length <= spec.write_cache_bytes:
            # Immediate report: the data goes into the buffer (after destaging enough to
            # make room) and reaches the media later, in the background (_destage_until).
            while self.dirty_bytes + length > spec.write_cache_bytes:
                self._destage_next(force=True)
                t = max(t, self.arm_free_at)
            x = self._bus_s(length)
            plan.transfer, plan.end, plan.cache_hit = x, t + x, True
            self._add_dirty(offset, length, t + x)
            return plan
        self._drop_dirty(offset, length)
        t = self._media(plan, max(t, self.arm_free_at), offset, length)
        plan.end = self.arm_free_at = t
        return plan

    def plan_flush(self, now: float) -> Plan:
        """SYNCHRONIZE CACHE: ends when every buffered write is on the media."""
        if self.kind != "hdd" or not self.write_cache_enabled:
            return Plan(now, now)
        c = self.spec.controller_write_ms * MS
        self._destage_until(now + c)
        while self.dirty:
            self._destage_next(force=True)
        end = max(now + c, self.arm_free_at)
        return Plan(now, end, controller=c)

    def plan_trim(self, now: float, offset: int, length: int) -> Plan:
        """A discard costs the controller's command overhead and no media time."""
        if self.kind == "hdd":
            self._drop_dirty(offset, length)
            c = self.spec.controller_write_ms * MS
            return Plan(now, now + c, controller=c)
        if self.kind == "ssd":
            c = self.spec.write_latency_ms * MS
            return Plan(now, now + c, controller=c)
        return Plan(now, now)

    def _stop_stream(self, t: float) -> None:
        """Read-ahead stops at time t (the arm stays where it got to)."""
        if self._stream is not None:
            self._stream_position(self._stream, t)
            self._stream = None

    # -- write cache ------------------------------------------------------------------
    #
    # Buffered writes reach the media in the background: whenever the arm is free and
    # data accepted before that moment is waiting, the drive writes the extent nearest
    # the arm (coalesced with extents that continue it), as drives' firmware does. The
    # destages are computed lazily, in time order, whenever a request needs to know the
    # arm's state at some time t (_destage_until); host requests that hit the cache never
    # wait for the arm, requests that need the media wait for at most the destage in
    # progress.

    def write_cache_room(self, length: int) -> bool:
        return self.dirty_bytes + length <= self.spec.write_cache_bytes

    def _add_dirty(self, offset: int, length: int, accepted_at: float) -> None:
        self._drop_dirty(offset, length)
        self.dirty.append((offset, length, accepted_at))
        self.dirty_bytes += length

    def _drop_dirty(self, offset: int, length: int) -> None:
        """Forget buffered data overwritten by [offset, offset+length) (newest data wins)."""
        if not self.dirty:
            return
        end = offset + length
        kept: list[tuple[int, int, float]] = []
        for d_off, d_len, d_t in self.dirty:
            d_end = d_off + d_len
            if d_end <= offset or d_off >= end:
                kept.append((d_off, d_len, d_t))
                continue
            if d_off < offset:
                kept.append((d_off, offset - d_off, d_t))
            if d_end > end:
                kept.append((end, d_end - end, d_t))
        self.dirty = kept
        self.dirty_bytes = sum(n for _, n, _ in kept)

    def _destage_until(self, t: float) -> None:
        """Run the background destages that start before time t."""
        while self.dirty:
            start = max(self.arm_free_at, min(a for _, _, a in self.dirty))
            if start >= t:
                return
            self._destage_next(force=False)

    def _destage_next(self, *, force: bool) -> None:
        """Destage one extent starting when the arm is free (force: even if it was accepted
        later, i.e. the host is waiting for room or for a flush)."""
        g = self.geometry
        assert g is not None
        start = max(self.arm_free_at, min(a for _, _, a in self.dirty))
        ready = [i for i, (_, _, a) in enumerate(self.dirty) if a <= start or force]
        best = min(ready, key=lambda i: (abs(g.cylinder_of(self.dirty[i][0]) - self.cylinder), i))
        off, n, accepted = self.dirty.pop(best)
        start = max(start, accepted)
        # Coalesce extents that continue this one on the media (a sequential stream
        # becomes one media write), up to DESTAGE_MAX_BYTES.
        while n < DESTAGE_MAX_BYTES:
            nxt = next((i for i, (o, _, a) in enumerate(self.dirty) if o == off + n and a <= start), None)
            if nxt is None:
                break
            n += self.dirty.pop(nxt)[1]
        self.dirty_bytes = sum(x for _, x, _ in self.dirty)
        self._stop_stream(start)
        plan = Plan(start, start)
        self.arm_free_at = self._media(plan, start, off, n)
        self.destaged_bytes += n
        self.destage_time += self.arm_free_at - start


# ----------------------------------------------------------------------------- closed forms


def expected_random_read_s(spec: DriveSpec, image_bytes: int, request_bytes: int,
                           span: str = "full") -> dict[str, float]:
    """Closed-form mean of an isolated random read (QD1) on an image, by component.

    mean seek (cylinders weighted by bytes) + half a revolution + transfer at the track
    size of the zones the offsets fall in + read controller overhead + the track switches
    inside the request (a request of L bytes crosses L / track-bytes track boundaries on
    average; each costs a head switch, or a cylinder switch once per cylinder, rounded up
    to whole sectors by the track skew, or a full revolution on a drive without skew).
    """
    if spec.kind == "none":
        return {"total": 0.0}
    if spec.kind == "ssd":
        t = spec.read_latency_ms * MS + request_bytes / (spec.read_mb_s * 1e6)
        return {"total": t}
    g = Geometry(spec, image_bytes, span)
    rev = spec.revolution_s
    seek = g.mean_random_seek_s(request_bytes)
    # transfer: byte-weighted mean of (request / track bytes) revolutions
    usable = image_bytes - request_bytes
    xfer = switches = 0.0
    for z in g.used_zones:
        share = max(0, min(z.byte_end, usable) - z.byte_start) / usable
        xfer += share * request_bytes / z.track_bytes * rev
        if spec.track_skew:
            per_switch = ((spec.heads - 1) * z.head_skew + z.cylinder_skew) / spec.heads * rev
        else:
            per_switch = rev
        switches += share * request_bytes / z.track_bytes * per_switch
    controller = spec.controller_read_ms * MS
    half = rev / 2
    return {
        "seek": seek,
        "rotation": half,
        "transfer": xfer,
        "switches": switches,
        "controller": controller,
        "total": seek + half + xfer + switches + controller,
    }


def zone_sequential_rate(spec: DriveSpec, zone_index: int) -> float:
    """Sustained sequential rate (bytes/s) in one zone, switches included: a cylinder of
    `heads` tracks costs `heads` revolutions plus heads-1 head switches and one cylinder
    switch, each rounded up to whole sectors by the track skew."""
    z = spec.zones[zone_index]
    rev = spec.revolution_s
    spt = z.sectors_per_track
    track = spt * spec.sector_bytes
    if spec.track_skew:
        hs = math.ceil(spec.head_switch_ms * MS / rev * spt - 1e-9) / spt * rev
        cs = math.ceil(spec.cylinder_switch_s() / rev * spt - 1e-9) / spt * rev
    else:  # no skew: every switch also misses the rest of a revolution
        hs = cs = rev
    per_cyl = spec.heads * rev + (spec.heads - 1) * hs + cs
    return spec.heads * track / per_cyl


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    if not values:
        raise ValueError("percentile of no values")
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return s[k]
