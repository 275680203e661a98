"""Bringing a TSS device's redundancy back (Pallipadi & Gopinath, "Temperature Sensitive
Storage", §3.7: "when the degraded disk is replaced ... synched"; §3.8, recovery): a failed
column rebuilt onto a new drive while the device serves, the check of every stripe's
redundancy (scrub), and the parity of shared stripes rewritten after an unclean stop.

Rebuild: first every shared (cRAID5) stripe under its physical lock, then each logical
stripe's RAID1 copies and RAID5 stripe under its lock: a data unit from the other copy, a
parity stripe's unit from the others' XOR. Writes meanwhile reach the new drive where their
stripe is rebuilt or they cover whole units (raidlab.engine.tss.columns), and the rebuild
fills in the rest; migrations wait for the end. This is the project's own design: §3.7
names the duty and says the work is in progress.

After an unclean stop the data log is replayed first (raidlab.engine.tss.logwrites); then
`resync_shared` rewrites the parity of every physical stripe compressed stripes share, since
a cRAID5 write or move that a crash cut short may have left it out of step with sub-stripes
no one owns any more (a move is not logged: its map record decides whether it happened).
"""

from __future__ import annotations

import collections
import errno
from collections.abc import Awaitable, Callable
from typing import Any

from raidlab import sched
from raidlab.disks.disk import as_block_layer
from raidlab.engine.layouts.xor import xor_blocks
from raidlab.engine.tss.columns import Columns, Missing, in_order
from raidlab.engine.tss.compressed import CompressedStripes
from raidlab.engine.tss.maptable import RAID1, RAID5, MapTable
from raidlab.engine.tss.persist import MapStore
from raidlab.engine.tss.physical import PhysicalStripes
from raidlab.errors import UsageError


