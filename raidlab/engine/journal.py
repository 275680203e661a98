"""A write journal for a parity array: md's raid5-cache in write-through mode, which closes
the RAID 5 write hole.

Why: a stripe update writes a data chunk and the parity chunk to two members; a crash (or a
power cut that takes one drive's cache) between the two leaves the stripe inconsistent, and
once a member is missing, the chunk computed for it from the others is wrong although
nobody wrote it (tests/unit/test_volatile_cache.py shows it). Replaying the data alone does
not help: a read-modify-write of the same data against the stale parity leaves it stale.
md's answer (`mdadm --write-journal`, drivers/md/raid5-cache.c) is to write every member
write of a stripe update, the data *and* the new parity, to a journal device first, durably,
and only then to the members; after a crash the journal's records are written to the
members again, so each stripe ends as its last journalled update made it, data and parity
together, degraded or not.

Here: each plan's member writes (raidlab.engine.array, `_write_piece`) are one record
appended with FUA before any of them is issued. A flush of the array flushes the members,
then checkpoints (FUA) the records whose member writes had all completed before it: those
are on the members' media and need no replay. The journal is a plain log from its start;
when every record is checkpointed it starts over, and when a record does not fit, the
journal waits for the writes in flight, flushes the members and starts over. Assembly
replays every record after the checkpoint, in order, to the members that are in service,
flushes them and checkpoints. Records are self-checking (a CRC over header and payloads)
and numbered one after another; replay walks them from the journal's start, skipping those
the checkpoint covers (a checkpoint taken while records were in flight does not start the
journal over, so they come first), and the first record that is torn, foreign or not the
successor of the one before ends it. If a newer whole record lies beyond that point, the
stop is damage, not the crash (records are appended one at a time, FUA, in order):
replaying only the records before it would write their data back over later writes, so
assembly refuses the journal instead.

A journal drive that fails (a write to it answers an error, or `raidlab fail` names it)
fails the journal, as md's r5l_log_disk_error does: from then on every write to the array
is refused with EIO (it can no longer be journalled, and md does not let it out
unjournalled), reads go on, a flush still flushes the members. The journal's records up to
the failure stay valid for the next assembly.

Departures: md also caches in write-back mode and keeps the journal on an SSD; the journal
drive here is one more emulated drive of the lab.
"""

from __future__ import annotations

import errno
import struct
import zlib
from collections.abc import Sequence
from typing import Any

from raidlab import sched
from raidlab.engine.metadata import MetadataError

BLOCK = 4096
HEADER_MAGIC = b"RLJOURN1"
RECORD_MAGIC = b"RLJREC01"
_HEADER = struct.Struct("<8s16sQI")        # magic, array uuid (16 bytes), checkpoint seq, crc
_RECORD = struct.Struct("<8s16sQII")        # magic, array uuid, seq, extents, crc of the rest
_EXTENT = struct.Struct("<IQI")             # member, member offset, length
_SCAN_CHUNK = 1 << 20                       # what open() reads at once past the last record


class JournalError(OSError):
    """The journal cannot serve: one plan's writes larger than the whole journal, or a
    journal drive that failed (the write fails with EIO, never goes out unjournalled). A
    drive that holds no journal of this array is refused at assembly with a MetadataError."""

    def __init__(self, message: str):
        super().__init__(errno.EIO, message)


def _uuid_bytes(uuid: str) -> bytes:
    return bytes.fromhex(uuid.replace("-", ""))[:16].ljust(16, b"\0")


