"""Migration of logical stripes between the personalities of a TSS device (Pallipadi &
Gopinath, "Temperature Sensitive Storage", §3.6), and what the device decides and answers
for policies (§3.9).

Migrations, each under the logical stripe's lock, in the paper's order: find the space,
copy the data, then change mapping and type, then free the old space
(raidlab.engine.tss.space).

    promote:   cRAID5 -> RAID5 -> RAID1     victimize: RAID1 -> RAID5 -> cRAID5

RAID1 -> RAID5 keeps the primary copy, writes its parity unit (unused while it was a copy)
and frees the mirror. RAID5 -> RAID1 copies the data units into a free stripe of another
polarity placed as the map table places mirrors. RAID5 -> cRAID5 and cRAID5 -> RAID5 store
the stripe anew. When no free space exists for a RAID5 victimization (or a cRAID5 promotion
that empties its physical stripe), the data move through the reserved stripe (§3.6). An
unwritten stripe is first written as the zeros it reads as. A migration resets the stripe's
temperature (§3.9); none runs while a column is rebuilt.

When a first write finds no free stripe, the device takes the decision itself (§3.9: "The
low level TSS device does take some policy decisions in extreme situations"): `make_room`
victimizes the coldest RAID1 stripe not in use, else the coldest RAID5 stripe.

Policies are separate (§3.9); they ask which stripe is the hottest or coldest of a
personality (`best`) and the highest temperature of each (`max_temperature`).
"""

from __future__ import annotations

import collections

from raidlab import sched
from raidlab.engine.tss.columns import Columns
from raidlab.engine.tss.compressed import CompressedStripes
from raidlab.engine.tss.maptable import CRAID5, RAID1, RAID5, MapTable, Mapping, NoSpace
from raidlab.engine.tss.personalities import Personalities
from raidlab.engine.tss.physical import PhysicalStripes
from raidlab.engine.tss.space import Space
from raidlab.engine.tss.temperature import Temperatures
from raidlab.errors import UsageError

PROMOTE = {CRAID5: RAID5, RAID5: RAID1}
VICTIMIZE = {RAID1: RAID5, RAID5: CRAID5}


class MigrationRefused(UsageError):
    """A promotion or victimization that cannot be done (wrong personality, no space)."""


