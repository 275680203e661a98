"""RAID-x background image writing from a persistent buffer of pending images.

Paper (Hwang, Jin & Ho, RAID-x, §3.2 and §3.5): "the images can be copied and updated at the
background, thus reducing the access latency"; "for delayed image writing, we maintain a
buffer file to record all delayed blocks. When all delayed blocks are written to the disks,
this buffer is cleared. If a disk failure occurs during delayed image writing, the lost data
blocks are recovered from this buffer."

How raidlab builds that buffer, and why:

* Where the buffer lives. A pending image must survive the failure of the disk holding its
  data copy (that is the case the paper names), so it cannot sit on the data disk nor only
  in RAM. It sits on the *image disk itself*: every member reserves a log region in its
  metadata area ([LOG_START, data_offset), see raidlab.engine.metadata), and the pending
  image of an extent is appended to the log of the disk that will hold the image. The image
  disk is by construction never the data disk (raidx.py), so any single failure leaves
  either the data copy or the buffered image. The background writer writes the image home
  from the entry it keeps in memory, so the log is read only at recovery; on one disk, log
  and home are a short seek apart. Over a cluster the home write goes from the writing
  node to the image disk's node like any member write (NBD has no copy within a disk), so
  a logged image crosses the network twice: the price of a log that survives a crash.
* Order of a write (the invariant the recovery relies on): (1) append the image, with a
  header (array uuid, sequence number, home offset, logical offset, length, CRCs), to the
  image disk's log; (2) only then write the data copy; (3) acknowledge. So at any instant,
  a range whose data copy differs from its image home has a valid log entry. Departure
  from "as fast as possible": steps (1) and (2) are sequential, not concurrent, so a crash
  between them can never leave a data copy newer than both its image and its log entry
  (the RAID1 "resync after crash" problem, which md solves with a write-intent bitmap).
* Or in memory (the layout's option image_buffer = "memory", an ablation): the same ring
  accounting, the layout's `image_memory` per image disk, with no log write; an entry is "logged"
  at once, the write is acknowledged after its data copy, and the background writer sends
  the image home from the memory of the node whose write it was (the entry's request
  origin, raidlab.engine.origin). A failed disk is still covered (the image waits in
  memory, reads lay it over), a crash is not: nothing is written before the data copy, so
  assembly has nothing to replay, and an image home may be older than its data copy until
  a check repairs it.
* Durability. A log entry is written with the request's FUA flag, like the data copy: the
  block-device contract only promises what was acknowledged with FUA or followed by a
  flush, and Array.flush flushes every member, logs included. (Forcing FUA on every entry
  would make every RAID-x write synchronous on the `none` disks' image files.)
* Clearing. A background writer per disk (started in the array's nursery) waits `delay`
  seconds of trio time after the disk's first pending entry (images are "written into disk
  ... in a delayed time at the background"), then writes every pending entry of its disk
  home (concurrently when their ranges are disjoint, contiguous images of one writing node
  joined into one write up to the layout's `image_merge`, §3.7's pipelined image writes;
  in log order when ranges overlap), flushes the
  disk once, and persists "cleared up to
  sequence S" in a two-slot tail record (FUA, alternating slots like the superblock).
  Entries at or below S are stale; the ring space they use is reused. One flush per batch
  rather than one FUA write per image: on the `none` disks' files each FUA is an
  fdatasync, and a writer paying one per image cannot keep up with the writes that fill
  the log (`raidlab bench engine --arch raidx` shows it).
* Reads. The data copy is always current (step 2), so a healthy read never looks at the
  buffer. With a member failed, a read may be served from image homes; the pending
  entries overlapping it (snapshot taken before the member reads are issued) are laid
  over the result, newest last. A write whose data disk is failed still logs its image:
  the log entry is then the only copy until the background writes it home.
* Crash recovery (assemble): every healthy member's log is scanned; valid entries newer
  than the tail record are replayed in sequence order: the image home is rewritten from the
  data copy when the data disk is healthy (so both copies agree even for a write that was
  never acknowledged), from the entry's bytes when it is failed. Then the tails advance.
* A rebuild or scrub first drains the buffer and switches it to write-through (images
  written home synchronously) for its duration, so it reads complete image homes.
* An image extent larger than half the ring, or a ring too small to use (a tiny metadata
  area), is written home synchronously after draining the log (write-through), so order
  among writes of one range is always log order.
* Failure of an image disk: its pending entries are dropped (their data copies are
  current); the layout then reads the data copies only.

Everything is async code that never blocks and takes time from sched.current_time(), so
the buffer runs unchanged under the virtual clock (tests/unit/test_raidx_buffer.py).
"""

