"""The common shape of every layout: pure functions from a logical byte range to member I/O.

Why this module exists: the engine (written separately, in trio) must serve every
architecture through one request path, and students must be able to ask any layout the
same questions ("where does this range live?", "what does this write cost?", "what do I
read when disk 2 is dead?"). So a layout is an immutable value (a frozen dataclass built
from the geometry) whose methods only compute; they never perform I/O. The engine executes
the plans they return. This follows the OSTEP raid.py habit (mapping as small pure
functions) and md's split between the mapping (raid5_compute_sector, __raid10_find_phys)
and the I/O state machine around it.

Units: every offset and length is in bytes and a multiple of SECTOR (512). Disk offsets are
offsets on the *member device*, with `data_offset` already added: the engine keeps its own
metadata in [0, data_offset) of every member (md 1.2 does the same with its superblock), and
the layout owns [data_offset, data_offset + member_data_size).

The questions a layout answers (see `Layout`):
    capacity                      bytes of the array
    map(off, len)                 the primary physical extents of a read
    copies(off, len)              every copy of every piece (read balancing, scrub)
    write_plan(off, len, failed)  pre-reads, every physical write, how to build payloads
    degraded_read_plan(off, len, failed)  what to read and what to XOR with members failed
    rebuild_plan(disk, off, len, failed)  how to recompute a member's bytes (replace)
    locate(disk, disk_off)        the reverse question: what lives at this member byte
    survives(failed) / redundancy which failure sets lose no data
    geometry() / from_geometry()  a JSON-able dict for the member superblocks

Plans are plain data. A ReadPlan lists disk ranges to read and how to assemble the result
(each piece is a copy or the XOR of several ranges); a WritePlan lists pre-reads, writes
(roles data/mirror/image/parity), writes skipped because their disk is failed, and for
parity writes a recipe of XOR terms. `ReadPlan.assemble` and `WritePlan.payloads` turn the
buffers the engine read into bytes, so the engine never re-derives the math.
"""

from __future__ import annotations

import dataclasses
import errno
import itertools
from collections.abc import Iterable, Iterator, Sequence
from functools import cached_property
from typing import Any, ClassVar

from raidlab.blockdev import SECTOR
from raidlab.engine.layouts.xor import xor_blocks
from raidlab.errors import UsageError

KiB = 1024
MiB = 1024 * KiB
# md's default chunk since mdadm 3.1.
DEFAULT_CHUNK = 512 * KiB


class DataUnavailableError(OSError):
    """The requested bytes have no surviving copy and cannot be reconstructed (EIO).

    Not a RaidlabError: it is what a failed array answers to I/O, and the engine turns it
    into EIO on the block device. Fields: failed_disks.
    """

    def __init__(self, message: str, *, failed_disks: Iterable[int] = ()):
        super().__init__(errno.EIO, message)
        self.failed_disks = tuple(sorted(failed_disks))


# --------------------------------------------------------------------------- plan types


@dataclasses.dataclass(frozen=True, slots=True)
class DiskRange:
    """A contiguous range of one member device (bytes, data_offset included)."""

    disk: int
    disk_offset: int
    length: int

    @property
    def end(self) -> int:
        return self.disk_offset + self.length


@dataclasses.dataclass(frozen=True, slots=True)
class Extent:
    """One physical request carrying logical data (or parity, whose logical_offset is None).

    role: "data" (the primary copy), "mirror" (another copy, raid1/raid10/chained),
    "image" (RAID-x's background image), "parity" (raid5). copy: 0 for the primary.
    """

    disk: int
    disk_offset: int
    length: int
    logical_offset: int | None
    role: str = "data"
    copy: int = 0

    @property
    def end(self) -> int:
        return self.disk_offset + self.length


@dataclasses.dataclass(frozen=True)
class Location:
    """The answer to "what lives at this member byte?" (the reverse mapping).

    role: data / mirror / image / parity / unused (inside the data area but mapped to no
    logical byte) / reserved (before data_offset or past member_data_size).
    """

    role: str
    logical_offset: int | None = None
    copy: int = 0
    stripe: int | None = None