class Migrations:
    """Promotion and victimization of logical stripes (module doc). `locks` are the
    logical stripes' locks, shared with the device's requests."""

    def __init__(self, name: str, table: MapTable, temperatures: Temperatures, locks: dict[int, sched.Lock], columns: Columns,
                 physical: PhysicalStripes, compressed: CompressedStripes, space: Space,
                 personalities: Personalities, counters: collections.Counter[str]) -> None:
        self.name = name
        self.table = table
        self.geometry = table.geometry
        self.temperatures = temperatures
        self.locks = locks
        self.columns = columns
        self.physical = physical
        self.compressed = compressed
        self.space = space
        self.personalities = personalities
        self.counters = counters

    async def promote(self, ls: int) -> str:
        """cRAID5 -> RAID5 or RAID5 -> RAID1; returns the new personality."""
        self.check_stripe(ls)
        async with self.locks[ls]:
            return await self.migrate(ls, up=True)

    async def victimize(self, ls: int) -> str:
        """RAID1 -> RAID5 or RAID5 -> cRAID5; returns the new personality."""
        self.check_stripe(ls)
        async with self.locks[ls]:
            return await self.migrate(ls, up=False)

    def check_stripe(self, ls: int) -> None:
        if not 0 <= ls < self.table.logical_stripes:
            raise UsageError(f"no logical stripe {ls}: {self.name} has 0..{self.table.logical_stripes - 1}")

    async def migrate(self, ls: int, *, up: bool) -> str:
        """Promote (`up`) or victimize `ls`, its lock held; returns the new personality."""
        entry = self.table[ls]
        moves = PROMOTE if up else VICTIMIZE
        verb = "promote" if up else "victimize"
        if self.columns.rebuilding is not None:
            raise MigrationRefused(f"cannot {verb} logical stripe {ls} while column {self.columns.rebuilding} "
                                   "is rebuilt", hint="migrations resume when the rebuild ends")
        if entry.kind not in moves:
            raise MigrationRefused(f"cannot {verb} logical stripe {ls}: it is {entry.kind}",
                                   hint=f"{verb} applies to {' and '.join(moves)} stripes")
        if entry.unwritten:  # moved as the zeros it reads as: written where it is first
            entry = await self.personalities.write_unwritten(ls, entry, bytes(self.geometry.data_bytes))
        try:
            if entry.kind == RAID1:
                await self._raid1_to_raid5(ls, entry)
            elif entry.kind == RAID5 and up:
                await self._raid5_to_raid1(ls, entry)
            elif entry.kind == RAID5:
                data = await self.physical.read_range(entry.stripes[0], 0, self.geometry.data_bytes)
                await self.compressed.store(ls, data, entry)
            else:
                await self._craid5_to_raid5(ls, entry)
        except NoSpace as exc:
            self.counters[f"{verb}_refused_no_space"] += 1
            raise MigrationRefused(f"cannot {verb} logical stripe {ls}: {exc}",
                                   hint="victimize other stripes first to free space") from None
        new = moves[entry.kind]
        self.counters[f"{verb}_{entry.kind}_to_{new}"] += 1
        self.temperatures.reset(ls)
        return new

    async def _raid1_to_raid5(self, ls: int, entry: Mapping) -> None:
        """Keep the primary copy, write its parity unit, change the map, free the mirror."""
        g = self.geometry
        primary = entry.stripes[0]
        data = await self.physical.read_mirrored(entry.stripes, 0, g.data_bytes)
        if self.columns.failed:  # the primary may miss a unit: write it whole, from both copies' data
            await self.physical.write_whole(primary, data)
        else:
            await self.physical.write_parity_unit(primary, data)
        await self.space.commit(ls, Mapping(RAID5, (primary,)))
        self.table.release(entry.stripes[1])

    async def _raid5_to_raid1(self, ls: int, entry: Mapping) -> None:
        """Copy the data units into a free stripe of another polarity; change the map."""
        stripe = entry.stripes[0]
        mirror = self.table.take_of_other_polarity(self.geometry.polarity(stripe), near=stripe)
        try:
            data = await self.physical.read_range(stripe, 0, self.geometry.data_bytes)
            await self.physical.write_plain(mirror, 0, data)
            await self.space.commit(ls, Mapping(RAID1, (stripe, mirror)))
        except BaseException:
            if self.table[ls].kind != RAID1:
                self.table.release(mirror)
            raise

    async def _craid5_to_raid5(self, ls: int, entry: Mapping) -> None:
        data = await self.compressed.read(entry.compressed)
        try:
            stripe = self.table.take_whole()
        except NoSpace:
            if self.space.vacates_whole_stripe(entry) is None:
                raise
            await self.space.move_through_reserved(ls, entry, data, None)
            return
        try:
            await self.physical.write_parity(stripe, 0, data, fresh=True)
            previous = await self.space.commit(ls, Mapping(RAID5, (stripe,)))
        except BaseException:
            if self.table[ls].kind != RAID5:
                self.table.release(stripe)
            raise
        self.space.release(previous)

    async def make_room(self, *, exclude: int) -> None:
        """No free stripe for a first write: victimize the coldest RAID1 stripe not in use,
        else the coldest RAID5 one (§3.9's decisions "in extreme situations")."""
        for kind in (RAID1, RAID5):
            victim = self.best(kind, hottest=False, exclude=exclude, idle_only=True)
            if victim is None:
                continue
            lock = self.locks[victim]
            lock.acquire_nowait()  # idle_only: free now, and taken before any wait
            try:
                await self.migrate(victim, up=False)
            except MigrationRefused:
                continue
            finally:
                lock.release()
            self.counters["forced_victimizations"] += 1
            return

    # -- what policies ask (§3.9) ------------------------------------------------------
    def best(self, kind: str, *, hottest: bool, exclude: int | None = None, idle_only: bool = False,
             recent: tuple[str, bool] | None = None) -> int | None:
        """The hottest (or coldest) logical stripe of personality `kind`, or None.
        `idle_only`: not one a request is using now. `recent`: (field, wanted) keeps only
        the stripes whose `access` (accessed since the last aging) or `uptodate` (since the
        last degradation) field is set (True) or clear (False)."""
        temperature = self.temperatures.temperature
        marks = None
        if recent is not None:
            field, wanted = recent
            if field not in ("access", "uptodate"):
                raise UsageError(f"unknown field {field!r}", hint="use access or uptodate")
            marks = self.temperatures.access if field == "access" else self.temperatures.uptodate
        best, best_key = None, None
        sign = -1 if hottest else 1
        for ls in self.table.logical_of(kind):  # ties go to the lowest stripe
            if ls == exclude or (idle_only and (lock := self.locks.get(ls)) is not None and lock.locked()):
                continue
            if marks is not None and bool(marks[ls]) != wanted:
                continue
            key = sign * temperature[ls]
            if best_key is None or key < best_key:
                best, best_key = ls, key
        return best

    def max_temperature(self, kind: str) -> float | None:
        temperature = self.temperatures.temperature
        return max((temperature[ls] for ls in self.table.logical_of(kind)), default=None)
