"""Statically adaptive RAID0 (SA1, SA2, SA3): McCormick, "Implementing a Statically Adaptive
Software RAID System", §2.2.

Idea: put more of every file on the faster disks. At creation each member's bandwidth is
measured (the write-then-read probe below); the relative
bandwidths fill a 100-entry *virtual device array* whose entries name real disks; each
disk appears as many times as its percentage of the total bandwidth. The array is built
once and persisted; the mapping is a pure function of it, so it "remains the same for the
life of the device" (§2.2.2) even if a later probe would measure differently.

Building the array (§2.2.2):
  * SA1: "places consecutive entries" for each disk: disk 0's share, then disk 1's, ...
  * SA2: round robin, one entry per disk per round; "once a disk's performance has been
    used up it is no longer considered in the rotation" (the buckets-and-balls picture).
  * SA3: stride scheduling (Waldspurger & Weihl): every disk starts with pass = stride =
    1/share; 100 times, the disk with the lowest pass gets the next entry and its pass
    grows by its stride.

Mapping (§2.2.1), for logical block (chunk) c:
    index  = c mod 100;  disk = array[index]
    cycles = c div 100   (complete cycles through the array)
    rank   = number of entries before `index` that name the same disk
    row    = cycles * share(disk) + rank
The paper's sentence for the rank reads "determining how many proceeding entries in the
array contain a reference to the same physical device. The number of identical entries is
then subtracted from the virtual index." Taken literally (index minus the count) it would
send, in SA1, the first entry of disk 1 to a row far past disk 1's share and collide
cycles; the only reading that keeps the mapping injective and dense, and that matches the
issue's "cycle count x share + rank within the cycle", is rank = the count of preceding
entries naming the same disk (equivalently: the index minus the entries naming *other*
disks). That is what raidlab does.

Rounding of the shares (the paper does not say): largest remainder (Hamilton) method. Each
disk first gets floor(100 * bw / total) entries; the entries still missing to reach 100 go
to the disks with the largest fractional parts, ties to the lower disk index. All
arithmetic uses exact fractions, so equal bandwidths always give equal shares where 100
allows (4 equal disks: 25 each; 3 equal disks: 34, 33, 33). A disk whose share rounds to
zero would hold no data; that is refused (UsageError) rather than silently dropped.

The probe is the one part of this module that does I/O: (McCormick §2: "test each disks' bandwidth by writing and then reading a
large amount of data to/from each disk and timing the operations"; §4 "a write and then
read on the raw device"): each member in turn gets a sequential write of `probe_bytes` in
1 MiB requests, a flush, and a sequential read of the same range; bandwidth = 2 x bytes /
elapsed. The probe runs in the middle of the member's data area by default, where a file
system will put most of its data; `--probe-at start` measures the first bytes instead. Time
comes from sched.current_time(), so the probe measures the timing model under both clocks.
In virtual time one round measures the model exactly. Live, an emulated drive turns in real
time and the host's load can only add to what it measures (a request that reaches the drive
late waits for the platter to come round again), so the probe runs LIVE_PROBE_ROUNDS rounds
over the members, each round in the opposite order to the one before, and keeps each
member's fastest round: the one the host disturbed least.
It runs from `prepare`, before the layout exists; the layout's methods stay pure.

SA3 exactness: with integer shares s_i summing to 100 and pass starting at 1/s_i, the picks
are the 100 smallest of the values k/s_i (k = 1, 2, ...); exactly sum(s_i) = 100 of them are
<= 1, so every disk gets exactly its share. Ties (equal pass values) go to the lower disk.

Capacity: all members have the same size, so the fastest disk (largest share) fills first:
members must hold at least one complete cycle (else some disk would hold nothing: refused);
complete cycles = min over disks of floor(chunks_per_disk / share); then the longest prefix
of one more cycle that still fits on every disk. Space beyond that on slower disks is
unused (the paper's 128 MB partitions hold a 256 MB file; it never hits this limit).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from fractions import Fraction
from functools import cached_property
from typing import Any, ClassVar

from raidlab import sched
from raidlab.blockdev import SECTOR
from raidlab.engine.layouts.base import ChunkMappedLayout
from raidlab.errors import UsageError

VIRTUAL_DEVICES = 100
TECHNIQUES = ("sa1", "sa2", "sa3")
MiB = 1 << 20
DEFAULT_PROBE_BYTES = 8 * MiB
LIVE_PROBE_ROUNDS = 3  # live only; virtual time needs one (module docstring)


def bandwidth_shares(bandwidths: Sequence[float], entries: int = VIRTUAL_DEVICES) -> tuple[int, ...]:
    """Entries per disk, proportional to bandwidth, summing to `entries` (largest remainder)."""
    if not bandwidths:
        raise UsageError("no bandwidths given", hint="measure every member first")
    exact: list[Fraction] = []
    for disk, bw in enumerate(bandwidths):
        if isinstance(bw, bool) or not isinstance(bw, (int, float, Fraction)) or not math.isfinite(bw) or bw <= 0:
            raise UsageError(f"bandwidth of disk {disk} is {bw!r}; it must be a positive number (bytes/s)")
        exact.append(Fraction(bw))
    total = sum(exact)
    quotas = [entries * bw / total for bw in exact]
    shares = [math.floor(q) for q in quotas]
    missing = entries - sum(shares)
    by_remainder = sorted(range(len(quotas)), key=lambda d: (-(quotas[d] - shares[d]), d))
    for disk in by_remainder[:missing]:
        shares[disk] += 1
    for disk, share in enumerate(shares):
        if share == 0:
            raise UsageError(
                f"disk {disk} has {float(exact[disk] / total) * 100:.2f}% of the total bandwidth; "
                f"its share of the {entries}-entry virtual device array rounds to 0",
                hint="leave that disk out of the array",
                disk=disk,
            )
    return tuple(shares)


def build_sa1(shares: Sequence[int]) -> tuple[int, ...]:
    """SA1: consecutive entries, disk by disk."""
    return tuple(disk for disk, share in enumerate(shares) for _ in range(share))


def build_sa2(shares: Sequence[int]) -> tuple[int, ...]:
    """SA2: round robin over the disks whose share is not used up yet."""
    remaining = list(shares)
    entries: list[int] = []
    while any(remaining):
        for disk, left in enumerate(remaining):
            if left:
                entries.append(disk)
                remaining[disk] -= 1
    return tuple(entries)


def build_sa3(shares: Sequence[int]) -> tuple[int, ...]:
    """SA3: stride scheduling; pass = stride = 1/share, lowest pass (then lowest disk) wins."""
    strides = [Fraction(1, share) for share in shares]
    passes = list(strides)
    entries: list[int] = []
    for _ in range(sum(shares)):
        disk = min(range(len(passes)), key=lambda d: (passes[d], d))
        entries.append(disk)
        passes[disk] += strides[disk]
    return tuple(entries)


BUILDERS = {"sa1": build_sa1, "sa2": build_sa2, "sa3": build_sa3}


def build_virtual_device_array(technique: str, bandwidths: Sequence[float]) -> tuple[int, ...]:
    """The 100-entry virtual device array of `technique` for measured `bandwidths`."""
    if technique not in BUILDERS:
        raise UsageError(f"unknown statically adaptive technique {technique!r}", hint=f"use one of {TECHNIQUES}")
    return BUILDERS[technique](bandwidth_shares(bandwidths))


@dataclasses.dataclass(frozen=True, kw_only=True)
class StaticallyAdaptiveLayout(ChunkMappedLayout):
    """RAID0 through a virtual device array.

    Give either `virtual_device_array` (the persisted truth; always wins) or `bandwidths`
    (measured bytes/s per member; the array is then built with this class's technique).
    Both are kept in the geometry: the array for mapping, the bandwidths as a record.
    """

    virtual_device_array: tuple[int, ...] | None = None
    bandwidths: tuple[float, ...] | None = None

    name: ClassVar[str] = "sa"
    min_disks: ClassVar[int] = 1
    failure_rule: ClassVar[str] = "no failure survives: RAID0"
    source: ClassVar[str] = "SA-RAID paper §2.2"
    option_help: ClassVar[dict[str, str]] = {
        "bandwidths": "member bandwidths (bytes/s) instead of the creation-time probe",
        "virtual_device_array": "the 100-entry array itself instead of building it from bandwidths",
    }

    # The superblock's 4 KiB slot keeps the creation-time probe of every member (its record
    # of why the array is laid out as it is); sixteen members' records fit with room to spare.
    # The paper's arrays have four.
    max_disks: ClassVar[int | None] = 16
    explain_rows: ClassVar[int] = VIRTUAL_DEVICES  # one cycle of the virtual device array fits

    def __post_init__(self) -> None:
        if self.bandwidths is not None and not isinstance(self.bandwidths, tuple):
            object.__setattr__(self, "bandwidths", tuple(self.bandwidths))
        if self.virtual_device_array is None and self.bandwidths is not None:
            if len(self.bandwidths) != self.n_disks:
                raise UsageError(
                    f"{self.name}: {len(self.bandwidths)} bandwidths for {self.n_disks} disks",
                    hint="measure every member once",
                )
            object.__setattr__(self, "virtual_device_array", build_virtual_device_array(self.name, self.bandwidths))
        elif self.virtual_device_array is not None and not isinstance(self.virtual_device_array, tuple):
            object.__setattr__(self, "virtual_device_array", tuple(self.virtual_device_array))
        super().__post_init__()

    @classmethod
    def placeholder_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        """Equal bandwidths stand in for the probe's, so the geometry is checked first."""
        if "bandwidths" in params or "virtual_device_array" in params:
            return params
        return {**params, "bandwidths": tuple([1.0] * params["n_disks"])}

    @classmethod
    def explain_example(cls, n_disks: int, params: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """Without bandwidths or an array: disk 0 twice as fast as the others."""
        if "bandwidths" in params or "virtual_device_array" in params:
            return params, ""
        return ({**params, "bandwidths": (20.0,) + (10.0,) * (n_disks - 1)},
                "bandwidths 20,10,... (an example: disk 0 twice as fast; -o bandwidths=... to change)")

    @classmethod
    def state_lines(cls, arch_state: dict[str, Any]) -> list[str]:
        """The creation-time probe: each member's bandwidth (untimed on a drive model that
        takes no time)."""
        probe = arch_state.get("probe") or []
        if not probe:
            return []
        return ["probe (write then read): " + ", ".join(
            f"d{p['member']} {p['bandwidth'] / 1e6:.1f} MB/s" if p.get("bandwidth") else f"d{p['member']} untimed"
            for p in probe)]

    @classmethod
    async def prepare(cls, members: Sequence[Any], params: dict[str, Any], *, status=None,
                      probe_bytes: int = DEFAULT_PROBE_BYTES, probe_at: str = "middle",
                      ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Measure every member (the probe below) unless bandwidths or an array are given;
        the measurements go into the superblock's arch_state as the record of creation."""
        if "virtual_device_array" in params or "bandwidths" in params:
            return params, {}
        data_offset, member_size = params["data_offset"], params["disk_size"]
        room = member_size - data_offset
        nbytes = min(probe_bytes, room) // SECTOR * SECTOR
        where = data_offset if probe_at == "start" else data_offset + (room - nbytes) // 2 // SECTOR * SECTOR
        best = await probe_members([(index, member, where, nbytes) for index, member in enumerate(members)],
                                   status=status)
        probes = [best[index] for index in range(len(members))]
        untimed = [p.member for p in probes if p.bandwidth == float("inf")]
        if untimed and len(untimed) < len(probes):
            raise UsageError(
                f"members {untimed} take no time (disk model 'none') while the others do: "
                f"their bandwidths cannot be compared",
                hint="give every member a timed disk model, or pass bandwidths explicitly",
            )
        # All untimed: every member is equally (infinitely) fast, so the shares are equal.
        bandwidths = tuple(1.0 for _ in probes) if untimed else tuple(p.bandwidth for p in probes)
        arch_state = {"probe": [dataclasses.asdict(p) | {"bandwidth": None if p.member in untimed else p.bandwidth}
                                for p in probes]}
        return {**params, "bandwidths": bandwidths}, arch_state

    def _validate_options(self) -> None:
        vda = self.virtual_device_array
        if vda is None:
            raise UsageError(f"{self.name} needs measured bandwidths or a virtual device array")
        if len(vda) != VIRTUAL_DEVICES:
            raise UsageError(f"{self.name}: virtual device array has {len(vda)} entries, not {VIRTUAL_DEVICES}")
        for entry in vda:
            if isinstance(entry, bool) or not isinstance(entry, int) or not 0 <= entry < self.n_disks:
                raise UsageError(f"{self.name}: virtual device array entry {entry!r} is not a member 0..{self.n_disks - 1}")
        missing = [d for d in range(self.n_disks) if d not in vda]
        if missing:
            raise UsageError(f"{self.name}: disks {missing} never appear in the virtual device array")
        widest = max(vda.count(d) for d in range(self.n_disks))
        if self.chunks_per_disk < widest:
            # Less than one cycle through the array: some members would hold no data.
            raise UsageError(
                f"{self.name}: members of {self.chunks_per_disk} chunks are smaller than one cycle of the "
                f"virtual device array (the fastest disk takes {widest} chunks per cycle)",
                hint="use larger disks or a smaller chunk",
            )

    @cached_property
    def shares(self) -> tuple[int, ...]:
        """Entries per disk in the virtual device array (its blocks per complete cycle)."""
        return tuple(self.virtual_device_array.count(d) for d in range(self.n_disks))

    @cached_property
    def ranks(self) -> tuple[int, ...]:
        """For each index: how many earlier entries name the same disk (§2.2.1)."""
        seen = [0] * self.n_disks
        out = []
        for disk in self.virtual_device_array:
            out.append(seen[disk])
            seen[disk] += 1
        return tuple(out)

    @cached_property
    def _index_of_rank(self) -> dict[tuple[int, int], int]:
        return {(disk, rank): index for index, (disk, rank) in enumerate(zip(self.virtual_device_array, self.ranks))}

    def _placement_period(self) -> int:
        return VIRTUAL_DEVICES

    @cached_property
    def complete_cycles(self) -> int:
        return min(self.chunks_per_disk // share for share in self.shares)

    @cached_property
    def partial_cycle_entries(self) -> int:
        """Length of the prefix of one more cycle that fits on every disk."""
        left = [self.chunks_per_disk - self.complete_cycles * share for share in self.shares]
        for index, disk in enumerate(self.virtual_device_array):
            if self.ranks[index] >= left[disk]:
                return index
        return VIRTUAL_DEVICES  # pragma: no cover - complete_cycles would be larger

    def _capacity(self) -> int:
        return (self.complete_cycles * VIRTUAL_DEVICES + self.partial_cycle_entries) * self.chunk_bytes

    def _chunk_places(self, chunk: int) -> tuple[tuple[int, int, str], ...]:
        cycles, index = divmod(chunk, VIRTUAL_DEVICES)
        disk = self.virtual_device_array[index]
        return ((disk, cycles * self.shares[disk] + self.ranks[index], "data"),)

    def _chunk_at(self, disk: int, row: int) -> tuple[int, int] | None:
        cycles, rank = divmod(row, self.shares[disk])
        chunk = cycles * VIRTUAL_DEVICES + self._index_of_rank[(disk, rank)]
        if chunk * self.chunk_bytes >= self.capacity:
            return None
        return chunk, 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class SA1Layout(StaticallyAdaptiveLayout):
    name: ClassVar[str] = "sa1"
    summary: ClassVar[str] = "statically adaptive RAID0, consecutive virtual device array"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SA2Layout(StaticallyAdaptiveLayout):
    name: ClassVar[str] = "sa2"
    summary: ClassVar[str] = "statically adaptive RAID0, round-robin virtual device array"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SA3Layout(StaticallyAdaptiveLayout):
    name: ClassVar[str] = "sa3"
    summary: ClassVar[str] = "statically adaptive RAID0, stride-scheduled virtual device array"


# ------------------------------------------------------------------ the bandwidth probe (§2, §4)


@dataclasses.dataclass
class ProbeResult:
    member: int
    bytes: int
    write_seconds: float
    read_seconds: float

    @property
    def elapsed(self) -> float:
        return self.write_seconds + self.read_seconds

    @property
    def bandwidth(self) -> float:
        """Bytes per second; infinite for an untimed member (disk model `none`)."""
        return 2 * self.bytes / self.elapsed if self.elapsed > 0 else float("inf")


async def probe_members(jobs: Sequence[tuple[Any, Any, int, int]], *, status=None) -> dict[Any, ProbeResult]:
    """Probe each job (key, member, offset, nbytes) one after another: one round in virtual
    time, LIVE_PROBE_ROUNDS live in alternating order, keeping each key's fastest round. A key
    is the member's index, or a tuple that starts with it."""
    rounds = 1 if sched.in_kernel() else LIVE_PROBE_ROUNDS
    best: dict[Any, ProbeResult] = {}
    for r in range(rounds):
        for key, member, offset, nbytes in (jobs if r % 2 == 0 else list(reversed(jobs))):
            index = key[0] if isinstance(key, tuple) else key
            if status:
                status(f"probing bandwidth of member {index} ({nbytes / MiB:g} MiB write then read"
                       + (f", round {r + 1} of {rounds})" if rounds > 1 else ")"))
            result = await probe_bandwidth(member, offset, nbytes, index)
            if key not in best or result.elapsed < best[key].elapsed:
                best[key] = result
    return best


async def probe_bandwidth(member, offset: int, nbytes: int, index: int = 0) -> ProbeResult:
    """Write then read `nbytes` sequentially at `offset` of `member`, timed (SA-RAID §2)."""
    step = MiB
    pattern = bytes(range(256)) * (step // 256)
    start = sched.current_time()
    pos = offset
    while pos < offset + nbytes:
        n = min(step, offset + nbytes - pos)
        await member.write(pos, pattern[:n])
        pos += n
    await member.flush()
    written = sched.current_time()
    pos = offset
    while pos < offset + nbytes:
        n = min(step, offset + nbytes - pos)
        await member.read(pos, n)
        pos += n
    done = sched.current_time()
    return ProbeResult(index, nbytes, written - start, done - written)
