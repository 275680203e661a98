"""Map changes of a TSS device in the paper's order, and the reserved stripe (Pallipadi &
Gopinath, "Temperature Sensitive Storage", §3.6).

Every change of a logical stripe's location follows §3.6's order: find the space, copy the
data, then change mapping and type, then free the old space. `commit` is the third step:
the column writes so far are made durable, the map record is written
(raidlab.engine.tss.persist), and only then does the in-memory map change; the caller
releases the space the old entry held (`release`) after that, so space a durable record
still points at is never reused.

When no free space exists for a move that empties a whole physical stripe (a RAID5
victimization, or a cRAID5 promotion or write whose compressed stripe was alone in its
physical stripe), the data move into the reserved stripe and the vacated stripe becomes
the reserved one (§3.6), one such move at a time: the store's header names the vacated
stripe reserved (keeping the old one as its previous) before the entry points into the old
reserved stripe.
"""

from __future__ import annotations

import collections
import dataclasses

from raidlab import sched
from raidlab.engine.tss.columns import Columns
from raidlab.engine.tss.maptable import CRAID5, RAID1, RAID5, Compressed, MapTable, Mapping
from raidlab.engine.tss.persist import MapStore
from raidlab.engine.tss.physical import PhysicalStripes


class Space:
    """The map table's entries changed durably, space released after, and moves through
    the reserved stripe (module doc)."""

    def __init__(self, table: MapTable, store: MapStore | None, columns: Columns, physical: PhysicalStripes,
                 counters: collections.Counter[str]) -> None:
        self.table = table
        self.store = store
        self.columns = columns
        self.physical = physical
        self.counters = counters
        self.reserved_lock = sched.Lock()  # one move through the reserved stripe at a time

    async def commit(self, ls: int, entry: Mapping) -> Mapping:
        """Record `entry` durably (raidlab.engine.tss.persist), then make it the map's;
        returns the entry it replaced, whose space the caller releases after this."""
        if self.store is not None:
            await self.columns.durable()
            await self.store.write_entry(ls, entry)
        return self.table.set(ls, entry)

    def release(self, old: Mapping) -> None:
        """Free the space of a map entry just replaced."""
        if old.kind in (RAID1, RAID5):
            for ps in old.stripes:
                self.table.release(ps)
        elif old.kind == CRAID5:
            c = old.compressed
            self.table.release_substripes(c.stripe, c.first, c.count)

    def vacates_whole_stripe(self, old: Mapping) -> int | None:
        """The physical stripe `old` leaves entirely free once gone (a RAID5 stripe, or a
        shared stripe holding only this compressed stripe), else None."""
        if old.kind == RAID5:
            return old.stripes[0]
        if old.kind == CRAID5:
            c = old.compressed
            if self.table.sub_used.get(c.stripe) == ((1 << c.count) - 1) << c.first:
                return c.stripe
        return None

    async def move_through_reserved(self, ls: int, old: Mapping, payload: bytes,
                                    compressed: Compressed | None) -> None:
        """§3.6: write `payload` into the reserved stripe (as cRAID5 sub-stripes from 0 when
        `compressed` is given, else as a RAID5 stripe), change the map, and let the stripe
        `old` vacates become the reserved stripe. One move at a time."""
        async with self.reserved_lock:
            table = self.table
            vacated = self.vacates_whole_stripe(old)
            assert vacated is not None
            target = table.reserved
            await self.physical.write_parity(target, 0, payload, fresh=True)
            self.counters["reserved_stripe_moves"] += 1
            if compressed is not None:
                entry = Mapping(CRAID5, (target,), dataclasses.replace(compressed, stripe=target))
            else:
                entry = Mapping(RAID5, (target,))
            if self.store is not None:  # header first, keeping the old reserved stripe (persist)
                await self.columns.durable()
                await self.store.write_header(vacated, target)
                await self.store.write_entry(ls, entry)
            if old.kind == CRAID5:
                c = old.compressed
                table.release_substripes(c.stripe, c.first, c.count)
            table.swap_reserved(vacated)
            if compressed is not None:
                table.adopt_shared(target, 0, compressed.count)
            table.set(ls, entry)
