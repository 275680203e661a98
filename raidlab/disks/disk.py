"""An emulated member disk: a backing store plus a timing model, as a trio BlockTarget.

Why built this way (docs/architecture.md, "Member disks and timing models", "Two clocks"):

* One service task per disk takes requests from a queue discipline (raidlab.disks.scheduler)
  and serves exactly one at a time, like a drive with one arm. The mechanism's arithmetic
  (raidlab.disks.mechanisms) says when each request would end on the modelled drive; the task
  sleeps until then with `sched.sleep_until`, so the same code is a discrete-event simulation
  on raidlab's kernel (raidlab.sched.run_virtual) and a real-time emulation under
  trio's real clock (where the last 1.5 ms are waited with checkpoints, see SPIN_WINDOW).
* Virtual mode (io_in_thread=False): the backend I/O is synchronous and happens when the
  request enters service, so the virtual clock cannot jump while data moves.
* Live mode (io_in_thread=True): the real I/O runs while the task waits for the model's end
  time; the request completes at max(model end, I/O done). "Live I/O": what cannot block
  for long runs inline, in the trio thread, as virtual mode does: a read the page cache holds
  whole (preadv with RWF_NOWAIT), a write of at most INLINE_WRITE_BYTES without FUA (a copy
  into the page cache), anything on a memory backend. The rest (reads that must wait for
  the device, large writes, FUA writes, flushes, trims) goes to a worker thread
  (trio.to_thread). A hand-off to a thread and back costs 60-80 µs here against about 6 µs
  for a 4 KiB pwrite into the page cache, so every member I/O paid ten times its own cost.
  Lateness = actual completion - model completion is recorded per request: the answer to
  "does this host deliver the model's timing" (ublk-disksim's validation question).
* The model clock of a request starts at max(its arrival, the previous request's *model*
  end), not at the moment the task got round to it. A host hiccup therefore shows up as
  lateness of every request it delays, instead of silently stretching the drive.
* Partitions (`EmulatedDisk.partition`) are windows on the same disk: they enqueue on the
  parent's queue, so they share its arm, and their offsets keep their place on the drive,
  so a partition in the inner zones is slow (the SA-RAID paper's b1 ... b8). The disk sums
  the service time of each partition's requests apart, so a partition reports its share of
  the drive's busy time (a logical DCD's cache-disk and data disk are two partitions of one
  drive, and their utilisations must mean what two drives' would).
* Merging (off unless `merge_queued_requests()` turns it on): requests waiting in the queue
  that continue one another on the drive (same operation and owner) are served as one when
  the first of them is chosen, up to MERGE_LIMIT, which is what the kernel's block layer
  does before requests reach a real drive. Every drive of a live lab has it on
  (raidlab.export.serve), whoever issues its requests, md through the lab VM or an engine
  array, and an engine Array turns it on for its members in virtual time too. Without it
  the engine's raid5 sent a Table 1 drive 408 writes where md sent 304 for more data, and
  lost 16% of md's sequential write throughput at iodepth 8 to the extra rotations. Trace
  replays of a single drive (the DCD tables) keep it off: their requests are the block
  layer's output already.
* The write cache: each model's catalog entry says whether its drive ships with the write
  cache on (`write_cache_default`; the VC-RAID SCSI members off, its IDE cache disk on); an
  array takes one setting for all its drives (WRITE_CACHE_SETTINGS: "model" keeps each
  model's default, "on" and "off" override it on every drive that has a write cache), so
  members, cache disks and md's drives are not left to differ by accident.
* Flushes (`flushes`, FLUSH_SETTINGS), one setting for all of an array's drives, as the
  write cache is: "honoured" (today's hosts) serves a FLUSH as the model says and writes a FUA
  write through; "dropped" is a host that never sends them, as Linux 2.0 did not (the
  VC-RAID and DCD papers' world): a FLUSH returns at once having done nothing, and a FUA
  write arrives as a plain write, which a drive with its write cache on reports from the
  cache. The drive counts neither as its own (`flushes` stays 0); `flushes_dropped` and
  `fua_dropped` say what the host left out. A comparison's drives all live in one such world,
  the paper's or today's (scenarios: `flushes` of every [[arch]]).
* A shared bus (raidlab.disks.bus, off unless the disk is given one): each read and write
  books its transfer on the bus the drives share and ends when that transfer does; the arm
  is free at the model's own end time.
* The `none` model bypasses the queue entirely: no service task hop, no sleep, the request
  does its I/O inline (in a thread in live mode). It exists for engine throughput runs.
* At once (`read_now`, `write_now`): an array that sends several members one request each
  would otherwise start a task per member I/O to run them side by side, and on the untimed
  model with inline I/O each of those tasks did its I/O at its first step and ended: the
  tasks, not the I/O, were the cost. These synchronous calls do the I/O in the caller where
  `read`/`write` would have done it inline without waiting (the `none` model, nothing
  injected, an inline-able I/O) and say so; anything else is left to `read`/`write`.
* Fault injection: `disk.failed = True` makes every request (queued or new) raise
  OSError(EIO), as a dead member does under md. `disk.fault` (on a disk or a partition)
  injects a partial fault the array has to find out for itself: "read-eio" (reads fail,
  writes succeed: a drive with unreadable sectors), "write-eio" (writes and flushes fail),
  "slow" (every request takes SLOW_FACTOR times as long: the model's service time, or for
  the untimed `none` model the I/O's own time, stretched).

Data is written to the backend when a write is serviced, also when the modelled drive
reports it from its write cache, so the image is what the drive shows while it has power.
What a power cut would take from it is kept apart, when asked for
(`enable_volatile_cache`): an undo log beside the image holds the pre-image of every write
the drive holds in its write cache until a FLUSH, a FUA write or the model's own write-back
makes it durable (raidlab.disks.volatile). The untimed `none` drive then has a write cache
of UNTIMED_CACHE_BYTES written back oldest first, unless its write cache is set off.
"""