from __future__ import annotations

import dataclasses
import struct
import uuid as uuid_mod
import zlib
from collections.abc import Sequence
from typing import Any

from raidlab import sched
from raidlab.blockdev import SECTOR
from raidlab.engine.origin import ORIGIN

# The log region starts after the superblock slots and a little room for other state.
LOG_START = 16 * 1024
# Background writer: wait this long after the first pending entry before writing images.
DEFAULT_DELAY = 0.005

ENTRY_MAGIC = b"RXIMAGE\x01"
TAIL_MAGIC = b"RXTAIL\x00\x01"
# magic, array uuid, seq, home offset, logical offset, length, data crc, header crc
ENTRY = struct.Struct("<8s16sQQQII I")
# magic, array uuid, generation, cleared-up-to seq, crc
TAIL = struct.Struct("<8s16sQQI")
TAIL_BYTES = 2 * SECTOR  # two alternating tail slots


@dataclasses.dataclass
class PendingImage:
    """One buffered image: `data` belongs at `home` on member `disk`."""

    seq: int
    disk: int
    home: int
    logical: int
    data: bytes
    log_offset: int  # where its header sits in the disk's log (member byte offset)
    logged: bool = False  # its log append has completed (only then may its space be reused)
    origin: int | None = None  # the node whose write it belongs to (raidlab.engine.origin)

    @property
    def length(self) -> int:
        return len(self.data)

    @property
    def log_bytes(self) -> int:
        return SECTOR + len(self.data)


def encode_entry(array_uuid: bytes, entry: PendingImage) -> bytes:
    """Header sector + data: what is appended to the log."""
    fields = (ENTRY_MAGIC, array_uuid, entry.seq, entry.home, entry.logical, entry.length,
              zlib.crc32(entry.data))
    head = ENTRY.pack(*fields, 0)
    crc = zlib.crc32(head[: ENTRY.size - 4])
    head = ENTRY.pack(*fields, crc)
    return head + bytes(SECTOR - len(head)) + entry.data


def decode_header(array_uuid: bytes, raw: bytes) -> tuple[int, int, int, int, int] | None:
    """(seq, home, logical, length, data crc) of a valid header sector of this array, else None."""
    if len(raw) < ENTRY.size:
        return None
    magic, owner, seq, home, logical, length, dcrc, hcrc = ENTRY.unpack_from(raw)
    if magic != ENTRY_MAGIC or owner != array_uuid:
        return None
    if zlib.crc32(raw[: ENTRY.size - 4]) != hcrc or length <= 0 or length % SECTOR:
        return None
    return seq, home, logical, length, dcrc


def encode_tail(array_uuid: bytes, generation: int, cleared: int) -> bytes:
    head = TAIL.pack(TAIL_MAGIC, array_uuid, generation, cleared, 0)
    crc = zlib.crc32(head[: TAIL.size - 4])
    return TAIL.pack(TAIL_MAGIC, array_uuid, generation, cleared, crc).ljust(SECTOR, b"\0")


