"""The integrated TSS device (Pallipadi & Gopinath, "Temperature Sensitive Storage", §3.4-3.6,
§3.9, §4): one block device whose logical stripes are RAID1, RAID5 or compressed RAID5
(cRAID5) under one map table, moved between those personalities by promotion and
victimization.

Requests are cut at logical stripe boundaries; each stripe's part runs under that logical
stripe's lock, and the map table says which personality serves it (stripe-level I/O, §3.6):

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
* RAID1: writes go to both physical stripes; a read goes to one copy, the one whose columns
  have served fewer reads when read balancing is on (§4).
* RAID5: a partial write is a read-modify-write or a reconstruct-write, whichever reads
  fewer bytes (a tie goes to reconstruct-write, as md decides); a whole stripe is written
  with its parity and no read.
* cRAID5: the stripe is read and decompressed whole even for a small request, the new data
  merged, compressed again and written to newly allocated sub-stripes; then the map entry
  changes and the old sub-stripes are freed (§3.5: "the new compressed length is usually
  different ... moving the physical stripe to some other suitable physical location, and
  then freeing the current physical location"). Sub-stripe writes update the parity of a
  physical stripe other compressed stripes share, so they hold that physical stripe's lock
  (§3.5). A physical stripe newly taken for sub-stripes is written whole (zeros in its free
  sub-stripes) so its parity is right from then on.

Migrations (§3.6), each under the logical stripe's lock, in the paper's order: find the
space, copy the data, then change mapping and type, then free the old space.
  promote:   cRAID5 -> RAID5 -> RAID1     victimize: RAID1 -> RAID5 -> cRAID5
RAID1 -> RAID5 keeps the primary copy, writes its parity unit (unused while it was a copy)
and frees the mirror. RAID5 -> RAID1 copies the data units into a free stripe of another
polarity placed as the map table places mirrors. When no free space exists for a RAID5
victimization (or a cRAID5 promotion that empties its physical stripe), the data move into
the reserved stripe and the vacated stripe becomes the reserved one (§3.6). A migration
resets the stripe's temperature (§3.9).

When a first write finds no free stripe, the device takes the decision itself (§3.9: "The
low level TSS device does take some policy decisions in extreme situations"): it victimizes
the coldest RAID1 stripe not in use, else the coldest RAID5 stripe.

Static devices: `mode` raid1, raid5 or craid5 allocates every stripe as that personality
and never migrates on its own: the paper's Table 3 rows ("RAID devices through TSS").
`mode="tss"` is the integrated device.

Degraded service (§3.7): a column that answers EIO, or that `fail` takes out, gets no more
I/O. A RAID1 read takes each piece from the copy that does not have it on that column (the
copies' polarities differ, so one always does); a parity stripe's lost bytes are the XOR of
its other columns; a partial write reads the stripe whole (rebuilding the lost unit), merges
and writes it whole without the column. A second failed column fails the device. `rebuild`
brings a replacement drive in while the device serves.

The data log (§3.8) is raidlab.engine.tss.datalog; how writes use it is this module's "data
log and asynchronous writes" section. Three write modes:
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
In both asynchronous modes at most `max_async` stripe writes are under way (§4: 8).

Where this departs from the paper, and why:
* Failure handling is this module's own design: §3.7 lists what it must do ("switch to the
  degraded mode ... when the degraded disk is replaced ... synched") and says the work is
  in progress.
* A read of a stripe with acknowledged asynchronous writes still queued waits for them (the
  paper's kernel had the buffer cache in front; here the volume has no cache of its own).
* The free-space bitmap is rebuilt from the map table at assembly rather than stored
  (raidlab.engine.tss.persist says why).
* Sector granularity: any write of whole 512-byte sectors is served exactly; the paper's
  requests were the file system's blocks.
"""

from __future__ import annotations

import collections
import contextvars
import dataclasses
import errno
from collections.abc import Sequence
from typing import Any

from raidlab import sched
from raidlab.blockdev import SECTOR, check_aligned
from raidlab.disks.disk import as_block_layer
from raidlab.engine.layouts.xor import xor_blocks
from raidlab.engine.ordered import start_in_order
from raidlab.engine.tss.compression import CpuCost, compress, decompress
from raidlab.engine.tss.datalog import DataLog
from raidlab.engine.tss.maptable import CRAID5, INVALID, RAID1, RAID5, Compressed, MapTable, Mapping, NoSpace
from raidlab.engine.tss.persist import MapStore
from raidlab.engine.tss.temperature import Temperatures
from raidlab.errors import UsageError

MODES = ("tss", RAID1, RAID5, CRAID5)
WRITE_MODES = ("sync", "async", "logged")
BACKGROUND_MODES = ("async", "logged")
# Set in a background stripe write of mode async: the event its writer waits for, set when
# the stripe write issues its first member write (every read and computation done).
_ISSUED: contextvars.ContextVar[sched.Event | None] = contextvars.ContextVar("tss_issued", default=None)
DEFAULT_MAX_ASYNC = 8  # §4: "A maximum of 8 asynchronous requests avoids this deadlock problem"
PROMOTE = {CRAID5: RAID5, RAID5: RAID1}
VICTIMIZE = {RAID1: RAID5, RAID5: CRAID5}


class MigrationRefused(UsageError):
    """A promotion or victimization that cannot be done (wrong personality, no space)."""