def _pad(n: int) -> int:
    return -(-n // BLOCK) * BLOCK


class StripeJournal:
    """The journal of one array on `target` (a BlockTarget). Build with `create` or `open`."""

    def __init__(self, target: Any, array_uuid: str):
        self.target = target
        self.uuid = _uuid_bytes(array_uuid)
        self.size = target.size - target.size % BLOCK
        self.position = BLOCK              # where the next record goes
        self.seq = 0                       # the last record's
        self.checkpoint_seq = 0            # records up to this one are on the members' media
        self._lock = sched.Lock()           # appends, one at a time, in seq order
        self._done: set[int] = set()       # records whose member writes completed
        self._in_flight: set[int] = set()  # records whose member writes are under way
        self._drained = sched.Event()
        self.counters = {"records": 0, "journal_bytes": 0, "checkpoints": 0, "restarts": 0,
                         "forced_flushes": 0, "replayed_records": 0, "writes_refused": 0}
        self.failed: str | None = None     # why the journal drive failed, once it did

    # -- format --------------------------------------------------------------------------

    @classmethod
    async def create(cls, target: Any, array_uuid: str) -> StripeJournal:
        journal = cls(target, array_uuid)
        await journal._write_header()
        return journal

    async def _write_header(self) -> None:
        body = _HEADER.pack(HEADER_MAGIC, self.uuid, self.checkpoint_seq, 0)[:-4]
        header = body + struct.pack("<I", zlib.crc32(body))
        await self._write(0, header.ljust(BLOCK, b"\0"))

    async def _write(self, offset: int, data: bytes) -> None:
        try:
            await self.target.write(offset, data, fua=True)
        except OSError as exc:
            self.fail(f"journal drive write error: {exc.strerror or exc}")
            raise JournalError(f"the write journal failed ({self.failed}): writes are refused") from exc

    def fail(self, why: str) -> None:
        """The journal drive is gone: no write goes out any more (see the module doc)."""
        if self.failed is None:
            self.failed = why

    # -- the write path ------------------------------------------------------------------

    async def log(self, writes: Sequence[tuple[int, int, bytes | memoryview]], flush_members) -> int:
        """Append one record of member writes [(member, offset, payload)] durably; returns its
        seq, to give to `completed` once every one of those member writes is done.
        `flush_members` (async) is called when the journal must start over while records
        are live."""
        if self.failed is not None:
            self.counters["writes_refused"] += 1
            raise JournalError(f"the write journal failed ({self.failed}): writes are refused, as md's are")
        extents = b"".join(_EXTENT.pack(disk, offset, len(payload)) for disk, offset, payload in writes)
        payload = b"".join(bytes(p) for _d, _o, p in writes)
        length = _pad(_RECORD.size + len(extents) + len(payload))
        if BLOCK + length > self.size:
            raise JournalError(f"a plan of {len(payload)} bytes does not fit the {self.size}-byte journal")
        async with self._lock:
            if self.position + length > self.size:
                await self._start_over(flush_members)
            self.seq += 1
            seq = self.seq
            crc = zlib.crc32(extents + payload, zlib.crc32(struct.pack("<8s16sQI", RECORD_MAGIC, self.uuid, seq,
                                                                      len(writes))))
            record = _RECORD.pack(RECORD_MAGIC, self.uuid, seq, len(writes), crc) + extents + payload
            try:
                await self._write(self.position, record.ljust(length, b"\0"))
            except JournalError:
                self.counters["writes_refused"] += 1   # this one too: it never went out
                raise
            self.position += length
            self._in_flight.add(seq)
            self.counters["records"] += 1
            self.counters["journal_bytes"] += length
            return seq

    def completed(self, seq: int) -> None:
        """The member writes of record `seq` are done (on the members, maybe in their caches)."""
        self._in_flight.discard(seq)
        self._done.add(seq)
        if not self._in_flight:
            self._drained.set()

    async def checkpoint(self, upto: int) -> None:
        """Records up to `upto` are on the members' media (the caller flushed the members
        after they completed): record it durably; the journal starts over when nothing is
        live any more."""
        if upto <= self.checkpoint_seq or self.failed is not None:
            return   # a failed journal: the members were flushed all the same
        self.checkpoint_seq = upto
        self._done = {s for s in self._done if s > upto}
        try:
            await self._write_header()
        except JournalError:
            return   # the drive failed now (self.failed); the members are flushed all the same
        self.counters["checkpoints"] += 1
        if self.seq == upto and not self._in_flight:
            self.position = BLOCK

    def durable_candidate(self) -> int:
        """The newest seq whose record and every older one have completed: what a member
        flush started now makes durable."""
        if self._in_flight:
            return min(self._in_flight) - 1
        return self.seq

    async def _start_over(self, flush_members) -> None:
        """The journal is full: wait for the member writes in flight, flush the members,
        checkpoint everything and write from the start again (lock held)."""
        while self._in_flight:
            self._drained = sched.Event()
            await self._drained.wait()
        self.counters["forced_flushes"] += 1
        await flush_members()
        await self.checkpoint(self.seq)
        self.position = BLOCK
        self.counters["restarts"] += 1

    # -- recovery ------------------------------------------------------------------------

    @classmethod
    async def open(cls, target: Any, array_uuid: str) -> tuple[StripeJournal, list[list[tuple[int, int, bytes]]]]:
        """The journal on `target` and the records to replay (newest last), each a list of
        (member, offset, payload). A target without this array's whole journal header is
        refused (MetadataError)."""
        journal = cls(target, array_uuid)
        raw = await target.read(0, BLOCK)
        magic, uuid, checkpoint, crc = _HEADER.unpack_from(raw)
        if magic != HEADER_MAGIC or uuid != journal.uuid or zlib.crc32(raw[:_HEADER.size - 4]) != crc:
            name = getattr(target, "name", "the journal drive")
            raise MetadataError(f"{name} holds no write journal of this array (its header is blank, damaged "
                                f"or another array's)", hint="give the array's own journal drive", member=name)
        journal.checkpoint_seq = journal.seq = checkpoint
        records: list[list[tuple[int, int, bytes]]] = []
        position, last, previous = BLOCK, checkpoint, None
        while position + BLOCK <= journal.size:
            head = await target.read(position, BLOCK)
            magic, uuid, seq, count, crc = _RECORD.unpack_from(head)
            if magic != RECORD_MAGIC or uuid != journal.uuid:
                break
            # One pass of records from the start, numbered one after another: its first is
            # at most the checkpoint's successor (a checkpoint taken while records were in
            # flight does not start the journal over, and the records it covers stay first).
            if not (seq == previous + 1 if previous is not None else seq <= checkpoint + 1):
                break
            extents_len = count * _EXTENT.size
            if _RECORD.size + extents_len > BLOCK * 16:
                break
            first = head if _RECORD.size + extents_len <= BLOCK else await target.read(
                position, _pad(_RECORD.size + extents_len))
            extents = [_EXTENT.unpack_from(first, _RECORD.size + k * _EXTENT.size) for k in range(count)]
            length = _pad(_RECORD.size + extents_len + sum(n for _d, _o, n in extents))
            if position + length > journal.size:
                break
            whole = await target.read(position, length)
            body = whole[_RECORD.size:_RECORD.size + extents_len + sum(n for _d, _o, n in extents)]
            expect = zlib.crc32(body, zlib.crc32(struct.pack("<8s16sQI", RECORD_MAGIC, journal.uuid, seq, count)))
            if expect != crc:
                break  # torn: the crash came while it was written; its member writes never began
            previous = seq
            position += length
            if seq <= checkpoint:
                continue  # on the members' media already
            at, writes = extents_len, []
            for disk, offset, n in extents:
                writes.append((disk, offset, bytes(body[at:at + n])))
                at += n
            records.append(writes)
            last = seq
        newer = await journal._whole_record_after(position, last)
        if newer is not None:
            name = getattr(target, "name", "the journal drive")
            raise MetadataError(f"{name}: the write journal is damaged at byte {position}: record {newer[0]} "
                                f"at byte {newer[1]} follows the last whole record ({last})",
                                hint="replaying only the records before the damage would undo later writes",
                                member=name)
        journal.seq = last
        return journal, records

    async def _whole_record_after(self, position: int, last: int) -> tuple[int, int] | None:
        """(seq, offset) of a whole record of this array past `position` with a sequence
        number above `last`, or None. Records are appended one at a time, each FUA, in
        sequence order from the start; past the newest, the journal holds records of
        earlier passes, all older. So where the replay stops because a record is torn or
        damaged, a newer whole record further on means the stop is damage, not the crash:
        the records after it were written, and replaying only those before it would write
        their old data back over what the later ones wrote."""
        start = -(-position // BLOCK) * BLOCK
        for chunk_at in range(start, self.size - BLOCK + 1, _SCAN_CHUNK):
            chunk = await self.target.read(chunk_at, min(_SCAN_CHUNK, self.size - chunk_at) // BLOCK * BLOCK)
            for at in range(0, len(chunk), BLOCK):
                magic, uuid, seq, count, crc = _RECORD.unpack_from(chunk, at)
                if magic != RECORD_MAGIC or uuid != self.uuid or seq <= last:
                    continue
                if _RECORD.size + count * _EXTENT.size > BLOCK * 16:
                    continue
                head = await self.target.read(chunk_at + at, _pad(_RECORD.size + count * _EXTENT.size))
                extents = [_EXTENT.unpack_from(head, _RECORD.size + k * _EXTENT.size) for k in range(count)]
                body_len = count * _EXTENT.size + sum(n for _d, _o, n in extents)
                if chunk_at + at + _pad(_RECORD.size + body_len) > self.size:
                    continue
                whole = await self.target.read(chunk_at + at, _pad(_RECORD.size + body_len))
                expect = zlib.crc32(whole[_RECORD.size:_RECORD.size + body_len],
                                    zlib.crc32(struct.pack("<8s16sQI", RECORD_MAGIC, self.uuid, seq, count)))
                if expect == crc:
                    return seq, chunk_at + at
        return None

    def statistics(self) -> dict[str, Any]:
        return {"size": self.size, "position": self.position, "seq": self.seq,
                "checkpoint": self.checkpoint_seq, "in_flight": len(self._in_flight), "failed": self.failed,
                **self.counters}


__all__ = ["BLOCK", "JournalError", "StripeJournal"]
