"""How the writes of a TSS device use its data log (Pallipadi & Gopinath, "Temperature
Sensitive Storage", §3.8), and asynchronous writes (§4). The log itself, its records and
their replay order are raidlab.engine.tss.datalog.

Three write modes:
* sync: log the stripe write, write the stripe, commit, then acknowledge (§3.8);
* async (§4): log, then do every read and computation the stripe write needs (a RAID5
  read-modify-write's pre-reads, a cRAID5 stripe's read, decompression and compression),
  issue the member writes and acknowledge without waiting for them; a cleanup task commits
  the record when they are done. This is the paper's reading: "the latency due to the
  synchronous writes over the underlying devices. These writes can be made asynchronous",
  with "a separate cleanup thread", and it is what Table 1 shows (RAID1, whose writes are
  all it does, gains most; RAID5 and cRAID5, whose reads stay, gain moderately);
* logged: acknowledge once the record is on the log; the whole stripe write follows in the
  background (a stronger reading of §4, kept for comparison).
In both asynchronous modes at most `max_async` stripe writes are under way (§4: 8), and a
stripe's background writes are applied and committed in log order. A device without a log
writes straight to the columns and acknowledges once they hold the data.

A read of a stripe with acknowledged asynchronous writes still queued waits for them
(`applied`): the paper's kernel had the buffer cache in front; here the volume has no cache
of its own.

A failed log drive (an EIO from it) is not a lost column: the data is on the columns. From
then on every write goes straight to the columns, synchronously, acknowledged once there
(what a device without a log does), and `failure` says why; a crash meanwhile can leave a
stripe's parity out of step, as without a log, until a new log drive is given (`replace`).

Recovery after an unclean stop replays every record the log holds uncommitted, in order,
with reconstruct-writes (§3.8), then starts an empty log (`replay`).
"""

from __future__ import annotations

import collections
import errno
from typing import Any

from raidlab import sched
from raidlab.blockdev import SECTOR
from raidlab.engine.tss.columns import ISSUED, Columns
from raidlab.engine.tss.datalog import DataLog
from raidlab.engine.tss.personalities import Personalities

WRITE_MODES = ("sync", "async", "logged")
BACKGROUND_MODES = ("async", "logged")
DEFAULT_MAX_ASYNC = 8  # §4: "A maximum of 8 asynchronous requests avoids this deadlock problem"