class _Missing(Exception):
    """A read found its column failed (the caller rebuilds the bytes or gives up)."""


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
        self.members = list(members)
        self.log = log
        # The device is its members' block layer. §4.1: "TSS relies on clustering to gain
        # performance, otherwise all the stripe I/Os will be partial ones"; the authors
        # changed ll_rw_block() so the kernel clustered below their module too.
        for member in self.members + ([log.device] if log is not None else []):
            as_block_layer(member)
        self.writes = writes
        self.max_async = max_async
        self._async_slots = sched.Semaphore(max_async)
        self._chain: dict[int, sched.Event] = {}  # logical stripe -> done-event of its last queued write
        self._nursery: sched.Nursery | None = None
        self.last_async_error: str | None = None
        self.wait_for_async_s = 0.0   # accesses waiting for their stripe's asynchronous writes
        self.wait_for_slot_s = 0.0    # writes waiting for one of the max_async slots
        self.failed: set[int] = set()               # failed columns (§3.7)
        self.on_failure = on_failure                # async (failed set) -> None: persist it
        self.log_failure: OSError | None = None     # the data log's drive failed (log_failed)
        self._rebuilding: int | None = None         # the column being rebuilt
        self._rebuilt: set[int] = set()             # its physical stripes rebuilt so far
        self.table = table
        self.geometry = table.geometry
        self.mode = mode
        self.temperatures = temperatures or Temperatures(table.logical_stripes)
        self.cost = cost
        self.read_balance = read_balance
        self.store = store
        self.allocate_on_read = allocate_on_read
        self._locks: dict[int, sched.Lock] = collections.defaultdict(sched.Lock)        # logical stripes
        self._physical_locks: dict[int, sched.Lock] = collections.defaultdict(sched.Lock)  # shared stripes
        self._reserved_lock = sched.Lock()  # one move through the reserved stripe at a time
        self._column_reads = [0] * self.geometry.columns
        self.counters: collections.Counter[str] = collections.Counter()

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
            await self._applied(ls)
            async with self._locks[ls]:
                out[pos:pos + n] = await self._read_stripe(ls, start, n)

        await _in_order([(one, *part) for part in self._split(offset, length)])
        self.counters["reads"] += 1
        self.counters["read_bytes"] += length
        return bytes(out)

    async def write(self, offset: int, data: bytes, *, fua: bool = False) -> None:
        check_aligned(offset, len(data), self.size)
        view = memoryview(data)

        async def direct(ls: int, start: int, n: int, pos: int) -> None:
            if self.log is not None:
                await self._applied(ls)  # a write that could not be logged: after the stripe's queued ones
            async with self._locks[ls]:
                await self._write_stripe(ls, start, view[pos:pos + n])

        async def logged(ls: int, start: int, n: int, pos: int) -> None:
            async with self._locks[ls]:
                record = None
                if self._log_usable():
                    try:
                        record = await self.log.append(ls, start, view[pos:pos + n])
                    except OSError as exc:
                        await self._log_failed(exc)
                await self._write_stripe(ls, start, view[pos:pos + n])
                if record is not None:
                    await self._durable()
                    try:
                        await self.log.commit(record)
                    except OSError as exc:
                        await self._log_failed(exc)

        async def queued(ls: int, start: int, n: int, pos: int) -> None:
            if self._log_usable():
                try:
                    await self._write_async(ls, start, bytes(view[pos:pos + n]))
                    return
                except OSError as exc:
                    await self._log_failed(exc)
            await direct(ls, start, n, pos)  # unlogged: acknowledged once on the columns

        one = direct if self.log is None else (queued if self.writes in BACKGROUND_MODES else logged)
        await _in_order([(one, *part) for part in self._split(offset, len(data))])
        self.counters["writes"] += 1
        self.counters["write_bytes"] += len(data)
        if fua:
            await self.flush()

    # -- data log and asynchronous writes (§3.8, §4) -----------------------------------
    # A failed log drive (an EIO from it) is not a lost column: the data is on the columns.
    # From then on every write goes straight to the columns, synchronously, acknowledged once
    # there (what a device without a log does), and `log_failure` says why; a crash meanwhile
    # can leave a stripe's parity out of step, as without a log, until a new log drive is
    # given (replace_log).

    def _log_usable(self) -> bool:
        return self.log is not None and self.log_failure is None

    async def _log_failed(self, exc: OSError) -> None:
        """The data log's drive failed (an EIO; anything else is raised): writes go unlogged."""
        if exc.errno != errno.EIO:
            raise exc
        if self.log_failure is None:
            self.log_failure = exc
            self.counters["log_failures"] += 1

    async def fail_log(self) -> None:
        """`raidlab fail` of the log drive: as its first EIO would."""
        await self._log_failed(OSError(errno.EIO, f"{self.name}: the data log's drive failed"))

    async def replace_log(self, drive: Any) -> None:
        """A new log drive: every queued asynchronous write applied first (their records were
        on the old one), then an empty log on `drive`, and writes logged again."""
        await self.drain()
        log = DataLog(drive, self.log.array_uuid if self.log is not None else None)
        await log.reset()
        self.log, self.log_failure = log, None

    async def check_log(self) -> None:
        """Read the data log whole, as recovery would: a log drive that fails its reads is
        found here (a scrub) rather than at the next crash."""
        if self._log_usable():
            try:
                await self.log.scan()
            except OSError as exc:
                await self._log_failed(exc)
    def start(self, nursery: sched.Nursery) -> None:
        """Where the background stripe writes of asynchronous mode run."""
        self._nursery = nursery

    async def _applied(self, ls: int) -> None:
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
        await self._async_slots.acquire()
        if sched.current_time() > started:
            self.counters["waits_for_slot"] += 1
            self.wait_for_slot_s += sched.current_time() - started
        behind = self.max_async - self._async_slots.value
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
            self._async_slots.release()
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
        _ISSUED.set(issued)  # this task's own context: _mwrite sets it at the first member write
        try:
            if previous is not None:
                await previous.wait()
            async with self._locks[ls]:
                await self._write_stripe(ls, start, memoryview(data))
            await self._durable()
            try:
                await self.log.commit(record)
            except OSError as exc:  # the data is on the columns; the log is what failed
                await self._log_failed(exc)
            self.counters["async_writes_applied"] += 1
        except Exception as exc:  # noqa: BLE001 - the record stays in the log for recovery
            self.counters["async_write_errors"] += 1
            self.last_async_error = repr(exc)
        finally:
            if issued is not None:
                issued.set()  # also when the stripe write failed or wrote nothing
            self._finish_chain(ls, done)
            self._async_slots.release()

    async def drain(self) -> None:
        """Wait until every acknowledged asynchronous write is applied and committed."""
        while self._chain:
            await next(iter(self._chain.values())).wait()

    async def recover(self) -> int:
        """After an unclean stop: replay every record the log holds uncommitted, in order,
        with reconstruct-writes (§3.8), then start an empty log; and rewrite the parity of
        every physical stripe compressed stripes share, since a cRAID5 write or move that a
        crash cut short may have left it out of step with sub-stripes no one owns any more
        (a move is not logged: its map record decides whether it happened). Returns the
        records replayed."""
        replayed = 0
        if self.log is not None:
            records = await self.log.scan()
            for _seq, ls, start, data in records:
                async with self._locks[ls]:
                    await self._write_stripe(ls, start, memoryview(data), reconstruct=True)
                self.counters["recovered_sectors"] += len(data) // SECTOR
            await self._durable()
            await self.log.reset()
            replayed = len(records)
            self.counters["recovered_records"] += replayed
        g = self.geometry
        for ps in sorted(self.table.sub_used):
            if self.failed:  # degraded: the parity is what rebuilds the lost column
                break
            data = await self._read_range(ps, 0, g.data_bytes)
            units = [data[i * g.unit:(i + 1) * g.unit] for i in range(g.data_units)]
            await self._mwrite(g.polarity(ps), g.unit_offset(ps), xor_blocks(units), whole_unit=True)
            self.counters["shared_stripes_resynced"] += 1
        return replayed

    async def flush(self) -> None:
        """Every write acknowledged before is durable: the columns in service (a failed
        column is skipped; one that fails on the flush is failed) and the log."""
        calls = [(self._flush_column, column) for column in range(len(self.members))]
        if self._log_usable():
            calls.append((self._flush_log,))
        await _in_order(calls)

    async def _flush_log(self) -> None:
        try:
            await self.log.device.flush()
        except OSError as exc:
            await self._log_failed(exc)

    async def _flush_column(self, column: int) -> None:
        if column in self.failed:
            return
        try:
            await self.members[column].flush()
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            await self._fail_column(column)

    async def _durable(self) -> None:
        """Make the column writes done so far durable, before a record that depends on them
        is written: a log commit (the stripe write it commits), a map record (the data at
        its new location), the reserved stripe's header (the data moved into it). A column
        whose drive can hold writes in a volatile cache is flushed; one that cannot (its
        writes are on the media when reported) needs nothing. Without this, a power cut
        that takes a drive's cache could leave a committed record whose data is lost: the
        log would not replay it, the map would point at what was never written."""
        calls = [(self._flush_column, column) for column in range(len(self.members))
                 if column not in self.failed and getattr(self.members[column], "volatile_writes", True)]
        if calls:  # nothing to wait for otherwise (and no checkpoint to reorder a seeded replay)
            await _in_order(calls)
            self.counters["durability_flushes"] += 1

    async def trim(self, offset: int, length: int) -> None:
        """Logical stripes the range covers whole become invalid again and their space is
        freed; partly covered ones keep their data (a trim may leave old data)."""
        check_aligned(offset, length, self.size)
        for ls, start, n, _pos in self._split(offset, length):
            if n == self.geometry.data_bytes:
                async with self._locks[ls]:
                    self._release(await self._commit(ls, Mapping()))
                    self.counters["trimmed_stripes"] += 1

    # -- reading -----------------------------------------------------------------------
    async def _read_stripe(self, ls: int, start: int, n: int) -> bytes:
        entry = self.table[ls]
        self.temperatures.touch(ls)
        if entry.kind == INVALID and self.allocate_on_read:
            entry = await self._allocate(ls, None)  # cRAID5: a stripe of zeros, stored compressed
        if entry.kind == INVALID:
            self.counters["invalid_reads"] += 1
            return bytes(n)
        self.counters[f"{entry.kind}_reads"] += 1
        if entry.unwritten:  # read what the stripe's disks hold, as the paper's device did; it is not ours
            self.counters["unwritten_reads"] += 1
            try:
                if entry.kind == RAID1:
                    await self._read_mirrored(entry.stripes, start, n)
                else:
                    await self._read_range(entry.stripes[0], start, n)
            except OSError:
                pass
            return bytes(n)
        if entry.kind == RAID1:
            return await self._read_mirrored(entry.stripes, start, n)
        if entry.kind == RAID5:
            return await self._read_range(entry.stripes[0], start, n)
        data = await self._read_compressed(entry.compressed)
        return data[start:start + n]

    def _pick_copy(self, stripes: tuple[int, ...], start: int, n: int) -> int:
        """The RAID1 copy to read: the one whose columns have served fewer reads (§4's read
        balancing), or the primary with balancing off."""
        if not self.read_balance:
            return stripes[0]
        best, best_load = stripes[0], None
        for ps in stripes:
            load = sum(self._column_reads[column] for _i, column, _o, _n in self.geometry.pieces(ps, start, n))
            if best_load is None or load < best_load:
                best, best_load = ps, load
        return best

    async def _read_range(self, ps: int, start: int, n: int) -> bytes:
        """Bytes of `ps`'s data area; a piece on a failed column is rebuilt from the other
        columns and the parity (§3.7), so `ps` must hold valid parity (not a RAID1 copy)."""
        pieces = self.geometry.pieces(ps, start, n)
        parts: list[bytes] = [b""] * len(pieces)

        async def one(i: int, column: int, offset: int, length: int) -> None:
            try:
                parts[i] = await self._mread(column, offset, length)
            except _Missing:
                parts[i] = await self._reconstruct(ps, column, offset, length)

        await _in_order([(one, i, column, offset, length)
                         for i, (_u, column, offset, length) in enumerate(pieces)])
        return b"".join(parts)

    async def _reconstruct(self, ps: int, column: int, offset: int, length: int) -> bytes:
        """The bytes of a failed column in parity stripe `ps`: the XOR of the same bytes of
        every other column (data units and parity)."""
        others = [c for c in range(self.geometry.columns) if c != column]
        parts: list[bytes] = [b""] * len(others)

        async def one(i: int, other: int) -> None:
            try:
                parts[i] = await self._mread(other, offset, length)
            except _Missing:
                raise OSError(errno.EIO, f"{self.name}: columns {column} and {other} failed") from None

        await _in_order([(one, i, other) for i, other in enumerate(others)])
        self.counters["degraded_reads"] += 1
        return xor_blocks(parts)

    async def _read_mirrored(self, stripes: tuple[int, ...], start: int, n: int) -> bytes:
        """A RAID1 stripe's bytes: each piece from the copy read balancing picks, or from
        the other when that copy's column failed (their polarities differ, so a piece is on
        a failed column in one copy at most, §3.3)."""
        first = self._pick_copy(stripes, start, n)
        order = (first,) + tuple(ps for ps in stripes if ps != first)
        pieces = [self.geometry.pieces(ps, start, n) for ps in order]
        parts: list[bytes] = [b""] * len(pieces[0])

        async def one(i: int) -> None:
            for copy in pieces:
                _u, column, offset, length = copy[i]
                try:
                    parts[i] = await self._mread(column, offset, length)
                    return
                except _Missing:
                    self.counters["degraded_reads"] += 1
            raise OSError(errno.EIO, f"{self.name}: both copies of a RAID1 stripe lost a column")

        await _in_order([(one, i) for i in range(len(parts))])
        return b"".join(parts)

    # -- member I/O, failures and rebuild (§3.7) ----------------------------------------
    def _stripe_of(self, offset: int) -> int:
        return (offset - self.geometry.data_offset) // self.geometry.unit

    async def _mread(self, column: int, offset: int, length: int) -> bytes:
        """A column's bytes; _Missing when the column has failed (now or by this read)."""
        if column in self.failed:
            raise _Missing(column)
        self._column_reads[column] += 1
        try:
            return await self.members[column].read(offset, length)
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            await self._fail_column(column)
            raise _Missing(column) from None

    async def _mwrite(self, column: int, offset: int, data: bytes, *, whole_unit: bool = False) -> None:
        """Write a column's bytes; skipped on a failed column, except the one being rebuilt
        where its stripe is rebuilt already or this write covers the whole unit. In a
        background stripe write of mode async, the first one acknowledges the request."""
        issued = _ISSUED.get()
        if issued is not None and not issued.is_set():
            issued.set()
        if column in self.failed:
            ps = self._stripe_of(offset)
            if column == self._rebuilding and (whole_unit or ps in self._rebuilt):
                await self.members[column].write(offset, data)
                self._rebuilt.add(ps)
                return
            self.counters["writes_skipped_on_failed_column"] += 1
            return
        try:
            await self.members[column].write(offset, data)
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            await self._fail_column(column)

    async def _fail_column(self, column: int) -> None:
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

    async def fail(self, column: int) -> None:
        """Take `column` out of service, as a failure would (`raidlab fail`)."""
        if not 0 <= column < self.geometry.columns:
            raise UsageError(f"no column {column}: {self.name} has columns 0..{self.geometry.columns - 1}")
        await self._fail_column(column)

    async def rebuild(self, column: int, drive: Any, progress=None) -> int:
        """Rebuild failed `column` onto `drive` while the device serves: first every shared
        stripe (under its physical lock), then each logical stripe's RAID1 copies and RAID5
        stripe (under its lock): a data unit from the other copy, a parity stripe's unit
        from the others' XOR. Writes meanwhile reach the new drive where their stripe is
        rebuilt or they cover whole units (_mwrite), and the rebuild fills in the rest.
        Migrations wait for the end. Returns the physical stripes rebuilt."""
        if column not in self.failed:
            raise UsageError(f"column {column} of {self.name} has not failed")
        if len(self.failed) > 1:
            raise UsageError(f"{self.name} lost columns {sorted(self.failed)}: nothing to rebuild from")
        g = self.geometry
        self.members[column] = drive
        as_block_layer(drive)
        self._rebuilding, self._rebuilt = column, set()
        done = 0
        total = len(self.table.sub_used) + self.table.logical_stripes
        try:
            for ps in sorted(self.table.sub_used):
                async with self._physical_locks[ps]:
                    if ps in self.table.sub_used and ps not in self._rebuilt:
                        await self._rebuild_parity_unit(ps, column)
                done += 1
                if progress:
                    progress(done, total)
            for ls in range(self.table.logical_stripes):
                async with self._locks[ls]:
                    entry = self.table[ls]
                    if entry.unwritten:
                        self._rebuilt.update(entry.stripes)  # nothing of it to rebuild
                    elif entry.kind == RAID1:
                        for copy, other in ((entry.stripes[0], entry.stripes[1]), (entry.stripes[1], entry.stripes[0])):
                            if copy not in self._rebuilt:
                                await self._rebuild_copy_unit(copy, other, column)
                    elif entry.kind == RAID5 and entry.stripes[0] not in self._rebuilt:
                        await self._rebuild_parity_unit(entry.stripes[0], column)
                done += 1
                if progress:
                    progress(done, total)
        finally:
            self._rebuilding = None
        rebuilt = len(self._rebuilt)
        self._rebuilt = set()
        self.failed.discard(column)
        if self.store is not None:
            self.store.failed.discard(column)
            if column < len(self.store.members):
                self.store.members[column] = drive
                await self.store.write_all(self.table)
        if self.on_failure is not None:
            await self.on_failure(frozenset(self.failed))
        self.counters["rebuilds"] += 1
        return rebuilt

    async def scrub(self, progress=None) -> tuple[list[dict[str, int]], int]:
        """Read every physical stripe in use once and check it: a RAID1 logical stripe's two
        copies hold the same data units, a RAID5 or shared stripe's parity is the XOR of its
        data units. Returns (mismatches as {"stripe", "disk", "offset", "length"}, bytes
        read); each stripe is checked under its lock."""
        if self.failed:
            raise UsageError(f"{self.name} runs degraded (failed columns {sorted(self.failed)}): "
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
                    out[i] = await self._mread(column, g.unit_offset(ps), g.unit)
                except _Missing:  # the read failed the column: the check ends, the device serves degraded
                    raise OSError(errno.EIO, f"{self.name}: column {column} failed under the check") from None

            await _in_order([(one, i, column) for i, column in enumerate(columns)])
            checked += len(columns) * g.unit
            return out

        def parity_wrong(ps: int, read: list[bytes]) -> None:
            if xor_blocks(read[:-1]) != read[-1]:
                mismatches.append({"stripe": ps, "disk": g.polarity(ps), "offset": g.unit_offset(ps),
                                   "length": g.unit})

        for ps in sorted(self.table.sub_used):
            async with self._physical_locks[ps]:
                if ps in self.table.sub_used:
                    parity_wrong(ps, await units(ps, True))
            done += 1
            if progress:
                progress(done, total)
        for ls in range(self.table.logical_stripes):
            await self._applied(ls)
            async with self._locks[ls]:
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

    async def _rebuild_parity_unit(self, ps: int, column: int) -> None:
        g = self.geometry
        data = await self._reconstruct(ps, column, g.unit_offset(ps), g.unit)
        await self.members[column].write(g.unit_offset(ps), data)
        self._rebuilt.add(ps)

    async def _rebuild_copy_unit(self, copy: int, other: int, column: int) -> None:
        """A RAID1 copy's unit on `column`: the same data unit of the other copy (its
        unused parity unit, when that is what `column` holds, stays as it is)."""
        g = self.geometry
        if g.polarity(copy) != column:
            index = (column - g.polarity(copy) - 1) % g.columns
            source = g.data_column(other, index)
            data = await self._mread(source, g.unit_offset(other), g.unit)
            await self.members[column].write(g.unit_offset(copy), data)
        self._rebuilt.add(copy)

    async def _read_compressed(self, c: Compressed) -> bytes:
        g = self.geometry
        start, length = g.substripe_range(c.first, c.count)
        blob = await self._read_range(c.stripe, start, length)
        if c.raw:
            return blob
        if self.cost is not None:
            await self.cost.decompressing(g.data_bytes)
        self.counters["decompressions"] += 1
        return decompress(blob[:c.size], g.data_bytes)

    # -- writing -----------------------------------------------------------------------
    async def _write_stripe(self, ls: int, start: int, data: memoryview, *, reconstruct: bool = False) -> None:
        entry = self.table[ls]
        self.temperatures.touch(ls)
        if entry.kind == INVALID:
            await self._allocate(ls, (start, data))
            return
        self.counters[f"{entry.kind}_writes"] += 1
        if entry.unwritten:  # its first write: the whole stripe, zeros around the data
            await self._write_unwritten(ls, entry, self._zero_filled(start, data))
            return
        if entry.kind == RAID1:
            await _in_order([(self._write_plain, ps, start, data) for ps in entry.stripes])
        elif entry.kind == RAID5:
            await self._write_parity(entry.stripes[0], start, data, reconstruct=reconstruct)
        else:
            old = await self._read_compressed(entry.compressed)
            await self._store_or_make_room(ls, b"".join((old[:start], data, old[start + len(data):])), entry)

    async def _store_or_make_room(self, ls: int, data: bytes, old: Mapping) -> None:
        """_store_compressed for a write: when no sub-stripes are free, the integrated
        device victimizes a stripe to make room once; otherwise the write fails ENOSPC."""
        for attempt in range(2):
            try:
                await self._store_compressed(ls, data, old)
                return
            except NoSpace:
                if self.mode != "tss" or attempt:
                    raise OSError(28, f"{self.name}: no free sub-stripes for logical stripe {ls}") from None
                await self._make_room(exclude=ls)

    def _zero_filled(self, start: int, data: bytes | memoryview) -> bytes:
        size = self.geometry.data_bytes
        return b"".join((bytes(start), data, bytes(size - start - len(data))))

    async def _write_unwritten(self, ls: int, entry: Mapping, whole: bytes) -> Mapping:
        """Write an unwritten stripe whole where it is allocated, and record it written."""
        if entry.kind == RAID1:
            await _in_order([(self._write_plain, ps, 0, whole) for ps in entry.stripes])
        else:
            await self._write_parity(entry.stripes[0], 0, whole, fresh=True)
        written = Mapping(entry.kind, entry.stripes)
        await self._commit(ls, written)
        return written

    async def _allocate(self, ls: int, write: tuple[int, memoryview] | None) -> Mapping:
        """First access of an invalid stripe (§3.6): physical space by the device's mode.
        A write fills it whole, zeros around its data; a read leaves a RAID1 or RAID5 stripe
        unwritten (the paper's device read whatever the new stripe held). A cRAID5 stripe
        cannot be unwritten (its compressed size is what locates it): a read stores it as
        compressed zeros and reads that back. Returns the new entry."""
        whole = self._zero_filled(write[0], write[1]) if write is not None else None
        if write is None:
            self.counters["allocations_on_read"] += 1
        if self.mode == CRAID5:
            self.counters["allocations_craid5"] += 1
            await self._store_or_make_room(ls, whole if whole is not None else bytes(self.geometry.data_bytes),
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
                await self._make_room(exclude=ls)
        kind = RAID1 if len(stripes) == 2 else RAID5
        self.counters[f"allocations_{kind}"] += 1
        entry = Mapping(kind, stripes, unwritten=whole is None)
        try:
            if whole is not None:
                if kind == RAID1:
                    await _in_order([(self._write_plain, ps, 0, whole) for ps in stripes])
                else:
                    await self._write_parity(stripes[0], 0, whole, fresh=True)
            await self._commit(ls, entry)
        except BaseException:
            if self.table[ls].kind == INVALID:  # not recorded: the space goes back
                for ps in stripes:
                    self.table.release(ps)
            raise
        return entry

    async def _write_plain(self, ps: int, start: int, data: bytes | memoryview) -> None:
        """Data units only, no parity (a RAID1 copy)."""
        view = memoryview(data)
        calls, pos = [], 0
        for _u, column, offset, length in self.geometry.pieces(ps, start, len(view)):
            calls.append((self._write_piece, column, offset, bytes(view[pos:pos + length])))
            pos += length
        await _in_order(calls)

    async def _write_piece(self, column: int, offset: int, data: bytes) -> None:
        await self._mwrite(column, offset, data, whole_unit=len(data) == self.geometry.unit)

    async def _write_parity(self, ps: int, start: int, data: bytes | memoryview, *, fresh: bool = False,
                            reconstruct: bool = False) -> None:
        """Bytes [start, start+len) of `ps`'s data area with its parity kept right: a whole
        stripe (or a fresh one, zero-filled around the data) without reads, else RMW or RCW."""
        g = self.geometry
        view = memoryview(data)
        if fresh or (start == 0 and len(view) == g.data_bytes):
            whole = bytes(view) if len(view) == g.data_bytes else self._zero_filled(start, view)
            await self._write_whole(ps, whole)
            return
        if self.failed:
            await self._write_degraded(ps, start, view)
            return
        try:
            await self._write_partial(ps, start, view, reconstruct)
        except _Missing:  # a column failed under this write: do it again as a degraded one
            await self._write_degraded(ps, start, view)

    async def _write_whole(self, ps: int, whole: bytes) -> None:
        g = self.geometry
        units = [whole[i * g.unit:(i + 1) * g.unit] for i in range(g.data_units)]
        base = g.unit_offset(ps)
        calls = [(self._write_piece, g.data_column(ps, i), base, unit) for i, unit in enumerate(units)]
        calls.append((self._write_piece, g.polarity(ps), base, xor_blocks(units)))
        if self.cost is not None:
            await self.cost.xor(len(whole))
        self.counters["full_stripe_writes"] += 1
        await _in_order(calls)

    async def _write_degraded(self, ps: int, start: int, view: memoryview) -> None:
        """A partial write with a failed column: the whole stripe read (its lost unit
        rebuilt from the others), the new bytes merged, written whole without the column."""
        whole = bytearray(await self._read_range(ps, 0, self.geometry.data_bytes))
        whole[start:start + len(view)] = view
        self.counters["degraded_writes"] += 1
        await self._write_whole(ps, bytes(whole))

    async def _write_partial(self, ps: int, start: int, view: memoryview, reconstruct: bool) -> None:
        g = self.geometry
        pieces = g.pieces(ps, start, len(view))
        lo = min(offset for _u, _c, offset, _n in pieces)
        hi = max(offset + n for _u, _c, offset, n in pieces)
        # bytes read by each way, as md weighs them (ties to reconstruct-write)
        written = sum(n for *_rest, n in pieces)
        rmw_reads = written + (hi - lo)
        rcw_reads = g.data_units * (hi - lo) - written
        parity_column = g.polarity(ps)
        if rmw_reads < rcw_reads and not reconstruct:
            self.counters["rmw_writes"] += 1
            olds: list[bytes] = [b""] * (len(pieces) + 1)

            async def read_old(i: int, column: int, offset: int, n: int) -> None:
                olds[i] = await self._mread(column, offset, n)

            reads = [(read_old, i, column, offset, n) for i, (_u, column, offset, n) in enumerate(pieces)]
            reads.append((read_old, len(pieces), parity_column, lo, hi - lo))
            await _in_order(reads)
            delta = [olds[-1]]
            pos = 0
            for i, (_u, _c, offset, n) in enumerate(pieces):
                new = bytes(view[pos:pos + n])
                pos += n
                pad_before, pad_after = offset - lo, hi - offset - n
                delta.append(bytes(pad_before) + olds[i] + bytes(pad_after))
                delta.append(bytes(pad_before) + new + bytes(pad_after))
            parity = xor_blocks(delta)
            if self.cost is not None:
                await self.cost.xor(sum(len(d) for d in delta))
        else:
            self.counters["rcw_writes"] += 1
            units: list[bytearray] = [bytearray(hi - lo) for _ in range(g.data_units)]
            covered: dict[int, tuple[int, int]] = {}
            pos = 0
            for index, _c, offset, n in pieces:
                units[index][offset - lo:offset - lo + n] = view[pos:pos + n]
                covered[index] = (offset, n)
                pos += n
            reads = []

            async def read_into(index: int, column: int, offset: int, n: int) -> None:
                units[index][offset - lo:offset - lo + n] = await self._mread(column, offset, n)

            for index in range(g.data_units):
                column = g.data_column(ps, index)
                have = covered.get(index)
                spans = [(lo, hi - lo)] if have is None else [(lo, have[0] - lo), (have[0] + have[1], hi - have[0] - have[1])]
                reads += [(read_into, index, column, offset, n) for offset, n in spans if n > 0]
            await _in_order(reads)
            parity = xor_blocks(units)
            if self.cost is not None:
                await self.cost.xor(sum(len(u) for u in units))
        calls, pos = [], 0
        for _u, column, offset, n in pieces:
            calls.append((self._write_piece, column, offset, bytes(view[pos:pos + n])))
            pos += n
        calls.append((self._write_piece, parity_column, lo, parity))
        await _in_order(calls)

    # -- cRAID5 ------------------------------------------------------------------------
    def _vacates_whole_stripe(self, old: Mapping) -> int | None:
        """The physical stripe `old` leaves entirely free once gone (a RAID5 stripe, or a
        shared stripe holding only this compressed stripe), else None."""
        if old.kind == RAID5:
            return old.stripes[0]
        if old.kind == CRAID5:
            c = old.compressed
            if self.table.sub_used.get(c.stripe) == ((1 << c.count) - 1) << c.first:
                return c.stripe
        return None

    async def _compress(self, data: bytes) -> tuple[bytes, int, int, bool]:
        """(blob padded to whole sub-stripes, sub-stripes, size, raw) for a whole stripe."""
        g = self.geometry
        if self.cost is not None:
            await self.cost.compressing(g.data_bytes)
        self.counters["compressions"] += 1
        blob = compress(data)
        count = -(-len(blob) // g.substripe_bytes)
        if count >= g.substripes:
            self.counters["stored_uncompressed"] += 1
            return bytes(data), g.substripes, g.data_bytes, True
        return blob + bytes(count * g.substripe_bytes - len(blob)), count, len(blob), False

    async def _store_compressed(self, ls: int, data: bytes, old: Mapping) -> None:
        """Compress `data` (the whole logical stripe), write it to new sub-stripes, point the
        map at them and free `old`'s space (module doc); through the reserved stripe when
        nothing else is free and `old` vacates a whole stripe."""
        blob, count, size, raw = await self._compress(data)
        try:
            ps, first, fresh = self.table.take_substripes(count)
        except NoSpace:
            if self._vacates_whole_stripe(old) is None:
                raise
            await self._move_through_reserved(ls, old, blob, Compressed(0, 0, count, size, raw))
            return
        entry = Mapping(CRAID5, (ps,), Compressed(ps, first, count, size, raw))
        try:
            await self._write_substripes(ps, first, blob, fresh)
            previous = await self._commit(ls, entry)
        except BaseException:
            if self.table[ls] is not entry:  # not recorded: the sub-stripes go back
                self.table.release_substripes(ps, first, count)
            raise
        self._release(previous)

    async def _write_substripes(self, ps: int, first: int, blob: bytes, fresh: bool) -> None:
        """Write sub-stripes of physical stripe `ps` under its lock: other compressed
        stripes share its parity (§3.5). A fresh stripe is written whole."""
        lock = self._physical_locks[ps]
        if fresh:
            lock.acquire_nowait()  # nobody else knows this stripe yet: held before any wait
        else:
            await lock.acquire()
        try:
            start, _length = self.geometry.substripe_range(first, len(blob) // self.geometry.substripe_bytes)
            await self._write_parity(ps, start, blob, fresh=fresh)
        finally:
            lock.release()

    async def _move_through_reserved(self, ls: int, old: Mapping, payload: bytes,
                                     compressed: Compressed | None) -> None:
        """§3.6: write `payload` into the reserved stripe (as cRAID5 sub-stripes from 0 when
        `compressed` is given, else as a RAID5 stripe), change the map, and let the stripe
        `old` vacates become the reserved stripe. One move at a time."""
        async with self._reserved_lock:
            table = self.table
            vacated = self._vacates_whole_stripe(old)
            assert vacated is not None
            target = table.reserved
            await self._write_parity(target, 0, payload, fresh=True)
            self.counters["reserved_stripe_moves"] += 1
            if compressed is not None:
                entry = Mapping(CRAID5, (target,), dataclasses.replace(compressed, stripe=target))
            else:
                entry = Mapping(RAID5, (target,))
            if self.store is not None:  # header first, keeping the old reserved stripe (persist)
                await self._durable()
                await self.store.write_header(vacated, target)
                await self.store.write_entry(ls, entry)
            if old.kind == CRAID5:
                c = old.compressed
                table.release_substripes(c.stripe, c.first, c.count)
            table.swap_reserved(vacated)
            if compressed is not None:
                table.adopt_shared(target, 0, compressed.count)
            table.set(ls, entry)

    async def _commit(self, ls: int, entry: Mapping) -> Mapping:
        """Record `entry` durably (raidlab.engine.tss.persist), then make it the map's;
        returns the entry it replaced, whose space the caller releases after this."""
        if self.store is not None:
            await self._durable()
            await self.store.write_entry(ls, entry)
        return self.table.set(ls, entry)

    def _release(self, old: Mapping) -> None:
        """Free the space of a map entry just replaced."""
        if old.kind in (RAID1, RAID5):
            for ps in old.stripes:
                self.table.release(ps)
        elif old.kind == CRAID5:
            c = old.compressed
            self.table.release_substripes(c.stripe, c.first, c.count)

    # -- migrations (§3.6) -------------------------------------------------------------
    async def promote(self, ls: int) -> str:
        """cRAID5 -> RAID5 or RAID5 -> RAID1; returns the new personality."""
        self._check_stripe(ls)
        async with self._locks[ls]:
            return await self._migrate(ls, up=True)

    async def victimize(self, ls: int) -> str:
        """RAID1 -> RAID5 or RAID5 -> cRAID5; returns the new personality."""
        self._check_stripe(ls)
        async with self._locks[ls]:
            return await self._migrate(ls, up=False)

    def _check_stripe(self, ls: int) -> None:
        if not 0 <= ls < self.table.logical_stripes:
            raise UsageError(f"no logical stripe {ls}: {self.name} has 0..{self.table.logical_stripes - 1}")

    async def _migrate(self, ls: int, *, up: bool) -> str:
        entry = self.table[ls]
        moves = PROMOTE if up else VICTIMIZE
        verb = "promote" if up else "victimize"
        if self._rebuilding is not None:
            raise MigrationRefused(f"cannot {verb} logical stripe {ls} while column {self._rebuilding} is rebuilt",
                                   hint="migrations resume when the rebuild ends")
        if entry.kind not in moves:
            raise MigrationRefused(f"cannot {verb} logical stripe {ls}: it is {entry.kind}",
                                   hint=f"{verb} applies to {' and '.join(moves)} stripes")
        if entry.unwritten:  # moved as the zeros it reads as: written where it is first
            entry = await self._write_unwritten(ls, entry, bytes(self.geometry.data_bytes))
        try:
            if entry.kind == RAID1:
                await self._raid1_to_raid5(ls, entry)
            elif entry.kind == RAID5 and up:
                await self._raid5_to_raid1(ls, entry)
            elif entry.kind == RAID5:
                data = await self._read_range(entry.stripes[0], 0, self.geometry.data_bytes)
                await self._store_compressed(ls, data, entry)
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
        data = await self._read_mirrored(entry.stripes, 0, g.data_bytes)
        if self.failed:  # the primary may miss a unit: write it whole, from both copies' data
            await self._write_whole(primary, data)
        else:
            units = [data[i * g.unit:(i + 1) * g.unit] for i in range(g.data_units)]
            await self._mwrite(g.polarity(primary), g.unit_offset(primary), xor_blocks(units), whole_unit=True)
        await self._commit(ls, Mapping(RAID5, (primary,)))
        self.table.release(entry.stripes[1])

    async def _raid5_to_raid1(self, ls: int, entry: Mapping) -> None:
        """Copy the data units into a free stripe of another polarity; change the map."""
        stripe = entry.stripes[0]
        mirror = self.table.take_of_other_polarity(self.geometry.polarity(stripe), near=stripe)
        try:
            data = await self._read_range(stripe, 0, self.geometry.data_bytes)
            await self._write_plain(mirror, 0, data)
            await self._commit(ls, Mapping(RAID1, (stripe, mirror)))
        except BaseException:
            if self.table[ls].kind != RAID1:
                self.table.release(mirror)
            raise

    async def _craid5_to_raid5(self, ls: int, entry: Mapping) -> None:
        data = await self._read_compressed(entry.compressed)
        try:
            stripe = self.table.take_whole()
        except NoSpace:
            if self._vacates_whole_stripe(entry) is None:
                raise
            await self._move_through_reserved(ls, entry, data, None)
            return
        try:
            await self._write_parity(stripe, 0, data, fresh=True)
            previous = await self._commit(ls, Mapping(RAID5, (stripe,)))
        except BaseException:
            if self.table[ls].kind != RAID5:
                self.table.release(stripe)
            raise
        self._release(previous)

    async def _make_room(self, *, exclude: int) -> None:
        """No free stripe for a first write: victimize the coldest RAID1 stripe not in use,
        else the coldest RAID5 one (§3.9's decisions "in extreme situations")."""
        for kind in (RAID1, RAID5):
            victim = self.best(kind, hottest=False, exclude=exclude, idle_only=True)
            if victim is None:
                continue
            lock = self._locks[victim]
            lock.acquire_nowait()  # idle_only: free now, and taken before any wait
            try:
                await self._migrate(victim, up=False)
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
            if ls == exclude or (idle_only and (lock := self._locks.get(ls)) is not None and lock.locked()):
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
            "rebuilding_column": self._rebuilding,
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


async def _in_order(calls) -> None:
    """Run `(fn, *args)` calls concurrently, started in plan order (raidlab.engine.ordered);
    the first error is raised as itself, not in an ExceptionGroup, so a failed member
    read reaches the FUSE handler as an OSError."""
    caught = await start_in_order(calls, catch=(Exception,))
    if caught:
        raise caught[0]
