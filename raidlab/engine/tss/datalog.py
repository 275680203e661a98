"""TSS data logging (Pallipadi & Gopinath §3.8, Fig. 3): each stripe write is logged, with
its data, on a log device before it goes to the columns, and committed after.

"Data logging consists of logging the data along with the stripe information in a log
device synchronously and then writing to the actual device. After the actual write is
complete, a commit of the transaction is done on the log device." The log is stripe-level
(one record per logical stripe a request touches), for consistency only, not to delay
writes as a log-structured system would. Recovery replays every record not committed, in
order, with reconstruct-writes: a crash in the middle of a read-modify-write leaves the
stripe's parity out of step with its data, and a read-modify-write during recovery would
carry that error on; a reconstruct-write computes the parity from the data units alone.

The log device is a circular area, written sequentially:

    data record     header sector + the data, one FUA write
    commit record   one sector naming the record it commits, FUA, in the sector after the
                    data, reserved with the record (so a full log can always commit: commits
                    never wait for space that only commits could free)

A header holds the record's sequence number and the *tail*: the oldest sequence not yet
committed when it was written. The log drive carries no superblock, so every header names
its device: the CRC32 of a header is seeded with the CRC32 of the device's array uuid, and a
log drive of another device (or a former one on the same drive) holds no record of this one.
Space is reused only behind the tail, so a record older than the newest tail seen on the
device was committed, even if its commit record has since been overwritten; recovery
replays only uncommitted records at or after that tail. Every header and the data carry
CRC32s: a torn record was never acknowledged and is skipped.

Damage is told from a crash by two more fields of each header. Records are written
concurrently (asynchronous writes), so a missing record followed by whole newer ones is
also what a crash leaves: the newer ones were begun while it was still being written.
So each header names `prev`, the sequence number of the data record reserved before it,
and `durable`: every data record numbered up to it was whole on the device when this
header was made. A data record that some whole header names as `prev`, at or after the
tail, not committed, and numbered at most the largest `durable` seen, was written whole
before a header that is still whole: if it does not read back whole now, the log is
damaged, and recovery refuses it (MetadataError) rather than lose its acknowledged write
without a word. Not caught: damage to a record newer than every `durable` (records still
being written when the last header was made), which a crash can leave torn as well.

Formats: MAGIC_V1 (the CRC not seeded) and MAGIC_V2 (seeded, without `prev` and
`durable`) are still read, for logs made before, with no damage check; this one writes only
the third.

Asynchronous writes (§4) acknowledge a write once its record is on the log; the stripe
write and the commit follow in the background (raidlab.engine.tss.logwrites). A log that is
full makes new records wait for commits.
"""

from __future__ import annotations

import collections
import dataclasses
import struct
import zlib
from typing import Any

from raidlab import sched
from raidlab.blockdev import SECTOR
from raidlab.engine.metadata import MetadataError

MAGIC_V1 = b"TSSLOG\x00\x01"   # header CRC not seeded with the device's uuid
MAGIC_V2 = b"TSSLOG\x00\x02"   # header CRC seeded with the CRC32 of the device's uuid
MAGIC = b"TSSLOG\x00\x03"      # seeded, with prev and durable (module doc)
HEADER_V2 = struct.Struct("<8sIQQQIIII")  # magic kind seq tail target ls start length data_crc
HEADER = struct.Struct("<8sIQQQIIIIQQ")   # ... prev durable
DATA, COMMIT = 1, 2


def owner_seed(array_uuid: str | None) -> int:
    """The CRC seed of this device's headers (module doc); 0 when the device has no uuid."""
    return zlib.crc32(array_uuid.encode()) if array_uuid else 0


@dataclasses.dataclass
class LogRecord:
    seq: int
    offset: int          # where its header is on the log device
    size: int            # header + data + commit sector bytes
    ls: int
    start: int
    length: int
    committed: bool = False


