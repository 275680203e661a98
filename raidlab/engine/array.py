"""The engine's request path: one architecture over member block targets, as a BlockTarget.

Why built this way (docs/architecture.md, "Two clocks"; layout math is pure functions and
I/O sits around them):

* The layout (raidlab.engine.layouts) answers every question of placement and parity as a
  plan; `Array` only executes plans: issue the plan's reads concurrently, let the plan
  assemble / compute payloads, issue the writes concurrently. So md-compatible raid5, the
  mirrors, chained declustering, RAID-x and the SA-RAID layouts share one request path.
* Everything is async code that never blocks and never reads the wall clock (time and
  synchronisation come from raidlab.sched), so the same Array serves the live FUSE volume
  under trio and a virtual-time trace replay on raidlab's kernel.
* Parity layouts serialise writes that share a row: the 4 KiB units (md's STRIPE_SIZE, the
  span of one stripe_head) of the member offsets a write plan reads or writes. A
  read-modify-write must not interleave with another write of the same parity bytes, and
  every write of a row writes that row's parity, so two writes conflict exactly when they
  share a row; writes to different rows of one stripe run at once, as md's stripe_heads
  do. (A lock per whole stripe would queue most of a destage's small scattered writes
  behind each other: VC-RAID's level-2 destage writes 64 scattered 1 KB blocks in ~14
  writes per segment, many sharing a stripe but not a row.) Row locks are taken in ascending order, so two writes spanning
  several stripes cannot deadlock. Mirror layouts need no lock: a block device user (the
  filesystem, the page cache) does not issue overlapping writes at once.
* Parity layouts keep md's stripe cache (raidlab.engine.stripecache): the member pages a
  write pre-read or wrote stay in memory, and a later write of the same rows weighs RMW
  against RCW by what it would still have to read, then reads only that.
* A member that answers EIO is marked failed, like md kicks a faulty member; the request
  is retried on the degraded plan when the layout survives the failure set, and fails with
  EIO when it does not. `on_failure` lets the owner persist the new failure set (a
  generation bump in every surviving superblock) before the request is acknowledged.
* Trim: non-parity layouts trim every copy; parity layouts ignore it (a discarded range
  would otherwise leave parity inconsistent with what reads return), which the BlockTarget
  contract allows ("zeros or old data"). RAID-x first writes its pending images home, so
  none lands after the trim. The loop device cannot send trims here (pyfuse3 has no
  fallocate handler, see raidlab.export.fuse); tests/unit/test_array_trim.py drives it.
* The image hook: a layout whose second copies may be written late (RAID-x's images,
  `Layout.buffers_images`) gets an `image_buffer` (raidlab.engine.imagebuffer, attached by
  raidlab.engine.build). The array calls it at five points and nowhere else (ImageHook
  below): `log` takes a write's image extents before the data copies are written;
  `overlay_snapshot` / `overlay` lay pending images over a degraded read; `drain` writes
  every pending image home (before a trim, a rebuild or a scrub); `write_through` makes
  later images go straight home while a rebuild runs; `statistics` joins the array's. The
  hook issues its own member I/O through `member_call` and `gather`, so a member error
  there is handled like any other.
* Member requests of one write that continue each other on a member are merged into one
  request (coalesce_writes): measured with `raidlab bench engine`, every member request is
  a worker-thread round trip in live mode (~65-75 us here against ~5 us for the pwrite
  itself), and a 1 MiB raid0 write over 64 KiB chunks was 16 of them instead of 4.
"""

from __future__ import annotations

import collections
import errno
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from raidlab import sched
from raidlab.blockdev import SECTOR, check_aligned
from raidlab.disks.disk import EmulatedDisk, Partition, as_block_layer
from raidlab.engine.layouts.base import DataUnavailableError, DiskRange, Layout, WritePlan
from raidlab.engine.ordered import start_in_order
from raidlab.engine.stripecache import DEFAULT_ROWS as STRIPE_CACHE_ROWS
from raidlab.engine.stripecache import StripeCache


# Members whose I/O may be done at once (EmulatedDisk.read_now / write_now): these exact
# types only, since a wrapper or subclass that changes read or write (a capture, a network,
# a test's slow member) must see every request.
_AT_ONCE = (EmulatedDisk, Partition)


class ImageHook(Protocol):
    """What the array asks of a layout's image buffer (module doc, "The image hook")."""

    write_through: bool
    resting_write_through: bool  # what write_through returns to after a rebuild or scrub

    async def log(self, images: list[tuple[int, int, int, bytes]], fua: bool) -> None:
        """Take image extents (disk, disk offset, logical offset, payload) durably."""

    def overlay_snapshot(self, offset: int, length: int) -> Any:
        """Pending images over [offset, offset + length), taken before a degraded read."""

    def overlay(self, offset: int, data: bytes, pending: Any) -> bytes:
        """`data` read at `offset` with the `pending` images laid over it."""

    async def drain(self) -> None:
        """Write every pending image home."""

    def statistics(self) -> dict[str, Any]:
        """The buffer's counters, for the array's statistics."""


ROW = 4096  # md's STRIPE_SIZE (one page): the member bytes one stripe_head covers


def row_keys(plan: WritePlan) -> list[int]:
    """The rows (member offset // ROW) a parity write plan touches, ascending; none for a
    layout without parity. Every raid5 member stores a stripe at the same offsets, so one
    key names a row across all members (for a layout where they differ it is only
    stricter than needed, never looser)."""
    if not plan.stripes:
        return []
    return rows_of((*plan.reads, *plan.writes, *plan.skipped))