from __future__ import annotations

import collections
import errno
import itertools
import math
import os
from collections.abc import Sequence
from typing import Any, Callable

from raidlab import sched
from raidlab.blockdev import SECTOR, check_aligned
from raidlab.disks import catalog
from raidlab.disks.backend import INLINE_WRITE_BYTES, Backend
from raidlab.disks.bus import Bus
from raidlab.disks.geometry import DriveSpec
from raidlab.disks.mechanisms import SERVICE_PARTS, Plan, make_mechanism
from raidlab.disks.scheduler import DISCIPLINES, make_discipline
from raidlab.disks.volatile import UNTIMED_CACHE_BYTES, VolatileCache
from raidlab.errors import UsageError

READ, WRITE, FLUSH, TRIM = "read", "write", "flush", "trim"
LATENESS_SAMPLES = 1 << 17  # most recent lateness samples kept per disk
_NOT_INLINE = object()  # EmulatedDisk._inline_io: leave this I/O to a worker thread
WRITE_CACHE_SETTINGS = ("model", "on", "off")  # an array's write-cache setting (module doc)
FLUSH_SETTINGS = ("honoured", "dropped")  # what becomes of the host's flushes and FUA (module doc)
SPANS = ("full", "start")  # how an image maps onto its drive (raidlab.disks.geometry.Geometry)


def check_flushes(setting: str) -> str:
    """`setting` if it is one of FLUSH_SETTINGS; UsageError otherwise."""
    if setting not in FLUSH_SETTINGS:
        raise UsageError(f"unknown flushes setting {setting!r}", hint=f"use one of: {', '.join(FLUSH_SETTINGS)}")
    return setting


def write_cache_override(setting: str | None) -> bool | None:
    """The EmulatedDisk `write_cache` argument of an array's setting: None (each model's
    default) for "model" or None, True for "on", False for "off"; UsageError otherwise."""
    if setting is None or setting == "model":
        return None
    if setting in ("on", "off"):
        return setting == "on"
    raise UsageError(f"unknown write cache setting {setting!r}",
                     hint=f"use one of: {', '.join(WRITE_CACHE_SETTINGS)}", write_cache=setting)


class _Counters:
    """I/O counters kept for a disk and for each of its partitions."""

    __slots__ = ("reads", "writes", "flushes", "trims", "bytes_read", "bytes_written", "errors")

    def __init__(self) -> None:
        self.reads = self.writes = self.flushes = self.trims = 0
        self.bytes_read = self.bytes_written = self.errors = 0

    def count(self, op: str, nbytes: int) -> None:
        if op == READ:
            self.reads += 1
            self.bytes_read += nbytes
        elif op == WRITE:
            self.writes += 1
            self.bytes_written += nbytes
        elif op == FLUSH:
            self.flushes += 1
        else:
            self.trims += 1

    def as_dict(self) -> dict[str, int]:
        return {
            "reads": self.reads,
            "writes": self.writes,
            "ios": self.reads + self.writes,
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "flushes": self.flushes,
            "trims": self.trims,
            "errors": self.errors,
        }