class LoggedWrites:
    """The device's writes of logical stripe parts, through the data log `log` (or without
    one) in write mode `writes` (module doc). `locks` are the logical stripes' locks,
    shared with the device's requests."""

    def __init__(self, name: str, log: DataLog | None, writes: str, max_async: int, locks: dict[int, sched.Lock], columns: Columns,
                 personalities: Personalities, counters: collections.Counter[str]) -> None:
        self.name = name
        self.log = log
        self.writes = writes
        self.max_async = max_async
        self.locks = locks
        self.columns = columns
        self.personalities = personalities
        self.counters = counters
        self.failure: OSError | None = None        # the data log's drive failed (failed)
        self._slots = sched.Semaphore(max_async)
        self._chain: dict[int, sched.Event] = {}  # logical stripe -> done-event of its last queued write
        self._nursery: sched.Nursery | None = None
        self.last_async_error: str | None = None
        self.wait_for_async_s = 0.0   # accesses waiting for their stripe's asynchronous writes
        self.wait_for_slot_s = 0.0    # writes waiting for one of the max_async slots

    def start(self, nursery: sched.Nursery) -> None:
        """Where the background stripe writes of asynchronous mode run."""
        self._nursery = nursery

    # -- the log drive -----------------------------------------------------------------
    def usable(self) -> bool:
        return self.log is not None and self.failure is None

    async def failed(self, exc: OSError) -> None:
        """The data log's drive failed (an EIO; anything else is raised): writes go unlogged."""
        if exc.errno != errno.EIO:
            raise exc
        if self.failure is None:
            self.failure = exc
            self.counters["log_failures"] += 1

    async def fail(self) -> None:
        """`raidlab fail` of the log drive: as its first EIO would."""
        await self.failed(OSError(errno.EIO, f"{self.name}: the data log's drive failed"))

    async def replace(self, drive: Any) -> None:
        """A new log drive: every queued asynchronous write applied first (their records were
        on the old one), then an empty log on `drive`, and writes logged again."""
        await self.drain()
        log = DataLog(drive, self.log.array_uuid if self.log is not None else None)
        await log.reset()
        self.log, self.failure = log, None

    async def check(self) -> None:
        """Read the data log whole, as recovery would: a log drive that fails its reads is
        found here (a scrub) rather than at the next crash."""
        if self.usable():
            try:
                await self.log.scan()
            except OSError as exc:
                await self.failed(exc)

    async def flush(self) -> None:
        """Flush the log drive (one that fails the flush is failed)."""
        try:
            await self.log.device.flush()
        except OSError as exc:
            await self.failed(exc)

    # -- writes ------------------------------------------------------------------------
    def stripe_writer(self):
        """The write of one logical stripe's part, `(ls, start, data)`, in this device's
        mode: straight to the columns without a log, logged in mode sync, else queued."""
        if self.log is None:
            return self.direct
        return self.queued if self.writes in BACKGROUND_MODES else self.logged

    async def direct(self, ls: int, start: int, data: memoryview) -> None:
        """Unlogged: on the columns before it is acknowledged."""
        if self.log is not None:
            await self.applied(ls)  # a write that could not be logged: after the stripe's queued ones
        async with self.locks[ls]:
            await self.personalities.write(ls, start, data)

    async def logged(self, ls: int, start: int, data: memoryview) -> None:
        """Mode sync (§3.8): log, write the stripe, commit, under the stripe's lock."""
        async with self.locks[ls]:
            record = None
            if self.usable():
                try:
                    record = await self.log.append(ls, start, data)
                except OSError as exc:
                    await self.failed(exc)
            await self.personalities.write(ls, start, data)
            if record is not None:
                await self.columns.durable()
                try:
                    await self.log.commit(record)
                except OSError as exc:
                    await self.failed(exc)

    async def queued(self, ls: int, start: int, data: memoryview) -> None:
        """Modes async and logged (§4), or straight to the columns when the log fails."""
        if self.usable():
            try:
                await self._write_async(ls, start, bytes(data))
                return
            except OSError as exc:
                await self.failed(exc)
        await self.direct(ls, start, data)  # unlogged: acknowledged once on the columns

    async def applied(self, ls: int) -> None:
        """Wait until every acknowledged asynchronous write of `ls` is on the columns (and
        committed: a later write of the stripe must not commit before an earlier one, or
        recovery would replay the older data over it). Counted: how often and how long an
        access waited for the stripe's asynchronous writes."""
        pending = self._chain.get(ls)
        if pending is not None:
            started = sched.current_time()
            await pending.wait()
            self.counters["waits_for_async"] += 1
            self.wait_for_async_s += sched.current_time() - started

    async def _write_async(self, ls: int, start: int, data: bytes) -> None:
        """§4: log the stripe write (durable); the stripe write and the commit follow in a
        background task, at most `max_async` at a time, in log order per stripe. Mode async
        acknowledges when that task has issued its member writes (module doc), mode logged
        as soon as the record is on the log."""
        started = sched.current_time()
        await self._slots.acquire()
        if sched.current_time() > started:
            self.counters["waits_for_slot"] += 1
            self.wait_for_slot_s += sched.current_time() - started
        behind = self.max_async - self._slots.value
        if behind > self.counters["async_in_flight_max"]:
            self.counters["async_in_flight_max"] = behind
        done = sched.Event()
        previous: list[sched.Event | None] = []

        def queued(_record) -> None:  # at the record's sequence number: the stripe's order
            previous.append(self._chain.get(ls))
            self._chain[ls] = done

        try:
            record = await self.log.append(ls, start, data, on_reserved=queued)
        except BaseException:
            if previous:
                self._finish_chain(ls, done)
            self._slots.release()
            raise
        issued = sched.Event() if self.writes == "async" else None
        self._nursery.start_soon(self._apply, ls, start, data, record, previous[0], done, issued)
        if issued is not None:
            await issued.wait()

    def _finish_chain(self, ls: int, done: sched.Event) -> None:
        done.set()
        if self._chain.get(ls) is done:
            del self._chain[ls]

    async def _apply(self, ls, start, data, record, previous, done, issued=None) -> None:
        ISSUED.set(issued)  # this task's own context: Columns.write sets it at the first member write
        try:
            if previous is not None:
                await previous.wait()
            async with self.locks[ls]:
                await self.personalities.write(ls, start, memoryview(data))
            await self.columns.durable()
            try:
                await self.log.commit(record)
            except OSError as exc:  # the data is on the columns; the log is what failed
                await self.failed(exc)
            self.counters["async_writes_applied"] += 1
        except Exception as exc:  # noqa: BLE001 - the record stays in the log for recovery
            self.counters["async_write_errors"] += 1
            self.last_async_error = repr(exc)
        finally:
            if issued is not None:
                issued.set()  # also when the stripe write failed or wrote nothing
            self._finish_chain(ls, done)
            self._slots.release()

    async def drain(self) -> None:
        """Wait until every acknowledged asynchronous write is applied and committed."""
        while self._chain:
            await next(iter(self._chain.values())).wait()

    async def replay(self) -> int:
        """After an unclean stop: replay every record the log holds uncommitted, in order,
        with reconstruct-writes (§3.8), then start an empty log. Returns the records
        replayed."""
        if self.log is None:
            return 0
        records = await self.log.scan()
        for _seq, ls, start, data in records:
            async with self.locks[ls]:
                await self.personalities.write(ls, start, memoryview(data), reconstruct=True)
            self.counters["recovered_sectors"] += len(data) // SECTOR
        await self.columns.durable()
        await self.log.reset()
        self.counters["recovered_records"] += len(records)
        return len(records)
