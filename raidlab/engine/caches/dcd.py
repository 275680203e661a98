"""DCD, the Disk Caching Disk (Hu & Yang, ISCA 96, §2), as a BlockTarget.

Three levels (§2): a RAM buffer (default 512 KB), a cache-disk holding a log (default
20 MB), and the data disk that holds the filesystem unchanged (the volume *is* the data
disk, byte for byte, so `bypass` turns the DCD back into a plain disk). The cache-disk is a
separate emulated disk ("physical DCD", Fig. 1) or a partition at the start of the data
disk's drive ("logical DCD", Fig. 2; §4 uses the first 80,000 sectors) — the caller passes
`EmulatedDisk.partition(...)` targets, which share the drive's arm as the paper's two
logical disks do.

Writing (§2.1): a write over 64 KB goes to the data disk; a smaller one goes to the RAM
buffer. The log writer moves *everything* in the buffer to the cache-disk as one log write
as soon as the cache-disk is free (it never waits for the buffer to fill), while new writes
keep collecting. Immediate report acknowledges a write once it is in RAM;
report-after-complete (§2.4) once its log write is on the cache-disk. A write that finds
the buffer full waits (the peaks of §4.1), and is counted.

Reading (§2.2): RAM buffer, then cache-disk, then data disk, per sector.

Destaging (§2.3): the idle detector counts the disk idle after `idle_threshold` (50 ms)
without a request; then Last-Write-First-Destage (`destage_lwfd`) pops destage segments off
the cache-disk log from the Current Log Position, drops holes, writes the blocks home in
address order and moves the CLP back, until the log is empty or a request arrives (which
suspends it). The log format, markers and tombstones are in raidlab.engine.caches.log; the
idle detector and the forced destage, which VC-RAID shares, in raidlab.engine.caches.destage.
`destage_order="oldest"` is an ablation, not the paper's: every destage takes the oldest
records of a circular log instead (raidlab.engine.caches.log, oldest-first).

Crash recovery (§2.5): a summary sector leads every log write; `assemble_dcd` scans the
cache-disk and rebuilds the mapping, then serves reads from it.

The host-to-controller link (§3.2, `HostLink`): a write the RAM buffer takes first crosses
the link from the host. A trace-driven simulation puts it in front of the DCD, so an
immediate-report write costs its transfer time, as in the paper's results; a live volume
needs none (its host is the real one).

Where this departs from the paper, and why:

* Granularity is the 512-byte sector (the paper's blocks are the trace's requests); a
  write of any sector-aligned size is exact without read-modify-write.
* The cache-disk is "busy" for a log write while a destage step holds its log (one lock); a
  read of cached sectors takes no lock, so it queues at the cache-disk with the log write
  (the drive's queue orders them), which matches "if the cache-disk is not busy with
  writing a previous log or reading" as far as the drive's own queue goes.
* A log that fills up is destaged in the background in batches, and when the log has no
  room for the next log write even so, a destage runs at once in the write path and is not
  suspended (raidlab.engine.caches.destage; the paper's traces never fill the 20 MB
  cache-disk; an emulator must not stop).
* A flush makes every acknowledged write durable: in immediate-report mode it forces the
  RAM buffer to the cache-disk log (log writes are FUA) and flushes the data disk.
* A large write that overwrites logged sectors writes a tombstone after its data is durable,
  so recovery cannot resurrect the older logged copy (see log.py).
* The paper's NVRAM variant of the RAM buffer is not modelled: RAM is lost in a crash.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from raidlab import sched
from raidlab.blockdev import SECTOR, check_aligned
from raidlab.engine import metadata
from raidlab.engine.caches.activity import FAILED_STATE
from raidlab.engine.caches.destage import (WATERMARK_DEFAULTS, Destaging, LogWrite, check_watermarks,
                                           oldest_unlogged, watermarks_of)
from raidlab.engine.caches.log import (
    DEFAULT_LOG_START,
    DESTAGE_ORDERS,
    LOG_GEOMETRY,
    ORDER_LWFD,
    CacheDiskLog,
    LogStore,
    destage_order_of,
    end_markers_of,
    log_id_of,
    log_layout,
    max_record_bytes,
    reserved_bytes,
    runs_of,
)
from raidlab.errors import UsageError

KiB = 1024
MiB = 1024 * KiB
REPORT_MODES = ("immediate", "after-complete")
DEFAULTS = dict(
    ram_buffer=512 * KiB,
    report="immediate",
    idle_threshold=0.050,
    destage_segment=128 * KiB,
    large_write=64 * KiB,
    **WATERMARK_DEFAULTS,
)


def check_dcd_config(cache_size: int, *, ram_buffer: int, report: str, idle_threshold: float,
                     destage_segment: int, large_write: int, log_start: int = DEFAULT_LOG_START,
                     high_watermark: float = DEFAULTS["high_watermark"],
                     low_watermark: float = DEFAULTS["low_watermark"],
                     destage_batch: int = DEFAULTS["destage_batch"],
                     destage_order: str = ORDER_LWFD) -> None:
    """Raise UsageError (one line) for a configuration that cannot work."""
    check_watermarks(high_watermark, low_watermark, destage_batch, destage_segment)
    if destage_order not in DESTAGE_ORDERS:
        raise UsageError(f"unknown destage order {destage_order!r}", hint=f"use one of: {', '.join(DESTAGE_ORDERS)}")
    if report not in REPORT_MODES:
        raise UsageError(f"unknown report mode {report!r}", hint=f"use one of: {', '.join(REPORT_MODES)}")
    if ram_buffer <= 0 or ram_buffer % SECTOR:
        raise UsageError(f"RAM buffer of {ram_buffer} bytes is not a positive multiple of {SECTOR}")
    if idle_threshold <= 0:
        raise UsageError(f"idle threshold must be positive, not {idle_threshold}")
    if destage_segment < SECTOR:
        raise UsageError(f"destage segment of {destage_segment} bytes is smaller than a sector")
    if large_write < SECTOR:
        raise UsageError(f"large-write threshold of {large_write} bytes is smaller than a sector")
    log_bytes = cache_size - log_start
    log_bytes -= reserved_bytes([log_bytes], SECTOR, order=destage_order)
    if ram_buffer > log_bytes:
        raise UsageError(
            f"RAM buffer of {ram_buffer} bytes is larger than the cache-disk log of {max(log_bytes, 0)} bytes",
            hint="use a larger cache-disk or a smaller RAM buffer")
    one_log_write = max_record_bytes(ram_buffer // SECTOR, SECTOR)
    if log_bytes < one_log_write:
        raise UsageError(
            f"cache-disk log of {log_bytes} bytes is smaller than one log write "
            f"({one_log_write} bytes for a {ram_buffer}-byte RAM buffer with its summary sectors)",
            hint="use a larger cache-disk or a smaller RAM buffer")


class DCD(Destaging):
    """A Disk Caching Disk over `cache_disk` and `data_disk` (module doc). Build it with
    `create_dcd` / `assemble_dcd`, then `start(nursery)` before the first request."""

    kind = "DCD"

    def __init__(self, name: str, cache_disk: Any, data_disk: Any, superblock: metadata.Superblock) -> None:
        g = superblock.geometry
        self.name = name
        self.cache_disk = cache_disk
        self.data_disk = data_disk
        self.superblock = superblock
        self.ram_buffer = int(g["ram_buffer"])
        self.report = g["report"]
        self.idle_threshold = float(g["idle_threshold"])
        self.destage_segment = int(g["destage_segment"])
        self.large_write = int(g["large_write"])
        for key, value in watermarks_of(g).items():
            setattr(self, key, value)
        self.log = CacheDiskLog(cache_disk, 0, int(g["log_start"]), cache_disk.size, SECTOR,
                                log_id_of(superblock.array_uuid))
        self.store = LogStore([self.log], SECTOR, epoch=superblock.generation,
                              layout=log_layout(g), order=destage_order_of(g),
                              end_markers=end_markers_of(g))
        self.bypass = False
        self._ram_capacity = self.ram_buffer // SECTOR
        self._collecting: dict[int, bytes] = {}
        self._collecting_since: int | None = None
        self._inflight: list[LogWrite] = []  # the RAM buffer's contents being logged
        self._write_seq = 0
        self._log_wanted = sched.Event()
        self._log_nonempty = sched.Event()
        self._init_activity()

    # ------------------------------------------------------------------ lifecycle

    @property
    def size(self) -> int:
        return self.data_disk.size

    async def _record_failure(self, what: str) -> None:
        """A failed DCD (raidlab.engine.caches.activity) is recorded in its cache-disk's
        superblock (`FAILED_STATE`), the only one it has, when that disk still takes a
        write (the data disk failed): an assembly after it is refused with the reason."""
        self.superblock = dataclasses.replace(
            self.superblock, generation=self.superblock.generation + 1,
            arch_state={**self.superblock.arch_state, FAILED_STATE: what})
        await metadata.write_superblock(self.cache_disk, self.superblock)

    def start(self, nursery: sched.Nursery) -> None:
        """Start the log writer and the idle detector / destage task in `nursery`."""
        self._start_activity()
        if self.log.records:
            self._log_nonempty.set()
        self._start_background(nursery, self._log_writer, name=f"dcd-{self.name}-log-writer")
        self._start_background(nursery, self._idle_detector, name=f"dcd-{self.name}-destage")
        self._start_background(nursery, self._watermark_destager, name=f"dcd-{self.name}-destage-full")

    # ------------------------------------------------------------------ BlockTarget

    async def write(self, offset: int, data: bytes, *, fua: bool = False) -> None:
        check_aligned(offset, len(data), self.size)
        if not data:
            return
        with self._request("writes", "bytes_written", len(data)):
            if self.bypass or len(data) > self.large_write or len(data) > self.ram_buffer:
                await self._write_data_disk(offset, bytes(data), fua=fua)
            else:
                durable = fua or self.report == "after-complete"
                await self._write_ram_buffer(offset, bytes(data), durable=durable)

    async def read(self, offset: int, length: int) -> bytes:
        check_aligned(offset, length, self.size)
        if not length:
            return b""
        with self._request("reads", "bytes_read", length):
            return await self._read(offset, length)

    async def flush(self) -> None:
        """Return when every write acknowledged before the call survives a crash."""
        with self._request("flushes"):
            await self._wait_logged(self._write_seq)
            await self.data_disk.flush()

    async def trim(self, offset: int, length: int) -> None:
        # Passed to the data disk only: a cached copy of the range may still be read or
        # destaged, which the BlockTarget contract allows ("zeros or old data").
        check_aligned(offset, length, self.size)
        self.counters["trims"] += 1
        if length:
            await self.data_disk.trim(offset, length)

    def statistics(self) -> dict[str, Any]:
        c, sc = self.counters, self.store.counters
        return {
            "arch": "dcd",
            "name": self.name,
            "report": self.report,
            "bypass": self.bypass,
            "capacity": self.size,
            "ram_buffer_bytes": self.ram_buffer,
            "ram_used_bytes": self._ram_used() * SECTOR,
            "cache_disk_bytes": self.log.capacity,
            "cache_disk_used_bytes": self.log.used,
            "cache_disk_blocks_mapped": len(self.store.mapping),
            "log_records": len(self.log.records),
            **self._request_statistics(),
            "read_hits_ram_sectors": c["hits_ram"],
            "read_hits_cache_disk_sectors": c["hits_cache_disk"],
            "read_hits_data_disk_sectors": c["hits_data_disk"],
            "cache_disk_reads": c["cache_disk_reads"],
            "large_writes_to_data_disk": c["large_writes"],
            "log_writes": sc["log_writes"], "log_write_bytes": sc["log_write_bytes"],
            "destages": sc["destages"], "destaged_bytes": sc["destaged_bytes"],
            "destage_holes_dropped": sc["destage_holes_dropped"],
            "destages_suspended": sc["destages_suspended"],
            "destage_order": self.store.order, "log_wraps": self.log.wraps,
            "forced_destages": c["forced_destages"],
            "watermark_periods": c["watermark_periods"], "watermark_batches": c["watermark_batches"],
            "drain_destages": c["drain_destages"],
            "tombstones": sc["tombstones"], "tombstone_entries": sc["tombstone_entries"],
            "tombstone_area_compactions": sc["tombstone_area_compactions"],
            "idle_periods_found": c["idle_periods"],
            "waited_for_full_buffer": c["waited_for_full_buffer"],
            "recovered_blocks": sc["recovered_blocks"],
            "cache_disk": self.cache_disk.statistics(),
            "data_disk": self.data_disk.statistics(),
        }

    # ------------------------------------------------------------------ bypass (§3.1)

    async def set_bypass(self, on: bool) -> None:
        """Turn the DCD into a plain disk (after draining RAM buffer and cache-disk), or back."""
        if not on:
            self.bypass = False
            self._note("bypass_off")
            return
        while True:
            await self._wait_logged(self._write_seq)
            async with self.log.lock:
                while self.log.records:
                    await self.destage_lwfd(interruptible=False)
                if not self._collecting and not self._inflight and not self.log.records:
                    self.bypass = True
                    self._note("bypass_on")
                    return

    # ------------------------------------------------------------------ writing (§2.1)

    def _ram_used(self) -> int:
        return len(self._collecting) + sum(len(b.blocks) for b in self._inflight)

    async def _write_ram_buffer(self, offset: int, data: bytes, *, durable: bool) -> None:
        first = offset // SECTOR
        sectors = range(first, first + len(data) // SECTOR)

        def missing_room() -> int:
            new = sum(1 for s in sectors if s not in self._collecting)
            return self._ram_used() + new - self._ram_capacity

        if missing_room() > 0:
            self.counters["waited_for_full_buffer"] += 1
            while missing_room() > 0:
                self._check_alive()
                self._log_wanted.set()
                await self._changed.wait()
        self._write_seq += 1
        mine = self._write_seq
        if not self._collecting:
            self._collecting_since = mine
        for i, s in enumerate(sectors):
            self._collecting[s] = data[i * SECTOR:(i + 1) * SECTOR]
        self._log_wanted.set()
        if durable:
            await self._wait_logged(mine)

    def _oldest_unlogged(self) -> float:
        return oldest_unlogged(self._inflight, self._collecting_since if self._collecting else None)

    async def _wait_logged(self, write_seq: int) -> None:
        while self._oldest_unlogged() <= write_seq:
            self._check_alive()
            self._log_wanted.set()
            await self._changed.wait()

    async def _log_writer(self) -> None:
        """Write the whole RAM buffer as one log write whenever the cache-disk is free."""
        while True:
            if not self._collecting:
                self._log_wanted = sched.Event()
                await self._log_wanted.wait()
                continue
            async with self.log.lock:
                await self._make_room_locked(self.log, lambda: max_record_bytes(len(self._collecting), SECTOR),
                                             "forced_destage")
                if not self._collecting:
                    continue
                batch = LogWrite(self.store.next_seq(), self._collecting, self._collecting_since or 0)
                self._collecting, self._collecting_since = {}, None
                self._inflight.append(batch)
                self._note("log_write_start", blocks=len(batch.blocks))
                try:
                    await self.store.append(0, list(batch.blocks.items()), batch.seq)
                finally:
                    self._inflight.remove(batch)
                self._note("log_write_done", blocks=len(batch.blocks))
                self._log_nonempty.set()
            self._notify()

    async def _write_data_disk(self, offset: int, data: bytes, *, fua: bool) -> None:
        """A large write (or any write in bypass mode) straight to the data disk."""
        self.counters["large_writes"] += 1
        if self.bypass:
            await self.data_disk.write(offset, data, fua=fua)
            return
        first = offset // SECTOR
        sectors = range(first, first + len(data) // SECTOR)
        async with self.log.lock:
            # Room for the tombstone first: a forced destage writes older copies home, so it
            # must come before this write, never after it.
            await self._make_room_locked(self.log, lambda: 2 * SECTOR, "forced_destage")
            for s in sectors:  # older buffered copies; the in-flight list is empty under the lock
                self._collecting.pop(s, None)
            logged = any(s in self.store.mapping for s in sectors)
            # The tombstone must not be durable before the data it stands for.
            durable = fua or self.report == "after-complete" or logged
            await self.data_disk.write(offset, data, fua=durable)
            if logged:
                await self.store.forget(0, sectors)
        self._notify()

    # ------------------------------------------------------------------ reading (§2.2)

    def _resolve(self, sector: int) -> tuple[str, Any]:
        """Where the newest copy of `sector` is: ("ram", bytes), ("cache", Location) or
        ("data", None)."""
        hit = self._collecting.get(sector)
        if hit is not None:
            return "ram", hit
        best_seq, best = -1, None
        for batch in self._inflight:
            if sector in batch.blocks and batch.seq > best_seq:
                best_seq, best = batch.seq, ("ram", batch.blocks[sector])
        loc = self.store.mapping.get(sector)
        if loc is not None and loc.seq > best_seq:
            return "cache", loc
        return best if best is not None else ("data", None)

    async def _read(self, offset: int, length: int) -> bytes:
        """RAM, cache-disk and data-disk sectors of one request: runs contiguous on a disk
        in one I/O each, all at once, the cache-disk's runs pinned (CacheDiskLog.pinned)
        right after the lookup instead of holding the log lock."""
        first, n = offset // SECTOR, length // SECTOR
        plan = [self._resolve(first + i) for i in range(n)]
        out = bytearray(length)
        cache_runs = self._runs(first, plan, "cache")
        data_runs = self._runs(first, plan, "data")
        reads = [(self.cache_disk, run) for run in cache_runs] + [(self.data_disk, run) for run in data_runs]

        async def fill(target: Any, run: tuple[int, int, int]) -> None:
            i, count, where = run
            out[i * SECTOR:(i + count) * SECTOR] = await target.read(where, count * SECTOR)

        with self.log.pinned([(where, where + count * SECTOR) for _, count, where in cache_runs]):
            if len(reads) == 1:
                await fill(*reads[0])
            elif reads:
                async with sched.open_nursery() as nursery:
                    for target, run in reads:
                        nursery.start_soon(fill, target, run)
        for i, (kind, value) in enumerate(plan):
            if kind == "ram":
                out[i * SECTOR:(i + 1) * SECTOR] = value
        self.counters["cache_disk_reads"] += len(cache_runs)
        self.counters["hits_ram"] += sum(1 for k, _ in plan if k == "ram")
        self.counters["hits_cache_disk"] += sum(1 for k, _ in plan if k == "cache")
        self.counters["hits_data_disk"] += sum(1 for k, _ in plan if k == "data")
        return bytes(out)

    @staticmethod
    def _runs(first: int, plan: Sequence[tuple[str, Any]], level: str) -> list[tuple[int, int, int]]:
        """(index of first sector, count, target offset) of the runs of `plan` at `level`
        that are contiguous on their target."""
        runs: list[list[int]] = []
        for i, (kind, value) in enumerate(plan):
            if kind != level:
                continue
            where = value.offset if level == "cache" else (first + i) * SECTOR
            if runs and runs[-1][0] + runs[-1][1] == i and runs[-1][2] + runs[-1][1] * SECTOR == where:
                runs[-1][1] += 1
            else:
                runs.append([i, 1, where])
        return [(i, count, where) for i, count, where in runs]

    # ------------------------------------------------------------------ destaging (§2.3)

    async def destage_lwfd(self, *, interruptible: bool, segment_bytes: int | None = None) -> int | None:
        """Last-Write-First-Destage one destage segment (or `segment_bytes`: a watermark
        batch) from the CLP, with one flush of the data disk (caller holds the log lock);
        with destage_order=oldest, from the tail instead. Returns the bytes written home, or
        None when a new request suspended it."""
        start_requests = self._requests

        def suspended() -> bool:
            return interruptible and self._requests != start_requests

        async def write_home(live: list[tuple[int, bytes]]) -> bool:
            for sector, data in runs_of(live):
                if suspended():
                    return False
                await self.data_disk.write(sector * SECTOR, data)
            if suspended():
                return False
            self._home_written()
            await self.data_disk.flush()
            return True

        self._note("destage_start", clp=self.log.clp)
        done = await self.store.destage(0, segment_bytes or self.destage_segment, write_home)
        self._note("destage_done" if done is not None else "destage_suspended", bytes=done or 0, clp=self.log.clp)
        return done

    # the idle detector's hooks (raidlab.engine.caches.destage)

    async def _destage_wanted(self) -> bool:
        if self.bypass or not self.log.records:
            self._log_nonempty = sched.Event()
            if self.bypass or not self.log.records:
                await self._log_nonempty.wait()
            return False
        return True

    def _destage_next(self) -> CacheDiskLog | None:
        return self.log if self.log.records and not self.bypass else None

    async def _destage_top(self, log: CacheDiskLog, *, interruptible: bool,
                           segment_bytes: int | None = None) -> int | None:
        return await self.destage_lwfd(interruptible=interruptible, segment_bytes=segment_bytes)

    async def _wait_all_logged(self) -> None:
        await self._wait_logged(self._write_seq)

    def _level1_pending(self) -> bool:
        return bool(self._collecting or self._inflight)

    def _level1_write_bytes(self) -> int:
        return max_record_bytes(self._ram_capacity, SECTOR)  # a log write takes the whole buffer


async def create_dcd(
    name: str,
    cache_disk: Any,
    data_disk: Any,
    *,
    ram_buffer: int = DEFAULTS["ram_buffer"],
    report: str = DEFAULTS["report"],
    idle_threshold: float = DEFAULTS["idle_threshold"],
    destage_segment: int = DEFAULTS["destage_segment"],
    large_write: int = DEFAULTS["large_write"],
    high_watermark: float = DEFAULTS["high_watermark"],
    low_watermark: float = DEFAULTS["low_watermark"],
    destage_batch: int = DEFAULTS["destage_batch"],
    destage_order: str = ORDER_LWFD,
) -> DCD:
    """Make a new DCD: validate, write the superblock and an empty log on the cache-disk.

    The data disk is not touched (its contents are the volume). Returns the DCD, not yet
    started: call `dcd.start(nursery)` (its background tasks live in that nursery).
    """
    policy = dict(high_watermark=high_watermark, low_watermark=low_watermark, destage_batch=destage_batch,
                  destage_order=destage_order)
    check_dcd_config(cache_disk.size, ram_buffer=ram_buffer, report=report, idle_threshold=idle_threshold,
                     destage_segment=destage_segment, large_write=large_write, **policy)
    sb = metadata.Superblock(
        array_uuid=metadata.new_array_uuid(), name=name, arch="dcd", n_members=1, member_index=0,
        member_size=cache_disk.size, data_offset=DEFAULT_LOG_START,
        geometry=dict(arch="dcd", ram_buffer=ram_buffer, report=report, idle_threshold=idle_threshold,
                      destage_segment=destage_segment, large_write=large_write,
                      log_start=DEFAULT_LOG_START, block_size=SECTOR, data_disk_size=data_disk.size,
                      **policy, **LOG_GEOMETRY),
    )
    dcd = DCD(name, cache_disk, data_disk, sb)
    await dcd.store.format()
    await metadata.write_first_superblock(cache_disk, sb)
    return dcd


async def assemble_dcd(cache_disk: Any, data_disk: Any, *, report: str | None = None) -> DCD:
    """Bring a DCD back from its cache-disk: read the superblock, start a new epoch
    (generation + 1), scan the log and rebuild the mapping (§2.5). `report` may change
    the report mode. Returns the DCD, not yet started."""
    sb = await metadata.read_superblock(cache_disk)
    if sb is None or sb.arch != "dcd":
        raise metadata.MetadataError(f"{cache_disk.name} is not a DCD cache-disk (no dcd superblock)",
                                     hint="give the cache-disk first, then the data disk")
    if sb.arch_state.get(FAILED_STATE):
        raise metadata.MetadataError(
            f"DCD {sb.name} failed while it ran ({sb.arch_state[FAILED_STATE]}): the writes its cache held are lost",
            hint="its data disk holds what was destaged before; destroy the DCD")
    if sb.geometry.get("data_disk_size") != data_disk.size:
        raise metadata.MetadataError(
            f"data disk {data_disk.name} has {data_disk.size} bytes, DCD {sb.name} was made "
            f"with {sb.geometry.get('data_disk_size')}", hint="give the DCD's own data disk")
    geometry = dict(sb.geometry)
    if report is not None:
        # A DCD made before a setting existed has no key for it: the default it ran with.
        check_dcd_config(cache_disk.size, **{**{k: geometry.get(k, v) for k, v in DEFAULTS.items()}, "report": report},
                         destage_order=destage_order_of(geometry))
        geometry["report"] = report
    sb = dataclasses.replace(sb, generation=sb.generation + 1, state="active", geometry=geometry)
    await metadata.write_superblock(cache_disk, sb)
    dcd = DCD(sb.name, cache_disk, data_disk, sb)
    await dcd.store.recover()
    return dcd


class HostLink:
    """The host-to-DCD-controller link (§3.2: "the data transfer rate between the host and
    the DCD disk controller is 10 MB/s") in front of `dcd`, a BlockTarget. A write the RAM
    buffer takes costs its transfer over the link first (one transfer at a time): that is
    the whole response time of an immediate-report write in the paper (§4.1: "response
    times are approximately identical to data transfer times"; hplajw's 8 KB writes take
    0.8 ms). Other paths are timed by the drives, whose model already includes their own
    bus transfer, so the link is not charged twice. `mb_s` is the rate (the drive model's
    bus rate; the C2200A's is this same 10 MB/s); 0 means no link cost. `busy` sums the
    seconds the link spent transferring."""

    def __init__(self, dcd: DCD, mb_s: float) -> None:
        self.dcd = dcd
        self.mb_s = mb_s
        self.busy = 0.0
        self._lock = sched.Lock()
        self.read, self.flush, self.trim = dcd.read, dcd.flush, dcd.trim

    @property
    def size(self) -> int:
        return self.dcd.size

    @property
    def name(self) -> str:
        return self.dcd.name

    async def write(self, offset: int, data: bytes, *, fua: bool = False) -> None:
        dcd = self.dcd
        if self.mb_s and not dcd.bypass and len(data) <= dcd.large_write and len(data) <= dcd.ram_buffer:
            seconds = len(data) / (self.mb_s * 1e6)
            async with self._lock:
                await sched.sleep(seconds)
            self.busy += seconds
        await dcd.write(offset, data, fua=fua)
