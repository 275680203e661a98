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
Headers of the first format (MAGIC_V1: the CRC not seeded) are still read, for logs made
before; this one writes only the second. Space is reused only behind the tail, so a record older than
the newest tail seen on the device was committed, even if its commit record has since been
overwritten; recovery replays only uncommitted records at or after that tail. Every header
and the data carry CRC32s: a torn record was never acknowledged and is skipped.

Asynchronous writes (§4) acknowledge a write once its record is on the log; the stripe
write and the commit follow in the background (raidlab.engine.tss.device). A log that is
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

MAGIC_V1 = b"TSSLOG\x00\x01"   # header CRC not seeded with the device's uuid
MAGIC = b"TSSLOG\x00\x02"      # header CRC seeded with the CRC32 of the device's uuid
HEADER = struct.Struct("<8sIQQQIIII")  # magic kind seq tail target ls start length data_crc
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
            seed: int = 0) -> bytes:
    body = HEADER.pack(MAGIC, kind, seq, tail, target, ls, start, length, data_crc)
    return body + struct.pack("<I", zlib.crc32(body, seed)) + bytes(SECTOR - HEADER.size - 4)


def _parse(sector: bytes, seed: int = 0) -> tuple | None:
    """The fields of a whole header of this device (`seed`: owner_seed of its uuid), else None."""
    if len(sector) < HEADER.size + 4 or sector[:8] not in (MAGIC, MAGIC_V1):
        return None
    body = sector[:HEADER.size]
    (crc,) = struct.unpack_from("<I", sector, HEADER.size)
    if zlib.crc32(body, seed if sector[:8] == MAGIC else 0) != crc:
        return None
    return HEADER.unpack(body)


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
        if on_reserved is not None:
            on_reserved(record)
        header = _header(DATA, seq, self.tail, 0, ls, start, len(data), zlib.crc32(data), self.seed)
        await self.device.write(offset, header + bytes(data), fua=True)
        self.counters["records"] += 1
        self.counters["record_bytes"] += size
        return record

    async def commit(self, record: LogRecord) -> None:
        """Write `record`'s commit record in the sector reserved after its data; its space
        is reusable once it and every older record are committed."""
        seq = self._next_seq
        self._next_seq += 1
        await self.device.write(record.offset + record.size - SECTOR,
                                _header(COMMIT, seq, self.tail, record.seq, 0, 0, 0, 0, self.seed), fua=True)
        record.committed = True
        self.counters["commits"] += 1
        async with self._space:
            self._space.notify_all()

    async def scan(self) -> list[tuple[int, int, int, bytes]]:
        """The uncommitted data records on the device, oldest first: (seq, ls, start, data)."""
        raw = await self.device.read(0, self.capacity)
        records: dict[int, tuple[int, int, int, int, int]] = {}
        committed: set[int] = set()
        newest_tail, newest_seq = 0, 0
        pos = 0
        while pos < self.capacity:
            parsed = _parse(raw[pos:pos + SECTOR], self.seed)
            if parsed is None:
                pos += SECTOR
                continue
            _magic, kind, seq, tail, target, ls, start, length, data_crc = parsed
            newest_tail, newest_seq = max(newest_tail, tail), max(newest_seq, seq)
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
