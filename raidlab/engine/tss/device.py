"""The integrated TSS device (Pallipadi & Gopinath, "Temperature Sensitive Storage", §3.4-3.9,
§4): one block device whose logical stripes are RAID1, RAID5 or compressed RAID5 (cRAID5)
under one map table, moved between those personalities by promotion and victimization.

Requests are cut at logical stripe boundaries; each stripe's part runs under that logical
stripe's lock, and the map table says which personality serves it (stripe-level I/O, §3.6).
`mode` raid1, raid5 or craid5 makes a static device that allocates every stripe as that
personality and never migrates on its own (the paper's Table 3 rows, "RAID devices through
TSS"); `mode="tss"` is the integrated device.

The device is composed of one component per mechanism of the paper, each holding the state
of its mechanism and handed the few others it calls:

    columns        Columns            §3.7 member I/O, failed columns, durability
    physical       PhysicalStripes    §3.3-3.4 RAID1 copies and parity stripes, degraded
                                      reads and writes (§3.7), read balancing (§4)
    space          Space              §3.6 map changes in the paper's order, reserved stripe
    compressed     CompressedStripes  §3.5 cRAID5: compression, shared sub-stripes
    personalities  Personalities      §3.4-3.6 a logical stripe's request by its personality,
                                      first-access allocation
    migration      Migrations         §3.6 promotion and victimization, §3.9 the device's own
                                      decisions and what policies ask
    logwrites      LoggedWrites       §3.8 data log, §4 asynchronous writes, log replay
    repair         Repair             §3.7 rebuild and scrub, §3.8 shared-stripe resync

Each component calls only components listed above it, with one exception the paper makes:
a first write that finds no space has the device victimize a cold stripe (§3.9), so
`personalities` is handed a callable, the device's `_make_room`, that asks `migration`.
What several mechanisms share are objects, passed by reference: the map table, the
temperatures, the statistics counters, and the logical stripes' locks (the device's, taken
by requests, migrations, background writes, rebuild and scrub alike). The device itself
cuts requests into stripe parts, answers flush and trim, gathers the statistics, and keeps
the attributes the rest of raidlab reads (`failed`, `log`, `log_failure`, ...) as views of
its components' state.

Where this departs from the paper, and why:
* Failure handling is this project's own design (raidlab.engine.tss.columns,
  raidlab.engine.tss.repair): §3.7 lists what it must do ("switch to the degraded mode ...
  when the degraded disk is replaced ... synched") and says the work is in progress.
* A read of a stripe with acknowledged asynchronous writes still queued waits for them
  (raidlab.engine.tss.logwrites).
* The free-space bitmap is rebuilt from the map table at assembly rather than stored
  (raidlab.engine.tss.persist says why).
* Sector granularity: any write of whole 512-byte sectors is served exactly; the paper's
  requests were the file system's blocks.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

from raidlab import sched
from raidlab.blockdev import check_aligned
from raidlab.disks.disk import as_block_layer
from raidlab.engine.tss.columns import Columns, in_order
from raidlab.engine.tss.compressed import CompressedStripes
from raidlab.engine.tss.compression import CpuCost
from raidlab.engine.tss.datalog import DataLog
from raidlab.engine.tss.logwrites import BACKGROUND_MODES, DEFAULT_MAX_ASYNC, WRITE_MODES, LoggedWrites
from raidlab.engine.tss.maptable import CRAID5, RAID1, RAID5, MapTable, Mapping
from raidlab.engine.tss.migration import PROMOTE, VICTIMIZE, MigrationRefused, Migrations
from raidlab.engine.tss.personalities import Personalities
from raidlab.engine.tss.persist import MapStore
from raidlab.engine.tss.physical import PhysicalStripes
from raidlab.engine.tss.repair import Repair
from raidlab.engine.tss.space import Space
from raidlab.engine.tss.temperature import Temperatures
from raidlab.errors import UsageError

__all__ = ["DEFAULT_MAX_ASYNC", "MODES", "PROMOTE", "VICTIMIZE", "WRITE_MODES", "MigrationRefused", "TSSDevice"]

MODES = ("tss", RAID1, RAID5, CRAID5)


class TSSDevice:
    """A BlockTarget: the logical stripes of `table` over the columns `members` (module doc)."""

    def __init__(self, name: str, members: Sequence[Any], table: MapTable, *, mode: str = "tss",
                 temperatures: Temperatures | None = None, cost: CpuCost | None = None,
                 read_balance: bool = True, store: MapStore | None = None, log: DataLog | None = None,
                 writes: str = "sync", max_async: int = DEFAULT_MAX_ASYNC, on_failure=None,
                 allocate_on_read: bool = True) -> None:
        if mode not in MODES:
            raise UsageError(f"unknown tss mode {mode!r}", hint=f"use one of: {', '.join(MODES)}")
        if len(members) != table.geometry.columns:
            raise ValueError(f"{len(members)} members for {table.geometry.columns} columns")
        if mode == RAID1 and 2 * table.logical_stripes > table.geometry.physical_stripes - 1:
            raise UsageError(f"a RAID1 TSS of {table.geometry.physical_stripes} physical stripes holds at most "
                             f"{(table.geometry.physical_stripes - 1) // 2} logical stripes, not {table.logical_stripes}")
        if writes not in WRITE_MODES:
            raise UsageError(f"unknown write mode {writes!r}", hint=f"use one of: {', '.join(WRITE_MODES)}")
        if writes in BACKGROUND_MODES and log is None:
            raise UsageError("asynchronous writes need the data log", hint="turn the log on (log=on)")
        self.name = name
        self.table = table
        self.geometry = table.geometry
        self.mode = mode
        self.temperatures = temperatures or Temperatures(table.logical_stripes)
        self.cost = cost
        self.read_balance = read_balance
        self.store = store
        self.allocate_on_read = allocate_on_read
        self.counters: collections.Counter[str] = collections.Counter()
        self._locks: dict[int, sched.Lock] = collections.defaultdict(sched.Lock)  # logical stripes
        counters, locks = self.counters, self._locks
        self.columns = Columns(name, list(members), self.geometry, counters, store=store, on_failure=on_failure)
        # The device is its members' block layer. §4.1: "TSS relies on clustering to gain
        # performance, otherwise all the stripe I/Os will be partial ones"; the authors
        # changed ll_rw_block() so the kernel clustered below their module too.
        for member in self.columns.members + ([log.device] if log is not None else []):
            as_block_layer(member)
        self.physical = PhysicalStripes(name, self.geometry, self.columns, counters, cost=cost,
                                        read_balance=read_balance)
        self.space = Space(table, store, self.columns, self.physical, counters)
        self.compressed = CompressedStripes(self.geometry, table, self.physical, self.space, counters, cost=cost)
        self.personalities = Personalities(name, mode, table, self.temperatures, self.physical, self.compressed,
                                           self.space, counters, allocate_on_read=allocate_on_read,
                                           make_room=self._make_room)
        self.migration = Migrations(name, table, self.temperatures, locks, self.columns, self.physical,
                                    self.compressed, self.space, self.personalities, counters)
        self.logwrites = LoggedWrites(name, log, writes, max_async, locks, self.columns, self.personalities,
                                      counters)
        self.repair = Repair(name, table, store, locks, self.columns, self.physical, self.compressed, counters,
                             applied=self.logwrites.applied)

    async def _make_room(self, *, exclude: int) -> None:
        """Free space for a first write to `exclude` (Migrations.make_room)."""
        await self.migration.make_room(exclude=exclude)

    # -- the components' state, as the rest of raidlab reads it ---------------------------
    @property
    def members(self) -> list[Any]:
        return self.columns.members

    @property
    def failed(self) -> set[int]:
        """The failed columns (§3.7)."""
        return self.columns.failed

    @failed.setter
    def failed(self, columns: set[int]) -> None:  # at assembly: the columns recorded failed
        self.columns.failed = columns

    @property
    def on_failure(self):
        return self.columns.on_failure

    @property
    def rebuilding(self) -> int | None:
        """The column being rebuilt, or None."""
        return self.columns.rebuilding


    @property
    def log(self) -> DataLog | None:
        return self.logwrites.log

    @property
    def log_failure(self) -> OSError | None:
        """Why the data log's drive was given up, or None."""
        return self.logwrites.failure

    @property
    def writes(self) -> str:
        return self.logwrites.writes

    @property
    def max_async(self) -> int:
        return self.logwrites.max_async

    @property
    def last_async_error(self) -> str | None:
        return self.logwrites.last_async_error

    @property
    def wait_for_async_s(self) -> float:
        return self.logwrites.wait_for_async_s

    @property
    def wait_for_slot_s(self) -> float:
        return self.logwrites.wait_for_slot_s

    # -- BlockTarget -------------------------------------------------------------------
    @property
    def size(self) -> int:
        return self.table.logical_stripes * self.geometry.data_bytes

    def _split(self, offset: int, length: int) -> list[tuple[int, int, int, int]]:
        """(logical stripe, start in it, length, position in the request) per stripe."""
        stripe = self.geometry.data_bytes
        out, pos = [], 0
        while pos < length:
            ls, start = divmod(offset + pos, stripe)
            n = min(stripe - start, length - pos)
            out.append((ls, start, n, pos))
            pos += n
        return out

    async def read(self, offset: int, length: int) -> bytes:
        check_aligned(offset, length, self.size)
        out = bytearray(length)

        async def one(ls: int, start: int, n: int, pos: int) -> None:
            await self.logwrites.applied(ls)
            async with self._locks[ls]:
                out[pos:pos + n] = await self.personalities.read(ls, start, n)

        await in_order([(one, *part) for part in self._split(offset, length)])
        self.counters["reads"] += 1
        self.counters["read_bytes"] += length
        return bytes(out)

    async def write(self, offset: int, data: bytes, *, fua: bool = False) -> None:
        check_aligned(offset, len(data), self.size)
        view = memoryview(data)
        one = self.logwrites.stripe_writer()
        parts = self._split(offset, len(data))
        await in_order([(one, ls, start, view[pos:pos + n]) for ls, start, n, pos in parts])
        self.counters["writes"] += 1
        self.counters["write_bytes"] += len(data)
        if fua:
            await self.flush()

    async def flush(self) -> None:
        """Every write acknowledged before is durable: the columns in service (a failed
        column is skipped; one that fails on the flush is failed) and the log."""
        calls = [(self.columns.flush, column) for column in range(len(self.members))]
        if self.logwrites.usable():
            calls.append((self.logwrites.flush,))
        await in_order(calls)

    async def trim(self, offset: int, length: int) -> None:
        """Logical stripes the range covers whole become invalid again and their space is
        freed; partly covered ones keep their data (a trim may leave old data)."""
        check_aligned(offset, length, self.size)
        for ls, start, n, _pos in self._split(offset, length):
            if n == self.geometry.data_bytes:
                async with self._locks[ls]:
                    self.space.release(await self.space.commit(ls, Mapping()))
                    self.counters["trimmed_stripes"] += 1

    def start(self, nursery: sched.Nursery) -> None:
        """Where the background stripe writes of asynchronous mode run."""
        self.logwrites.start(nursery)

    async def drain(self) -> None:
        """Wait until every acknowledged asynchronous write is applied and committed."""
        await self.logwrites.drain()

    async def recover(self) -> int:
        """After an unclean stop: replay the data log's uncommitted records (§3.8), then
        rewrite the parity of every shared stripe (raidlab.engine.tss.repair). Returns the
        records replayed."""
        replayed = await self.logwrites.replay()
        await self.repair.resync_shared()
        return replayed

    # -- failures and the log drive (§3.7, §3.8) ---------------------------------------
    async def fail(self, column: int) -> None:
        """Take `column` out of service, as a failure would (`raidlab fail`)."""
        if not 0 <= column < self.geometry.columns:
            raise UsageError(f"no column {column}: {self.name} has columns 0..{self.geometry.columns - 1}")
        await self.columns.fail(column)

    async def rebuild(self, column: int, drive: Any, progress=None) -> int:
        """Rebuild failed `column` onto `drive` while the device serves; returns the
        physical stripes rebuilt (Repair.rebuild)."""
        return await self.repair.rebuild(column, drive, progress)

    async def scrub(self, progress=None) -> tuple[list[dict[str, int]], int]:
        """Check every stripe's redundancy: (mismatches, bytes read) (Repair.scrub)."""
        return await self.repair.scrub(progress)

    async def fail_log(self) -> None:
        """`raidlab fail` of the log drive: as its first EIO would."""
        await self.logwrites.fail()

    async def replace_log(self, drive: Any) -> None:
        """A new log drive (LoggedWrites.replace)."""
        await self.logwrites.replace(drive)

    async def check_log(self) -> None:
        """Read the data log whole, as recovery would (LoggedWrites.check)."""
        await self.logwrites.check()

    # -- migrations and what policies ask (§3.6, §3.9) ---------------------------------
    async def promote(self, ls: int) -> str:
        """cRAID5 -> RAID5 or RAID5 -> RAID1; returns the new personality."""
        return await self.migration.promote(ls)

    async def victimize(self, ls: int) -> str:
        """RAID1 -> RAID5 or RAID5 -> cRAID5; returns the new personality."""
        return await self.migration.victimize(ls)

    def best(self, kind: str, *, hottest: bool, exclude: int | None = None, idle_only: bool = False,
             recent: tuple[str, bool] | None = None) -> int | None:
        """The hottest (or coldest) logical stripe of personality `kind` (Migrations.best)."""
        return self.migration.best(kind, hottest=hottest, exclude=exclude, idle_only=idle_only, recent=recent)

    def max_temperature(self, kind: str) -> float | None:
        return self.migration.max_temperature(kind)

    def statistics(self) -> dict[str, Any]:
        counts = dict(self.table.counts)
        return {
            "arch": "tss",
            "name": self.name,
            "mode": self.mode,
            "capacity": self.size,
            "geometry": self.geometry.describe(),
            "logical_stripes": self.table.logical_stripes,
            "placement": self.table.placement,
            "personalities": counts,
            "space": self.table.space(),
            "free_stripes": self.table.free_stripes(),
            "reserved_stripe": self.table.reserved,
            "cpu_cost": self.cost.describe() if self.cost else None,
            "failed_columns": sorted(self.failed),
            "rebuilding_column": self.rebuilding,
            "writes_mode": self.writes,
            "max_async": self.max_async,
            "log": self.log.statistics() if self.log is not None else None,
            "log_failed": (self.log_failure.strerror or str(self.log_failure)) if self.log_failure else None,
            "wait_for_async_s": self.wait_for_async_s,
            "wait_for_slot_s": self.wait_for_slot_s,
            "agings": self.temperatures.agings,
            "degradations": self.temperatures.degradations,
            **dict(sorted(self.counters.items())),
            "members": [m.statistics() for m in self.members],
        }
