"""A logical stripe's request served by its personality (Pallipadi & Gopinath, "Temperature
Sensitive Storage", §3.4-3.6: stripe-level I/O). The caller holds the logical stripe's
lock; the map table says which personality serves it:

* invalid: the first access allocates the stripe (RAID1 when two free stripes of different
  polarity exist, else RAID5, §3.6: "Whenever some READ/WRITE happens to a particular
  stripe, it should move to RAID1 or RAID5"). A first write writes it whole, zeros around
  the new data, so no stale bytes of an earlier owner survive. A first read leaves it
  *unwritten*: its reads go to its disks, as the paper's did (the time of a first read is a
  disk read), and answer zeros; its first write (or a migration, which moves it as zeros)
  writes it whole. With allocate_on_read off, a read of an invalid stripe answers zeros
  and touches no disk. A cRAID5 stripe has no unwritten state (its compressed size locates
  it): a static cRAID5 device's first read stores the stripe as compressed zeros and reads
  that back.
* RAID1: writes go to both physical stripes; a read goes to one copy
  (raidlab.engine.tss.physical: read balancing, §4).
* RAID5: a partial write is a read-modify-write or a reconstruct-write
  (raidlab.engine.tss.physical); a whole stripe is written with its parity and no read.
* cRAID5: the stripe is read and decompressed whole, the new data merged, compressed again
  and stored anew (raidlab.engine.tss.compressed, §3.5).

Static devices: `mode` raid1, raid5 or craid5 allocates every stripe as that personality:
the paper's Table 3 rows ("RAID devices through TSS"); `mode="tss"` is the integrated
device. When the integrated device finds no free space for a first write or a cRAID5 store,
it takes the decision itself (§3.9: "The low level TSS device does take some policy
decisions in extreme situations"): `make_room` (raidlab.engine.tss.migration) victimizes a
cold stripe, and the allocation is tried again. Every access touches the stripe's
temperature (§3.9).
"""

from __future__ import annotations

import collections
from collections.abc import Awaitable, Callable

from raidlab.engine.tss.compressed import CompressedStripes
from raidlab.engine.tss.maptable import CRAID5, INVALID, RAID1, RAID5, MapTable, Mapping, NoSpace
from raidlab.engine.tss.physical import PhysicalStripes
from raidlab.engine.tss.space import Space
from raidlab.engine.tss.temperature import Temperatures