@dataclasses.dataclass(frozen=True)
class Piece:
    """Bytes [offset, offset+length) of a plan's result: the XOR of every source.

    A source is (index into plan.reads, offset inside that read). One source is a plain
    copy; none means zeros (an unused region being rebuilt).
    """

    offset: int
    length: int
    sources: tuple[tuple[int, int], ...]


@dataclasses.dataclass(frozen=True)
class ReadPlan:
    """Read `reads`, then `assemble` the buffers into the `length` bytes at `offset`.

    For a read plan, offset is a logical (array) offset; for a rebuild plan it is a member
    offset of the disk being rebuilt.
    """

    offset: int
    length: int
    reads: tuple[DiskRange, ...]
    pieces: tuple[Piece, ...]

    @property
    def reconstructs(self) -> bool:
        """True when some bytes come from an XOR of several ranges (parity reconstruction)."""
        return any(len(p.sources) > 1 for p in self.pieces)

    def assemble(self, buffers: Sequence[bytes | bytearray | memoryview]) -> bytes:
        if len(buffers) != len(self.reads):
            raise ValueError(f"assemble: {len(buffers)} buffers for {len(self.reads)} reads")
        for rng, buf in zip(self.reads, buffers):
            if len(buf) != rng.length:
                raise ValueError(f"assemble: buffer of {len(buf)} bytes for a read of {rng.length}")
        views = [memoryview(b).cast("B") for b in buffers]
        out = bytearray(self.length)
        for piece in self.pieces:
            start = piece.offset - self.offset
            if not piece.sources:
                continue
            operands = [views[i][off : off + piece.length] for i, off in piece.sources]
            if len(operands) == 1:
                out[start : start + piece.length] = operands[0]
            else:
                out[start : start + piece.length] = xor_blocks(operands)
        return bytes(out)


@dataclasses.dataclass(frozen=True)
class ParitySegment:
    """Bytes [offset, offset+length) of one parity write: XOR of new data and read ranges.

    new_data: logical offsets of the new data operands (each `length` long);
    reads: (index into plan.reads, offset inside that read) operands.
    """

    offset: int
    length: int
    new_data: tuple[int, ...]
    reads: tuple[tuple[int, int], ...]


@dataclasses.dataclass(frozen=True)
class RowsWrite:
    """How rows [start, end) of a raid5 stripe (bytes inside the chunk, the same on every
    member) are written: every row of the range has the same data chunks being written, so
    md's per-row choice is the same for each. rmw_read_bytes / rcw_read_bytes are what each
    method would read over the range (None: impossible with the failed disk)."""

    start: int
    end: int
    method: str
    rmw_read_bytes: int | None
    rcw_read_bytes: int | None


@dataclasses.dataclass(frozen=True)
class StripeWrite:
    """How one raid5 stripe is written, with the cost of both methods (for teaching).

    method: "full-stripe" (no reads), "rmw" (read-modify-write: old data + old parity),
    "rcw" (reconstruct-write: the data not being written), "rmw+rcw" (rows of the stripe
    differ: each row takes its own method, degraded or not), "no-parity" (the parity disk
    is failed: data is written, parity is not). As md decides in handle_stripe_dirtying,
    per row (one stripe_head: a page of every member): read-modify-write only where it
    reads strictly fewer bytes than reconstruct-write, so a tie goes to RCW; degraded, each
    row takes the only method that avoids the failed disk. `rows` has the choice for each
    range of rows with the same data chunks written. rmw_reads / rcw_reads and
    rmw_read_bytes / rcw_read_bytes are what each method would read if the whole stripe
    used it (read requests and bytes; None when impossible with the failed disk).
    """

    stripe: int
    method: str
    reads: int
    writes: int
    rmw_reads: int | None
    rcw_reads: int | None
    rmw_read_bytes: int | None = None
    rcw_read_bytes: int | None = None
    rows: tuple[RowsWrite, ...] = ()


