"""Synthetic office/engineering block traces with the properties the DCD paper reports.

Why synthetic: the HP traces the DCD paper replays (cello, snake, hplajw; Ruemmler & Wilkes,
"UNIX disk access patterns", USENIX Winter 1993) are not redistributable. What the
papers *say* about them is enough to build labelled look-alikes, and `raidlab trace stats`
checks each property in the tests (tests/unit/test_traces_synth.py). They are not the real
traces: absolute response times replayed from them are ours, not the paper's; the shape of
a comparison (DCD vs a traditional disk) is what they can support.

The generator (`synth(profile, duration, seed)`), a stream of Requests in time order:

* Arrivals: an ON/OFF process. Bursts of requests arrive one after another; within a burst
  requests are `intra_burst_gap_s` apart on average (exponential), between bursts the disk
  sees an exponential idle gap. Burst sizes are a mixture of two geometric distributions:
  mostly small bursts and a few large ones (UNIX's periodic flush of dirty buffers). The
  idle gap's mean is chosen so that the long-run rate is exactly `rate_per_s`:
  mean cycle = mean burst / rate = (mean burst - 1) x intra gap + mean idle gap.
  DCD §3.1: "bursty requests and a low average request rate ... it is common to find more
  than 5 write requests waiting in a queue and the maximum queue length goes up to 100
  and even 1000 [15]".
* Each request is a write with probability `write_fraction`, otherwise a read.
* Sizes: drawn from the profile's size table (whole KiB, so offsets stay 1 KiB aligned like
  HP-UX's 1 KiB fragments). DCD §3.1: "dominated by small random file read and write
  requests"; §4.1 for hplajw: "the size of most requests is 8 KB which is also the maximum".
* Overwrites: with probability `overwrite_fraction` a write rewrites an extent written
  before (same offset and length), drawn from the last REWRITE_WINDOW written extents with
  a bias to recent ones (temporal locality); otherwise it writes space never written in
  this trace. So the fraction of written sectors that were written before (trace stats'
  overwrite fraction) tracks `overwrite_fraction`, until the device is full: when no
  never-written space is left, fresh writes restart at the beginning of the device and the
  measured overwrite fraction rises above the profile's (documented limit: long traces on
  small devices).
* Spatial locality: the device is split into `regions` (like a file system's cylinder
  groups). Each burst picks a region with Zipf(1) weights (a few hot regions) and its
  fresh writes continue sequentially at that region's fill cursor, with small skips.
  Reads re-read a recently written extent (probability `reread_fraction`), continue the
  previous read sequentially (`sequential_read_fraction`), or read a random extent of the
  burst's region.
* Deterministic for a seed: one random.Random(seed) drives everything; Python documents
  random()'s sequence as reproducible across versions for a given seed.

Profiles and the source of each parameter ("assumed" = not given by the papers; chosen,
and labelled as a choice):

  parameter          hplajw      snake       cello       oltp        source
  rate_per_s         0.076       1.5         5.6         50          DCD §3.1 (R&W) for hplajw and cello;
                                                                     snake assumed between them (DCD gives
                                                                     only the extremes); oltp assumed
                                                                     ("medium to high", DCD §3.1)
  write_fraction     0.57        0.57        0.57        0.35        VC-RAID §4.3.1 ("about 57%" in the HP
                                                                     traces); oltp assumed (2 reads : 1 write)
  overwrite_fraction 0.25        0.47        0.35        0.60        DCD §5 (R&W): hplajw 25%, snake 47%,
                                                                     cello about 35%; oltp assumed
  sizes              mostly 8K,  1-8K, 8K    1-8K, some  4K/8K       DCD §3.1, §4.1 (hplajw max 8 KB);
                     max 8K      heavy       16-64K      pages       per-size weights assumed
  burst (small/large/P(large))
                     2/25/.015   2/60/.005   3/30/.02    1/1/0       DCD §3.1 (queues > 5, up to 100-1000);
                                                                     values calibrated, see below; oltp: no
                                                                     bursts ("fairly uniform over time")
  large-burst writes 0.9         0.4         0.8         -           calibrated, see below (UNIX's periodic
                                                                     flush makes the large bursts writes)
  intra_burst_gap_s  0.010       0.008       0.010       -           calibrated (faster than an 8 KB access on
                                                                     the HP C2200A, 33.6 ms, so bursts queue)
  regions            16          16          16          1           assumed; oltp: new data and reads
                                                                     uniform over the device
  reread/sequential  0.4/0.3     0.4/0.3     0.3/0.3     0/0         assumed

Two more profiles stand for the single cello disks the TSS paper replays (§5.2, Table 3):
`cello-usr` (disk 5, /usr, 59.83% writes) and `cello-var` (disk 6, /var, 83.17% writes).
Their write shares are the TSS paper's; rate, bursts, overwrites and regions are cello's
above (assumed: the TSS paper describes the traces no further). Their request sizes (reads
and writes apart) and read locality were calibrated on the paper's RAID0 rows only (Table
3: read / write time per block 4.40 / 7.17 ms for disk 5, 4.30 / 6.98 ms for disk 6), never
on a RAID1, RAID5, cRAID5 or TSS row, replayed as scenarios/tss-table3.toml replays its RAID0
row: raid0 of five 16 KiB-unit columns that are partitions of three Quantum Fireball 1280S
drives, one shared 10 MB/s bus, compaction x1000, one request outstanding, each request's
time over its own KiB averaged over requests. One hour of trace, seed 1, gave read / write
4.51 / 7.23 ms (usr) and 4.24 / 7.07 ms (var). What moved them there: with cello's one size
table, writes were as fast per block as reads and both slower than the paper's, so writes
get their own table weighted to 1-2 KiB (HP-UX's synchronous metadata writes are
fragments: an assumption the paper's faster RAID0 reads point to), reads one weighted to
8 KiB, and re-reads and sequential reads set how often a read finds the arm near. Table 3's
I/O time column was not used: its rows weight reads and writes 60/40 for disk 6 and 83/17
for disk 5, the other disk's write share (results/tss-table3/NOTES.md).

Calibration of the burst parameters (the papers give no burst-size distribution): they were
chosen so that replaying a profile on ONE traditional HP C2200A disk (`raidlab sim --arch
disk`) gives mean and max response times of the order of the *traditional-disk* columns of
DCD Tables 2, 3 and 5 (write mean 134 / 205 / 128 ms, read mean 54 / 159 / 189 ms for hplajw
/ cello / snake): large bursts mostly writes where the paper's traditional disk shows writes
slower than reads (hplajw, cello), mostly reads where it shows the opposite (snake). The DCD
columns were not used, so the DCD-vs-disk comparison is not fitted. Inside small bursts the
write probability is set so the overall write fraction stays `write_fraction`. The earlier
parameters (small/large burst means 4-6/30-60 with P(large) 0.1) made the traditional disk's
mean write response 330 ms (hplajw) to 1060 ms (cello): bursts far larger than the paper's.

The device size defaults to the HP C2200A's formatted capacity (DCD Table 1, 335 MB, the
catalog's `hp-c2200a`), the drive the DCD tables replay on.
"""

