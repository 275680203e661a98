"""Destaging, the two steps that move written blocks down from the RAM buffer, shared by DCD
and VC-RAID.

Papers: DCD (Hu & Yang, ISCA 96) §2.1 (the log write: the RAM buffer goes to the cache-disk
log as one write) and §2.3 (destaging: the idle detector finds the system idle after a
while without a request, then Last-Write-First-Destage moves the log home segment by
segment until it is empty or a request arrives, which suspends it). VC-RAID (He & Yang)
§3.3.3 names the same two steps level-1 destage (RAM buffer -> cache disk) and level-2
destage (cache disk -> array, LWFD, only when the system is idle or a cache disk is full,
suspended by a new request); VC-RAID builds on DCD.

Why one module: both architectures decide *when* to destage in the same way, and track the
log writes in progress in the same way; they differ only in what they destage and where it
goes. So the architecture supplies:

* `_destage_wanted()`: whether there is a log to destage now; when there is none it waits
  for a change (DCD: for a record in its log; VC-RAID: for the RAM buffer to be written out
  too, since level 1 has priority) and returns False.
* `_destage_next()`: the log an idle period destages next, or None to end it (DCD: its one
  log; VC-RAID: the cache disk whose top segment is oldest).
* `_destage_top(log, interruptible=...)`: one LWFD segment of `log` home (the caller holds
  `log.lock`); the bytes written home, or None when a new request suspended it. DCD writes
  its data disk run by run; VC-RAID writes the array in parallel. With the ablation
  `destage_order="oldest"` the segment is the oldest one of a circular log instead
  (raidlab.engine.caches.log); when and how much is destaged stays the same.

Besides the idle periods, a log that fills up is destaged in the background
(`_watermark_destager`, VC-RAID §3.3.3: level 2 runs "when ... the cache disk becomes full",
and "once [it] starts, it continues until the cache disk becomes empty"): when a log is
`high_watermark` full (a fraction of its capacity; 1.0 or more: never), it is destaged in
batches of `destage_batch` bytes, each batch one LWFD pop of several segments written home
with one flush of the backing store, until at most `low_watermark` of it is used (0: empty).
mcd's logs are destaged together: when one reaches the mark, the others start a period too,
and each batch pops `destage_batch` bytes per log in a period, the newest records of any
of them first, and writes their live blocks home in one pass, with one flush (VC-RAID §2:
the cache disks "form a uniform disk space"; §4.3.1: mcd's destages run "in parallel").
Level 1 hands consecutive log writes to the cache disks in turn, so a log alone holds
every other piece of what was written; together the pieces meet again in the runs written
to the array. New requests do not suspend it, but level 1 has priority over it (VC-RAID
§3.3.3: "Level 1 destage has higher priority than the Level 2 destage. Once the Level 1
destage starts, it continues until the RAM buffer becomes empty"): a batch starts only when the RAM buffer has
nothing to log, or when the log has no room left for a few more log writes (the cache disk
is full, and only a batch can make room). Otherwise a log write of 64 KB and a batch of
1 MB would take turns at the log's lock, and a burst that the log has room for would reach
the cache disk at the array's destage rate.

Where this departs from the papers, and why: the papers give no number for "full": 0.9
(`high_watermark`) is assumed, leaving room for the log writes that arrive while a batch
is written; the papers' drivers issued no flushes (Linux 2.0 had none), and a batch costs
one. When a log has no room for the next log write even so, `_make_room_locked` destages it
at once in the write path, one segment at a time, and counts each in `forced_destages` (an
emulator must not stop); with the background destage this is the last resort.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterable
from typing import Any

from raidlab import sched
from raidlab.engine.caches.activity import RequestActivity
from raidlab.engine.caches.log import CacheDiskLog
from raidlab.errors import UsageError


# When a full log is destaged in the background, and in what steps (module doc): the
# geometry keys of a DCD's or VC-RAID's superblock, with these defaults where absent.
WATERMARK_DEFAULTS: dict[str, Any] = dict(high_watermark=0.9, low_watermark=0.0, destage_batch=1 << 20)

# Log writes' worth of room below which a waiting background batch goes before level 1: the
# batch queues for the log's lock behind at most the log write holding it and the next one.
LEVEL1_MARGIN = 3


def check_watermarks(high_watermark: float, low_watermark: float, destage_batch: int, destage_segment: int) -> None:
    """Raise UsageError (one line) for a background-destage setting that cannot work."""
    if not 0 < high_watermark:
        raise UsageError(f"high watermark {high_watermark} must be above 0",
                         hint="a fraction of the log, like 0.9 (1 or more: no background destage)")
    if not 0 <= low_watermark < min(high_watermark, 1):
        raise UsageError(f"low watermark {low_watermark} must be at least 0 and below the high watermark",
                         hint="0 destages a full log until it is empty")
    if destage_batch < destage_segment:
        raise UsageError(f"destage batch of {destage_batch} bytes is smaller than a destage segment "
                         f"({destage_segment} bytes)")


def watermarks_of(geometry: dict[str, Any]) -> dict[str, Any]:
    """The background-destage setting of a superblock's geometry (defaults where absent)."""
    return {key: type(default)(geometry.get(key, default)) for key, default in WATERMARK_DEFAULTS.items()}


