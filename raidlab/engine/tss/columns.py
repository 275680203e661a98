"""The columns of a TSS device and their failure (Pallipadi & Gopinath, "Temperature
Sensitive Storage", §3.7): every member read and write of the device goes through `Columns`.

Degraded mode (§3.7: "switch to the degraded mode"): a column that answers EIO, or that
the device's `fail` takes out, gets no more I/O. A read of it raises `Missing`, and the
caller (raidlab.engine.tss.physical) rebuilds the bytes from the other columns or the other
copy; a write to it is skipped. The failure is recorded (the device's `on_failure`, and the
map store's copy on that column marked stale) before the request that found it is answered.
A second failed column fails the device.

While a replacement drive is rebuilt (raidlab.engine.tss.repair) the column stays failed
for reads, but writes reach the new drive where their physical stripe is rebuilt already
or they cover a whole stripe unit, so the rebuild never has to go back over a stripe.

`durable` makes the column writes done so far durable before a record that depends on them
is written (§3.6's order of a move, §3.8's commit).
"""

from __future__ import annotations

import collections
import contextvars
import errno
from typing import Any

from raidlab import sched
from raidlab.engine.ordered import start_in_order
from raidlab.engine.tss.geometry import TSSGeometry

# Set by a task that must know when its stripe write has issued its first member write (a
# background stripe write of mode async, raidlab.engine.tss.logwrites): Columns.write sets
# the event then, every read and computation of that stripe write done.
ISSUED: contextvars.ContextVar[sched.Event | None] = contextvars.ContextVar("tss_issued", default=None)


class Missing(Exception):
    """A read found its column failed (the caller rebuilds the bytes or gives up)."""


async def in_order(calls) -> None:
    """Run `(fn, *args)` calls concurrently, started in plan order (raidlab.engine.ordered);
    the first error is raised as itself, not in an ExceptionGroup, so a failed member
    read reaches the FUSE handler as an OSError."""
    caught = await start_in_order(calls, catch=(Exception,))
    if caught:
        raise caught[0]


class Columns:
    """The device's members, which of them failed, and the one being rebuilt (module doc).

    `members` is the device's own list: a rebuild puts the new drive in its place, and
    whoever holds the list (the superblock keeper) sees it."""

    def __init__(self, name: str, members: list[Any], geometry: TSSGeometry, counters: collections.Counter[str], *,
                 store=None, on_failure=None) -> None:
        self.name = name
        self.members = members
        self.geometry = geometry
        self.counters = counters
        self.store = store                      # its copies on a failed column are stale
        self.on_failure = on_failure            # async (failed set) -> None: persist it
        self.failed: set[int] = set()           # failed columns (§3.7)
        self.rebuilding: int | None = None      # the column being rebuilt
        self.rebuilt: set[int] = set()          # its physical stripes rebuilt so far
        self.reads = [0] * geometry.columns     # reads served per column (read balancing, §4)

    def stripe_of(self, offset: int) -> int:
        """The physical stripe a column offset lies in."""
        return (offset - self.geometry.data_offset) // self.geometry.unit

    async def read(self, column: int, offset: int, length: int) -> bytes:
        """A column's bytes; Missing when the column has failed (now or by this read)."""
        if column in self.failed:
            raise Missing(column)
        self.reads[column] += 1
        try:
            return await self.members[column].read(offset, length)
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            await self.fail(column)
            raise Missing(column) from None

    async def write(self, column: int, offset: int, data: bytes, *, whole_unit: bool = False) -> None:
        """Write a column's bytes; skipped on a failed column, except the one being rebuilt
        where its stripe is rebuilt already or this write covers the whole unit. In a
        background stripe write of mode async, the first one acknowledges the request."""
        issued = ISSUED.get()
        if issued is not None and not issued.is_set():
            issued.set()
        if column in self.failed:
            ps = self.stripe_of(offset)
            if column == self.rebuilding and (whole_unit or ps in self.rebuilt):
                await self.members[column].write(offset, data)
                self.rebuilt.add(ps)
                return
            self.counters["writes_skipped_on_failed_column"] += 1
            return
        try:
            await self.members[column].write(offset, data)
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            await self.fail(column)

    async def fail(self, column: int) -> None:
        """Degraded mode (§3.7): no I/O to `column` from now on; recorded (on_failure) before
        the request that found it is answered. A second failed column fails the device."""
        if column in self.failed:
            return
        self.failed.add(column)
        self.counters["column_failures"] += 1
        if self.store is not None and column < len(self.store.members):
            self.store.failed.add(column)
        if self.on_failure is not None:
            await self.on_failure(frozenset(self.failed))
        if len(self.failed) > 1:
            raise OSError(errno.EIO, f"{self.name}: columns {sorted(self.failed)} failed; the data is lost")

    async def flush(self, column: int) -> None:
        """Flush one column's drive; a failed column is skipped, one that fails on the flush
        is failed."""
        if column in self.failed:
            return
        try:
            await self.members[column].flush()
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            await self.fail(column)

    async def durable(self) -> None:
        """Make the column writes done so far durable, before a record that depends on them
        is written: a log commit (the stripe write it commits), a map record (the data at
        its new location), the reserved stripe's header (the data moved into it). A column
        whose drive can hold writes in a volatile cache is flushed; one that cannot (its
        writes are on the media when reported) needs nothing. Without this, a power cut
        that takes a drive's cache could leave a committed record whose data is lost: the
        log would not replay it, the map would point at what was never written."""
        calls = [(self.flush, column) for column in range(len(self.members))
                 if column not in self.failed and getattr(self.members[column], "volatile_writes", True)]
        if calls:  # nothing to wait for otherwise (and no checkpoint to reorder a seeded replay)
            await in_order(calls)
            self.counters["durability_flushes"] += 1