from __future__ import annotations

import dataclasses
import random
from collections import deque
from collections.abc import Iterator

from raidlab.errors import UsageError
from raidlab.traces.formats import READ, WRITE, Request

KiB = 1024
ALIGN = KiB
REWRITE_WINDOW = 4096
HP_C2200A_BYTES = 335_333_376  # catalog "hp-c2200a" media capacity (DCD Table 1: 335 MB)


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    description: str
    rate_per_s: float
    write_fraction: float
    overwrite_fraction: float
    sizes: tuple[tuple[int, float], ...]  # (bytes, weight)
    small_burst_mean: float
    large_burst_mean: float
    large_burst_probability: float
    intra_burst_gap_s: float
    regions: int
    reread_fraction: float
    sequential_read_fraction: float
    random_fresh_writes: bool = False  # oltp: new data anywhere, not at a region's cursor
    large_burst_write_fraction: float | None = None  # None: as write_fraction
    write_sizes: tuple[tuple[int, float], ...] | None = None  # None: writes draw from `sizes` too

    @property
    def small_burst_write_fraction(self) -> float:
        """Write probability inside small bursts that keeps the overall fraction exact when
        large (flush) bursts have their own."""
        if self.large_burst_write_fraction is None:
            return self.write_fraction
        p, ms, ml = self.large_burst_probability, self.small_burst_mean, self.large_burst_mean
        small_requests = (1 - p) * ms
        wanted = self.write_fraction * (small_requests + p * ml) - p * ml * self.large_burst_write_fraction
        return min(max(wanted / small_requests, 0.0), 1.0)

    @property
    def mean_burst(self) -> float:
        p = self.large_burst_probability
        return (1 - p) * self.small_burst_mean + p * self.large_burst_mean

    @property
    def mean_idle_gap_s(self) -> float:
        """Mean gap between the end of one burst and the next (keeps the rate exact)."""
        return self.mean_burst / self.rate_per_s - (self.mean_burst - 1) * self.intra_burst_gap_s

    def parameters(self) -> dict:
        return dataclasses.asdict(self) | {"mean_burst": self.mean_burst, "mean_idle_gap_s": self.mean_idle_gap_s,
                                           "small_burst_write_fraction": self.small_burst_write_fraction}


_OFFICE_SMALL = ((1 * KiB, 0.20), (2 * KiB, 0.10), (4 * KiB, 0.15), (8 * KiB, 0.50), (16 * KiB, 0.05))

PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("hplajw", "HP personal workstation (Ruemmler & Wilkes' hplajw), DCD §3.1",
                rate_per_s=0.076, write_fraction=0.57, overwrite_fraction=0.25,
                sizes=((1 * KiB, 0.10), (2 * KiB, 0.05), (4 * KiB, 0.10), (8 * KiB, 0.75)),
                small_burst_mean=2, large_burst_mean=25, large_burst_probability=0.015,
                intra_burst_gap_s=0.010, regions=16, reread_fraction=0.4, sequential_read_fraction=0.3,
                large_burst_write_fraction=0.9),
        Profile("snake", "UC Berkeley file server of 9 workstations (R&W's snake), DCD §3.1",
                rate_per_s=1.5, write_fraction=0.57, overwrite_fraction=0.47,
                sizes=_OFFICE_SMALL,
                small_burst_mean=2, large_burst_mean=60, large_burst_probability=0.005,
                intra_burst_gap_s=0.008, regions=16, reread_fraction=0.4, sequential_read_fraction=0.3,
                large_burst_write_fraction=0.4),
        Profile("cello", "HP Labs timesharing system, ~20 researchers (R&W's cello), DCD §3.1",
                rate_per_s=5.6, write_fraction=0.57, overwrite_fraction=0.35,
                sizes=((1 * KiB, 0.20), (2 * KiB, 0.10), (4 * KiB, 0.15), (8 * KiB, 0.45),
                       (16 * KiB, 0.05), (32 * KiB, 0.03), (64 * KiB, 0.02)),
                small_burst_mean=3, large_burst_mean=30, large_burst_probability=0.02,
                intra_burst_gap_s=0.010, regions=16, reread_fraction=0.3, sequential_read_fraction=0.3,
                large_burst_write_fraction=0.8),
        Profile("oltp", "transaction processing: uniform over time and space, DCD §3.1 (not an HP trace)",
                rate_per_s=50.0, write_fraction=0.35, overwrite_fraction=0.60,
                sizes=((4 * KiB, 0.5), (8 * KiB, 0.5)),
                small_burst_mean=1, large_burst_mean=1, large_burst_probability=0.0,
                intra_burst_gap_s=0.0, regions=1, reread_fraction=0.0, sequential_read_fraction=0.0,
                random_fresh_writes=True),
    )
}


# TSS §5 replays two single disks of cello: their write shares are the paper's (Table 3);
# their write sizes and read locality are calibrated on Table 3's RAID0 rows (module doc).
_TSS_READ_SIZES = ((1 * KiB, 0.10), (2 * KiB, 0.05), (4 * KiB, 0.15), (8 * KiB, 0.55), (16 * KiB, 0.08),
                   (32 * KiB, 0.04), (64 * KiB, 0.03))
_TSS_CALIBRATED = {
    "cello-usr": dict(write_fraction=0.5983, description="cello disk 5 (/usr), TSS Table 3's write share",
                      sizes=_TSS_READ_SIZES,
                      write_sizes=((1 * KiB, 0.42), (2 * KiB, 0.15), (4 * KiB, 0.15), (8 * KiB, 0.23),
                                   (16 * KiB, 0.03), (32 * KiB, 0.01), (64 * KiB, 0.01)),
                      reread_fraction=0.30, sequential_read_fraction=0.30),
    "cello-var": dict(write_fraction=0.8317, description="cello disk 6 (/var), TSS Table 3's write share",
                      sizes=_TSS_READ_SIZES,
                      write_sizes=((1 * KiB, 0.40), (2 * KiB, 0.15), (4 * KiB, 0.15), (8 * KiB, 0.25),
                                   (16 * KiB, 0.03), (32 * KiB, 0.01), (64 * KiB, 0.01)),
                      reread_fraction=0.25, sequential_read_fraction=0.45),
}
for _name, _fields in _TSS_CALIBRATED.items():
    PROFILES[_name] = dataclasses.replace(PROFILES["cello"], name=_name, **_fields)


def _cumulative(table: tuple[tuple[int, float], ...]) -> tuple[list[int], list[float]]:
    """A size table's values and running weights, for `draw`."""
    values, running, total = [], [], 0.0
    for value, weight in table:
        total += weight
        values.append(value)
        running.append(total)
    return values, running


def profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise UsageError(f"unknown trace profile {name!r}", hint=f"use one of: {', '.join(PROFILES)}",
                         profile=name, known=list(PROFILES)) from None