@dataclasses.dataclass
class LogWrite:
    """A log write in progress (DCD §2.1; VC-RAID level 1): its blocks stay readable from
    RAM until it is done. `versions`: the write sequence number each block had when taken
    (VC-RAID frees a slot only if it was not written again meanwhile)."""

    seq: int
    blocks: dict[int, bytes]
    min_write_seq: int  # write sequence number of the oldest write it carries
    versions: dict[int, int] = dataclasses.field(default_factory=dict)


def oldest_unlogged(in_progress: Iterable[LogWrite], buffered: int | None) -> float:
    """The write sequence number of the oldest write not yet on a cache disk: in a log write
    in progress, or `buffered`, the oldest one still only in the RAM buffer (None: the buffer
    holds none); inf when every write is on a cache disk."""
    candidates = [w.min_write_seq for w in in_progress]
    if buffered is not None:
        candidates.append(buffered)
    return min(candidates) if candidates else math.inf


class Destaging(RequestActivity):
    """The idle detector and the forced destage (module doc) of a cache with cache-disk logs.

    Uses `idle_threshold` and `store` (the LogStore) of the class, and its three hooks."""

    idle_threshold: float
    store: Any
    high_watermark: float = 0.9
    low_watermark: float = 0.0
    destage_batch: int = 1 << 20

    async def _destage_wanted(self) -> bool:
        raise NotImplementedError

    def _destage_next(self) -> CacheDiskLog | None:
        raise NotImplementedError

    async def _destage_top(self, log: CacheDiskLog, *, interruptible: bool,
                           segment_bytes: int | None = None) -> int | None:
        raise NotImplementedError

    async def _wait_all_logged(self) -> None:
        """Return once every write acknowledged so far is in a cache-disk log."""
        raise NotImplementedError

    def _level1_pending(self) -> bool:
        """Blocks wait in the RAM buffer for a log write, or a log write is in progress."""
        raise NotImplementedError

    def _level1_write_bytes(self) -> int:
        """The log bytes of the largest single log write (its record's headers too)."""
        raise NotImplementedError

    # Called between a level-2 destage's writes home and the flush that makes them durable
    # (each architecture's write_home), when set: a crash test's hook for a cut at the moment
    # the drives hold destaged blocks no flush has made durable yet (raidlab.campaigns.crash,
    # through the daemon's `crash_at` op). Not set: nothing happens.
    before_home_flush: Callable[[], None] | None = None

    def _home_written(self) -> None:
        if self.before_home_flush is not None:
            self.before_home_flush()

    async def drain(self) -> int:
        """Move everything written so far home: the RAM buffer to the cache disks, then every
        log destaged to empty (not suspended), the backing store flushed by each step. What a
        benchmark that starts cold needs (the papers reload the driver before each run);
        writes that arrive meanwhile may stay cached. Returns the live bytes destaged."""
        await self._wait_all_logged()
        total = 0
        for log in self.store.logs:
            async with log.lock:
                while log.records:
                    self.counters["drain_destages"] += 1
                    total += await self._destage_top(log, interruptible=False) or 0
        self._note("drained", bytes=total)
        return total

    async def _idle_detector(self) -> None:
        """No request for `idle_threshold` seconds: the system is idle, destage until there
        is nothing left or a request arrives (DCD §2.3, VC-RAID level 2)."""
        while True:
            if not await self._destage_wanted():
                continue
            if not await self._idle_or_sleep(self.idle_threshold):
                continue
            self.counters["idle_periods"] += 1
            self._note("idle")
            while (log := self._destage_next()) is not None:
                start_requests = self._requests
                async with log.lock:
                    if self._requests != start_requests:
                        break
                    done = await self._destage_top(log, interruptible=True)
                if done is None or self._requests != start_requests:
                    break

    def _over_watermark(self) -> list[CacheDiskLog]:
        """The logs at or above `high_watermark` (none when it is 1 or more)."""
        if self.high_watermark >= 1:
            return []
        return [log for log in self.store.logs
                if log.records and log.used >= self.high_watermark * log.capacity]

    def _watermark_companions(self) -> list[CacheDiskLog]:
        """The logs that start a period of their own when another log reaches the high
        watermark (none here; VC-RAID's mcd: every cache disk, as level 1 fills them in
        turn and they are destaged together)."""
        return []

    def _above_low(self, log: CacheDiskLog) -> bool:
        return bool(log.records) and log.used > self.low_watermark * log.capacity

    async def _watermark_destager(self) -> None:
        """Destage each log that reached `high_watermark` (and its `_watermark_companions`) in
        batches down to `low_watermark`, in the background (module doc). A log's period lasts
        until it is down. While several logs are in a period (mcd's cache disks, filled in
        turn by level 1), each batch takes one segment from every one of them and writes them
        home in one pass (`_destage_tops`): level 1 spread consecutive writes over the cache
        disks, and one log's segment alone would go home in fragments."""
        draining: list[CacheDiskLog] = []
        while True:
            over = self._over_watermark()
            for log in over + (self._watermark_companions() if over else []):
                if log not in draining and log.records:
                    draining.append(log)
                    self.counters["watermark_periods"] += 1
                    self._note("watermark", disk=log.index, used=log.used)
            draining = [log for log in draining if self._above_low(log)]
            if not draining:
                await self._changed.wait()
                continue
            await self._level1_first(min(draining, key=lambda log: log.free))
            batch = sorted(draining, key=lambda log: log.index)  # one lock order for all
            async with contextlib.AsyncExitStack() as locks:
                for log in batch:
                    await locks.enter_async_context(log.lock)
                batch = [log for log in batch if self._above_low(log)]
                if not batch:
                    continue
                self.counters["watermark_batches"] += 1
                await self._destage_tops(batch, segment_bytes=self.destage_batch)

    async def _destage_tops(self, logs: list[CacheDiskLog], *, segment_bytes: int) -> int | None:
        """One segment of each of `logs` home in one pass, not interruptible (the caller holds
        their locks). An architecture with a single log only ever gets that one."""
        if len(logs) != 1:
            raise NotImplementedError(f"{type(self).__name__} destages one log at a time")
        return await self._destage_top(logs[0], interruptible=False, segment_bytes=segment_bytes)

    async def _level1_first(self, log: CacheDiskLog) -> None:
        """Return when a background batch of `log` may start: the RAM buffer has nothing to
        log, or `log` has room for fewer than `LEVEL1_MARGIN` more log writes (module doc:
        level 1 has priority). The margin is kept because the log writes that take the lock
        before the batch gets it must still fit, or the write path would destage.
        An empty buffer is looked at again after the tasks woken with this one have run: a
        log write that has just emptied it also wakes the writers that waited for room."""
        def level1_first() -> bool:
            return self._level1_pending() and log.free >= self._level1_room()

        while True:
            while level1_first():
                await self._changed.wait()
            await sched.checkpoint()
            if not level1_first():
                return

    def _level1_room(self) -> int:
        """Free bytes a log needs to take `LEVEL1_MARGIN` more log writes and the next
        marker without destaging in the write path."""
        return LEVEL1_MARGIN * self._level1_write_bytes() + self.store.tombstone_bytes()

    async def _make_room_locked(self, log: CacheDiskLog, needed: Callable[[], int], event: str,
                                **detail: Any) -> None:
        """Destage `log` at once, not suspended, until it has `needed()` bytes free and room
        for the next marker (the caller holds `log.lock`); each step counts as a forced
        destage and notes `event` with `detail` in the timeline."""
        while log.free < needed() + self.store.tombstone_bytes() and log.records:
            self.counters["forced_destages"] += 1
            self._note(event, **detail)
            await self._destage_top(log, interruptible=False)