def rows_of(ranges) -> list[int]:
    """The rows (see row_keys) member ranges cover, ascending."""
    keys: set[int] = set()
    for rng in ranges:
        keys.update(range(rng.disk_offset // ROW, (rng.disk_offset + rng.length - 1) // ROW + 1))
    return sorted(keys)


class _StripeLocks:
    """Per-row locks (see row_keys), FIFO per row, taken in ascending order (so two writes
    never wait for each other crosswise). A held row is a key of `_held`; only a row that
    somebody waits for gets a queue, and a release hands the row to the first waiter. A
    1 MiB raid5 write takes some 90 rows: a sched.Lock per row, made and dropped each time,
    cost more than the write's planning."""

    def __init__(self) -> None:
        self._held: dict[int, collections.deque[sched.Event] | None] = {}
        self.waits = 0

    async def acquire(self, stripes: Sequence[int]) -> None:
        """Take every row, waiting for held ones in turn; one checkpoint in all when none
        is held. Cancelled while waiting: the rows taken so far are released."""
        await sched.checkpoint_if_cancelled()
        taken: list[int] = []
        waited = False
        for stripe in sorted(set(stripes)):
            if stripe not in self._held:
                self._held[stripe] = None
                taken.append(stripe)
                continue
            queue = self._held[stripe]
            if queue is None:
                queue = self._held[stripe] = collections.deque()
            handed = sched.Event()
            queue.append(handed)
            self.waits += 1
            waited = True
            try:
                await handed.wait()
            except BaseException:
                if handed.is_set():    # handed over as we were cancelled: ours, give it on
                    taken.append(stripe)
                else:
                    queue.remove(handed)
                    if not queue:
                        self._held[stripe] = None
                self.release(taken)
                raise
            taken.append(stripe)
        if not waited:
            await sched.cancel_shielded_checkpoint()

    def try_acquire(self, stripes: Sequence[int]) -> bool:
        """Take every row now, or none (False) if one is held."""
        keys = sorted(set(stripes))
        if any(stripe in self._held for stripe in keys):
            return False
        for stripe in keys:
            self._held[stripe] = None
        return True

    def release(self, stripes: Sequence[int]) -> None:
        for stripe in sorted(set(stripes)):
            queue = self._held[stripe]
            if queue:
                queue.popleft().set()   # the row stays held, by the first waiter now
                if not queue:
                    self._held[stripe] = None
            else:
                del self._held[stripe]


class Array:
    """An architecture (a layout) over its members, served as a BlockTarget."""

    def __init__(
        self,
        name: str,
        layout: Layout,
        members: Sequence[Any],
        *,
        failed: Sequence[int] = (),
        on_failure: Callable[[frozenset[int]], Awaitable[None]] | None = None,
        stripe_cache_rows: int = STRIPE_CACHE_ROWS,
    ) -> None:
        if len(members) != layout.n_disks:
            raise ValueError(f"{name}: layout wants {layout.n_disks} members, got {len(members)}")
        self.name = name
        self.layout = layout
        self.members = list(members)
        for member in self.members:  # the array is its members' block layer, as the kernel below md
            as_block_layer(member)
        self.failed: frozenset[int] = frozenset(failed)
        self.on_failure = on_failure
        self._stripe_locks = _StripeLocks()
        # Rebuild (replace) state: while a member is rebuilt, writes pass one at a time
        # through _write_gate, alternating with the rebuild's segment copies (see rebuild).
        self._rebuild: _RebuildState | None = None
        self._write_gate = sched.Lock()
        self._resyncing = False  # resync(): writes pass the gate as during a rebuild
        self._ungated_writes = 0
        self._ungated_drained = sched.Event()
        self._parity = bool(getattr(layout.redundancy, "parity", False))
        # md's stripe cache (raidlab.engine.stripecache), for parity layouts.
        self.stripe_cache: StripeCache | None = (
            StripeCache(stripe_cache_rows) if self._parity and stripe_cache_rows else None)
        # Logical bytes of a parity stripe when writes are split and gathered by stripe (a
        # parity layout with its stripe cache), else None.
        self._stripe_bytes = layout.parity_stripe_bytes if self.stripe_cache is not None else None
        # Whole member pages written, as md's stripe_heads (_page_edges): where the stripe
        # cache is kept and the layout's member pages line up with its chunks.
        self._whole_pages = (self._stripe_bytes is not None
                             and getattr(layout, "chunk_bytes", 1) % ROW == 0
                             and getattr(layout, "data_offset", 1) % ROW == 0)
        self._pending: list[_PendingWrite] = []  # parity writes not yet finished (_gather)
        self._full_writes: list[_PendingWrite] = []  # of them, those writing whole stripes only
        # The image hook (module doc): RAID-x's persistent buffer of pending images, attached
        # by raidlab.engine.build; None: images are written like mirrors.
        self.image_buffer: ImageHook | None = None
        # A parity layout's write journal (raidlab.engine.journal), attached by
        # raidlab.archs.layouts with the journal option; None: member writes go straight out.
        self.journal: Any = None
        self.counters = {
            "reads": 0, "writes": 0, "flushes": 0, "trims": 0,
            "bytes_read": 0, "bytes_written": 0,
            "member_reads": 0, "member_writes": 0,
            "member_read_bytes": 0, "member_write_bytes": 0,
            "degraded_reads": 0, "reconstructed_reads": 0, "degraded_writes": 0,
            "full_stripe_writes": 0, "rmw_stripes": 0, "rcw_stripes": 0, "gathered_bytes": 0,
            "delayed_stripe_writes": 0, "partial_page_writes": 0,
            "member_errors": 0,
        }

    # ------------------------------------------------------------------ BlockTarget

    @property
    def size(self) -> int:
        return self.layout.capacity

    async def read(self, offset: int, length: int) -> bytes:
        check_aligned(offset, length, self.size)
        if length == 0:
            return b""
        while True:
            failed = self.failed
            plan = self._read_plan(offset, length, failed)
            # RAID-x: with a member failed, image homes may be read; pending images are laid
            # over them (snapshot before the reads, see raidlab.engine.imagebuffer).
            pending = (self.image_buffer.overlay_snapshot(offset, length)
                       if failed and self.image_buffer is not None else None)
            # A block of a failed member is computed from its row's other members: under the
            # row locks, as md computes it in the stripe_head, so that a write to another
            # block of the row (its data and parity, two member writes) is not seen half done.
            rows = rows_of(plan.reads) if plan.reconstructs and self._parity else []
            if rows:
                await self._stripe_locks.acquire(rows)
            try:
                buffers = await self._read_ranges(plan.reads)
            except _MemberFailed:
                continue  # the failure set changed: plan again (raises EIO if unsurvivable)
            finally:
                if rows:
                    self._stripe_locks.release(rows)
            self.counters["reads"] += 1
            self.counters["bytes_read"] += length
            if failed:
                self.counters["degraded_reads"] += 1
            if plan.reconstructs:
                self.counters["reconstructed_reads"] += 1
            if pending:
                return self.image_buffer.overlay(offset, plan.assemble(buffers), pending)
            return plan.assemble(buffers)

    async def write(self, offset: int, data: bytes, *, fua: bool = False) -> None:
        length = len(data)
        check_aligned(offset, length, self.size)
        if length == 0:
            return
        if self._rebuild is not None or self._resyncing:
            async with self._write_gate:
                await self._write(offset, data, fua)
                if self._rebuild is not None:  # it may have finished while we waited
                    await self._refresh_rebuilt(offset, length)
            return
        self._ungated_writes += 1
        try:
            await self._write(offset, data, fua)
        finally:
            self._ungated_writes -= 1
            if self._ungated_writes == 0:
                self._ungated_drained.set()

    async def _write(self, offset: int, data: bytes, fua: bool) -> None:
        """A parity layout writes a request's partial first stripe, its whole stripes and
        its partial last stripe as independent parts, each under its own rows, as md
        handles each stripe_head on its own: the next request of a sequential stream, which
        shares a stripe with this one, then writes its whole stripes at once instead of
        waiting for this one's last stripe, and the shared stripe is written whole once
        (see _write_range)."""
        parts = self._stripe_parts(offset, data) if self._stripe_bytes else [(offset, data)]
        if len(parts) == 1:
            await self._write_range(offset, data, fua)
        else:
            async with sched.open_nursery() as nursery:
                for part_offset, part in parts:
                    nursery.start_soon(self._write_range, part_offset, part, fua)
        self.counters["writes"] += 1
        self.counters["bytes_written"] += len(data)

    def _stripe_parts(self, offset: int, data: bytes) -> list[tuple[int, bytes]]:
        stripe = self._stripe_bytes
        assert stripe is not None
        end = offset + len(data)
        head_end = min(end, -(-offset // stripe) * stripe)
        tail_start = max(head_end, end - end % stripe)
        cuts = (offset, head_end, tail_start, end)
        if len(set(cuts)) <= 2:  # one part: inside a stripe, or whole stripes only
            return [(offset, data)]
        view = memoryview(data)
        return [(a, view[a - offset:b - offset]) for a, b in zip(cuts, cuts[1:]) if b > a]

    async def _write_range(self, offset: int, data: bytes, fua: bool) -> None:
        length = len(data)
        me = _PendingWrite(offset, data)
        gathering = self._stripe_bytes is not None
        if gathering:
            self._pending.append(me)
        try:
            # Every plan of these bytes (degraded, weighing the stripe cache) touches the
            # same rows (RMW and RCW read and write the same rows of a stripe).
            held = self._write_rows(offset, length)
            await self._stripe_locks.acquire(held)
            me.started = True
            try:
                pieces, absorbed = me.remaining(), []
                first_plan = None   # the first piece's plan, when made under these locks
                if gathering and self._usable_stripe_cache() is not None:
                    pieces, absorbed = self._gather(pieces, held)
                    needs, first_plan = self._needs_pre_read(pieces)
                    if needs:
                        # md delays a stripe that must pre-read while full-stripe writes are
                        # pending (STRIPE_DELAYED, its hold_list served when no full write
                        # is): the request that completes the stripe may arrive meanwhile.
                        # One round: the full-stripe writes in flight now, not later ones.
                        busy = list(self._full_writes)
                        if busy:
                            self.counters["delayed_stripe_writes"] += 1
                            for other in busy:
                                await other.finished.wait()
                            pieces, absorbed = self._gather(me.remaining(), held)
                            first_plan = None
                    else:
                        self._full_writes.append(me)
                for piece_offset, piece in pieces:
                    await self._write_piece(piece_offset, piece, fua, first_plan)
                    first_plan = None
                # Written: the writes whose bytes this one carried skip them.
                for other, lo, hi in absorbed:
                    other.done.append((lo, hi))
                    self.counters["gathered_bytes"] += hi - lo
            finally:
                self._stripe_locks.release(held)
        finally:
            if gathering:
                self._pending.remove(me)
                if me in self._full_writes:
                    self._full_writes.remove(me)
            me.finished.set()

    def _gather(self, pieces: list[tuple[int, bytes]], held: list[int]
                ) -> tuple[list[tuple[int, bytes]], list[tuple[_PendingWrite, int, int]]]:
        """md's stripe_heads gather the bios of several requests: a stripe that one request
        writes only in part is written whole when another request that has not started yet
        holds the rest of it, and neither pre-reads. Here a piece that ends (starts) inside
        a stripe takes the rest of that stripe from a waiting write that starts where the
        piece ends (ends where it starts), when the rows it adds are free. The rows are
        taken without waiting and added to `held`; the caller marks the taken bytes done
        in the other write once they are written (the other write waits for these rows, so
        it cannot finish first, and writes them itself if this write fails)."""
        stripe = self._stripe_bytes
        assert stripe is not None
        waiting = [w for w in self._pending if not w.started]
        if not waiting:
            return pieces, []
        out: list[tuple[int, bytes]] = []
        absorbed: list[tuple[_PendingWrite, int, int]] = []
        for offset, piece in pieces:
            end = offset + len(piece)
            if end % stripe:
                stripe_end = min(end - end % stripe + stripe, self.size)
                other = next((w for w in waiting if w.offset == end and w.end >= stripe_end
                              and not w.done), None)
                if other is not None and self._take_rows(end, stripe_end - end, held):
                    piece = bytes(piece) + bytes(other.data[:stripe_end - end])
                    absorbed.append((other, end, stripe_end))
            if offset % stripe:
                stripe_start = offset - offset % stripe
                other = next((w for w in waiting if w.end == offset and w.offset <= stripe_start
                              and not w.done), None)
                if other is not None and self._take_rows(stripe_start, offset - stripe_start, held):
                    head = other.data[stripe_start - other.offset:offset - other.offset]
                    piece = bytes(head) + bytes(piece)
                    absorbed.append((other, stripe_start, offset))
                    offset = stripe_start
            out.append((offset, piece))
        return out, absorbed

    def _needs_pre_read(self, pieces: list[tuple[int, bytes]]) -> tuple[bool, WritePlan | None]:
        """Would writing `pieces` now read a member (a partial stripe the cache does not
        cover)? With it, the plan of the first piece if one was made: written next, under
        the same rows, with nothing written before it, that piece would plan the same."""
        cache, stripe = self.stripe_cache, self._stripe_bytes
        assert cache is not None and stripe is not None  # called while gathering
        first_plan = None
        for index, (offset, piece) in enumerate(pieces):
            if offset % stripe == 0 and len(piece) % stripe == 0:
                continue  # whole stripes: no pre-read
            edges, plan = self._piece_plan(offset, len(piece), frozenset(), cache)
            if index == 0:
                first_plan = plan
            if any(not cache.holds(r.disk, r.disk_offset, r.length) for r in (*plan.reads, *edges)):
                return True, first_plan
        return False, first_plan

    def _page_edges(self, offset: int, length: int) -> list[DiskRange]:
        """The member pages a write of [offset, offset + length) covers only in part (at
        most its first and last), when the array writes whole pages. md's stripe_head
        holds a page of each member; a bio that covers part of one leaves it not
        R5_OVERWRITE, so md reads the page (unless it is up to date in the stripe cache)
        and writes all of it. The engine does the same: the write is widened to whole
        pages, their other bytes read from the cache or the member."""
        if not self._whole_pages or (offset % ROW == 0 and length % ROW == 0):
            return []
        edges = []
        first, last = _page_span(offset, length)
        for lo, hi in ((first, offset), (offset + length, last)):
            if hi > lo:
                ext = self.layout.map(lo, hi - lo)[0]
                page = DiskRange(ext.disk, ext.disk_offset - ext.disk_offset % ROW, ROW)
                if page not in edges:
                    edges.append(page)
        return edges

    def _piece_plan(self, offset: int, length: int, failed: frozenset[int], cache: StripeCache | None
                    ) -> tuple[list[DiskRange], WritePlan]:
        """The member pages a piece covers in part (_page_edges, with the cache usable) and
        the plan of the piece widened to whole pages, weighing what the cache holds."""
        if cache is None:
            return [], self._write_plan(offset, length, failed)
        edges = self._page_edges(offset, length)
        return edges, self._widened_plan(offset, length, failed, cache, edges)

    def _widened_plan(self, offset: int, length: int, failed: frozenset[int], cache: StripeCache,
                      edges: list[DiskRange]) -> WritePlan:
        """The plan of [offset, offset + length) widened to the pages `edges` covers in part
        (none: the piece as it is), weighing what the cache holds."""
        if not edges:
            return self._write_plan(offset, length, failed, cache.holds)
        lo, hi = _page_span(offset, length)

        def partial(disk: int, member_offset: int, n: int) -> int:
            return sum(ROW for page in edges if page.disk == disk
                       and member_offset < page.disk_offset + ROW and page.disk_offset < member_offset + n
                       and not cache.holds(disk, page.disk_offset, ROW))

        try:
            return self.layout.write_plan(lo, hi - lo, failed, cached=cache.holds, partial=partial)
        except DataUnavailableError as exc:
            raise OSError(errno.EIO, f"{self.name}: {exc.strerror}") from exc

    def _write_rows(self, offset: int, length: int) -> list[int]:
        """The rows (row_keys) a write of [offset, offset + length) takes: from the layout's
        span where it gives one, else from a plan."""
        if self._parity:
            span = self.layout.parity_write_span(offset, length)
            if span is not None:
                return list(range(span[0] // ROW, (span[1] - 1) // ROW + 1))
        return row_keys(self._write_plan(offset, length, self.failed))

    def _take_rows(self, offset: int, length: int, held: list[int]) -> bool:
        """Take, without waiting, the rows a write of [offset, offset + length) needs
        beyond `held` (added to it); False, taking none, if one of them is busy."""
        keys = sorted(set(row_keys(self.layout.write_plan(offset, length))) - set(held))
        if not self._stripe_locks.try_acquire(keys):
            return False
        held.extend(keys)
        return True

    async def _write_piece(self, offset: int, data: bytes, fua: bool, plan: WritePlan | None = None) -> None:
        """Write [offset, offset + len(data)) with its rows held: plan, pre-read (from the
        stripe cache where it can), write; plan again when a member fails meanwhile. `plan`:
        this piece's plan with the stripe cache, made under the same rows (_needs_pre_read)."""
        length = len(data)
        while True:  # again when a member fails meanwhile
            cache = self._usable_stripe_cache()
            # Under the row locks the cache cannot change: the plan weighs what it holds.
            edges = self._page_edges(offset, length) if cache is not None else []
            lo, hi = _page_span(offset, length) if edges else (offset, offset + length)
            if plan is None or cache is None or plan.offset != lo or plan.length != hi - lo:
                plan = (self._widened_plan(offset, length, self.failed, cache, edges) if cache is not None
                        else self._write_plan(offset, length, self.failed))
            try:
                # The pages covered in part: read with the plan's pre-reads unless one of
                # those holds them (RMW reads the old data of every written page).
                extra = [page for page in edges
                         if not any(_within(r, page.disk, page.disk_offset, ROW) for r in plan.reads)]
                ranges = [*plan.reads, *extra]
                buffers = await self._pre_read(ranges, cache) if ranges else []
                whole = data
                if edges:
                    whole = _fill_pages(offset, data, lo, hi, self.layout, ranges, buffers)
                    self.counters["partial_page_writes"] += 1
                # Data payloads are views of `whole` (the member copies what it keeps).
                payloads = plan.payloads(whole, buffers[:len(plan.reads)], data_views=True)
                writes = plan.writes
                if self.image_buffer is not None and any(w.role == "image" for w in writes):
                    # RAID-x: images into the persistent buffer first, then the data copy.
                    await self.image_buffer.log(
                        [(w.disk, w.disk_offset, w.logical_offset, p)
                         for w, p in zip(writes, payloads) if w.role == "image"], fua)
                    kept = [(w, p) for w, p in zip(writes, payloads) if w.role != "image"]
                    writes, payloads = [w for w, _ in kept], [p for _, p in kept]
                record = None
                if self.journal is not None:  # data and parity into the journal first (raidlab.engine.journal)
                    record = await self.journal.log(
                        [(w.disk, w.disk_offset, p) for w, p in zip(writes, payloads)], self._flush_members)
                try:
                    await self._write_extents(writes, payloads, fua)
                finally:
                    if record is not None:
                        self.journal.completed(record)
                if cache is not None:
                    for write, payload in zip(writes, payloads):
                        cache.put(write.disk, write.disk_offset, payload)
            except _MemberFailed:
                plan = None
                continue
            except BaseException:
                # Some member writes may have landed (an unsurvivable failure, a
                # cancellation): what the cache holds of these rows may be stale.
                if self.stripe_cache is not None:
                    self.stripe_cache.clear()
                raise
            break
        self._count_plan(plan)

    def _usable_stripe_cache(self) -> StripeCache | None:
        """The stripe cache, when it may be used: all members healthy, no rebuild running."""
        if self.stripe_cache is None or self.failed or self._rebuild is not None:
            return None
        return self.stripe_cache

    async def _pre_read(self, ranges: Sequence[DiskRange], cache: StripeCache | None) -> list[bytes]:
        """A write plan's pre-reads: from the stripe cache where it holds the whole range,
        from the members otherwise (and what they return is cached)."""
        if cache is None:
            return await self._read_ranges(ranges)
        results: list[bytes | None] = [cache.get(r.disk, r.disk_offset, r.length) for r in ranges]
        missing = [i for i, got in enumerate(results) if got is None]
        if missing:
            read = await self._read_ranges([ranges[i] for i in missing])
            for i, buf in zip(missing, read):
                results[i] = buf
                cache.put(ranges[i].disk, ranges[i].disk_offset, buf)
        return results  # type: ignore[return-value]

    async def flush(self) -> None:
        self.counters["flushes"] += 1
        durable = self.journal.durable_candidate() if self.journal is not None else None
        await self._flush_members()
        if self.journal is not None:  # the journal's records up to `durable` need no replay now
            await self.journal.checkpoint(durable)

    async def _flush_members(self) -> None:
        calls = [
            (self.member_call, index, member.flush)
            for index, member in enumerate(self.members)
            if index not in self.failed
        ]
        try:
            await self.gather(calls)
        except _MemberFailed:
            pass  # the member is marked failed; what it held survives on the others

    async def trim(self, offset: int, length: int) -> None:
        check_aligned(offset, length, self.size)
        self.counters["trims"] += 1
        if self._parity or length == 0:
            return
        if self.image_buffer is not None:
            await self.image_buffer.drain()  # a pending image must not land after the trim
        calls = [
            (self.member_call, ext.disk, self.members[ext.disk].trim, ext.disk_offset, ext.length)
            for piece in self.layout.copies(offset, length)
            for ext in piece
            if ext.disk not in self.failed
        ]
        try:
            await self.gather(calls)
        except _MemberFailed:
            pass

    def statistics(self) -> dict[str, Any]:
        stats: dict[str, Any] = {
            "arch": self.layout.name,
            "capacity": self.size,
            "failed_members": sorted(self.failed),
            "state": self.state,
            "stripe_lock_waits": self._stripe_locks.waits,
            **self.counters,
        }
        if self.image_buffer is not None:
            stats["image_buffer"] = self.image_buffer.statistics()
        if self.stripe_cache is not None:
            stats["stripe_cache"] = self.stripe_cache.statistics()
        if self.journal is not None:
            stats["journal"] = self.journal.statistics()
        stats["members"] = [
            {"index": i, "failed": i in self.failed, **member.statistics()}
            for i, member in enumerate(self.members)
        ]
        return stats

    # ------------------------------------------------------------------ state

    @property
    def state(self) -> str:
        if not self.failed:
            return "optimal"
        return "degraded" if self.layout.survives(self.failed) else "failed"

    async def fail_member(self, index: int) -> None:
        """Mark member `index` failed (fault injection or an EIO it returned)."""
        if index in self.failed:
            return
        self.failed = self.failed | {index}
        if self.stripe_cache is not None:
            self.stripe_cache.clear()  # not used while degraded; a rebuild starts it empty
        if self.on_failure is not None:
            await self.on_failure(self.failed)

    # ------------------------------------------------------------------ repair

    async def rebuild(self, index: int, replacement, *, segment: int = 1 << 20,
                      progress: Callable[[int, int], None] | None = None) -> None:
        """Rebuild failed member `index` onto `replacement` (a blank BlockTarget of the
        member's size) from the surviving members, then put it in service.

        Reads keep being served (degraded) throughout. Writes are let through one at a
        time between segment copies; a write that touches bytes of the member below the
        rebuild watermark has those bytes recomputed onto the replacement right after it
        (from the survivors, which now hold the write), so nothing the rebuild already
        copied goes stale. Writes in flight when the rebuild starts are waited for.
        """
        if index not in self.failed:
            raise ValueError(f"{self.name}: member {index} is not failed")
        if replacement.size != self.members[index].size:
            raise ValueError(f"{self.name}: replacement has {replacement.size} bytes, member has "
                             f"{self.members[index].size}")
        others = self.failed - {index}
        if not self.layout.survives(self.failed):
            raise OSError(errno.EIO, f"{self.name}: cannot rebuild member {index}: data is lost "
                                     f"(failed members {sorted(self.failed)})")
        start = self.layout.data_offset
        end = start + self.layout.member_data_size
        self._rebuild = _RebuildState(index, replacement, others, watermark=start)
        try:
            if self._ungated_writes:
                self._ungated_drained = sched.Event()
                await self._ungated_drained.wait()
            await self._images_home()
            pos = start
            while pos < end:
                n = min(segment, end - pos)
                async with self._write_gate:
                    await self._rebuild_range(pos, n)
                    self._rebuild.watermark = pos + n
                pos += n
                if progress is not None:
                    progress(pos - start, end - start)
            async with self._write_gate:
                await replacement.flush()
                as_block_layer(replacement)
                self.members[index] = replacement
                self.failed = others
                self.counters["rebuilds"] = self.counters.get("rebuilds", 0) + 1
                if self.on_failure is not None:
                    await self.on_failure(self.failed)
        finally:
            self._rebuild = None
            self._images_buffered()

    async def resync(self, *, segment: int = 1 << 20,
                     progress: Callable[[int, int], None] | None = None) -> int:
        """Make every stripe consistent again, as md's resync after an unclean shutdown and
        its `repair` do: each segment of the array is read through the normal read path
        (the data members; a mirror's chosen copy) and written back whole, so parity is
        recomputed from the data and every copy gets the one that was read. Writes wait
        between segments, as during a rebuild. Needs every member. Returns bytes rewritten."""
        if self.failed:
            raise OSError(errno.EIO, f"{self.name}: cannot resync with failed members {sorted(self.failed)}")
        stripe = self.layout.parity_stripe_bytes or SECTOR
        step = max(stripe, segment - segment % stripe)
        self._resyncing = True
        try:
            if self._ungated_writes:
                self._ungated_drained = sched.Event()
                await self._ungated_drained.wait()
            await self._images_home()
            pos = 0
            while pos < self.size:
                n = min(step, self.size - pos)
                async with self._write_gate:
                    await self._write(pos, await self.read(pos, n), False)
                pos += n
                if progress is not None:
                    progress(pos, self.size)
            await self.flush()
            self.counters["resyncs"] = self.counters.get("resyncs", 0) + 1
            return self.size
        finally:
            self._resyncing = False
            self._images_buffered()

    async def _images_home(self) -> None:
        """RAID-x: write every pending image home and write images through from now on,
        so a rebuild or scrub reads complete image homes."""
        if self.image_buffer is not None:
            self.image_buffer.write_through = True
            await self.image_buffer.drain()

    def _images_buffered(self) -> None:
        if self.image_buffer is not None:
            self.image_buffer.write_through = self.image_buffer.resting_write_through

    async def _rebuild_range(self, disk_offset: int, length: int) -> None:
        state = self._rebuild
        assert state is not None
        plan = self.layout.rebuild_plan(state.index, disk_offset, length, state.others)
        buffers = await self._read_ranges(plan.reads)
        await state.replacement.write(disk_offset, plan.assemble(buffers))

    async def _refresh_rebuilt(self, offset: int, length: int) -> None:
        """After a write during a rebuild: recompute the replacement's bytes it touched
        below the watermark."""
        state = self._rebuild
        assert state is not None
        healthy = self.layout.write_plan(offset, length, state.others)
        for ext in healthy.writes:
            if ext.disk != state.index:
                continue
            lo, hi = ext.disk_offset, min(ext.end, state.watermark)
            if lo < hi:
                await self._rebuild_range(lo, hi - lo)

    async def scrub(self, *, segment: int = 1 << 20,
                    progress: Callable[[int, int], None] | None = None) -> list[dict[str, int]]:
        """Compare every healthy member's data area with what the other members say it
        must hold (mirror copy or parity reconstruction). Returns the mismatching ranges
        as [{"disk", "offset", "length"}]. Needs a redundant layout and no failed member."""
        if self.failed:
            raise OSError(errno.EIO, f"{self.name}: cannot check with failed members {sorted(self.failed)}")
        await self._images_home()
        try:
            return await self._scrub(segment, progress)
        except _MemberFailed as exc:  # failed meanwhile: marked failed; the check cannot go on
            raise OSError(errno.EIO, f"{self.name}: member {exc.args[0]} failed during the check, which stopped "
                                     f"there; replace it, then check again") from None
        finally:
            self._images_buffered()

    async def _scrub(self, segment: int, progress) -> list[dict[str, int]]:
        """Segment by segment, read the same bytes of every member once, all at once, and
        check each member's bytes against what the others say they must be (its rebuild
        plan: the mirror copy or the parity reconstruction). A plan's reads are taken from
        the segment already read where they lie in it (raid1, raid5, raid10 near); only
        copies kept elsewhere on a member (raid10 far/offset, chained, raidx) cost another
        read."""
        start = self.layout.data_offset
        end = start + self.layout.member_data_size
        mismatches: list[dict[str, int]] = []
        count = len(self.members)
        total = (end - start) * count
        done = 0
        pos = start
        while pos < end:
            n = min(segment, end - pos)
            async with self._write_gate:  # no write may land between the reads of a segment
                rows = await self._read_ranges([DiskRange(disk, pos, n) for disk in range(count)])
                for index in range(count):
                    plan = self.layout.rebuild_plan(index, pos, n, ())
                    inside = [r.disk_offset >= pos and r.end <= pos + n for r in plan.reads]
                    elsewhere = await self._read_ranges([r for r, ok in zip(plan.reads, inside) if not ok])
                    datas, more = [], iter(elsewhere)
                    for rng, ok in zip(plan.reads, inside):
                        datas.append(rows[rng.disk][rng.disk_offset - pos:rng.end - pos] if ok else next(more))
                    expected = plan.assemble(datas)
                    if expected != rows[index]:
                        mismatches.extend(_diff_ranges(index, pos, expected, rows[index]))
            pos += n
            done += n * count
            if progress is not None:
                progress(done, total)
        self.counters["scrubs"] = self.counters.get("scrubs", 0) + 1
        return mismatches

    # ------------------------------------------------------------------ plan execution

    def _read_plan(self, offset: int, length: int, failed: frozenset[int]):
        try:
            if failed:
                return self.layout.degraded_read_plan(offset, length, failed)
            return self.layout.read_plan(offset, length)
        except DataUnavailableError as exc:
            raise OSError(errno.EIO, f"{self.name}: {exc.strerror}") from exc

    def _write_plan(self, offset: int, length: int, failed: frozenset[int],
                    cached: Callable[[int, int, int], bool] | None = None) -> WritePlan:
        try:
            if cached is not None:
                return self.layout.write_plan(offset, length, failed, cached=cached)
            return self.layout.write_plan(offset, length, failed)
        except DataUnavailableError as exc:
            raise OSError(errno.EIO, f"{self.name}: {exc.strerror}") from exc

    async def _read_ranges(self, ranges: Sequence[DiskRange]) -> list[bytes]:
        if not ranges:
            return []
        self.counters["member_reads"] += len(ranges)
        self.counters["member_read_bytes"] += sum(r.length for r in ranges)
        results: list[bytes | None] = [None] * len(ranges)
        waiting = []  # the reads that are not done at once (EmulatedDisk.read_now)
        for i, rng in enumerate(ranges):
            member = self.members[rng.disk]
            got = member.read_now(rng.disk_offset, rng.length) if type(member) in _AT_ONCE else None
            if got is None:
                waiting.append(i)
            else:
                results[i] = got
        if not waiting:
            await sched.checkpoint_if_cancelled()
            return results  # type: ignore[return-value]

        async def one(i: int) -> None:
            rng = ranges[i]
            results[i] = await self.member_call(rng.disk, self.members[rng.disk].read, rng.disk_offset, rng.length)

        if len(waiting) == 1:
            await one(waiting[0])
        else:
            await self.gather([(one, i) for i in waiting])
        return results  # type: ignore[return-value]

    async def _write_extents(self, writes: Sequence, payloads: Sequence[bytes | memoryview], fua: bool) -> None:
        if not writes:
            return
        requests = coalesce_writes(writes, payloads)
        self.counters["member_writes"] += len(requests)
        self.counters["member_write_bytes"] += sum(len(payload) for _disk, _offset, payload in requests)

        waiting = []  # the writes that are not done at once (EmulatedDisk.write_now)
        for request in requests:
            disk, offset, payload = request
            member = self.members[disk]
            if type(member) not in _AT_ONCE or not member.write_now(offset, payload, fua=fua):
                waiting.append(request)
        if not waiting:
            await sched.checkpoint_if_cancelled()
            return

        async def one(disk: int, offset: int, payload) -> None:
            await self.member_call(disk, self.members[disk].write, offset, payload, fua=fua)

        if len(waiting) == 1:
            await one(*waiting[0])
            return
        await self.gather([(one, *request) for request in waiting])

    async def gather(self, calls) -> None:
        """Run the calls concurrently (each `(fn, *args)`, typically member_call), started in
        the order given (raidlab.engine.ordered says why). Errors are re-raised as
        themselves (not as an ExceptionGroup): a fatal OSError first, otherwise one
        _MemberFailed."""
        caught = await start_in_order(calls, catch=(_MemberFailed, OSError))
        fatal = [exc for exc in caught if isinstance(exc, OSError)]
        if fatal:
            raise fatal[0]
        if caught:
            raise caught[0]

    async def member_call(self, index: int, fn, *args, **kwargs):
        """`fn(*args)` on member `index`, with the array's failure handling: an EIO marks the
        member failed (persisted through on_failure) and raises EIO if the layout cannot
        survive it, else an internal signal that makes the request plan again."""
        try:
            return await fn(*args, **kwargs)
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            self.counters["member_errors"] += 1
            await self.fail_member(index)
            if not self.layout.survives(self.failed):
                raise OSError(errno.EIO, f"{self.name}: member {index} failed and the array cannot survive it "
                                         f"(failed members {sorted(self.failed)})") from exc
            raise _MemberFailed(index) from exc

    def _count_plan(self, plan: WritePlan) -> None:
        if plan.skipped:
            self.counters["degraded_writes"] += 1
        for stripe in plan.stripes:
            if stripe.method == "full-stripe":
                self.counters["full_stripe_writes"] += 1
            elif stripe.method.startswith("rmw"):
                self.counters["rmw_stripes"] += 1
            elif stripe.method == "rcw":
                self.counters["rcw_stripes"] += 1


def _page_span(offset: int, length: int) -> tuple[int, int]:
    """[offset, offset + length) widened to whole pages (ROW)."""
    return offset - offset % ROW, -(-(offset + length) // ROW) * ROW


def _within(rng: DiskRange, disk: int, offset: int, length: int) -> bool:
    """Does member range `rng` hold [offset, offset + length) of member `disk`?"""
    return rng.disk == disk and rng.disk_offset <= offset and offset + length <= rng.disk_offset + rng.length


def _fill_pages(offset: int, data: bytes, lo: int, hi: int, layout: Layout,
                ranges: Sequence[DiskRange], buffers: Sequence[bytes]) -> bytes:
    """`data`, written at `offset`, widened to [lo, hi) with the old bytes of the pages it
    covers in part, taken from the member ranges just read (or served by the cache)."""
    def old(a: int, b: int) -> bytes:
        if b <= a:
            return b""
        ext = layout.map(a, b - a)[0]
        for rng, buf in zip(ranges, buffers):
            if _within(rng, ext.disk, ext.disk_offset, ext.length):
                start = ext.disk_offset - rng.disk_offset
                return bytes(buf[start:start + ext.length])
        raise AssertionError(f"no read holds member {ext.disk} at {ext.disk_offset}")  # pragma: no cover

    end = offset + len(data)
    return old(lo, offset) + bytes(data) + old(end, hi)


def coalesce_writes(writes: Sequence, payloads: Sequence[bytes | memoryview]) -> list[tuple[int, int, bytes | memoryview]]:
    """(disk, offset, payload) member requests: writes of one plan that continue each other on
    the same member become one request, in the order of their first piece.

    Why: a layout plans per chunk (a 1 MiB raid0 write over 64 KiB chunks is 16 extents,
    four back-to-back on each member), and every member request costs a trip to a worker
    thread in live mode; the block layer below md merges such bios the same way. The
    payloads of a merged request are joined (one copy)."""
    runs: list[list] = []  # [disk, start, end, pieces]
    open_end: dict[tuple[int, int], list] = {}  # (disk, end) -> the run ending there
    for ext, payload in zip(writes, payloads):
        run = open_end.pop((ext.disk, ext.disk_offset), None)
        if run is None:
            run = [ext.disk, ext.disk_offset, ext.disk_offset, []]
            runs.append(run)
        run[2] += ext.length
        run[3].append(payload)
        open_end[(ext.disk, run[2])] = run
    return [(disk, start, pieces[0] if len(pieces) == 1 else b"".join(pieces))
            for disk, start, _end, pieces in runs]


class _PendingWrite:
    """A write of a parity layout between its arrival and its end (Array._gather)."""

    def __init__(self, offset: int, data: bytes) -> None:
        self.offset = offset
        self.data = data
        self.end = offset + len(data)
        self.started = False  # holds its rows
        self.finished = sched.Event()
        self.done: list[tuple[int, int]] = []  # [lo, hi) another write wrote for it

    def remaining(self) -> list[tuple[int, bytes]]:
        """(offset, bytes) of what is left to write: the write less what others did."""
        if not self.done:
            return [(self.offset, self.data)]
        out: list[tuple[int, bytes]] = []
        pos = self.offset
        for lo, hi in sorted(self.done) + [(self.end, self.end)]:
            if lo > pos:
                out.append((pos, self.data[pos - self.offset:lo - self.offset]))
            pos = max(pos, hi)
        return out


class _RebuildState:
    def __init__(self, index: int, replacement, others: frozenset[int], watermark: int) -> None:
        self.index = index
        self.replacement = replacement
        self.others = others
        self.watermark = watermark


def _diff_ranges(disk: int, base: int, expected: bytes, actual: bytes, grain: int = 4096):
    """Coalesced [offset, length) ranges (in `grain` units) where the two buffers differ."""
    out: list[dict[str, int]] = []
    for pos in range(0, len(expected), grain):
        if expected[pos : pos + grain] != actual[pos : pos + grain]:
            n = min(grain, len(expected) - pos)
            if out and out[-1]["offset"] + out[-1]["length"] == base + pos:
                out[-1]["length"] += n
            else:
                out.append({"disk": disk, "offset": base + pos, "length": n})
    return out


class _MemberFailed(Exception):
    """Internal: a member just failed and the array survives; re-plan the request."""

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index