@dataclasses.dataclass(frozen=True)
class WritePlan:
    """Every physical I/O of one logical write.

    1. issue `reads` (may be empty), 2. call `payloads(new_data, read_buffers)`, 3. issue
    `writes` with those payloads. `skipped` are writes that would go to failed disks.
    """

    offset: int
    length: int
    writes: tuple[Extent, ...]
    reads: tuple[DiskRange, ...] = ()
    skipped: tuple[Extent, ...] = ()
    parity_recipes: tuple[tuple[ParitySegment, ...] | None, ...] = ()
    stripes: tuple[StripeWrite, ...] = ()

    @property
    def full_stripe(self) -> bool:
        """True when every stripe touched is written whole (raid5: no pre-reads at all)."""
        return bool(self.stripes) and all(s.method == "full-stripe" for s in self.stripes)

    def io_counts(self) -> dict[str, int]:
        return {
            "reads": len(self.reads),
            "writes": len(self.writes),
            "read_bytes": sum(r.length for r in self.reads),
            "write_bytes": sum(w.length for w in self.writes),
            "skipped": len(self.skipped),
        }

    def payloads(
        self,
        new_data: bytes | bytearray | memoryview,
        read_buffers: Sequence[bytes | bytearray | memoryview] = (),
        *,
        data_views: bool = False,
    ) -> list[bytes | memoryview]:
        """The bytes of each write, in the order of `writes`. With `data_views` a data write's
        payload is a view of `new_data`, not a copy (for a caller that writes the payloads out
        before `new_data` can change); parity is always computed into bytes of its own."""
        new = memoryview(new_data).cast("B")
        if len(new) != self.length:
            raise ValueError(f"payloads: {len(new)} bytes of new data for a {self.length}-byte write")
        if len(read_buffers) != len(self.reads):
            raise ValueError(f"payloads: {len(read_buffers)} buffers for {len(self.reads)} reads")
        views = [memoryview(b).cast("B") for b in read_buffers]
        result: list[bytes | memoryview] = []
        for index, write in enumerate(self.writes):
            recipe = self.parity_recipes[index] if self.parity_recipes else None
            if recipe is None:
                start = write.logical_offset - self.offset
                piece = new[start : start + write.length]
                result.append(piece if data_views else bytes(piece))
                continue
            if len(recipe) == 1 and recipe[0].offset == 0 and recipe[0].length == write.length:
                seg = recipe[0]   # one segment over the whole write: its XOR is the payload
                operands = [new[lo - self.offset : lo - self.offset + seg.length] for lo in seg.new_data]
                operands += [views[i][off : off + seg.length] for i, off in seg.reads]
                result.append(xor_blocks(operands))
                continue
            buf = bytearray(write.length)
            for seg in recipe:
                operands = [new[lo - self.offset : lo - self.offset + seg.length] for lo in seg.new_data]
                operands += [views[i][off : off + seg.length] for i, off in seg.reads]
                buf[seg.offset : seg.offset + seg.length] = xor_blocks(operands)
            result.append(bytes(buf))
        return result


@dataclasses.dataclass(frozen=True)
class Redundancy:
    """Which member failures an array survives.

    copies: copies of each data byte (1 for raid0 and raid5; raid5 has parity=True).
    any_failures: every set of this many failed members loses nothing.
    max_failures: the largest set of failed members that some placement survives
    (None when the array is too large to enumerate).
    rule: the survivable sets in words.
    """

    copies: int
    parity: bool
    any_failures: int
    max_failures: int | None
    rule: str