class _Space:
    """Never-written space, handed out region by region at each region's fill cursor."""

    def __init__(self, size: int, regions: int) -> None:
        self.region_size = size // regions // ALIGN * ALIGN
        self.starts = [i * self.region_size for i in range(regions)]
        self.cursors = list(self.starts)
        self.wrapped = 0

    def fresh(self, region: int, length: int, skip: int) -> int:
        regions = len(self.starts)
        for attempt in range(regions):
            r = (region + attempt) % regions
            at = self.cursors[r] + (skip if attempt == 0 else 0)
            if at + length <= self.starts[r] + self.region_size:
                self.cursors[r] = at + length
                return at
        # The device is full of this trace's writes: start again (writes become overwrites).
        self.wrapped += 1
        self.cursors = list(self.starts)
        self.cursors[region] = self.starts[region] + length
        return self.starts[region]


def synth(profile_name: str, duration: float, seed: int, *, device_size: int = HP_C2200A_BYTES) -> Iterator[Request]:
    """Requests of profile `profile_name` for `duration` seconds (see the module doc)."""
    prof = profile(profile_name)
    if duration <= 0:
        raise UsageError(f"duration must be positive, not {duration}")
    max_size = max(size for size, _ in prof.sizes + (prof.write_sizes or ()))
    if device_size < prof.regions * max_size * 4:
        raise UsageError(f"device of {device_size} bytes is too small for profile {prof.name}",
                         hint=f"use at least {prof.regions * max_size * 4} bytes")
    rng = random.Random(seed)
    rand, expo = rng.random, rng.expovariate
    sizes, cumulative = _cumulative(prof.sizes)
    total = cumulative[-1]
    write_sizes, write_cumulative = _cumulative(prof.write_sizes) if prof.write_sizes else (None, None)
    space = _Space(device_size, prof.regions)
    region_weights = [1.0 / (k + 1) for k in range(prof.regions)]
    region_cumulative = [sum(region_weights[: k + 1]) for k in range(prof.regions)]
    written: deque[tuple[int, int]] = deque(maxlen=REWRITE_WINDOW)
    idle_rate = 1.0 / prof.mean_idle_gap_s
    small_p = 1.0 / prof.small_burst_mean
    large_p = 1.0 / prof.large_burst_mean
    region_size = space.region_size

    def draw(table_cumulative: list[float], values: list, total_weight: float):
        u = rand() * total_weight
        for value, limit in zip(values, table_cumulative):
            if u < limit:
                return value
        return values[-1]

    def geometric(p: float) -> int:
        n = 1
        while rand() >= p:
            n += 1
        return n

    time = 0.0
    large_wf = prof.write_fraction if prof.large_burst_write_fraction is None else prof.large_burst_write_fraction
    small_wf = prof.small_burst_write_fraction
    while True:
        large = rand() < prof.large_burst_probability
        burst = geometric(large_p if large else small_p)
        write_fraction = large_wf if large else small_wf
        region = draw(region_cumulative, list(range(prof.regions)), region_cumulative[-1])
        last_read_end = None
        for index in range(burst):
            if index:
                time += expo(1.0 / prof.intra_burst_gap_s)
            if time >= duration:
                return
            length = draw(cumulative, sizes, total)
            if rand() < write_fraction:
                if write_sizes is not None:  # a profile whose writes have their own sizes draws again
                    length = draw(write_cumulative, write_sizes, write_cumulative[-1])
                if written and rand() < prof.overwrite_fraction:
                    # Recency bias: u^2 favours the newest extents of the window.
                    pick = len(written) - 1 - int(len(written) * rand() ** 2)
                    offset, length = written[pick]
                elif prof.random_fresh_writes:
                    offset = int(rand() * (device_size - length) / ALIGN) * ALIGN
                else:
                    skip = 0 if rand() < 0.7 else int(rand() * 16) * ALIGN
                    offset = space.fresh(region, length, skip)
                written.append((offset, length))
                yield Request(time, WRITE, offset, length)
                continue
            u = rand()
            if written and u < prof.reread_fraction:
                offset, length = written[len(written) - 1 - int(len(written) * rand() ** 2)]
            elif last_read_end is not None and u < prof.reread_fraction + prof.sequential_read_fraction \
                    and last_read_end + length <= device_size:
                offset = last_read_end
            else:
                start = space.starts[region]
                offset = start + int(rand() * (region_size - length) / ALIGN) * ALIGN
            last_read_end = offset + length
            yield Request(time, READ, offset, length)
        time += expo(idle_rate)
        if time >= duration:
            return


def label(prof: Profile, duration: float, seed: int, device_size: int) -> list[str]:
    """Comment lines that label a synthetic trace file (raidlab format)."""
    return [
        f"synthetic trace: profile={prof.name} duration_s={duration:g} seed={seed} device_size={device_size}",
        f"{prof.description}; generated by raidlab.traces.synth (NOT the real HP trace)",
        "parameters: " + ", ".join(f"{k}={v}" for k, v in prof.parameters().items()
                                   if k not in ("name", "description")),
    ]