class Personalities:
    """Reads and writes within one logical stripe, by its personality (module doc).
    `make_room(exclude=ls)` frees space by victimizing a stripe other than `ls`."""

    def __init__(self, name: str, mode: str, table: MapTable, temperatures: Temperatures,
                 physical: PhysicalStripes, compressed: CompressedStripes, space: Space, counters: collections.Counter[str], *,
                 allocate_on_read: bool, make_room: Callable[..., Awaitable[None]]) -> None:
        self.name = name
        self.mode = mode
        self.table = table
        self.temperatures = temperatures
        self.physical = physical
        self.compressed = compressed
        self.space = space
        self.counters = counters
        self.allocate_on_read = allocate_on_read
        self.make_room = make_room

    async def read(self, ls: int, start: int, n: int) -> bytes:
        """Bytes [start, start+n) of logical stripe `ls`."""
        entry = self.table[ls]
        self.temperatures.touch(ls)
        if entry.kind == INVALID and self.allocate_on_read:
            entry = await self.allocate(ls, None)  # cRAID5: a stripe of zeros, stored compressed
        if entry.kind == INVALID:
            self.counters["invalid_reads"] += 1
            return bytes(n)
        self.counters[f"{entry.kind}_reads"] += 1
        if entry.unwritten:  # read what the stripe's disks hold, as the paper's device did; it is not ours
            self.counters["unwritten_reads"] += 1
            try:
                if entry.kind == RAID1:
                    await self.physical.read_mirrored(entry.stripes, start, n)
                else:
                    await self.physical.read_range(entry.stripes[0], start, n)
            except OSError:
                pass
            return bytes(n)
        if entry.kind == RAID1:
            return await self.physical.read_mirrored(entry.stripes, start, n)
        if entry.kind == RAID5:
            return await self.physical.read_range(entry.stripes[0], start, n)
        data = await self.compressed.read(entry.compressed)
        return data[start:start + n]

    async def write(self, ls: int, start: int, data: memoryview, *, reconstruct: bool = False) -> None:
        """Write `data` at `start` of logical stripe `ls`; a RAID5 partial write as a
        reconstruct-write when `reconstruct` (the data log's replay, §3.8)."""
        entry = self.table[ls]
        self.temperatures.touch(ls)
        if entry.kind == INVALID:
            await self.allocate(ls, (start, data))
            return
        self.counters[f"{entry.kind}_writes"] += 1
        if entry.unwritten:  # its first write: the whole stripe, zeros around the data
            await self.write_unwritten(ls, entry, self.physical.zero_filled(start, data))
            return
        if entry.kind == RAID1:
            await self.physical.write_copies(entry.stripes, start, data)
        elif entry.kind == RAID5:
            await self.physical.write_parity(entry.stripes[0], start, data, reconstruct=reconstruct)
        else:
            old = await self.compressed.read(entry.compressed)
            await self.store_or_make_room(ls, b"".join((old[:start], data, old[start + len(data):])), entry)

    async def store_or_make_room(self, ls: int, data: bytes, old: Mapping) -> None:
        """Store `ls` compressed (CompressedStripes.store) for a write: when no sub-stripes
        are free, the integrated device victimizes a stripe to make room once; otherwise
        the write fails ENOSPC."""
        for attempt in range(2):
            try:
                await self.compressed.store(ls, data, old)
                return
            except NoSpace:
                if self.mode != "tss" or attempt:
                    raise OSError(28, f"{self.name}: no free sub-stripes for logical stripe {ls}") from None
                await self.make_room(exclude=ls)

    async def write_unwritten(self, ls: int, entry: Mapping, whole: bytes) -> Mapping:
        """Write an unwritten stripe whole where it is allocated, and record it written."""
        if entry.kind == RAID1:
            await self.physical.write_copies(entry.stripes, 0, whole)
        else:
            await self.physical.write_parity(entry.stripes[0], 0, whole, fresh=True)
        written = Mapping(entry.kind, entry.stripes)
        await self.space.commit(ls, written)
        return written

    async def allocate(self, ls: int, write: tuple[int, memoryview] | None) -> Mapping:
        """First access of an invalid stripe (§3.6): physical space by the device's mode.
        A write fills it whole, zeros around its data; a read leaves a RAID1 or RAID5 stripe
        unwritten (the paper's device read whatever the new stripe held). A cRAID5 stripe
        cannot be unwritten (its compressed size is what locates it): a read stores it as
        compressed zeros and reads that back. Returns the new entry."""
        whole = self.physical.zero_filled(write[0], write[1]) if write is not None else None
        if write is None:
            self.counters["allocations_on_read"] += 1
        if self.mode == CRAID5:
            self.counters["allocations_craid5"] += 1
            await self.store_or_make_room(ls, whole if whole is not None else bytes(self.table.geometry.data_bytes),
                                          self.table[ls])
            return self.table[ls]
        for attempt in range(3):
            try:
                if self.mode == RAID1 or (self.mode == "tss" and self.table.free_stripes() >= 2):
                    try:
                        stripes = self.table.take_mirror_pair()
                    except NoSpace:
                        if self.mode == RAID1:
                            raise
                        stripes = (self.table.take_whole(),)
                else:
                    stripes = (self.table.take_whole(),)
                break
            except NoSpace:
                if self.mode != "tss" or attempt == 2:
                    raise OSError(28, f"{self.name}: no free physical stripe for logical stripe {ls}") from None
                await self.make_room(exclude=ls)
        kind = RAID1 if len(stripes) == 2 else RAID5
        self.counters[f"allocations_{kind}"] += 1
        entry = Mapping(kind, stripes, unwritten=whole is None)
        try:
            if whole is not None:
                if kind == RAID1:
                    await self.physical.write_copies(stripes, 0, whole)
                else:
                    await self.physical.write_parity(stripes[0], 0, whole, fresh=True)
            await self.space.commit(ls, entry)
        except BaseException:
            if self.table[ls].kind == INVALID:  # not recorded: the space goes back
                for ps in stripes:
                    self.table.release(ps)
            raise
        return entry

