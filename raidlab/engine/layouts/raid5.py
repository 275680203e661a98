"""RAID5 (and RAID4) exactly as md lays them out, every md algorithm, with write planning (RMW / RCW).

Mapping: Linux drivers/md/raid5.c, `raid5_compute_sector`, read from torvalds/linux at
commit 0021b7bc045e4b0b85d8c53614342aaf84ca96a5:

    chunk_offset = sector_div(r_sector, sectors_per_chunk);   chunk_number = r_sector;
    stripe = chunk_number;  *dd_idx = sector_div(stripe, data_disks);  stripe2 = stripe;
    new_sector = stripe * sectors_per_chunk + chunk_offset;

so every member stores stripe s (a row of chunks, one per member) at chunk row s, and the
algorithm (md's `layout`, `ALGORITHMS`) places the parity and the data of stripe s, with
d = 0..N-2 the data chunk's index in the stripe and N the members:

    left-asymmetric  (0)  parity (N-1) - (s mod N); data d on d, or d+1 from the parity on
    right-asymmetric (1)  parity s mod N;           data d on d, or d+1 from the parity on
    left-symmetric   (2)  parity (N-1) - (s mod N); data d on (parity + 1 + d) mod N
    right-symmetric  (3)  parity s mod N;           data d on (parity + 1 + d) mod N
    parity-first     (4)  parity 0;                 data d on d + 1
    parity-last      (5)  parity N-1;               data d on d

left-symmetric is md's default. md's RAID4 (level 4) is parity-last: `algorithm=parity-last`
is RAID4 here, member for member. With data_offset equal to md's data offset, the engine
reads an md array's members and md reads ours.

Writes (what md's handle_stripe_dirtying weighs; we plan it up front, per stripe):
  * full-stripe write: every data chunk of the stripe is overwritten; parity is the XOR of
    the new data; no reads at all.
  * read-modify-write (RMW): read the old data being overwritten and the old parity under
    it; new parity = old parity ^ old data ^ new data. A one-chunk write costs 2 reads +
    2 writes whatever N is: the classic "small write problem".
  * reconstruct-write (RCW): read the data of the stripe that is *not* being written (in
    the parity range touched); parity = XOR of all data, new and old.
  Like md (handle_stripe_dirtying, once per stripe_head: a page of every member), raidlab
  decides per row, with md's default rmw_level: RMW only where it reads fewer bytes than
  RCW, a tie going to RCW. Rows of a stripe with the same data chunks written decide alike,
  so the planner decides once per such range of rows (a segment), and one stripe may use
  RMW in some rows and RCW in others ("rmw+rcw"). So a 4 KiB write on 4
  disks reads the two other data chunks (RCW), on 5 or more disks the old data and parity
  (RMW); either way 2 reads + 2 writes, the papers' small-write cost (Table 3 of the RAID-x
  paper: R + W per disk, 2R + 2W in total). For example on 5 disks with 16 KiB chunks, a
  6-block write from block 0 covers 4 rows with 2 chunks written in rows 0-1 and 1 in rows
  2-3: RCW in rows 0-1 (2 reads each against 3), RMW in rows 2-3 (2 against 3), 8 blocks
  read, where one method for the whole stripe would read 10.
  On 3 disks RCW of one chunk needs only one read (the other data chunk), so the planner
  picks RCW there: 1 read + 2 writes.
  Reads the array's stripe cache holds (raidlab.engine.stripecache, md's stripe_heads kept
  after a write) cost nothing in that count, as md counts only pages not up to date.

Degraded (one failed member):
  * a read of a chunk on the failed disk XORs the same range of all other members;
  * a write picks, for each part of the stripe, the only method that avoids the failed
    disk: RCW where the failed disk's data is being overwritten (its new data then lives
    only in the parity), RMW where it is not; with the parity disk failed, data is written
    and parity skipped, after the reads reconstruct-write would make: md reads them (it
    computes the parity it cannot write), and the lab VM's md shows it member for member.
Two failed members lose the array (any two members share every stripe).

Sub-page writes: the layout plans at sector (512 B) granularity; the array (raidlab.engine.
array) writes whole 4 KiB member pages where it keeps md's stripe cache, as md's stripe_heads
do: a write that covers a page only in part is widened to the page, its other bytes the
page's old contents. md counts such a page as a read for RCW as well as for RMW (it is not
R5_OVERWRITE), so a one-block write on 4 disks reads the old data and parity pages (RMW, 2
against RCW's 3). The array tells the planner those pages (`partial`). Afterwards the
engine's stripe cache holds both pages; md, measured in the lab VM, keeps the parity page up
to date but reads the data page again on the next write to it (tests/vm/test_md_host.py).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import ClassVar

from raidlab.engine.layouts.base import (
    DataUnavailableError,
    DiskRange,
    Extent,
    Layout,
    Location,
    ParitySegment,
    Piece,
    RangeCollector,
    ReadPlan,
    RowsWrite,
    StripeWrite,
    WritePlan,
    merge_extents,
)
from raidlab.engine.layouts.xor import xor_blocks, xor_bytes  # noqa: F401  (re-exported)
from raidlab.errors import UsageError

# md's raid5 layouts by name, with md's layout number (drivers/md/raid5.h, ALGORITHM_*).
ALGORITHMS = {"left-asymmetric": 0, "right-asymmetric": 1, "left-symmetric": 2, "right-symmetric": 3,
              "parity-first": 4, "parity-last": 5}
_LEFT = ("left-asymmetric", "left-symmetric")      # parity starts on the last member and moves left
_ROTATING = ("left-asymmetric", "right-asymmetric", "left-symmetric", "right-symmetric")
_SYMMETRIC = ("left-symmetric", "right-symmetric")  # data starts after the parity and wraps


@dataclasses.dataclass(frozen=True, kw_only=True)
class Raid5Layout(Layout):
    algorithm: str = "left-symmetric"

    name: ClassVar[str] = "raid5"
    summary: ClassVar[str] = "striping with rotating parity, md's layouts (left-symmetric by default)"
    source: ClassVar[str] = "md's RAID 5 (and RAID 4: algorithm=parity-last); VC-RAID's array"
    option_help: ClassVar[dict[str, str]] = {
        "algorithm": "parity placement, md's raid5 layouts: " + ", ".join(ALGORITHMS)
                     + " (parity-last is md's RAID 4)"}
    min_disks: ClassVar[int] = 3
    failure_rule: ClassVar[str] = "survives any single failure"

    def _validate_options(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise UsageError(f"raid5 algorithm {self.algorithm!r} is not supported",
                             hint=f"use one of {', '.join(ALGORITHMS)}")

    # ---- md's mapping

    @property
    def data_disks(self) -> int:
        return self.n_disks - 1

    @property
    def stripes(self) -> int:
        """Stripes (chunk rows) in the array."""
        return self.chunks_per_disk

    def _capacity(self) -> int:
        return self.stripes * self.data_disks * self.chunk_bytes

    def parity_disk(self, stripe: int) -> int:
        """The member holding `stripe`'s parity (module doc, the algorithm's table)."""
        algorithm = self.algorithm
        if algorithm in _ROTATING:
            return self.data_disks - stripe % self.n_disks if algorithm in _LEFT else stripe % self.n_disks
        return 0 if algorithm == "parity-first" else self.data_disks

    def data_disk(self, stripe: int, index: int) -> int:
        """Disk of data chunk `index` (0..N-2) of `stripe` (module doc)."""
        parity = self.parity_disk(stripe)
        if self.algorithm in _SYMMETRIC:
            return (parity + 1 + index) % self.n_disks
        return index + 1 if index >= parity else index

    def data_index(self, stripe: int, disk: int) -> int | None:
        """Which data chunk of `stripe` lives on `disk` (None: the parity)."""
        parity = self.parity_disk(stripe)
        if disk == parity:
            return None
        if self.algorithm in _SYMMETRIC:
            return (disk - parity - 1) % self.n_disks
        return disk - 1 if disk > parity else disk

    def _member_offset(self, stripe: int, within: int) -> int:
        return self.data_offset + stripe * self.chunk_bytes + within

    def _pieces(self, offset: int, length: int) -> Iterator[tuple[int, int, int, int, int]]:
        """(stripe, data index, offset inside chunk, length, logical offset)."""
        self.check_range(offset, length)
        chunk_bytes = self.chunk_bytes
        pos, end = offset, offset + length
        while pos < end:
            chunk, within = divmod(pos, chunk_bytes)
            stripe, index = divmod(chunk, self.data_disks)
            n = min(chunk_bytes - within, end - pos)
            yield stripe, index, within, n, pos
            pos += n

    def _logical(self, stripe: int, index: int, within: int) -> int:
        return (stripe * self.data_disks + index) * self.chunk_bytes + within

    def map(self, offset: int, length: int) -> list[Extent]:
        return merge_extents(
            Extent(self.data_disk(s, d), self._member_offset(s, w), n, lo)
            for s, d, w, n, lo in self._pieces(offset, length)
        )

    def copies(self, offset: int, length: int) -> list[tuple[Extent, ...]]:
        return [
            (Extent(self.data_disk(s, d), self._member_offset(s, w), n, lo),)
            for s, d, w, n, lo in self._pieces(offset, length)
        ]

    def stripe_members(self, stripe: int) -> tuple[Extent, tuple[Extent, ...]]:
        """(parity extent, data extents) of a whole stripe: what a scrub XORs to zero."""
        if not 0 <= stripe < self.stripes:
            raise ValueError(f"raid5: no stripe {stripe} (stripes 0..{self.stripes - 1})")
        parity = Extent(self.parity_disk(stripe), self._member_offset(stripe, 0), self.chunk_bytes, None, "parity")
        data = tuple(
            Extent(self.data_disk(stripe, d), self._member_offset(stripe, 0), self.chunk_bytes, self._logical(stripe, d, 0))
            for d in range(self.data_disks)
        )
        return parity, data

    def _locate_in_row(self, disk: int, stripe: int, within: int) -> Location:
        index = self.data_index(stripe, disk)
        if index is None:
            return Location("parity", None, 0, stripe)
        return Location("data", self._logical(stripe, index, within), 0, stripe)

    # ---- failures

    def failure_groups(self) -> frozenset[frozenset[int]]:
        return frozenset(frozenset(pair) for pair in itertools.combinations(range(self.n_disks), 2))

    def _has_parity(self) -> bool:
        return True

    @property
    def parity_stripe_bytes(self) -> int:
        return self.data_disks * self.chunk_bytes

    def parity_write_span(self, offset: int, length: int) -> tuple[int, int] | None:
        """A write inside one chunk reads and writes only the chunk's written range, on the
        data member, the parity member and (RCW, degraded) the stripe's other members."""
        within = offset % self.chunk_bytes
        if within + length > self.chunk_bytes:
            return None
        stripe = offset // self.chunk_bytes // self.data_disks
        lo = self.data_offset + stripe * self.chunk_bytes + within
        return lo, lo + length

    def _check_failed(self, failed: Iterable[int]) -> frozenset[int]:
        failed_set = self._failed_set(failed)
        if len(failed_set) > 1:
            raise DataUnavailableError(
                f"raid5: members {sorted(failed_set)} failed; RAID5 survives one failure only",
                failed_disks=failed_set,
            )
        return failed_set

    # ---- reads

    def degraded_read_plan(self, offset: int, length: int, failed: Iterable[int]) -> ReadPlan:
        failed_set = self._failed_set(failed)
        collector = RangeCollector()
        wanted: list[tuple[int, int, list[int]]] = []
        for stripe, index, within, n, logical in self._pieces(offset, length):
            disk = self.data_disk(stripe, index)
            member_offset = self._member_offset(stripe, within)
            if disk not in failed_set:
                wanted.append((logical, n, [collector.want(disk, member_offset, n)]))
                continue
            self._check_failed(failed_set)
            others = [d for d in range(self.n_disks) if d != disk]
            wanted.append((logical, n, [collector.want(d, member_offset, n) for d in others]))
        reads = collector.build()
        pieces = tuple(Piece(lo, n, tuple(collector.source(t) for t in toks)) for lo, n, toks in wanted)
        return ReadPlan(offset, length, reads, pieces)

    def rebuild_plan(self, disk: int, disk_offset: int, length: int, failed: Iterable[int] = ()) -> ReadPlan:
        """Any member byte (data or parity) is the XOR of the same byte on all other members."""
        self.check_member_range(disk, disk_offset, length)
        failed_set = self._failed_set(failed) - {disk}
        if failed_set:
            raise DataUnavailableError(
                f"raid5: cannot rebuild member {disk} with members {sorted(failed_set)} also failed",
                failed_disks=failed_set | {disk},
            )
        collector = RangeCollector()
        others = [d for d in range(self.n_disks) if d != disk]
        toks = [collector.want(d, disk_offset, length) for d in others]
        reads = collector.build()
        return ReadPlan(disk_offset, length, reads, (Piece(disk_offset, length, tuple(collector.source(t) for t in toks)),))

    # ---- writes

    def write_plan(self, offset: int, length: int, failed: Iterable[int] = (),
                   cached: Callable[[int, int, int], bool] | None = None,
                   partial: Callable[[int, int, int], int] | None = None) -> WritePlan:
        """The plan of a write. `cached(disk, member_offset, length)` says which member bytes
        the caller holds already (the array's stripe cache): a pre-read it holds costs
        nothing when RMW and RCW are weighed, as md counts only pages not up to date. The
        plan still lists such reads; the caller serves them from its cache.
        `partial(disk, member_offset, length)`: the bytes of that written range that the
        caller must read whatever the method, because its request covers their pages only
        in part (the array writes whole pages, as md's stripe_heads do; module doc). RMW
        reads them anyway (the old data), so they weigh on RCW only, as in md's count."""
        failed_set = self._check_failed(failed)
        if not failed_set:
            within = offset % self.chunk_bytes
            if within + length <= self.chunk_bytes:
                self.check_range(offset, length)
                return self._one_chunk_plan(offset, length, within, cached, partial)
            stripe_bytes = self.data_disks * self.chunk_bytes
            if offset % stripe_bytes == 0 and length % stripe_bytes == 0:
                self.check_range(offset, length)
                return self._full_stripes_plan(offset, length, cached)
        return self._write_plan(offset, length, failed_set, cached, partial)

    def _full_stripes_plan(self, offset: int, length: int,
                           cached: Callable[[int, int, int], bool] | None) -> WritePlan:
        """write_plan of whole stripes of a healthy array (the middle of a large sequential
        write), built directly: every data chunk, then every parity chunk (the XOR of the
        stripe's new data), no reads; the same plan as the general planner's (tests check
        it), which also reports what RMW would have read (RCW reads nothing)."""
        chunk, k = self.chunk_bytes, self.data_disks
        writers = frozenset(range(k))   # the general planner's order of a segment's writers
        data_writes: list[Extent] = []
        parity_writes: list[Extent] = []
        recipes: list[tuple[ParitySegment, ...]] = []
        summaries: list[StripeWrite] = []
        first = offset // (k * chunk)
        for stripe in range(first, first + length // (k * chunk)):
            parity = self.parity_disk(stripe)
            member_offset = self.data_offset + stripe * chunk
            base = stripe * k * chunk
            disks = [self.data_disk(stripe, index) for index in range(k)]
            for index in range(k):
                data_writes.append(Extent(disks[index], member_offset, chunk, base + index * chunk))
            parity_writes.append(Extent(parity, member_offset, chunk, None, "parity"))
            recipes.append((ParitySegment(0, chunk, tuple(base + d * chunk for d in writers), ()),))
            rmw = [*disks, parity]
            rmw_reads = len(rmw) if cached is None else sum(1 for d in rmw if not cached(d, member_offset, chunk))
            summaries.append(StripeWrite(stripe=stripe, method="full-stripe", reads=0, writes=k + 1,
                                         rmw_reads=rmw_reads, rcw_reads=0,
                                         rmw_read_bytes=rmw_reads * chunk, rcw_read_bytes=0,
                                         rows=(RowsWrite(0, chunk, "rcw", rmw_reads * chunk, 0),)))
        writes = merge_extents(data_writes)
        return WritePlan(offset, length, (*writes, *parity_writes), (), (),
                         (*([None] * len(writes)), *recipes), tuple(summaries))

    def _one_chunk_plan(self, offset: int, length: int, within: int,
                        cached: Callable[[int, int, int], bool] | None,
                        partial: Callable[[int, int, int], int] | None = None) -> WritePlan:
        """write_plan of a write inside one data chunk of a healthy array (most small
        writes), built directly: the same plan as the general planner's (tests check it),
        without its per-stripe bookkeeping. RMW reads the old data and parity, RCW the
        other data chunks, each the written range of one member, so nothing merges."""
        stripe, index = divmod(offset // self.chunk_bytes, self.data_disks)
        parity = self.parity_disk(stripe)
        disk = self.data_disk(stripe, index)
        member_offset = self.data_offset + stripe * self.chunk_bytes + within
        rmw = (disk, parity)
        rcw = tuple(self.data_disk(stripe, d) for d in range(self.data_disks) if d != index)
        if cached is None:
            rmw_reads, rcw_reads = len(rmw), len(rcw)
        else:
            rmw_reads = sum(1 for d in rmw if not cached(d, member_offset, length))
            rcw_reads = sum(1 for d in rcw if not cached(d, member_offset, length))
        rmw_bytes, rcw_bytes = rmw_reads * length, rcw_reads * length
        extra = partial(disk, member_offset, length) if partial is not None else 0
        if extra:
            rcw_reads, rcw_bytes = rcw_reads + 1, rcw_bytes + extra
        method = "rmw" if rmw_bytes < rcw_bytes else "rcw"
        wants = rmw if method == "rmw" else rcw
        order = sorted(wants)
        reads = tuple(DiskRange(d, member_offset, length) for d in order)
        sources = tuple((order.index(d), 0) for d in wants)
        writes = (Extent(disk, member_offset, length, offset),
                  Extent(parity, member_offset, length, None, "parity"))
        recipes = (None, (ParitySegment(0, length, (offset,), sources),))
        summary = StripeWrite(stripe=stripe, method=method, reads=len(wants), writes=2,
                              rmw_reads=rmw_reads, rcw_reads=rcw_reads,
                              rmw_read_bytes=rmw_bytes, rcw_read_bytes=rcw_bytes,
                              rows=(RowsWrite(within, within + length, method, rmw_bytes, rcw_bytes),))
        return WritePlan(offset, length, writes, reads, (), recipes, (summary,))

    def _write_plan(self, offset: int, length: int, failed_set: frozenset[int],
                    cached: Callable[[int, int, int], bool] | None,
                    partial: Callable[[int, int, int], int] | None = None) -> WritePlan:
        """The general planner: any range, any stripes, degraded or not."""
        by_stripe: dict[int, dict[int, tuple[int, int, int]]] = {}
        for stripe, index, within, n, logical in self._pieces(offset, length):
            by_stripe.setdefault(stripe, {})[index] = (within, within + n, logical)

        collector = RangeCollector()
        data_writes: list[Extent] = []
        parity_writes: list[tuple[Extent, list[tuple[int, int, str, list]]]] = []
        skipped: list[Extent] = []
        summaries: list[StripeWrite] = []

        for stripe, written in by_stripe.items():
            parity = self.parity_disk(stripe)
            failed_disk = next(iter(failed_set)) if failed_set else None
            failed_index = None if failed_disk is None else self.data_index(stripe, failed_disk)
            segments = _segments(written)

            # Reads each method would need in this stripe, segment by segment.
            def rmw_wants(seg):
                start, end, writers = seg
                return [(self.data_disk(stripe, d), start, end) for d in writers] + [(parity, start, end)]

            def rcw_wants(seg):
                start, end, writers = seg
                return [(self.data_disk(stripe, d), start, end) for d in range(self.data_disks) if d not in writers]

            def cost(wants):
                probe = RangeCollector()
                for disk, start, end in wants:
                    member_offset = self._member_offset(stripe, start)
                    if cached is not None and cached(disk, member_offset, end - start):
                        continue
                    probe.want(disk, member_offset, end - start)
                return probe.count()

            def partial_cost(segs):
                """(ranges, bytes) RCW must also read: the written pages covered in part."""
                if partial is None:
                    return 0, 0
                found = [partial(self.data_disk(stripe, d), self._member_offset(stripe, start), end - start)
                         for start, end, writers in segs for d in writers]
                return sum(1 for n in found if n), sum(found)

            full = all(written.get(d, (1, 0))[:2] == (0, self.chunk_bytes) for d in range(self.data_disks))
            rmw_cost = cost([w for seg in segments for w in rmw_wants(seg)])
            rcw_cost = tuple(a + b for a, b in zip(cost([w for seg in segments for w in rcw_wants(seg)]),
                                                   partial_cost(segments)))
            # With a failed data disk, RMW cannot read its old data and RCW cannot read its
            # unwritten data; with the parity disk failed neither applies (no parity written).
            if failed_disk is None:
                rmw_possible = rcw_possible = True
            elif failed_disk == parity:
                rmw_possible = rcw_possible = False
            else:
                rmw_possible = all(failed_index not in seg[2] for seg in segments)
                rcw_possible = all(failed_index in seg[2] for seg in segments)

            # Each segment's rows have the same data chunks written, so md's per-row choice
            # (handle_stripe_dirtying: RMW only where it reads strictly fewer pages) is the
            # same for all of them: decided here per segment, on the bytes each would read.
            seg_costs = [(cost(rmw_wants(seg))[1], cost(rcw_wants(seg))[1] + partial_cost([seg])[1])
                         for seg in segments]
            if failed_disk == parity:
                method, seg_methods = "no-parity", None
            elif full:
                method, seg_methods = "full-stripe", ["rcw"] * len(segments)
            else:
                if failed_index is not None:
                    seg_methods = ["rcw" if failed_index in seg[2] else "rmw" for seg in segments]
                else:
                    seg_methods = ["rmw" if rmw < rcw else "rcw" for rmw, rcw in seg_costs]
                method = "+".join(sorted(set(seg_methods), key=["rmw", "rcw"].index))
            rows = tuple(
                RowsWrite(start, end, seg_method,
                          rmw if failed_index is None or failed_index not in writers else None,
                          rcw if failed_index is None or failed_index in writers else None)
                for (start, end, writers), seg_method, (rmw, rcw)
                in zip(segments, seg_methods or ["no-parity"] * len(segments), seg_costs))

            stripe_reads = RangeCollector()
            if seg_methods is not None:
                recipe_segments = []
                for seg, seg_method in zip(segments, seg_methods):
                    start, end, writers = seg
                    wants = rmw_wants(seg) if seg_method == "rmw" else rcw_wants(seg)
                    read_tokens = []
                    for disk, s0, s1 in wants:
                        member_offset = self._member_offset(stripe, s0)
                        read_tokens.append(collector.want(disk, member_offset, s1 - s0))
                        stripe_reads.want(disk, member_offset, s1 - s0)
                    new_offsets = [written[d][2] + (start - written[d][0]) for d in writers]
                    recipe_segments.append((start, end, new_offsets, read_tokens))
                for run in _contiguous_runs(recipe_segments):
                    run_start, run_end = run[0][0], run[-1][1]
                    ext = Extent(parity, self._member_offset(stripe, run_start), run_end - run_start, None, "parity")
                    if parity in failed_set:  # pragma: no cover - handled by "no-parity"
                        skipped.append(ext)
                    else:
                        parity_writes.append((ext, [(s - run_start, e - s, no, rt) for s, e, no, rt in run]))
            else:
                # The parity disk failed: md still reads what reconstruct-write would (its
                # handle_stripe_dirtying counts a failed parity as too costly for RMW and
                # computes the parity it then cannot write), so the engine reads the same.
                for seg in segments:
                    for disk, s0, s1 in rcw_wants(seg):
                        member_offset = self._member_offset(stripe, s0)
                        collector.want(disk, member_offset, s1 - s0)
                        stripe_reads.want(disk, member_offset, s1 - s0)
                for start, end in _union(segments):
                    skipped.append(Extent(parity, self._member_offset(stripe, start), end - start, None, "parity"))

            for index in sorted(written):
                start, end, logical = written[index]
                ext = Extent(self.data_disk(stripe, index), self._member_offset(stripe, start), end - start, logical)
                (skipped if ext.disk in failed_set else data_writes).append(ext)

            stripe_writes = sum(1 for d in written if self.data_disk(stripe, d) not in failed_set)
            stripe_writes += len(_union(segments)) if method != "no-parity" else 0
            summaries.append(StripeWrite(
                stripe=stripe, method=method, reads=stripe_reads.count()[0], writes=stripe_writes,
                rmw_reads=rmw_cost[0] if rmw_possible else None,
                rcw_reads=rcw_cost[0] if rcw_possible else None,
                rmw_read_bytes=rmw_cost[1] if rmw_possible else None,
                rcw_read_bytes=rcw_cost[1] if rcw_possible else None,
                rows=rows,
            ))

        reads = collector.build()
        writes = merge_extents(data_writes)
        recipes: list[tuple[ParitySegment, ...] | None] = [None] * len(writes)
        for ext, segs in parity_writes:
            writes.append(ext)
            recipes.append(tuple(
                ParitySegment(rel, n, tuple(new_offsets), tuple(collector.source(t) for t in tokens))
                for rel, n, new_offsets, tokens in segs
            ))
        return WritePlan(offset, length, tuple(writes), reads, tuple(skipped), tuple(recipes), tuple(summaries))


def _segments(written: dict[int, tuple[int, int, int]]) -> list[tuple[int, int, frozenset[int]]]:
    """Split the union of the written in-chunk ranges at every boundary.

    Returns (start, end, data indexes written over all of [start, end)), in order; parity
    over each segment depends on exactly that set of new chunks.
    """
    points = sorted({p for start, end, _lo in written.values() for p in (start, end)})
    out = []
    for start, end in zip(points, points[1:]):
        writers = frozenset(d for d, (s, e, _lo) in written.items() if s <= start and end <= e)
        if writers:
            out.append((start, end, writers))
    return out


def _union(segments) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end, *_rest in segments:
        if out and out[-1][1] == start:
            out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def _contiguous_runs(items):
    """Group consecutive (start, end, ...) items whose ranges touch into runs."""
    runs: list[list] = []
    for item in items:
        if runs and runs[-1][-1][1] == item[0]:
            runs[-1].append(item)
        else:
            runs.append([item])
    return runs