def decode_tails(array_uuid: bytes, raw: bytes) -> tuple[int, int]:
    """(generation, cleared-up-to seq) of the newest valid tail slot; (0, 0) if none."""
    best = (0, 0)
    for slot in range(2):
        part = raw[slot * SECTOR : slot * SECTOR + TAIL.size]
        if len(part) < TAIL.size:
            continue
        magic, owner, gen, cleared, crc = TAIL.unpack(part)
        if magic == TAIL_MAGIC and owner == array_uuid and zlib.crc32(part[: TAIL.size - 4]) == crc:
            best = max(best, (gen, cleared))
    return best


def parse_log(array_uuid: bytes, region: bytes, region_offset: int, cleared: int) -> list[tuple[int, int, int, int, bytes]]:
    """Valid entries newer than `cleared` in a log region image: (seq, home, logical, log offset, data).

    Scans sector by sector (entries are sector-aligned); a header whose data CRC does not
    match (a torn append) is skipped."""
    found = []
    pos = 0
    while pos + SECTOR <= len(region):
        header = decode_header(array_uuid, region[pos : pos + SECTOR])
        if header is None:
            pos += SECTOR
            continue
        seq, home, logical, length, dcrc = header
        data = region[pos + SECTOR : pos + SECTOR + length]
        if len(data) == length and zlib.crc32(data) == dcrc and seq > cleared:
            found.append((seq, home, logical, region_offset + pos, bytes(data)))
            pos += SECTOR + length
        else:
            pos += SECTOR
    found.sort()
    return found


def merge_runs(batch: Sequence[PendingImage], limit: int) -> list[list[PendingImage]]:
    """Disjoint images of one disk in runs that are each one write home: in home order,
    an image joins the run before it when it starts where that run ends, belongs to the
    same writing node (its request origin) and keeps the run within `limit` bytes (§3.7:
    images mapped contiguously on one disk are written "in a pipelined fashion"). A limit
    no larger than one image leaves every image a run of its own."""
    runs: list[list[PendingImage]] = []
    size = 0
    for entry in sorted(batch, key=lambda e: e.home):
        last = runs[-1][-1] if runs else None
        if (last is not None and entry.home == last.home + last.length and entry.origin == last.origin
                and size + entry.length <= limit):
            runs[-1].append(entry)
            size += entry.length
        else:
            runs.append([entry])
            size = entry.length
    return runs


class _Ring:
    """Space of one member's log: a ring of sector-aligned entries, consumed in order."""

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end
        self.head = start          # next append
        self.entries: list[PendingImage] = []  # in log (= sequence) order

    @property
    def capacity(self) -> int:
        return self.end - self.start

    def place(self, nbytes: int) -> int | None:
        """Offset where an entry of `nbytes` fits without overwriting a pending one."""
        if not self.entries:
            self.head = self.start
            return self.start if nbytes <= self.capacity else None
        tail = self.entries[0].log_offset
        if self.head > tail:  # free: [head, end) and [start, tail)
            if self.head + nbytes <= self.end:
                return self.head
            if self.start + nbytes <= tail:
                return self.start
            return None
        return self.head if self.head + nbytes <= tail else None  # wrapped: free [head, tail)


