"""VC-RAID, a virtual NVRAM cache for software RAID5 (He & Yang, §2-3), as a BlockTarget.

Structure (§2, Fig. 1): the engine's raid5 (the "data disk array") behind a RAM buffer
(default 4 MB) and one or more cache disks (default 200 MB in total).

* scd (Fig. 1a): one dedicated cache disk. mcd (Fig. 1b): cache partitions on several
  disks (the paper: one partition on each of two disks) forming one cache space; log writes
  go to them round-robin. The caller passes the cache disks as BlockTargets (a separate
  EmulatedDisk, or `disk.partition(...)` of array disks, which then share their arm).
* RAM buffer (§3.1, Fig. 3): slots of the block size (1 KB default, the ext2 default the
  paper keys on), a hash table keyed by block LBA, an LRU list and a free list. A write to
  a block that has a slot overwrites it in place.
* Level-1 destage (§3.3.3): RAM buffer -> cache disk, appended in log writes of up to 64 KB,
  whenever a cache disk is free and the buffer holds dirty blocks (§2: "when the RAM buffer
  is full or the cache disk is idle"), round-robin over the cache disks. A disk busy with a
  level-2 destage passes its turn to the next one that has room (§2: "to one of the cache
  disks" while there are idle ones), so with mcd one disk takes the log writes while the
  other destages. Once started it runs until no dirty block is left and is never
  interrupted; it has priority over level 2.
* Level-2 destage (§3.3.3): cache disk -> array, last-write-first-destage in segments of
  64 KB (configurable), the array computing parity, only when the system is idle (no
  request for `idle_threshold`) or a cache disk is full; a new request suspends it. It is
  DCD's destage: raidlab.engine.caches.destage decides when it runs, for both.
* Synchronous writes (§3.3.1, O_SYNC; here FUA, or a flush) are acknowledged only when
  their blocks are on a cache disk; a flush does not touch the array (see `flush`).
* Cache disk headers (§3.2): the summary sectors of raidlab.engine.caches.log (cache block
  -> array LBA). Crash recovery (§3.4): `assemble_vcraid` scans them and writes everything
  not yet destaged to the array *before* the volume is used, then starts with empty caches.

Where this departs from the paper, and why:

* "Last-write-first-destage according to the LRU list": within one cache disk the log is
  a stack and level 2 pops its top (the last write, DCD's LWFD); across cache disks (mcd)
  it takes the disk whose top segment is oldest, which is where the LRU list's tail is.
  `destage_order="oldest"` is an ablation, not the paper's: level 2 takes the oldest
  records of a circular log instead (raidlab.engine.caches.log, oldest-first), and across
  cache disks the disk whose oldest record is oldest.
* A level-1 log write takes dirty blocks in the order they became dirty (the LRU list's
  order of last writes), so the oldest dirty data reaches a disk first.
* The slot of a block is freed once its log write is done (the block is then IN_CACHE_DISK
  and is read from the cache disk); the paper does not keep clean copies in RAM either.
* Durability, a mode of the array (`durability`). Both acknowledge a write once it is in the
  RAM buffer (immediate report, §3.3.1), and a FUA write or a flush (the modern O_SYNC)
  only once its blocks' log write to a cache disk is done, as the paper's O_SYNC writes
  waited for the cache disk. They differ in that log write: "strict" writes it FUA, so it
  is on the cache disk's media whatever its write cache does; "paper" writes it as Linux
  2.0's driver did, a plain write, which a cache disk with its write cache on reports from
  the cache (the paper's IDE cache disk had it on, and 2.0 knew no FUA or flush). The
  paper's reliability argument (§3.4) assumes the RAM buffer survives most crashes; here
  RAM is lost in a crash, so a write is durable only after a flush or with FUA (strict),
  or only once the cache disk has written its cache back (paper). The markers and
  tombstones that keep the log's chain true after a crash are FUA in both.
* Requests smaller than a block (or not aligned to it) are read-modify-written, since the
  paper relies on the filesystem only ever issuing whole blocks.
* Configurations 1c/1d (per-disk cache disks, and RAM buffers) are built from this class
  by raidlab.engine.caches.perdisk (1c uses `route`: a block's level-1 write goes to the
  cache disk of its data disk); the mirrored cache disk (§3.4) is a BlockTarget in
  raidlab.engine.caches.mirror. create_vcraid/assemble_vcraid build scd and mcd.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from raidlab import sched
from raidlab.blockdev import SECTOR, check_aligned
from raidlab.engine import build, metadata
from raidlab.engine.caches.activity import FAILED_STATE
from raidlab.engine.caches.destage import (WATERMARK_DEFAULTS, Destaging, LogWrite, check_watermarks,
                                           oldest_unlogged, watermarks_of)
from raidlab.engine.caches.log import (DEFAULT_LOG_START, DESTAGE_ORDERS, LOG_GEOMETRY, ORDER_LWFD, ORDER_OLDEST,
                                       CacheDiskLog, LogStore, destage_order_of, end_markers_of, log_id_of, log_layout,
                                       max_record_bytes, reserved_bytes, runs_of)
from raidlab.errors import UsageError

KiB = 1024
MiB = 1024 * KiB
CONFIGS = ("scd", "mcd", "1c", "1d")
PER_DISK_CONFIGS = ("1c", "1d")  # built by raidlab.engine.caches.perdisk
DEFAULTS = dict(
    block_size=1 * KiB,
    ram_buffer=4 * MiB,
    level1_write=64 * KiB,
    destage_segment=64 * KiB,
    idle_threshold=0.050,
    durability="strict",
    destage_order=ORDER_LWFD,
    **WATERMARK_DEFAULTS,
)
DURABILITY_MODES = ("paper", "strict")
IN_RAM_BUFFER, IN_CACHE_DISK = "IN_RAM_BUFFER", "IN_CACHE_DISK"


@dataclasses.dataclass
class SlotEntry:
    """A hash-table entry (§3.1) of a block that has a RAM slot."""

    lba: int
    slot_no: int
    version: int = 0                 # write sequence number of its newest data
    dirty_since: int | None = None   # write sequence number when it last became dirty


def check_vcraid_config(config: str, cache_sizes: Sequence[int], *, block_size: int, ram_buffer: int,
                        level1_write: int, destage_segment: int, idle_threshold: float,
                        durability: str = DEFAULTS["durability"],
                        high_watermark: float = DEFAULTS["high_watermark"],
                        low_watermark: float = DEFAULTS["low_watermark"],
                        destage_batch: int = DEFAULTS["destage_batch"],
                        destage_order: str = DEFAULTS["destage_order"]) -> None:
    """Raise UsageError (one line) for a configuration that cannot work."""
    if durability not in DURABILITY_MODES:
        raise UsageError(f"unknown durability mode {durability!r}", hint=f"use one of: {', '.join(DURABILITY_MODES)}")
    if destage_order not in DESTAGE_ORDERS:
        raise UsageError(f"unknown destage order {destage_order!r}", hint=f"use one of: {', '.join(DESTAGE_ORDERS)}")
    check_watermarks(high_watermark, low_watermark, destage_batch, destage_segment)
    if config not in CONFIGS:
        raise UsageError(f"unknown VC-RAID configuration {config!r}", hint=f"use one of: {', '.join(CONFIGS)}")
    if config == "scd" and len(cache_sizes) != 1:
        raise UsageError(f"scd takes exactly one cache disk, {len(cache_sizes)} given")
    if config == "mcd" and len(cache_sizes) < 2:
        raise UsageError(f"mcd needs cache partitions on at least two disks, {len(cache_sizes)} given",
                         hint="use scd for one cache disk")
    if config in PER_DISK_CONFIGS and len(cache_sizes) < 3:
        raise UsageError(f"{config} needs a cache disk for each of at least 3 raid5 disks, {len(cache_sizes)} given")
    if block_size < SECTOR or block_size > 64 * KiB or block_size & (block_size - 1):
        raise UsageError(f"block size {block_size} is not one a filesystem uses",
                         hint="use a power of two from 512 to 65536 (ext4: 1024, 2048 or 4096)")
    if ram_buffer <= 0 or ram_buffer % block_size:
        raise UsageError(f"RAM buffer of {ram_buffer} bytes is not a positive multiple of the block size {block_size}")
    if level1_write < block_size or destage_segment < block_size:
        raise UsageError("level-1 write size and destage segment must hold at least one block")
    if idle_threshold <= 0:
        raise UsageError(f"idle threshold must be positive, not {idle_threshold}")
    logs = [size - DEFAULT_LOG_START for size in cache_sizes]
    reserved = reserved_bytes(logs, block_size, order=destage_order)
    logs = [size - reserved for size in logs]
    if ram_buffer > sum(logs):
        raise UsageError(f"RAM buffer of {ram_buffer} bytes is larger than the cache disks ({max(sum(logs), 0)} bytes of log)",
                         hint="use larger cache disks or a smaller RAM buffer")
    one_log_write = max_record_bytes(level1_write // block_size, block_size)
    if min(logs) < one_log_write:
        raise UsageError(f"cache disk log of {min(logs)} bytes is smaller than one log write ({one_log_write} bytes)",
                         hint="use larger cache disks")


class VCRAID(Destaging):
    """VC-RAID over a raid5 `array` and `cache_disks` (module doc). Build it with
    `create_vcraid` / `assemble_vcraid`, then `start(nursery)`."""

    kind = "VC-RAID"

    def __init__(self, name: str, array: Any, cache_disks: Sequence[Any], superblock: metadata.Superblock,
                 *, route: Any = None) -> None:
        g = superblock.geometry
        # route(lba) -> cache disk index (configuration 1c: a cache disk caches only the data
        # disk below it); None: level-1 writes go round-robin over the cache disks.
        self.route = route
        self.name = name
        self.array = array
        self.cache_disks = list(cache_disks)
        self.superblock = superblock
        self.config = g["config"]
        self.block_size = int(g["block_size"])
        self.ram_buffer = int(g["ram_buffer"])
        self.level1_write = int(g["level1_write"])
        self.destage_segment = int(g["destage_segment"])
        self.idle_threshold = float(g["idle_threshold"])
        self.durability = g.get("durability", DEFAULTS["durability"])
        for key, value in watermarks_of(g).items():
            setattr(self, key, value)
        log_id = log_id_of(superblock.array_uuid)
        self.logs = [CacheDiskLog(d, i, DEFAULT_LOG_START, d.size, self.block_size, log_id)
                     for i, d in enumerate(self.cache_disks)]
        self.store = LogStore(self.logs, self.block_size, epoch=superblock.generation,
                              layout=log_layout(g), order=destage_order_of(g),
                              end_markers=end_markers_of(g))
        for log in self.logs:  # module doc: durability
            log.data_fua = self.durability == "strict"
        # RAM buffer (§3.1)
        self.n_slots = self.ram_buffer // self.block_size
        self.data_buffer = bytearray(self.ram_buffer)
        self.free_list: list[int] = list(range(self.n_slots - 1, -1, -1))
        self.hash_table: dict[int, SlotEntry] = {}
        self.lru_list: collections.OrderedDict[int, None] = collections.OrderedDict()
        self._dirty: collections.OrderedDict[int, None] = collections.OrderedDict()  # not yet in a log write
        self._inflight: list[LogWrite] = []
        # Blocks in a level-1 write now. A block is in at most one at a time: written again
        # meanwhile, it waits (dirty) for that write to finish, so the log writes of one block
        # finish in sequence order even across cache disks (mcd), and a newer copy can never
        # be destaged home while an older one is still being logged.
        self._inflight_lbas: set[int] = set()
        self._turn = 0
        self._level2_lock = sched.Lock()
        self._destaging: set[int] = set()  # cache disks in a level-2 destage now
        self._write_seq = 0
        self._init_activity()
        self.keeper: build.MetadataKeeper | None = None  # the raid5's superblock keeper

    # ------------------------------------------------------------------ lifecycle

    @property
    def size(self) -> int:
        return self.array.size

    async def _record_failure(self, what: str) -> None:
        """A failed VC-RAID (raidlab.engine.caches.activity) is recorded in its raid5
        members' superblocks (`FAILED_STATE`): the writes its caches held are lost, and an
        assembly after it is refused with the reason instead of serving stale blocks."""
        if self.keeper is not None:
            await self.keeper.record_arch_state(**{FAILED_STATE: what})

    def start(self, nursery: sched.Nursery) -> None:
        """Start the level-1 writers (one per cache disk) and the level-2 idle detector."""
        self._start_activity()
        for log in self.logs:
            self._start_background(nursery, self._level1_writer, log, name=f"vcraid-{self.name}-level1-{log.index}")
        self._start_background(nursery, self._idle_detector, name=f"vcraid-{self.name}-level2")
        self._start_background(nursery, self._watermark_destager, name=f"vcraid-{self.name}-level2-full")

    # ------------------------------------------------------------------ BlockTarget

    async def write(self, offset: int, data: bytes, *, fua: bool = False) -> None:
        check_aligned(offset, len(data), self.size)
        if not data:
            return
        with self._request("writes", "bytes_written", len(data)):
            bs = self.block_size
            first, last = offset // bs, (offset + len(data) - 1) // bs
            for lba in range(first, last + 1):
                lo, hi = max(offset, lba * bs), min(offset + len(data), (lba + 1) * bs)
                piece = data[lo - offset:hi - offset]
                if hi - lo < bs:  # part of a block: read-modify-write
                    self.counters["partial_block_writes"] += 1
                    block = bytearray(await self._read_blocks(lba, 1))
                    block[lo - lba * bs:hi - lba * bs] = piece
                    piece = bytes(block)
                await self._put_block(lba, piece)
            if fua:
                self.counters["sync_writes"] += 1
                await self._wait_on_cache_disk(self._write_seq)

    async def read(self, offset: int, length: int) -> bytes:
        check_aligned(offset, length, self.size)
        if not length:
            return b""
        with self._request("reads", "bytes_read", length):
            bs = self.block_size
            first, last = offset // bs, (offset + length - 1) // bs
            blocks = await self._read_blocks(first, last - first + 1)
            start = offset - first * bs
            return blocks[start:start + length]

    async def flush(self) -> None:
        """Every write acknowledged before the call is on a cache disk (or the array).

        The array is not flushed: blocks reach it only by level-2 destage, which flushes it
        before their log entries are dropped, so what it holds unflushed is also in a log,
        whose writes are FUA. Flushing it here would cost the array's members a flush
        (host fdatasyncs, and a wait behind their queued I/O) for every flush of the volume.
        """
        with self._request("flushes"):
            await self._wait_on_cache_disk(self._write_seq)

    async def trim(self, offset: int, length: int) -> None:
        check_aligned(offset, length, self.size)
        self.counters["trims"] += 1  # raid5 ignores trims (parity); so does the cache

    def statistics(self) -> dict[str, Any]:
        c, sc = self.counters, self.store.counters
        used_slots = self.n_slots - len(self.free_list)
        return {
            "arch": "vcraid",
            "name": self.name,
            "config": self.config,
            "capacity": self.size,
            "block_size": self.block_size,
            "ram_buffer_bytes": self.ram_buffer,
            "ram_used_bytes": used_slots * self.block_size,
            "ram_dirty_blocks": len(self._dirty),
            "cache_disk_bytes": self.store.capacity,
            "cache_disk_used_bytes": self.store.used,
            "cache_disk_used_per_disk": [log.used for log in self.logs],
            "cache_disk_blocks_mapped": len(self.store.mapping),
            **self._request_statistics(),
            "sync_writes": c["sync_writes"], "partial_block_writes": c["partial_block_writes"],
            "read_hits_ram_blocks": c["hits_ram"],
            "read_hits_cache_disk_blocks": c["hits_cache_disk"],
            "read_hits_array_blocks": c["hits_array"],
            "cache_disk_reads": c["cache_disk_reads"],
            "level1_destages": sc["log_writes"], "level1_bytes": sc["log_write_bytes"],
            "level1_per_disk": [c[f"level1_disk{i}"] for i in range(len(self.logs))],
            "level2_destages": sc["destages"], "level2_bytes": sc["destaged_bytes"],
            "level2_holes_dropped": sc["destage_holes_dropped"],
            "level2_suspended": sc["destages_suspended"],
            "level2_forced": c["forced_destages"],
            "level2_watermark_periods": c["watermark_periods"],
            "level2_watermark_batches": c["watermark_batches"],
            "level2_batches_together": sc["destages_together"],
            "level2_drain": c["drain_destages"],
            "durability": self.durability,
            "destage_order": self.store.order, "log_wraps": sum(log.wraps for log in self.logs),
            "tombstones": sc["tombstones"], "tombstone_entries": sc["tombstone_entries"],
            "tombstone_area_compactions": sc["tombstone_area_compactions"],
            "idle_periods_found": c["idle_periods"],
            "waited_for_full_buffer": c["waited_for_full_buffer"],
            "recovered_blocks": c["recovered_blocks"],
            "cache_disks": [d.statistics() for d in self.cache_disks],
            "array": self.array.statistics(),
        }

    # ------------------------------------------------------------------ RAM buffer (§3.1, §3.3.1)

    async def _put_block(self, lba: int, block: bytes) -> None:
        entry = self.hash_table.get(lba)
        if entry is None:
            if not self.free_list:
                self.counters["waited_for_full_buffer"] += 1
                # Wake the level-1 writers once, then wait. (Notifying on every wake-up made
                # two waiters wake each other for ever: a busy loop under the live clock and
                # a virtual clock that never advanced.)
                self._notify()
                while not self.free_list:
                    self._check_alive()
                    await self._changed.wait()
            entry = self.hash_table.get(lba)  # another writer may have made it meanwhile
            if entry is None:
                entry = SlotEntry(lba, self.free_list.pop())
                self.hash_table[lba] = entry
        bs = self.block_size
        self.data_buffer[entry.slot_no * bs:(entry.slot_no + 1) * bs] = block
        self._write_seq += 1
        # The write sequence number, not a per-entry counter: with mcd two level-1 writes of
        # one block can be in flight on different cache disks, and the slot may be freed and
        # taken again meanwhile; a restarted counter let the older log write's completion
        # match the new entry and free its slot while its newest data was still in flight
        # (reads then returned an older copy from the cache disk).
        entry.version = self._write_seq
        if lba not in self._dirty:
            entry.dirty_since = self._write_seq
            self._dirty[lba] = None
        self.lru_list[lba] = None
        self.lru_list.move_to_end(lba)
        self._notify()

    def _oldest_unlogged(self) -> float:
        buffered = None
        if self._dirty:
            buffered = self.hash_table[next(iter(self._dirty))].dirty_since or 0
        return oldest_unlogged(self._inflight, buffered)

    async def _wait_on_cache_disk(self, write_seq: int) -> None:
        if self._oldest_unlogged() <= write_seq:
            self._notify()  # once: see _put_block
        while self._oldest_unlogged() <= write_seq:
            self._check_alive()
            await self._changed.wait()

    # ------------------------------------------------------------------ reads (§3.3.2)

    async def _read_blocks(self, first: int, count: int) -> bytes:
        """Blocks from RAM, the cache disks and the array. Runs of blocks consecutive in
        one log are read in one I/O, runs on different disks at once, and no log lock is
        held: each run is pinned (CacheDiskLog.pinned) right after the lookup."""
        bs = self.block_size
        out = bytearray(count * bs)
        plan = [self._where(first + i) for i in range(count)]
        cache_runs: list[list[Any]] = []  # [index of first block, count, Location of the first]
        data_runs: list[list[int]] = []   # [index of first block, count]
        for i, (kind, value) in enumerate(plan):
            if kind == "ram":
                out[i * bs:(i + 1) * bs] = value
            elif kind == "cache":
                run = cache_runs[-1] if cache_runs else None
                if (run is not None and run[0] + run[1] == i and run[2].log == value.log
                        and run[2].offset + run[1] * bs == value.offset):
                    run[1] += 1
                else:
                    cache_runs.append([i, 1, value])
            elif data_runs and data_runs[-1][0] + data_runs[-1][1] == i:
                data_runs[-1][1] += 1
            else:
                data_runs.append([i, 1])

        async def from_cache(i: int, n: int, loc: Any) -> None:
            out[i * bs:(i + n) * bs] = await self.logs[loc.log].target.read(loc.offset, n * bs)

        async def from_array(i: int, n: int) -> None:
            out[i * bs:(i + n) * bs] = await self.array.read((first + i) * bs, n * bs)

        with contextlib.ExitStack() as pins:
            for log in self.logs:
                ranges = [(loc.offset, loc.offset + n * bs) for _, n, loc in cache_runs if loc.log == log.index]
                if ranges:
                    pins.enter_context(log.pinned(ranges))
            if len(cache_runs) + len(data_runs) == 1:
                if cache_runs:
                    await from_cache(*cache_runs[0])
                else:
                    await from_array(*data_runs[0])
            elif cache_runs or data_runs:
                async with sched.open_nursery() as nursery:
                    for run in cache_runs:
                        nursery.start_soon(from_cache, *run)
                    for run in data_runs:
                        nursery.start_soon(from_array, *run)
        self.counters["cache_disk_reads"] += len(cache_runs)
        self.counters["hits_ram"] += sum(1 for k, _ in plan if k == "ram")
        self.counters["hits_cache_disk"] += sum(1 for k, _ in plan if k == "cache")
        self.counters["hits_array"] += sum(1 for k, _ in plan if k == "array")
        return bytes(out)

    def _where(self, lba: int) -> tuple[str, Any]:
        entry = self.hash_table.get(lba)
        if entry is not None:
            bs = self.block_size
            return "ram", bytes(self.data_buffer[entry.slot_no * bs:(entry.slot_no + 1) * bs])
        loc = self.store.mapping.get(lba)
        if loc is not None:
            return "cache", loc
        return "array", None

    # ------------------------------------------------------------------ level-1 destage

    async def _level1_writer(self, log: CacheDiskLog) -> None:
        """Log writes of up to `level1_write` bytes to this cache disk, in its round-robin
        turn, whenever it is free and dirty blocks wait (uninterruptible)."""
        n_logs = len(self.logs)
        per_write = self.level1_write // self.block_size
        one_write = max_record_bytes(per_write, self.block_size)

        def eligible(lba: int) -> bool:
            return lba not in self._inflight_lbas and (self.route is None or self.route(lba) == log.index)

        def my_turn() -> bool:
            if self.route is None and self._free_turn() != log.index:
                return False
            return any(eligible(lba) for lba in self._dirty)

        while True:
            if not my_turn():
                await self._changed.wait()
                continue
            async with log.lock:
                if not my_turn():
                    continue
                await self._make_room_locked(log, lambda: one_write, "level2_forced", disk=log.index)
                if not my_turn():
                    continue
                self._turn = (log.index + 1) % n_logs
                lbas = []
                for lba in self._dirty:
                    if not eligible(lba):
                        continue
                    lbas.append(lba)
                    if len(lbas) == per_write:
                        break
                bs = self.block_size
                blocks, versions, since = {}, {}, []
                for lba in lbas:
                    del self._dirty[lba]
                    entry = self.hash_table[lba]
                    blocks[lba] = bytes(self.data_buffer[entry.slot_no * bs:(entry.slot_no + 1) * bs])
                    versions[lba] = entry.version
                    since.append(entry.dirty_since or 0)
                batch = LogWrite(self.store.next_seq(), blocks, min(since), versions)
                self._inflight.append(batch)
                self._inflight_lbas.update(blocks)
                self._notify()  # the next cache disk may start its log write now
                self._note("level1_start", disk=log.index, blocks=len(blocks))
                try:
                    await self.store.append(log.index, list(blocks.items()), batch.seq)
                finally:
                    self._inflight.remove(batch)
                    self._inflight_lbas.difference_update(blocks)
                self.counters[f"level1_disk{log.index}"] += 1
                for lba, version in versions.items():
                    entry = self.hash_table.get(lba)
                    if entry is not None and entry.version == version and lba not in self._dirty:
                        # Now IN_CACHE_DISK: the slot goes back to the free list.
                        del self.hash_table[lba]
                        self.free_list.append(entry.slot_no)
                        self.lru_list.pop(lba, None)
                self._note("level1_done", disk=log.index, blocks=len(blocks))
            self._notify()

    def _free_turn(self) -> int:
        """The cache disk whose turn it is to take the next log write: the round-robin turn,
        passed on to the next disk when it is busy with a level-2 destage and the next one
        has room to spare (§2: the RAM buffer goes "to one of the cache disks" when there
        are idle ones). A disk with room for only a few more log writes is not given the
        turn: there a log write would have to destage in the write path (a forced destage,
        behind the other disk's level 2), so the turn waits for the busy disk instead."""
        if self._turn not in self._destaging:
            return self._turn
        spare = self._level1_room()
        n_logs = len(self.logs)
        for step in range(1, n_logs):
            index = (self._turn + step) % n_logs
            if index not in self._destaging and self.logs[index].free >= spare:
                return index
        return self._turn

    # ------------------------------------------------------------------ level-2 destage

    async def destage_level2(self, logs: Sequence[CacheDiskLog], *, interruptible: bool,
                             segment_bytes: int | None = None) -> int | None:
        """LWFD one segment (or `segment_bytes`: a watermark batch) of each of `logs` to the
        array, their live blocks in one parallel pass with one array flush (the caller holds
        their locks); with destage_order=oldest, the oldest segment instead."""
        start_requests = self._requests
        bs = self.block_size

        async def write_home(live: list[tuple[int, bytes]]) -> bool:
            if interruptible and self._requests != start_requests:
                return False
            async with sched.open_nursery() as nursery:  # "written to the disk array in parallel"
                for lba, data in runs_of(live):
                    nursery.start_soon(self.array.write, lba * bs, data)
            self._home_written()
            await self.array.flush()
            return True

        # One level-2 destage at a time across all cache disks: with mcd, a forced destage
        # of a newer copy on one disk must not race an idle destage of an older copy on
        # another to the same array block (the older one could land last).
        indices = [log.index for log in logs]
        self._destaging.update(indices)
        if len(self.logs) > 1:
            self._notify()  # a log write waiting for this disk's turn may go to another disk
        try:
            async with self._level2_lock:
                self._note("level2_start", disk=indices[0], disks=indices)
                done = await self.store.destage_together(indices, segment_bytes or self.destage_segment,
                                                         write_home)
        finally:
            self._destaging.difference_update(indices)
        self._note("level2_done" if done is not None else "level2_suspended",
                   disk=indices[0], disks=indices, bytes=done or 0)
        return done

    def _level2_candidate(self) -> CacheDiskLog | None:
        """The cache disk whose top segment is oldest (the LRU list's end); with
        destage_order=oldest, the one whose tail record is oldest."""
        candidates = [log for log in self.logs if log.records]
        if not candidates:
            return None
        if self.store.order == ORDER_OLDEST:
            return min(candidates, key=lambda log: log.records[0].seq)
        return min(candidates, key=lambda log: log.records[-1].seq)

    # the idle detector's hooks (raidlab.engine.caches.destage); level 1 has priority

    async def _destage_wanted(self) -> bool:
        if self._level2_candidate() is None or self._dirty or self._inflight:
            await self._changed.wait()
            return False
        return True

    def _destage_next(self) -> CacheDiskLog | None:
        return None if self._dirty else self._level2_candidate()

    async def _destage_top(self, log: CacheDiskLog, *, interruptible: bool,
                           segment_bytes: int | None = None) -> int | None:
        return await self.destage_level2([log], interruptible=interruptible, segment_bytes=segment_bytes)

    async def _destage_tops(self, logs: list[CacheDiskLog], *, segment_bytes: int) -> int | None:
        return await self.destage_level2(logs, interruptible=False, segment_bytes=segment_bytes)

    def _watermark_companions(self) -> list[CacheDiskLog]:
        """Round-robin level 1 (scd, mcd) fills the cache disks in turn, and a log holds
        every other piece of what was written: all of them go into the period. With a route
        (1c: a cache disk per data disk) each log fills on its own and waits for its mark."""
        return list(self.logs) if self.route is None else []

    async def _wait_all_logged(self) -> None:
        await self._wait_on_cache_disk(self._write_seq)

    def _level1_pending(self) -> bool:
        return bool(self._dirty or self._inflight)

    def _level1_write_bytes(self) -> int:
        return max_record_bytes(self.level1_write // self.block_size, self.block_size)


def _cache_superblocks(base: metadata.Superblock, cache_disks: Sequence[Any]) -> list[metadata.Superblock]:
    return [base.for_member(i) for i in range(len(cache_disks))]


async def create_vcraid(
    name: str,
    array_members: Sequence[Any],
    cache_disks: Sequence[Any],
    *,
    config: str = "scd",
    block_size: int = DEFAULTS["block_size"],
    ram_buffer: int = DEFAULTS["ram_buffer"],
    level1_write: int = DEFAULTS["level1_write"],
    destage_segment: int = DEFAULTS["destage_segment"],
    idle_threshold: float = DEFAULTS["idle_threshold"],
    chunk: int = 64 * KiB,
    durability: str = DEFAULTS["durability"],
    high_watermark: float = DEFAULTS["high_watermark"],
    low_watermark: float = DEFAULTS["low_watermark"],
    destage_batch: int = DEFAULTS["destage_batch"],
    destage_order: str = DEFAULTS["destage_order"],
) -> VCRAID:
    """Make a new VC-RAID: a raid5 over `array_members` (build.create_array, superblocks on
    each), and a superblock plus an empty log on each cache disk. Not yet started."""
    if config in PER_DISK_CONFIGS:
        raise UsageError(f"VC-RAID {config} is built by raidlab.engine.caches.perdisk.create_perdisk")
    policy = dict(durability=durability, high_watermark=high_watermark, low_watermark=low_watermark,
                  destage_batch=destage_batch, destage_order=destage_order)
    check_vcraid_config(config, [d.size for d in cache_disks], block_size=block_size, ram_buffer=ram_buffer,
                        level1_write=level1_write, destage_segment=destage_segment,
                        idle_threshold=idle_threshold, **policy)
    array, keeper = await build.create_array(name, "raid5", array_members, chunk=chunk)
    if array.size % block_size:
        raise UsageError(f"array capacity {array.size} is not a multiple of the block size {block_size}")
    base = metadata.Superblock(
        array_uuid=metadata.new_array_uuid(), name=name, arch="vcraid", n_members=len(cache_disks),
        member_index=0, member_size=cache_disks[0].size, data_offset=DEFAULT_LOG_START,
        geometry=dict(arch="vcraid", config=config, block_size=block_size, ram_buffer=ram_buffer,
                      level1_write=level1_write, destage_segment=destage_segment,
                      idle_threshold=idle_threshold, raid5_uuid=keeper.superblock.array_uuid,
                      **policy, **LOG_GEOMETRY),
    )
    vc = VCRAID(name, array, cache_disks, base)
    await vc.store.format()
    for disk, sb in zip(cache_disks, _cache_superblocks(base, cache_disks)):
        await metadata.write_first_superblock(disk, sb)
    vc.keeper = keeper
    return vc


async def assemble_vcraid(array_members: Sequence[Any], cache_disks: Sequence[Any], *,
                          assembled: Callable[[Any, Any], None] = lambda array, keeper: None) -> VCRAID:
    """Bring a VC-RAID back (§3.4): assemble the raid5 from its superblocks (`assembled` sees
    it first, and may refuse it), check the cache disks' superblocks, scan the cache disk
    headers, write every block not yet destaged to the array, flush it, and start with empty
    caches. Not yet started."""
    array, keeper = await build.assemble_array(array_members)
    assembled(array, keeper)
    failed = keeper.superblock.arch_state.get(FAILED_STATE)
    if failed:
        raise metadata.MetadataError(
            f"VC-RAID {keeper.superblock.name} failed while it ran ({failed}): the writes its caches held "
            f"are lost", hint="its raid5 members hold what was destaged before; destroy the array")
    found = []
    for disk in cache_disks:
        found.append(await metadata.read_superblock(disk))
    authority = metadata.check_assembly(found, labels=[getattr(d, "name", str(i)) for i, d in enumerate(cache_disks)])
    if authority.arch != "vcraid" or authority.geometry.get("raid5_uuid") != keeper.superblock.array_uuid:
        raise metadata.MetadataError(f"the cache disks do not belong to the raid5 of {keeper.superblock.name}",
                                     hint="give the array members and the cache disks of one VC-RAID")
    vc = await recover_cache(authority, array, cache_disks)
    vc.keeper = keeper
    return vc


async def recover_cache(authority: metadata.Superblock, backing: Any, cache_disks: Sequence[Any], *,
                        first_index: int = 0, name: str | None = None, route: Any = None) -> VCRAID:
    """§3.4 recovery of one VC-RAID cache over `backing` (the raid5, or one data disk in the
    per-disk configurations): scan the cache disk headers of the old epoch, write every
    block not yet destaged to `backing`, flush it, and start a new epoch with empty caches
    (superblocks for_member(first_index + i) on the cache disks). Not yet started."""
    base = dataclasses.replace(authority, generation=authority.generation + 1, state="active")
    name = name or authority.name
    old = VCRAID(name, backing, cache_disks, authority, route=route)
    await old.store.recover()
    bs = old.block_size
    pending = []
    for lba, loc in sorted(old.store.mapping.items()):
        pending.append((lba, await old.store.read_block(loc)))
    for lba, data in runs_of(pending):
        await backing.write(lba * bs, data)
    await backing.flush()
    vc = VCRAID(name, backing, cache_disks, base, route=route)
    await vc.store.format()
    for i, disk in enumerate(cache_disks):
        await metadata.write_superblock(disk, base.for_member(first_index + i))
    vc.counters["recovered_blocks"] = len(pending)
    return vc