class _Request:
    __slots__ = ("op", "offset", "length", "data", "fua", "cylinder", "seq", "arrival",
                 "done", "result", "error", "owner")

    def __init__(self, op, offset, length, data, fua, cylinder, seq, arrival, owner):
        self.op, self.offset, self.length, self.data, self.fua = op, offset, length, data, fua
        self.cylinder, self.seq, self.arrival, self.owner = cylinder, seq, arrival, owner
        self.done = sched.Event()
        self.result: bytes | None = None
        self.error: BaseException | None = None


# The largest request the queue makes of contiguous queued ones (Linux's max_sectors_kb of
# many drives; the lab VM's virtio disks pass md's member requests up to this size).
MERGE_LIMIT = 512 * 1024

# Live mode only: trio's real clock waits in epoll, whose timeout Python rounds *up* to
# whole milliseconds, so a plain sleep_until wakes up to 1 ms late (measured: p50 lateness
# 0.87 ms on hp-c2200a). The service task therefore sleeps until SPIN_WINDOW before the
# model's end and then yields with checkpoints until the end: trio-only waiting (no
# time.sleep, no blocking), at the cost of up to SPIN_WINDOW of CPU per request. Never used
# on the virtual clock, where checkpoints would not let the kernel jump.
SPIN_WINDOW = 1.5e-3


async def _sleep_until_precisely(deadline: float) -> None:
    await sched.sleep_until(deadline - SPIN_WINDOW)
    while sched.current_time() < deadline:
        await sched.checkpoint()


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    if not values:
        raise ValueError("percentile of no values")
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return s[k]


FAULTS = ("read-eio", "write-eio", "slow")
SLOW_FACTOR = 100


def _faulted(fault: str | None, op: str) -> bool:
    """Whether an injected partial fault fails this operation (module doc)."""
    return (fault == "read-eio" and op == READ) or (fault == "write-eio" and op in (WRITE, FLUSH))


def _eio(name: str) -> OSError:
    return OSError(errno.EIO, f"emulated disk {name} has failed")