class Repair:
    """Rebuild, scrub and shared-stripe resync over the device's columns (module doc).
    `locks` are the logical stripes' locks; `applied(ls)` waits for a stripe's queued
    asynchronous writes."""

    def __init__(self, name: str, table: MapTable, store: MapStore | None, locks: dict[int, sched.Lock], columns: Columns,
                 physical: PhysicalStripes, compressed: CompressedStripes, counters: collections.Counter[str], *,
                 applied: Callable[[int], Awaitable[None]]) -> None:
        self.name = name
        self.table = table
        self.geometry = table.geometry
        self.store = store
        self.locks = locks
        self.columns = columns
        self.physical = physical
        self.compressed = compressed
        self.counters = counters
        self.applied = applied

    async def rebuild(self, column: int, drive: Any, progress=None) -> int:
        """Rebuild failed `column` onto `drive` while the device serves (module doc).
        Returns the physical stripes rebuilt."""
        columns = self.columns
        if column not in columns.failed:
            raise UsageError(f"column {column} of {self.name} has not failed")
        if len(columns.failed) > 1:
            raise UsageError(f"{self.name} lost columns {sorted(columns.failed)}: nothing to rebuild from")
        columns.members[column] = drive
        as_block_layer(drive)
        columns.rebuilding, columns.rebuilt = column, set()
        done = 0
        total = len(self.table.sub_used) + self.table.logical_stripes
        try:
            for ps in sorted(self.table.sub_used):
                async with self.compressed.locks[ps]:
                    if ps in self.table.sub_used and ps not in columns.rebuilt:
                        await self._rebuild_parity_unit(ps, column)
                done += 1
                if progress:
                    progress(done, total)
            for ls in range(self.table.logical_stripes):
                async with self.locks[ls]:
                    entry = self.table[ls]
                    if entry.unwritten:
                        columns.rebuilt.update(entry.stripes)  # nothing of it to rebuild
                    elif entry.kind == RAID1:
                        for copy, other in ((entry.stripes[0], entry.stripes[1]), (entry.stripes[1], entry.stripes[0])):
                            if copy not in columns.rebuilt:
                                await self._rebuild_copy_unit(copy, other, column)
                    elif entry.kind == RAID5 and entry.stripes[0] not in columns.rebuilt:
                        await self._rebuild_parity_unit(entry.stripes[0], column)
                done += 1
                if progress:
                    progress(done, total)
        finally:
            columns.rebuilding = None
        rebuilt = len(columns.rebuilt)
        columns.rebuilt = set()
        columns.failed.discard(column)
        if self.store is not None:
            self.store.failed.discard(column)
            if column < len(self.store.members):
                self.store.members[column] = drive
                await self.store.write_all(self.table)
        if columns.on_failure is not None:
            await columns.on_failure(frozenset(columns.failed))
        self.counters["rebuilds"] += 1
        return rebuilt

    async def _rebuild_parity_unit(self, ps: int, column: int) -> None:
        g = self.geometry
        data = await self.physical.reconstruct(ps, column, g.unit_offset(ps), g.unit)
        await self.columns.members[column].write(g.unit_offset(ps), data)
        self.columns.rebuilt.add(ps)

    async def _rebuild_copy_unit(self, copy: int, other: int, column: int) -> None:
        """A RAID1 copy's unit on `column`: the same data unit of the other copy (its
        unused parity unit, when that is what `column` holds, stays as it is)."""
        g = self.geometry
        if g.polarity(copy) != column:
            index = (column - g.polarity(copy) - 1) % g.columns
            source = g.data_column(other, index)
            data = await self.columns.read(source, g.unit_offset(other), g.unit)
            await self.columns.members[column].write(g.unit_offset(copy), data)
        self.columns.rebuilt.add(copy)

    async def scrub(self, progress=None) -> tuple[list[dict[str, int]], int]:
        """Read every physical stripe in use once and check it: a RAID1 logical stripe's two
        copies hold the same data units, a RAID5 or shared stripe's parity is the XOR of its
        data units. Returns (mismatches as {"stripe", "disk", "offset", "length"}, bytes
        read); each stripe is checked under its lock."""
        if self.columns.failed:
            raise UsageError(f"{self.name} runs degraded (failed columns {sorted(self.columns.failed)}): "
                             "nothing to check against", hint="replace the column first")
        g = self.geometry
        mismatches: list[dict[str, int]] = []
        total = len(self.table.sub_used) + self.table.logical_stripes
        done = checked = 0

        async def units(ps: int, with_parity: bool) -> list[bytes]:
            nonlocal checked
            columns = [g.data_column(ps, i) for i in range(g.data_units)] + ([g.polarity(ps)] if with_parity else [])
            out: list[bytes] = [b""] * len(columns)

            async def one(i: int, column: int) -> None:
                try:
                    out[i] = await self.columns.read(column, g.unit_offset(ps), g.unit)
                except Missing:  # the read failed the column: the check ends, the device serves degraded
                    raise OSError(errno.EIO, f"{self.name}: column {column} failed under the check") from None

            await in_order([(one, i, column) for i, column in enumerate(columns)])
            checked += len(columns) * g.unit
            return out

        def parity_wrong(ps: int, read: list[bytes]) -> None:
            if xor_blocks(read[:-1]) != read[-1]:
                mismatches.append({"stripe": ps, "disk": g.polarity(ps), "offset": g.unit_offset(ps),
                                   "length": g.unit})

        for ps in sorted(self.table.sub_used):
            async with self.compressed.locks[ps]:
                if ps in self.table.sub_used:
                    parity_wrong(ps, await units(ps, True))
            done += 1
            if progress:
                progress(done, total)
        for ls in range(self.table.logical_stripes):
            await self.applied(ls)
            async with self.locks[ls]:
                entry = self.table[ls]
                if entry.unwritten:
                    pass  # nothing of it on its disks to check
                elif entry.kind == RAID1:
                    a, b = entry.stripes
                    first, second = await units(a, False), await units(b, False)
                    for index, (x, y) in enumerate(zip(first, second)):
                        if x != y:
                            mismatches.append({"stripe": b, "disk": g.data_column(b, index),
                                               "offset": g.unit_offset(b), "length": g.unit})
                elif entry.kind == RAID5:
                    parity_wrong(entry.stripes[0], await units(entry.stripes[0], True))
            done += 1
            if progress:
                progress(done, total)
        self.counters["scrubs"] += 1
        self.counters["scrub_mismatches"] += len(mismatches)
        return mismatches, checked

    async def resync_shared(self) -> None:
        """Rewrite the parity of every physical stripe compressed stripes share (module
        doc); not when degraded, where the parity is what rebuilds the lost column."""
        g = self.geometry
        for ps in sorted(self.table.sub_used):
            if self.columns.failed:  # degraded: the parity is what rebuilds the lost column
                break
            data = await self.physical.read_range(ps, 0, g.data_bytes)
            await self.physical.write_parity_unit(ps, data)
            self.counters["shared_stripes_resynced"] += 1