class RangeCollector:
    """Collects wanted disk ranges, merges overlapping/adjacent ones per disk into reads.

    `want` returns a token; after `build`, `source(token)` gives (read index, offset).
    Merging adjacent ranges turns e.g. two consecutive chunk rows of one disk into one
    request, as the block layer would merge them.
    """

    def __init__(self) -> None:
        self._wanted: list[tuple[int, int, int]] = []
        self._sources: list[tuple[int, int]] | None = None
        self.reads: tuple[DiskRange, ...] = ()

    def want(self, disk: int, disk_offset: int, length: int) -> int:
        self._wanted.append((disk, disk_offset, length))
        return len(self._wanted) - 1

    def count(self) -> tuple[int, int]:
        """(requests, bytes) the wanted ranges would cost once merged."""
        reads = self._merge()
        return len(reads), sum(r.length for r in reads)

    def _merge(self) -> list[DiskRange]:
        merged: list[DiskRange] = []
        for disk, start, length in sorted(set(self._wanted)):
            end = start + length
            if merged and merged[-1].disk == disk and start <= merged[-1].end:
                last = merged[-1]
                if end > last.end:
                    merged[-1] = DiskRange(disk, last.disk_offset, end - last.disk_offset)
            else:
                merged.append(DiskRange(disk, start, length))
        return merged

    def build(self) -> tuple[DiskRange, ...]:
        merged = self._merge()
        self.reads = tuple(merged)
        sources: list[tuple[int, int]] = []
        for disk, start, _length in self._wanted:
            # Binary search would do; plans are small (a handful of reads).
            for index, rng in enumerate(merged):
                if rng.disk == disk and rng.disk_offset <= start < rng.end:
                    sources.append((index, start - rng.disk_offset))
                    break
            else:  # pragma: no cover - impossible by construction
                raise AssertionError("range lost while merging")
        self._sources = sources
        return self.reads

    def source(self, token: int) -> tuple[int, int]:
        assert self._sources is not None, "call build() first"
        return self._sources[token]


def merge_extents(extents: Iterable[Extent]) -> list[Extent]:
    """Merge consecutive extents contiguous both on disk and logically (same role/copy)."""
    out: list[Extent] = []
    for ext in extents:
        if out:
            last = out[-1]
            if (
                last.disk == ext.disk
                and last.role == ext.role
                and last.copy == ext.copy
                and last.end == ext.disk_offset
                and last.logical_offset is not None
                and ext.logical_offset is not None
                and last.logical_offset + last.length == ext.logical_offset
            ):
                out[-1] = dataclasses.replace(last, length=last.length + ext.length)
                continue
        out.append(ext)
    return out