class EmulatedDisk:
    """A member disk: BlockTarget over `backend`, timed by `model` (see module doc).

    model: a DriveSpec or a catalog name ("hp-c2200a", "none", ...).
    discipline: "fifo", "sstf" or "scan".
    io_in_thread: live mode (real I/O in a worker thread, overlapped with the model's wait).
    span: how the image maps onto the drive's cylinders ("full" or "start"; see
      raidlab.disks.geometry.Geometry). write_cache: override the model's default.
    bus: a Bus this drive shares with others (raidlab.disks.bus): every read and write
      books its transfer there and ends when the transfer does.
    flushes: "honoured" or "dropped" (module doc, "Flushes").
    """

    def __init__(
        self,
        name: str,
        model: DriveSpec | str,
        backend: Backend,
        *,
        discipline: str = "fifo",
        io_in_thread: bool = False,
        span: str = "full",
        write_cache: bool | None = None,
        bus: Bus | None = None,
        flushes: str = "honoured",
    ):
        if isinstance(model, str):
            model = catalog.get(model)
        if discipline not in DISCIPLINES:
            raise UsageError(
                f"unknown queue discipline {discipline!r}",
                hint=f"use one of: {', '.join(DISCIPLINES)}",
                discipline=discipline,
            )
        if span not in SPANS:
            raise UsageError(f"unknown span {span!r}", hint="use 'full' or 'start'", span=span)
        if backend.size % SECTOR:
            raise UsageError(f"disk size {backend.size} is not a multiple of {SECTOR}")
        self.name = name
        self.model = model
        self.backend = backend
        self.span = span
        self.discipline = discipline
        self.io_in_thread = io_in_thread
        self.failed = False
        self.fault: str | None = None  # module doc, "Fault injection"
        self.volatile: VolatileCache | None = None  # enable_volatile_cache
        self._write_cache_setting = write_cache
        self.flushes = check_flushes(flushes)
        self._flushes_dropped = 0
        self._fua_dropped = 0
        self._fua_writes = 0  # FUA writes served (counted in `writes` too)
        self._write_backs = 0  # write_back() calls: the drive's own, not the host's
        self.bus = bus
        self._bus_wait = 0.0
        try:
            self.mechanism = make_mechanism(model, backend.size, span=span, write_cache=write_cache)
        except ValueError as exc:
            raise UsageError(str(exc), model=model.name) from None
        self._bypass = model.kind == "none"
        self._queue = make_discipline(discipline)
        self._seq = itertools.count()
        self._wake = sched.Event()
        self._started = False
        self._in_service = False
        self._model_free_at = float("-inf")
        self._counters = _Counters()
        self._busy = 0.0
        self._owner_busy: dict[Partition, float] = {}  # service time of each partition's requests
        self._services = 0
        self._service_sum = 0.0
        self._service_split = dict.fromkeys(SERVICE_PARTS, 0.0)  # busy time by part
        self._cache_hits = 0
        self._max_queue = 0
        # Called with (op, offset, length, arrival, plan) for every request the model plans,
        # when set (`raidlab explain --timing` records each member operation so).
        self.observer: Callable[[str, int, int, float, Plan], None] | None = None
        self._merge = False  # merge_queued_requests()
        self._merged = 0  # queued requests served as part of another (_merge_queued)
        # Lateness of reads, writes and trims; flushes apart: a flush's real cost is the
        # backing file's fdatasync, which the modelled drive does not have.
        self._lateness: collections.deque[float] = collections.deque(maxlen=LATENESS_SAMPLES)
        self._flush_lateness: collections.deque[float] = collections.deque(maxlen=LATENESS_SAMPLES)

    # -- BlockTarget ------------------------------------------------------------------

    @property
    def size(self) -> int:
        return self.backend.size

    @property
    def write_cache(self) -> bool:
        """Whether this drive reports writes from its write cache (the model's default or the
        override it was built with; False for a drive that has none)."""
        return self.mechanism.write_cache_enabled

    @property
    def volatile_writes(self) -> bool:
        """Whether a write can be reported done before it is durable, so that a flush has
        something to do: a timed drive with its write cache on, or the untimed drive unless
        its cache was set off (its writes sit in the host's page cache, or in the emulated
        volatile cache, until a flush)."""
        if self.model.kind == "none":
            return self._write_cache_setting is not False
        return self.mechanism.write_cache_enabled

    def start(self, nursery: sched.Nursery) -> None:
        """Start the disk's service task in `nursery` (the disk lives as long as it)."""
        if self._started:
            raise RuntimeError(f"disk {self.name} already started")
        self._started = True
        if not self._bypass:
            nursery.start_soon(self._serve, name=f"disk-{self.name}")

    async def read(self, offset: int, length: int) -> bytes:
        return await self._submit(READ, offset, length, None, False, self, self.failed)

    async def write(self, offset: int, data: bytes, *, fua: bool = False) -> None:
        await self._submit(WRITE, offset, len(data), bytes(data), fua, self, self.failed)

    async def flush(self) -> None:
        await self._submit(FLUSH, 0, 0, None, False, self, self.failed)

    async def write_back(self) -> None:
        """The drive writes its cache back on its own, as an idle drive does, whatever the
        host sends (module doc, "Flushes"): what an array has behind it once it was settled
        (raidlab.service.hosts' settle: a cold start) in either world. Served as a flush
        (counted in `flushes` and in `write_backs`)."""
        self._write_backs += 1
        await self._submit(FLUSH, 0, 0, None, False, self, self.failed, host=False)

    async def trim(self, offset: int, length: int) -> None:
        await self._submit(TRIM, offset, length, None, False, self, self.failed)

    def read_now(self, offset: int, length: int) -> bytes | None:
        """`read` done at once in the caller, without a checkpoint, where it would not wait
        (module doc, "At once"); None, with nothing done, where it would."""
        result = self._now(READ, offset, length, None, False, self, self.failed)
        return None if result is _NOT_INLINE else result

    def write_now(self, offset: int, data: bytes, *, fua: bool = False) -> bool:
        """`write` done at once in the caller where it would not wait; False, with nothing
        written, where it would."""
        return self._now(WRITE, offset, len(data), data, fua, self, self.failed) is not _NOT_INLINE

    def partition(self, start: int, size: int, name: str | None = None) -> "Partition":
        """A BlockTarget over bytes [start, start+size) of this disk, sharing its arm."""
        check_aligned(start, size, self.size)
        if size <= 0:
            raise UsageError(f"partition size must be positive, not {size}")
        return Partition(self, start, size, name or f"{self.name}p@{start}")

    def close(self) -> None:
        """Release the backend; a clean stop keeps power, so nothing cached is lost."""
        if self.volatile is not None:
            self.volatile.close(clean=True)
        self.backend.close()

    def enable_volatile_cache(self, log: str | os.PathLike | None) -> VolatileCache:
        """Keep what a power cut would lose in an undo log at `log` (None: in memory) (module
        doc). Before the first request."""
        if self._started and self._counters.writes:
            raise RuntimeError(f"disk {self.name}: the volatile cache must be enabled before it is written")
        untimed = self.model.kind == "none"
        capacity = UNTIMED_CACHE_BYTES if untimed else None
        self.volatile = VolatileCache(log, capacity)
        return self.volatile

    def _caches(self, length: int, fua: bool) -> bool:
        """Whether the drive holds this write in its write cache (reports it before it is
        durable): what the timing model does, or the untimed drive's emulated cache."""
        if fua or not self.volatile_writes:
            return False
        return self.model.kind == "none" or length <= self.model.write_cache_bytes

    def _volatile_write(self, offset: int, data: bytes, fua: bool) -> None:
        dirty = getattr(self.mechanism, "dirty", None)
        if dirty is not None and self.mechanism.write_cache_enabled:
            self.volatile.retire_unless_dirty(list(dirty))
        self.volatile.write(self.backend, offset, data, cached=self._caches(len(data), fua))
        if fua:
            self.backend.flush()

    def _volatile_flush(self) -> None:
        self.backend.flush()
        self.volatile.flushed()

    # -- submission -------------------------------------------------------------------

    async def _submit(self, op, offset, length, data, fua, owner, owner_failed, base=0, host=True):
        if op in (READ, WRITE, TRIM):
            check_aligned(offset, length, owner.size)
        if self.flushes == "dropped" and host:  # module doc, "Flushes": the host never sent it
            if op == FLUSH:
                self._flushes_dropped += 1
                await sched.checkpoint()
                return None
            if fua:
                self._fua_dropped += 1
                fua = False
        elif fua:
            self._fua_writes += 1
        offset += base
        fault = owner.fault or self.fault
        if owner_failed or self.failed or (fault is not None and _faulted(fault, op)):
            owner._counters.errors += 1
            await sched.checkpoint()
            raise _eio(owner.name)
        if not self._started:
            raise RuntimeError(f"disk {self.name} is not started (call disk.start(nursery))")
        if self._bypass:
            return await self._bypass_io(op, offset, length, data, fua, owner)
        req = _Request(op, offset, length, data, fua, self.mechanism.cylinder_of(offset),
                       next(self._seq), sched.current_time(), owner)
        self._queue.push(req)
        depth = len(self._queue) + self._in_service
        if depth > self._max_queue:
            self._max_queue = depth
        self._wake.set()
        await req.done.wait()
        if req.error is not None:
            raise req.error
        return req.result

    async def _bypass_io(self, op, offset, length, data, fua, owner):
        """The `none` model: no queue, no delay; the I/O itself is all the cost."""
        io = self._io_function(op, offset, length, data, fua)
        start = sched.current_time()
        if self.io_in_thread:
            result = self._inline_io(op, offset, length, fua, io)
            if result is _NOT_INLINE:
                result = await sched.to_thread_run_sync(io)
            else:
                await sched.checkpoint()
        else:
            result = io()
            await sched.checkpoint()
        if (owner.fault or self.fault) == "slow":
            await sched.sleep((sched.current_time() - start) * (SLOW_FACTOR - 1))
        self._bypass_done(op, length, owner, start)
        return result

    def _bypass_done(self, op, length, owner, start: float) -> None:
        # The model says "done at once": all the time the request took is lateness.
        (self._flush_lateness if op == FLUSH else self._lateness).append(sched.current_time() - start)
        self._counters.count(op, length)
        if owner is not self:
            owner._counters.count(op, length)

    def _now(self, op, offset, length, data, fua, owner, owner_failed, base=0):
        """The request done at once, or _NOT_INLINE with nothing done: only the untimed model
        with nothing injected, and only I/O `_bypass_io` would do inline (module doc, "At
        once"). Whatever goes wrong is left to the request's own path, which meets it again
        and reports it as it always does (a read or a write done twice is the same I/O)."""
        if not self._bypass or not self._started or owner_failed or self.failed or owner.fault or self.fault:
            return _NOT_INLINE
        if fua and self.flushes == "dropped":
            return _NOT_INLINE  # _submit drops it, and counts that
        if offset % SECTOR or length % SECTOR or offset < 0 or offset + length > owner.size:
            return _NOT_INLINE
        offset += base
        if op == WRITE and self.volatile is not None:
            data = bytes(data)  # the volatile cache may keep it
        io = self._io_function(op, offset, length, data, fua)
        start = sched.current_time()
        try:
            result = self._inline_io(op, offset, length, fua, io) if self.io_in_thread else io()
        except OSError:
            return _NOT_INLINE
        if result is not _NOT_INLINE:
            self._bypass_done(op, length, owner, start)
            if fua:
                self._fua_writes += 1
        return result

    def _inline_io(self, op, offset, length, fua, io: Callable[[], Any]) -> Any:
        """Live mode: the result of `io` done inline where it cannot block for long, or
        _NOT_INLINE for a worker thread to do it (module doc, "Live I/O")."""
        if op == READ:
            cached = getattr(self.backend, "pread_cached", None)
            data = cached(offset, length) if cached is not None else None
            return _NOT_INLINE if data is None else data
        if op == WRITE and not fua and length <= INLINE_WRITE_BYTES:
            return io()
        return _NOT_INLINE

    def _io_function(self, op, offset, length, data, fua) -> Callable[[], Any]:
        b = self.backend
        if op == READ:
            return lambda: b.pread(offset, length)
        if self.volatile is not None:
            if op == WRITE:
                return lambda: self._volatile_write(offset, data, fua)
            if op == FLUSH:
                return self._volatile_flush
            return lambda: self.volatile.trim(b, offset, length)
        if op == WRITE:
            if fua:
                def write_through():
                    b.pwrite(offset, data)
                    b.flush()
                return write_through
            return lambda: b.pwrite(offset, data)
        if op == FLUSH:
            return b.flush
        return lambda: b.trim(offset, length)

    # -- service ----------------------------------------------------------------------

    async def _serve(self) -> None:
        while True:
            if not len(self._queue):
                self._wake = sched.Event()
                await self._wake.wait()
                continue
            req = self._queue.pop(self.mechanism.cylinder)
            batch = self._merge_queued(req)
            served = req if len(batch) == 1 else self._joined(batch)
            self._in_service = True
            try:
                await self._service(served)
            finally:
                self._in_service = False
            if served is not req:
                self._merged += len(batch) - 1
                for part in batch:
                    part.error = served.error
                    if served.result is not None:
                        start = part.offset - served.offset
                        part.result = served.result[start:start + part.length]
            for part in batch:
                part.done.set()

    def merge_queued_requests(self) -> None:
        """Serve contiguous queued requests as one from now on (module doc, "Merging")."""
        self._merge = True

    def _merge_queued(self, req: _Request) -> list[_Request]:
        """`req` and the queued requests that continue it on the drive (before or after),
        same operation and owner, up to MERGE_LIMIT bytes in all: what the block layer's
        elevator merges before a request reaches a real drive. In offset order."""
        if (not self._merge or req.op not in (READ, WRITE) or req.length >= MERGE_LIMIT
                or len(self._queue) == 0):
            return [req]
        candidates = [q for q in self._queue.items()
                      if q.op == req.op and q.owner is req.owner and q.fua == req.fua]
        batch, lo, hi = [req], req.offset, req.offset + req.length
        grown = True
        while grown:
            grown = False
            for q in candidates:
                if q in batch or hi - lo + q.length > MERGE_LIMIT:
                    continue
                if q.offset == hi:
                    hi += q.length
                elif q.offset + q.length == lo:
                    lo = q.offset
                else:
                    continue
                batch.append(q)
                self._queue.remove(q)
                grown = True
        batch.sort(key=lambda r: r.offset)
        return batch

    def _joined(self, batch: list[_Request]) -> _Request:
        first = batch[0]
        data = b"".join(r.data for r in batch) if first.op == WRITE else None
        return _Request(first.op, first.offset, sum(r.length for r in batch), data, first.fua,
                        first.cylinder, min(r.seq for r in batch), max(r.arrival for r in batch),
                        first.owner)

    def _model_start(self, arrival: float) -> float:
        return max(arrival, self._model_free_at)

    async def _service(self, req: _Request) -> None:
        if self.failed or getattr(req.owner, "failed", False):
            req.error = _eio(req.owner.name)
            req.owner._counters.errors += 1
            return
        mech = self.mechanism
        start = self._model_start(req.arrival)
        if req.op == READ:
            plan = mech.plan_read(start, req.offset, req.length)
        elif req.op == WRITE:
            plan = mech.plan_write(start, req.offset, req.length, fua=req.fua)
        elif req.op == FLUSH:
            plan = mech.plan_flush(start)
        else:
            plan = mech.plan_trim(start, req.offset, req.length)
        io = self._io_function(req.op, req.offset, req.length, req.data, req.fua)
        self._account(plan, req.owner)
        if self.observer is not None:
            self.observer(req.op, req.offset, req.length, req.arrival, plan)
        if plan.cache_hit:
            self._cache_hits += 1
        end = plan.end
        if (req.owner.fault or self.fault) == "slow":
            now = sched.current_time()
            end = now + max(end - now, 0.0) * SLOW_FACTOR
        if self.bus is not None and req.op in (READ, WRITE) and req.length:
            ready = end
            end = self.bus.book(sched.current_time(), ready, req.length)
            self._bus_wait += end - ready
        try:
            inline = self._inline_io(req.op, req.offset, req.length, req.fua, io) if self.io_in_thread else _NOT_INLINE
            if inline is not _NOT_INLINE:
                req.result = inline
                await _sleep_until_precisely(end)
            elif self.io_in_thread:
                box: dict[str, Any] = {}
                async with sched.open_nursery() as nursery:
                    nursery.start_soon(self._thread_io, io, box)
                    await _sleep_until_precisely(end)
                if "error" in box:
                    raise box["error"]
                req.result = box.get("result")
            else:
                req.result = io()
                await sched.sleep_until(end)
        except OSError as exc:
            req.error = exc
            req.owner._counters.errors += 1
            return
        late = sched.current_time() - end
        (self._flush_lateness if req.op == FLUSH else self._lateness).append(late)
        self._counters.count(req.op, req.length)
        if req.owner is not self:
            req.owner._counters.count(req.op, req.length)

    @staticmethod
    async def _thread_io(io: Callable[[], Any], box: dict) -> None:
        try:
            box["result"] = await sched.to_thread_run_sync(io)
        except OSError as exc:
            box["error"] = exc

    def _account(self, plan: Plan, owner: Any) -> None:
        self._model_free_at = plan.end
        self._busy += plan.service
        self._services += 1
        self._service_sum += plan.service
        plan.add_parts_to(self._service_split)
        if owner is not self:
            self._owner_busy[owner] = self._owner_busy.get(owner, 0.0) + plan.service

    # -- statistics -------------------------------------------------------------------

    def _busy_split(self) -> dict[str, float]:
        """busy_time by what the modelled drive spent it on: the Plan's parts, and
        "waiting", the rest (the arm busy with the drive's own write-back, a read-ahead
        stream the request joined). Seek and rotation apart say whether a change in busy
        time came from where the requests went or from when they arrived: the platter turns
        with the clock, so the same requests issued with other gaps wait other rotations."""
        split = dict(self._service_split)
        split["waiting"] = self._busy - sum(split.values())
        return split

    def lateness_samples(self) -> list[float]:
        """Seconds by which recent reads/writes/trims completed after the model said they
        would (flushes are in statistics()["flush_lateness"])."""
        return list(self._lateness)

    def statistics(self) -> dict[str, Any]:
        stats: dict[str, Any] = {
            "name": self.name,
            "model": self.model.name,
            "size": self.size,
            "discipline": self.discipline,
            "mode": "live" if self.io_in_thread else "virtual",
            "write_cache": self.write_cache,
            "flushes_setting": self.flushes,
            "fua_writes": self._fua_writes,
            "flushes_dropped": self._flushes_dropped,
            "write_backs": self._write_backs,
            "fua_dropped": self._fua_dropped,
            "span": self.span,
            "failed": self.failed,
            "fault": self.fault,
            **self._counters.as_dict(),
            "busy_time": self._busy,
            "queue_length": len(self._queue) + self._in_service,
            "max_queue_length": self._max_queue,
            "merged_requests": self._merged,
            "mean_service_ms": (self._service_sum / self._services * 1e3) if self._services else 0.0,
            "cache_hits": self._cache_hits,
            "busy_split": self._busy_split(),
            "destaged_bytes": self.mechanism.destaged_bytes,
            "destage_time": self.mechanism.destage_time,
            "destage_split": dict(self.mechanism.destage_split),
            "dirty_bytes": self.mechanism.dirty_bytes,
        }
        if self.volatile is not None:
            stats["volatile_cache"] = self.volatile.statistics()
        if self.bus is not None:
            stats["bus"] = self.bus.name
            stats["bus_wait_s"] = self._bus_wait
        for key, lat in (("lateness", self._lateness), ("flush_lateness", self._flush_lateness)):
            if lat:
                stats[key] = {
                    "samples": len(lat),
                    "p50_ms": percentile(lat, 50) * 1e3,
                    "p99_ms": percentile(lat, 99) * 1e3,
                    "max_ms": max(lat) * 1e3,
                }
        return stats