class ImageBuffer:
    """The persistent buffer of pending RAID-x images of one Array (see module docstring)."""

    def __init__(self, array, array_uuid: str, *, delay: float = DEFAULT_DELAY) -> None:
        layout = array.layout
        self.array = array
        self.uuid = uuid_mod.UUID(array_uuid).bytes
        self.delay = delay
        self.merge = getattr(layout, "image_merge_bytes", 0)
        self.persistent = getattr(layout, "image_buffer", "disk") == "disk"
        self.log_start = LOG_START + TAIL_BYTES
        # image_buffer = "memory": the layout's image_memory per image disk (assumed: the paper
        # gives its buffer file no size)
        self.log_end = layout.data_offset if self.persistent else self.log_start + layout.image_memory_bytes
        self.rings = [_Ring(self.log_start, self.log_end) for _ in range(layout.n_disks)]
        self.enabled = self.log_end - self.log_start >= 16 * SECTOR
        self.joined = False
        self.write_through = not self.enabled
        self._seq = 0
        self._tail_gen = [0] * layout.n_disks
        self._cleared = [0] * layout.n_disks
        self._wake = [sched.Event() for _ in range(layout.n_disks)]
        self._space = [sched.Event() for _ in range(layout.n_disks)]  # set when a disk's ring frees space
        self._appended = sched.Event()
        self._writing = [sched.Lock() for _ in range(layout.n_disks)]  # one writer of a disk's homes at a time
        self.running = False  # the background task runs (else log() drains inline when full)
        self.stats = {"logged": 0, "logged_bytes": 0, "written_home": 0, "written_through": 0,
                      "dropped": 0, "recovered": 0, "overlays": 0, "waits_for_space": 0, "merged_writes": 0}

    def join(self) -> None:
        """This array instance joins one that runs elsewhere (raidlab.engine.build,
        assemble_array join=True): the image disks' logs belong to that one, so images that
        would go to a log are written home at once (write-through); images kept in memory
        stay in this instance's memory."""
        self.joined = True
        self.write_through = self.resting_write_through

    @property
    def resting_write_through(self) -> bool:
        """Write-through outside a rebuild or scrub: a log too small to use, or a joined
        instance's images that would go to a log it does not own."""
        return not self.enabled or (self.joined and self.persistent)

    # ------------------------------------------------------------------ state

    @property
    def pending(self) -> list[PendingImage]:
        return sorted((e for ring in self.rings for e in ring.entries), key=lambda e: e.seq)

    def statistics(self) -> dict[str, Any]:
        return {**self.stats, "pending": sum(len(r.entries) for r in self.rings),
                "pending_bytes": sum(e.length for r in self.rings for e in r.entries),
                "write_through": self.write_through, "log_bytes_per_member": self.log_end - self.log_start}

    # ------------------------------------------------------------------ foreground

    async def log(self, writes: Sequence[tuple[int, int, int, bytes | memoryview]], fua: bool) -> None:
        """Make the images durable in their disks' logs (or home, write-through).

        writes: (disk, home offset, logical offset, payload) of every image extent of one
        logical write. Returns when every image is in a log or at home."""
        direct = []
        appends = []
        for disk, home, logical, payload in writes:
            ring = self.rings[disk]
            if self.write_through or SECTOR + len(payload) > ring.capacity // 2:
                direct.append((disk, home, payload))
                continue
            appends.append((disk, home, logical, payload))
        if direct:
            await self.drain()
            await self.array.gather([(self._write_member, d, h, p, True) for d, h, p in direct])
            self.stats["written_through"] += len(direct)
        if not appends:
            return
        batch: list[PendingImage] = []
        for disk, home, logical, payload in appends:
            ring = self.rings[disk]
            need = SECTOR + len(payload)
            while (where := ring.place(need)) is None:
                # Log what this write placed so far: until logged, it cannot be written home
                # and its space cannot be freed (one write may need more than the ring).
                await self._append(batch, fua)
                batch = []
                # The background writer may have freed the space while the batch was logged
                # (and set the event this write would otherwise wait on anew, for ever): look
                # again before waiting. Nothing awaits between this look and the wait.
                if (where := ring.place(need)) is not None:
                    break
                self.stats["waits_for_space"] += 1
                if not self.running:  # no background task (e.g. a bare Array): write now
                    await self._write_or_wait(ring)
                    continue
                if self._space[disk].is_set():
                    self._space[disk] = sched.Event()
                self._wake[disk].set()
                await self._space[disk].wait()
            self._seq += 1
            entry = PendingImage(self._seq, disk, home, logical, bytes(payload), where, origin=ORIGIN.get())
            ring.entries.append(entry)
            ring.head = where + need
            batch.append(entry)
        await self._append(batch, fua)

    async def _append(self, entries: list[PendingImage], fua: bool) -> None:
        if not entries:
            return
        calls = [(self._write_member, e.disk, e.log_offset, encode_entry(self.uuid, e), fua) for e in entries]
        try:
            if self.persistent:
                await self.array.gather(calls)
        finally:
            for e in entries:
                e.logged = True
            self._appended.set()
            self.stats["logged"] += len(entries)
            self.stats["logged_bytes"] += sum(e.length for e in entries)
            for disk in {e.disk for e in entries}:
                self._wake[disk].set()

    async def _write_member(self, disk: int, offset: int, payload, fua: bool) -> None:
        await self.array.member_call(disk, self.array.members[disk].write, offset, payload, fua=fua)

    def overlay_snapshot(self, offset: int, length: int) -> list[PendingImage]:
        """Pending images overlapping logical [offset, offset+length), oldest first."""
        end = offset + length
        return [e for e in self.pending if e.logical < end and e.logical + e.length > offset]

    def overlay(self, offset: int, data: bytes, snapshot: list[PendingImage]) -> bytes:
        """Lay the snapshot's pending images over `data` (logical bytes at `offset`)."""
        if not snapshot:
            return data
        out = bytearray(data)
        end = offset + len(data)
        for e in snapshot:
            lo, hi = max(offset, e.logical), min(end, e.logical + e.length)
            out[lo - offset : hi - offset] = e.data[lo - e.logical : hi - e.logical]
        self.stats["overlays"] += 1
        return bytes(out)

    # ------------------------------------------------------------------ background

    async def run(self, *, task_status=sched.TASK_STATUS_IGNORED) -> None:
        """The background image writers, one per disk (run until cancelled)."""
        self.running = True
        task_status.started()
        try:
            async with sched.open_nursery() as writers:
                for disk in range(len(self.rings)):
                    writers.start_soon(self._run, disk)
        finally:
            self.running = False

    async def _run(self, disk: int) -> None:
        ring = self.rings[disk]
        while True:
            if not any(e.logged for e in ring.entries):
                self._wake[disk] = sched.Event()
                await self._wake[disk].wait()
                continue
            if self.delay > 0:
                await sched.sleep(self.delay)
            try:
                await self._write_disk(disk)
            except Exception as exc:  # keep serving; the entries stay pending (and logged)
                self.stats["errors"] = self.stats.get("errors", 0) + 1
                self.last_error = repr(exc)
                await sched.sleep(max(self.delay, 0.1))

    async def write_pending(self) -> None:
        """Write every pending image home (FUA), then advance each disk's tail record. The
        disks go concurrently, each in its own log order: a disk's batch, its flush and its
        tail record depend on nothing of another disk."""
        await self.array.gather([(self._write_disk, disk) for disk, ring in enumerate(self.rings) if ring.entries])

    async def _write_disk(self, disk: int) -> None:
        async with self._writing[disk]:
            try:
                await self._write_pending_of(disk, self.rings[disk])
            finally:
                self._space[disk].set()

    async def _write_pending_of(self, disk: int, ring: _Ring) -> None:
        batch = []
        for entry in ring.entries:  # the logged prefix: an append still in flight
            if not entry.logged:    # keeps its ring space (and all after it)
                break
            batch.append(entry)
        if not batch:
            return
        done = 0
        try:
            if disk not in self.array.failed:
                await self._write_home(disk, batch)
                done = batch[-1].seq
                self.stats["written_home"] += len(batch)
        except Exception:
            if disk not in self.array.failed:
                raise
            # else: the image disk failed; its data copies are current
        if disk in self.array.failed:
            self.stats["dropped"] += len(ring.entries)
            ring.entries.clear()
            return
        if done:
            try:
                await self._write_tail(disk, done)
            except Exception:
                if disk not in self.array.failed:
                    raise
                self.stats["dropped"] += len(ring.entries)
                ring.entries.clear()
                return
            ring.entries = [e for e in ring.entries if e.seq > done]

    async def _write_home(self, disk: int, batch: list[PendingImage]) -> None:
        """Write a batch of one disk's images home, then flush that disk once (so they are
        durable before the tail record says so). Images of disjoint ranges go concurrently;
        if two overlap, the batch goes in log order (a newer image must land last)."""
        spans = sorted((e.home, e.home + e.length) for e in batch)
        disjoint = all(a_end <= b_start for (_a, a_end), (b_start, _b) in zip(spans, spans[1:]))
        if disjoint and len(batch) > 1:
            runs = merge_runs(batch, self.merge)
            self.stats["merged_writes"] += len(runs)
            await self.array.gather([(self._write_run, disk, run) for run in runs])
        else:
            for e in batch:
                await self._write_run(disk, [e])
        await self.array.member_call(disk, self.array.members[disk].flush)

    async def _write_run(self, disk: int, run: list[PendingImage]) -> None:
        """Images home as one write, from the entries in memory, sent as the writes they
        belong to were: from that node (their request origin, one for the whole run)."""
        token = ORIGIN.set(run[0].origin)
        try:
            data = run[0].data if len(run) == 1 else b"".join(e.data for e in run)
            await self._write_member(disk, run[0].home, data, False)
        finally:
            ORIGIN.reset(token)

    async def _write_tail(self, disk: int, cleared: int) -> None:
        if not self.persistent:
            self._cleared[disk] = cleared
            return
        self._tail_gen[disk] += 1
        gen = self._tail_gen[disk]
        self._cleared[disk] = cleared
        await self._write_member(disk, LOG_START + (gen % 2) * SECTOR, encode_tail(self.uuid, gen, cleared), True)

    async def drain(self) -> None:
        """Return when no image is pending (writes them now instead of after the delay)."""
        while any(r.entries for r in self.rings):
            await self._write_or_wait(None)

    async def _write_or_wait(self, ring: _Ring | None) -> None:
        """Write the logged pending images home; if none is logged yet (every append of
        `ring`, or of all rings, is still in flight), wait until an append completes."""
        entries = ring.entries if ring is not None else [e for r in self.rings for e in r.entries]
        if any(e.logged for e in entries):
            await self.write_pending()
            return
        if self._appended.is_set():
            self._appended = sched.Event()
        await self._appended.wait()

    # ------------------------------------------------------------------ assembly

    async def recover(self) -> int:
        """After assembly: replay every valid pending entry of the healthy members' logs
        (module docstring, "Crash recovery"). Returns the number of images rewritten. A
        memory buffer has nothing to replay: its pending images died with the process."""
        if not self.enabled or not self.persistent:
            return 0
        array, layout = self.array, self.array.layout
        found: list[tuple[int, int, int, int, bytes]] = []
        for disk in range(layout.n_disks):
            if disk in array.failed:
                continue
            raw_tail = await array.members[disk].read(LOG_START, TAIL_BYTES)
            gen, cleared = decode_tails(self.uuid, raw_tail)
            self._tail_gen[disk], self._cleared[disk] = gen, cleared
            region = await array.members[disk].read(self.log_start, self.log_end - self.log_start)
            for seq, home, logical, _at, data in parse_log(self.uuid, region, self.log_start, cleared):
                found.append((seq, disk, home, logical, data))
        found.sort()
        newest: dict[int, int] = {}
        for seq, disk, home, logical, data in found:
            data_disks = {ext.disk for ext in layout.map(logical, len(data))}
            if data_disks & array.failed:
                image = data  # the data copy is gone: the buffered image is the only copy
            else:
                image = await array.read(logical, len(data))
            await self._write_member(disk, home, image, True)
            newest[disk] = max(newest.get(disk, 0), seq)
            self.stats["recovered"] += 1
        for disk, seq in newest.items():
            await self._write_tail(disk, seq)
        self._seq = max([0, *(s for s, *_ in found), *self._cleared])
        return len(found)