def format_size(nbytes: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size and nbytes % size == 0:
            return f"{nbytes // size} {unit}"
    return f"{nbytes} bytes"


# --------------------------------------------------------------------------- layouts


@dataclasses.dataclass(frozen=True, kw_only=True)
class Layout:
    """Geometry common to every layout; subclasses add their options as fields.

    n_disks: members; disk_size: bytes of each member device; chunk_bytes: stripe unit;
    data_offset: bytes reserved at the start of every member for the engine's metadata;
    member_data_size: bytes the layout may use after data_offset (default: the rest).
    """

    n_disks: int
    disk_size: int
    chunk_bytes: int = DEFAULT_CHUNK
    data_offset: int = 0
    member_data_size: int | None = None

    name: ClassVar[str] = "?"
    min_disks: ClassVar[int] = 1
    # An array whose creation record grows with its members (SA's bandwidth probes) must fit
    # the superblock's 4 KiB slot: at most this many members (None: no limit of its own). The
    # layout itself, a pure mapping, takes any number (raidlab explain); building refuses more
    # (raidlab.engine.build.check_geometry).
    max_disks: ClassVar[int | None] = None
    # False when the chunk only splits requests and need not divide the member (raid1).
    uses_chunks: ClassVar[bool] = True
    # Which failure sets survive, in words (Redundancy.rule).
    failure_rule: ClassVar[str] = ""
    # Which copy md's driver of the same level reads, for mirrored layouts md also has (the
    # engine reads a block's first surviving copy); `raidlab explain` shows it beside a read.
    md_read_policy: ClassVar[str] = ""
    # What the layout is and which paper and section it follows, in one line each, and a
    # line per option: what `raidlab archs` and `raidlab create --help` show.
    summary: ClassVar[str] = ""
    source: ClassVar[str] = ""
    option_help: ClassVar[dict[str, str]] = {}
    # True when the layout's image copies go through the array's image hook (RAID-x's buffer
    # of pending images, raidlab.engine.imagebuffer) instead of straight to their homes.
    buffers_images: ClassVar[bool] = False
    # `raidlab explain`: chunk rows per member when no --disk-size is given.
    explain_rows: ClassVar[int] = 16

    def __post_init__(self) -> None:
        if self.member_data_size is None and isinstance(self.disk_size, int) and isinstance(self.data_offset, int):
            object.__setattr__(self, "member_data_size", self.disk_size - self.data_offset)
        self.validate()

    # ---- creation-time work

    @classmethod
    def placeholder_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        """`params` completed with stand-ins for what `prepare` will measure, so the geometry
        can be checked before anything is measured. Most layouts measure nothing."""
        return params

    @classmethod
    async def prepare(cls, members: Sequence[Any], params: dict[str, Any], *, status=None,
                      **options: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """Creation-time work over the member targets before the layout is built: returns the
        layout's params and what to record in the superblock's arch_state. Most layouts have
        none; SA-RAID measures its members here (raidlab.engine.layouts.sa)."""
        if options:
            raise UsageError(f"{cls.name} takes no creation options ({', '.join(sorted(options))})")
        return params, {}

    @classmethod
    def explain_example(cls, n_disks: int, params: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """`raidlab explain`: `params` completed with example values for what creation would
        measure (SA-RAID's bandwidths), and a note naming them ("" when none was needed)."""
        return params, ""

    @classmethod
    def state_lines(cls, arch_state: dict[str, Any]) -> list[str]:
        """`raidlab status`: what the creation record `prepare` kept in the superblock's
        arch_state says, in lines (SA-RAID's probe); none for most layouts."""
        return []

    # ---- validation

    def validate(self) -> None:
        """Raise UsageError (one line saying what to do) for an impossible geometry."""
        for field in ("n_disks", "disk_size", "chunk_bytes", "data_offset", "member_data_size"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool):
                raise UsageError(f"{self.name}: {field} must be an integer, got {value!r}")
        if self.n_disks < self.min_disks:
            raise UsageError(
                f"{self.name} needs at least {self.min_disks} disks, got {self.n_disks}",
                hint=f"use --disks {self.min_disks} or more",
                arch=self.name, n_disks=self.n_disks, min_disks=self.min_disks,
            )
        if self.chunk_bytes <= 0 or self.chunk_bytes % SECTOR:
            raise UsageError(
                f"chunk {self.chunk_bytes} bytes is not a positive multiple of {SECTOR}",
                hint="use e.g. --chunk 4K, 64K or 512K",
                chunk=self.chunk_bytes,
            )
        if self.disk_size <= 0 or self.disk_size % SECTOR:
            raise UsageError(f"disk size {self.disk_size} bytes is not a positive multiple of {SECTOR}",
                             hint="use a size such as 64M or 1G", disk_size=self.disk_size)
        if self.data_offset < 0 or self.data_offset % SECTOR:
            raise UsageError(f"data offset {self.data_offset} is not a non-negative multiple of {SECTOR}",
                             data_offset=self.data_offset)
        room = self.disk_size - self.data_offset
        if self.member_data_size <= 0 or self.member_data_size > room or self.member_data_size % SECTOR:
            raise UsageError(
                f"member data size {self.member_data_size} does not fit: each member has "
                f"{max(room, 0)} bytes after the {self.data_offset}-byte metadata area",
                hint="use larger disks",
                member_data_size=self.member_data_size, disk_size=self.disk_size,
            )
        if self.uses_chunks and self.member_data_size % self.chunk_bytes:
            raise UsageError(
                f"chunk {format_size(self.chunk_bytes)} does not divide the member data size "
                f"{format_size(self.member_data_size)} ({self.member_data_size} bytes)",
                hint="pick a disk size that is a multiple of the chunk, or a smaller chunk",
                chunk=self.chunk_bytes, member_data_size=self.member_data_size,
            )
        self._validate_options()
        if self.capacity <= 0:
            raise UsageError(
                f"{self.name}: members of {format_size(self.member_data_size)} are too small "
                f"for chunk {format_size(self.chunk_bytes)} with {self.n_disks} disks",
                hint="use larger disks or a smaller chunk",
            )

    def _validate_options(self) -> None:
        """Layout-specific checks (override)."""

    # ---- derived geometry

    @property
    def chunks_per_disk(self) -> int:
        """Whole chunks in each member's data area."""
        return self.member_data_size // self.chunk_bytes

    @cached_property
    def capacity(self) -> int:
        """Bytes of the array."""
        return self._capacity()

    def _capacity(self) -> int:
        raise NotImplementedError

    def check_range(self, offset: int, length: int) -> None:
        """ValueError unless [offset, offset+length) is sector-aligned and inside the array."""
        if offset % SECTOR or length % SECTOR:
            raise ValueError(f"{self.name}: unaligned request offset={offset} length={length}")
        if offset < 0 or length <= 0 or offset + length > self.capacity:
            raise ValueError(
                f"{self.name}: request offset={offset} length={length} outside array of {self.capacity} bytes"
            )

    def check_member_range(self, disk: int, disk_offset: int, length: int) -> None:
        if not 0 <= disk < self.n_disks:
            raise ValueError(f"{self.name}: no member {disk} (members 0..{self.n_disks - 1})")
        if disk_offset % SECTOR or length % SECTOR or length <= 0:
            raise ValueError(f"{self.name}: unaligned member range offset={disk_offset} length={length}")
        end = self.data_offset + self.member_data_size
        if disk_offset < self.data_offset or disk_offset + length > end:
            raise ValueError(
                f"{self.name}: member range [{disk_offset}, {disk_offset + length}) is outside the "
                f"data area [{self.data_offset}, {end})"
            )

    def _failed_set(self, failed: Iterable[int]) -> frozenset[int]:
        failed_set = frozenset(failed)
        for disk in failed_set:
            if not 0 <= disk < self.n_disks:
                raise ValueError(f"{self.name}: no member {disk} (members 0..{self.n_disks - 1})")
        return failed_set

    # ---- the questions (overridden by the two families below)

    def map(self, offset: int, length: int) -> list[Extent]:
        raise NotImplementedError

    def copies(self, offset: int, length: int) -> list[tuple[Extent, ...]]:
        raise NotImplementedError

    def write_plan(self, offset: int, length: int, failed: Iterable[int] = ()) -> WritePlan:
        raise NotImplementedError

    def degraded_read_plan(self, offset: int, length: int, failed: Iterable[int]) -> ReadPlan:
        raise NotImplementedError

    def read_plan(self, offset: int, length: int) -> ReadPlan:
        """The plan of a read with every member healthy."""
        return self.degraded_read_plan(offset, length, ())

    def rebuild_plan(self, disk: int, disk_offset: int, length: int, failed: Iterable[int] = ()) -> ReadPlan:
        raise NotImplementedError

    def locate(self, disk: int, disk_offset: int) -> Location:
        """What lives at byte `disk_offset` of member `disk`: reserved outside the data area,
        else what `_locate_in_row` finds in its chunk-sized row (a stripe for raid5)."""
        if not 0 <= disk < self.n_disks:
            raise ValueError(f"{self.name}: no member {disk}")
        rel = disk_offset - self.data_offset
        if rel < 0 or rel >= self.member_data_size:
            return Location("reserved")
        row, within = divmod(rel, self.chunk_bytes)
        return self._locate_in_row(disk, row, within)

    def _locate_in_row(self, disk: int, row: int, within: int) -> Location:
        raise NotImplementedError

    # ---- failures

    def failure_groups(self) -> frozenset[frozenset[int]]:
        """Sets of disks that together hold every copy of some data (lost iff all failed)."""
        raise NotImplementedError

    def survives(self, failed: Iterable[int]) -> bool:
        """True when no data is lost with these members failed."""
        failed_set = self._failed_set(failed)
        return not any(group <= failed_set for group in self.failure_groups())

    @cached_property
    def redundancy(self) -> Redundancy:
        groups = self.failure_groups()
        any_failures = min(len(g) for g in groups) - 1 if groups else self.n_disks
        max_failures: int | None = None
        if self.n_disks <= 12:
            masks = [sum(1 << d for d in g) for g in groups]
            max_failures = 0
            for size in range(self.n_disks, 0, -1):
                found = False
                for combo in itertools.combinations(range(self.n_disks), size):
                    fmask = sum(1 << d for d in combo)
                    if not any(m & ~fmask == 0 for m in masks):
                        found = True
                        break
                if found:
                    max_failures = size
                    break
        return Redundancy(
            copies=self._copies_per_byte(),
            parity=self._has_parity(),
            any_failures=any_failures,
            max_failures=max_failures,
            rule=self.failure_rule,
        )

    def _copies_per_byte(self) -> int:
        return 1

    def _has_parity(self) -> bool:
        return False

    @property
    def parity_stripe_bytes(self) -> int | None:
        """Logical bytes of one parity stripe (a write of a whole one needs no pre-read),
        stripes starting at multiples of it; None for a layout without parity."""
        return None

    def parity_write_span(self, offset: int, length: int) -> tuple[int, int] | None:
        """[lo, hi): member bytes, at the same offsets on every member, that hold all the
        member I/O of a write of this logical range whatever has failed and whatever is
        cached, where the layout can say so without planning (a parity write inside one
        chunk); None otherwise, and then a plan says it."""
        return None

    # ---- persistence

    def geometry(self) -> dict[str, Any]:
        """JSON-able description; `layout_from_geometry` rebuilds an equal layout from it."""
        out: dict[str, Any] = {"arch": self.name}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            out[field.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_geometry(cls, geometry: dict[str, Any]) -> Layout:
        params = dict(geometry)
        arch = params.pop("arch", cls.name)
        if arch != cls.name:
            raise UsageError(f"geometry is for {arch!r}, not {cls.name!r}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(params) - names
        if unknown:
            raise UsageError(f"{cls.name}: unknown geometry fields {sorted(unknown)}")
        for key, value in params.items():
            if isinstance(value, list):
                params[key] = tuple(value)
        return cls(**params)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChunkMappedLayout(Layout):
    """Layouts where each logical chunk has whole-chunk copies at (disk, chunk row) places.

    raid0, raid1, raid10, chained declustering, RAID-x and the SA-RAID layouts differ only
    in `_chunk_places` (chunk -> places, primary first) and `_chunk_at` (its inverse); every
    plan below is derived from those two functions, so an injectivity test of the pair
    covers reads, writes, degraded reads and rebuilds alike.
    """

    # Chunks after which the pattern of disks holding a chunk's copies repeats.
    def _placement_period(self) -> int:
        return self.n_disks

    @property
    def logical_chunks(self) -> int:
        """Logical chunks of the array (the last may be partial for raid1)."""
        return -(-self.capacity // self.chunk_bytes)

    def _chunk_places(self, chunk: int) -> tuple[tuple[int, int, str], ...]:
        """(disk, chunk row on that disk, role) of every copy of `chunk`, primary first."""
        raise NotImplementedError

    def _chunk_at(self, disk: int, row: int) -> tuple[int, int] | None:
        """(chunk, copy index) stored at chunk `row` of `disk`, or None if unused."""
        raise NotImplementedError

    def _copies_per_byte(self) -> int:
        return len(self._chunk_places(0))

    def _pieces(self, offset: int, length: int) -> Iterator[tuple[int, int, int, int]]:
        """(chunk, offset inside chunk, length, logical offset) splitting at chunk boundaries."""
        self.check_range(offset, length)
        chunk_bytes = self.chunk_bytes
        pos, end = offset, offset + length
        while pos < end:
            chunk, within = divmod(pos, chunk_bytes)
            n = min(chunk_bytes - within, end - pos)
            yield chunk, within, n, pos
            pos += n

    def _extent(self, place: tuple[int, int, str], copy: int, within: int, n: int, logical: int) -> Extent:
        disk, row, role = place
        return Extent(disk, self.data_offset + row * self.chunk_bytes + within, n, logical, role, copy)

    def copies(self, offset: int, length: int) -> list[tuple[Extent, ...]]:
        return [
            tuple(self._extent(place, copy, within, n, logical) for copy, place in enumerate(self._chunk_places(chunk)))
            for chunk, within, n, logical in self._pieces(offset, length)
        ]

    def map(self, offset: int, length: int) -> list[Extent]:
        return merge_extents(
            self._extent(self._chunk_places(chunk)[0], 0, within, n, logical)
            for chunk, within, n, logical in self._pieces(offset, length)
        )

    def write_plan(self, offset: int, length: int, failed: Iterable[int] = ()) -> WritePlan:
        failed_set = self._failed_set(failed)
        per_copy: dict[int, list[Extent]] = {}
        for piece in self.copies(offset, length):
            if all(ext.disk in failed_set for ext in piece):
                raise DataUnavailableError(
                    f"{self.name}: logical bytes {piece[0].logical_offset}+{piece[0].length} have no "
                    f"surviving copy (failed members {sorted(failed_set)})",
                    failed_disks=failed_set,
                )
            for ext in piece:
                per_copy.setdefault(ext.copy, []).append(ext)
        writes: list[Extent] = []
        skipped: list[Extent] = []
        for copy in sorted(per_copy):
            for ext in merge_extents(per_copy[copy]):
                (skipped if ext.disk in failed_set else writes).append(ext)
        return WritePlan(offset, length, tuple(writes), skipped=tuple(skipped))

    def degraded_read_plan(self, offset: int, length: int, failed: Iterable[int]) -> ReadPlan:
        failed_set = self._failed_set(failed)
        collector = RangeCollector()
        wanted: list[tuple[int, int, int]] = []
        for piece in self.copies(offset, length):
            for ext in piece:
                if ext.disk not in failed_set:
                    wanted.append((ext.logical_offset, ext.length, collector.want(ext.disk, ext.disk_offset, ext.length)))
                    break
            else:
                raise DataUnavailableError(
                    f"{self.name}: logical bytes {piece[0].logical_offset}+{piece[0].length} have no "
                    f"surviving copy (failed members {sorted(failed_set)})",
                    failed_disks=failed_set,
                )
        reads = collector.build()
        pieces = tuple(Piece(lo, n, (collector.source(tok),)) for lo, n, tok in wanted)
        return ReadPlan(offset, length, reads, pieces)

    def rebuild_plan(self, disk: int, disk_offset: int, length: int, failed: Iterable[int] = ()) -> ReadPlan:
        """How to recompute member `disk`'s bytes [disk_offset, +length) from the others."""
        self.check_member_range(disk, disk_offset, length)
        unusable = self._failed_set(failed) | {disk}
        collector = RangeCollector()
        wanted: list[tuple[int, int, int | None]] = []
        pos, end = disk_offset, disk_offset + length
        chunk_bytes = self.chunk_bytes
        while pos < end:
            row, within = divmod(pos - self.data_offset, chunk_bytes)
            n = min(chunk_bytes - within, end - pos)
            found = self._chunk_at(disk, row)
            if found is None or found[0] * chunk_bytes + within >= self.capacity:
                wanted.append((pos, n, None))  # unused: zeros
            else:
                chunk, copy = found
                for other_copy, (odisk, orow, _role) in enumerate(self._chunk_places(chunk)):
                    if other_copy != copy and odisk not in unusable:
                        tok = collector.want(odisk, self.data_offset + orow * chunk_bytes + within, n)
                        wanted.append((pos, n, tok))
                        break
                else:
                    raise DataUnavailableError(
                        f"{self.name}: member {disk} bytes at {pos} (chunk {chunk}) have no other surviving copy",
                        failed_disks=unusable,
                    )
            pos += n
        reads = collector.build()
        pieces = tuple(Piece(p, n, () if tok is None else (collector.source(tok),)) for p, n, tok in wanted)
        return ReadPlan(disk_offset, length, reads, pieces)

    def _locate_in_row(self, disk: int, row: int, within: int) -> Location:
        found = self._chunk_at(disk, row)
        if found is None:
            return Location("unused")
        chunk, copy = found
        logical = chunk * self.chunk_bytes + within
        if logical >= self.capacity:
            return Location("unused")
        role = self._chunk_places(chunk)[copy][2]
        return Location(role, logical, copy)

    @cached_property
    def _groups(self) -> frozenset[frozenset[int]]:
        span = min(self.logical_chunks, self._placement_period())
        return frozenset(frozenset(d for d, _r, _role in self._chunk_places(c)) for c in range(span))

    def failure_groups(self) -> frozenset[frozenset[int]]:
        return self._groups