def _header(kind: int, seq: int, tail: int, target: int, ls: int, start: int, length: int, data_crc: int,
            seed: int = 0, prev: int = 0, durable: int = 0) -> bytes:
    body = HEADER.pack(MAGIC, kind, seq, tail, target, ls, start, length, data_crc, prev, durable)
    return body + struct.pack("<I", zlib.crc32(body, seed)) + bytes(SECTOR - HEADER.size - 4)


def _parse(sector: bytes, seed: int = 0) -> tuple | None:
    """The fields of a whole header of this device (`seed`: owner_seed of its uuid), else
    None: magic, kind, seq, tail, target, ls, start, length, data_crc, prev, durable (the
    last two None in the older formats)."""
    magic = sector[:8]
    layout = HEADER if magic == MAGIC else HEADER_V2 if magic in (MAGIC_V1, MAGIC_V2) else None
    if layout is None or len(sector) < layout.size + 4:
        return None
    body = sector[:layout.size]
    (crc,) = struct.unpack_from("<I", sector, layout.size)
    if zlib.crc32(body, 0 if magic == MAGIC_V1 else seed) != crc:
        return None
    fields = layout.unpack(body)
    return fields if layout is HEADER else (*fields, None, None)


class DataLog:
    """The circular data log on `device` (a drive or a partition), whole of it, of the TSS
    device with uuid `array_uuid` (module doc: its headers name it)."""

    def __init__(self, device: Any, array_uuid: str | None = None) -> None:
        self.device = device
        self.array_uuid = array_uuid
        self.seed = owner_seed(array_uuid)
        self.capacity = device.size // SECTOR * SECTOR
        self._next_seq = 1
        self._head = 0                  # next byte to write
        self._last_data = 0             # the data record reserved last (the next one's prev)
        self._writing: set[int] = set()  # data records whose log write has not completed
        self._records: collections.deque[LogRecord] = collections.deque()  # oldest first, data records
        self._space = sched.Condition()  # notified when commits free space
        self.counters: collections.Counter[str] = collections.Counter()

    @property
    def tail(self) -> int:
        """The oldest sequence number not yet committed (the next one when all are)."""
        for record in self._records:
            if not record.committed:
                return record.seq
        return self._next_seq

    @property
    def durable(self) -> int:
        """Every data record numbered up to this is whole on the device (module doc)."""
        return min(self._writing) - 1 if self._writing else self._next_seq - 1

    def _used_from(self) -> int:
        """Offset of the oldest byte still needed (the first uncommitted record), or the
        head when nothing is."""
        while self._records and self._records[0].committed:
            self._records.popleft()
        return self._records[0].offset if self._records else self._head

    def _reserve(self, size: int) -> int | None:
        """Offset for `size` contiguous bytes, or None when the log has no room yet."""
        if size > self.capacity:
            raise ValueError(f"a {size}-byte log record does not fit a {self.capacity}-byte log")
        oldest = self._used_from()
        head = self._head
        if not self._records:          # empty: anywhere, from the head
            if head + size <= self.capacity:
                return head
            return 0
        if oldest <= head:             # used [oldest, head): free [head, end) and [0, oldest)
            if head + size <= self.capacity:
                return head
            if size < oldest:
                return 0
            return None
        if head + size < oldest:       # wrapped: free [head, oldest)
            return head
        return None

    async def _place(self, size: int) -> int:
        async with self._space:
            while (offset := self._reserve(size)) is None:
                self.counters["waited_for_log_space"] += 1
                await self._space.wait()
            self._head = offset + size
        return offset

    async def append(self, ls: int, start: int, data: bytes, *, on_reserved=None) -> LogRecord:
        """Write a data record durably; return it (commit it after the stripe write).
        `on_reserved(record)` runs as the record gets its sequence number, before any wait,
        so a caller can keep its own order in step with the log's."""
        size = SECTOR + len(data) + SECTOR
        offset = await self._place(size)
        seq = self._next_seq
        self._next_seq += 1
        record = LogRecord(seq, offset, size, ls, start, len(data))
        self._records.append(record)
        prev, self._last_data = self._last_data, seq
        self._writing.add(seq)
        if on_reserved is not None:
            on_reserved(record)
        header = _header(DATA, seq, self.tail, 0, ls, start, len(data), zlib.crc32(data), self.seed,
                         prev, self.durable)
        try:
            await self.device.write(offset, header + bytes(data), fua=True)
        finally:
            self._writing.discard(seq)
        self.counters["records"] += 1
        self.counters["record_bytes"] += size
        return record

    async def commit(self, record: LogRecord) -> None:
        """Write `record`'s commit record in the sector reserved after its data; its space
        is reusable once it and every older record are committed."""
        seq = self._next_seq
        self._next_seq += 1
        await self.device.write(record.offset + record.size - SECTOR,
                                _header(COMMIT, seq, self.tail, record.seq, 0, 0, 0, 0, self.seed,
                                        durable=self.durable), fua=True)
        record.committed = True
        self.counters["commits"] += 1
        async with self._space:
            self._space.notify_all()

    async def scan(self) -> list[tuple[int, int, int, bytes]]:
        """The uncommitted data records on the device, oldest first: (seq, ls, start, data)."""
        raw = await self.device.read(0, self.capacity)
        records: dict[int, tuple[int, int, int, int, int]] = {}
        committed: set[int] = set()
        named: dict[int, int] = {}   # a data record some whole header names as prev -> where
        newest_tail, newest_seq, durable = 0, 0, 0
        pos = 0
        while pos < self.capacity:
            parsed = _parse(raw[pos:pos + SECTOR], self.seed)
            if parsed is None:
                pos += SECTOR
                continue
            _magic, kind, seq, tail, target, ls, start, length, data_crc, prev, durable_then = parsed
            newest_tail, newest_seq = max(newest_tail, tail), max(newest_seq, seq)
            if durable_then is not None:
                durable = max(durable, durable_then)
                if kind == DATA and prev:
                    named[prev] = pos
            if kind == COMMIT:
                committed.add(target)
                pos += SECTOR
                continue
            end = pos + SECTOR + length
            if kind == DATA and end <= self.capacity and zlib.crc32(raw[pos + SECTOR:end]) == data_crc:
                records[seq] = (pos, ls, start, length, data_crc)
                pos = end
            else:
                pos += SECTOR  # torn: never acknowledged
        self._next_seq = newest_seq + 1
        lost = sorted(k for k in named if newest_tail <= k <= durable and k not in records and k not in committed)
        if lost:
            raise MetadataError(
                f"{getattr(self.device, 'name', 'the log drive')}: the TSS data log is damaged: record {lost[0]} "
                f"was written whole (record {durable} and all before it were) but does not read back whole",
                hint="its logged writes cannot all be replayed; the device cannot be assembled")
        out = []
        for seq in sorted(records):
            if seq < newest_tail or seq in committed:
                continue
            pos, ls, start, length, _crc = records[seq]
            out.append((seq, ls, start, raw[pos + SECTOR:pos + SECTOR + length]))
        return out

    async def reset(self) -> None:
        """After recovery (every uncommitted record replayed): an empty log. A marker at its
        start carries a tail newer than anything on the device, so a later recovery replays
        none of the old records again; sequence numbers go on from the last seen."""
        self._records.clear()
        seq = self._next_seq
        self._next_seq += 1
        await self.device.write(0, _header(COMMIT, seq, self._next_seq, 0, 0, 0, 0, 0, self.seed), fua=True)
        self._head = SECTOR
        self.counters["resets"] += 1

    def statistics(self) -> dict[str, Any]:
        return {"log_bytes": self.capacity, "log_in_use_records": sum(not r.committed for r in self._records),
                **dict(self.counters)}