def as_block_layer(target: Any) -> None:
    """Whoever calls this issues `target`'s requests as a kernel block layer would: its queue
    merges contiguous requests queued together (module doc, "Merging"). Targets without a
    queue (a real block device, a test double) are left as they are."""
    enable = getattr(target, "merge_queued_requests", None)
    if enable is not None:
        enable()


class Partition:
    """Bytes [start, start+size) of an EmulatedDisk; same queue, same arm, same zones."""

    def __init__(self, disk: EmulatedDisk, start: int, size: int, name: str):
        self.disk = disk
        self.start = start
        self._size = size
        self.name = name
        self.failed = False
        self.fault: str | None = None
        self._counters = _Counters()

    def merge_queued_requests(self) -> None:
        """The drive's queue merges (it is the drive's, shared by its partitions)."""
        self.disk.merge_queued_requests()

    @property
    def model(self):
        """The drive's model (a partition has its drive's mechanics)."""
        return self.disk.model

    @property
    def size(self) -> int:
        return self._size

    @property
    def volatile_writes(self) -> bool:
        """The drive's (EmulatedDisk.volatile_writes)."""
        return self.disk.volatile_writes

    async def read(self, offset: int, length: int) -> bytes:
        return await self.disk._submit(READ, offset, length, None, False, self, self.failed, self.start)

    def read_now(self, offset: int, length: int) -> bytes | None:
        """EmulatedDisk.read_now on this window of the drive."""
        result = self.disk._now(READ, offset, length, None, False, self, self.failed, self.start)
        return None if result is _NOT_INLINE else result

    def write_now(self, offset: int, data: bytes, *, fua: bool = False) -> bool:
        """EmulatedDisk.write_now on this window of the drive."""
        return self.disk._now(WRITE, offset, len(data), data, fua, self, self.failed, self.start) is not _NOT_INLINE

    async def write(self, offset: int, data: bytes, *, fua: bool = False) -> None:
        await self.disk._submit(WRITE, offset, len(data), bytes(data), fua, self, self.failed, self.start)

    async def flush(self) -> None:
        await self.disk._submit(FLUSH, 0, 0, None, False, self, self.failed, 0)

    async def trim(self, offset: int, length: int) -> None:
        await self.disk._submit(TRIM, offset, length, None, False, self, self.failed, self.start)

    def statistics(self) -> dict[str, Any]:
        """Its own counters, and its share of the drive's time: `busy_time` sums the service
        time of this partition's requests (the drive's busy time split by partition, so the
        utilisation of a logical cache-disk and of its data partition means what it means for
        two drives), `mean_service_ms` is that per read or write. The queue is the drive's,
        shared by its partitions, so `max_queue_length` is the drive's deepest queue."""
        counters = self._counters.as_dict()
        busy = self.disk._owner_busy.get(self, 0.0)
        return {
            "name": self.name,
            "disk": self.disk.name,
            "model": self.disk.model.name,
            "start": self.start,
            "size": self._size,
            "write_cache": self.disk.write_cache,
            "span": self.disk.span,
            "failed": self.failed or self.disk.failed,
            **counters,
            "busy_time": busy,
            "max_queue_length": self.disk._max_queue,
            "mean_service_ms": busy / counters["ios"] * 1e3 if counters["ios"] else 0.0,
        }
