"""Metadata persistence of a TSS device (Pallipadi & Gopinath §3.2: "the metadata about the
logical stripes, their mapping to the physical stripes, information about the compressed
stripes etc, needs to be persistent across reboots ... a separate private partition").

The private area is a region of the first two columns, between the engine's superblock
slots and the stripes (raidlab.engine.metadata says what the superblock holds; for TSS
it records the geometry and options):

    [PRIVATE_OFFSET, +512)           header: magic, reserved stripe, previous reserved stripe
    [PRIVATE_OFFSET + 512, ...)      one 32-byte record per logical stripe, 16 to a sector

Two copies (columns 0 and 1), so one column's failure leaves the map readable; each record
carries its own CRC32 and an all-zero record is an invalid stripe, so a fresh area reads as
a fresh map. The bitmap of free sub-stripes is not stored: it follows from the records and
is rebuilt (and checked against them) on load, which cannot disagree with the map the way a
separately written bitmap could after a crash.

Order, the device's duty (raidlab.engine.tss.device): the data of a new location are written
first, then the record (FUA, both copies), then the old location is released in memory, so
space a durable record still points at is never reused. A move through the reserved stripe
writes the header first, naming the vacated stripe reserved and keeping the old reserved
one as `previous`, then the record; a load that finds the reserved stripe still referenced
by a record knows the move did not finish and takes `previous` back.

Sector writes of one sector are serialised and built from `on_disk`, the records as
written, so two stripes' records in one sector never overwrite each other's newer state.
"""

from __future__ import annotations

import collections
import struct
import zlib
from collections.abc import Sequence
from typing import Any

from raidlab import sched
from raidlab.blockdev import SECTOR
from raidlab.engine.metadata import SLOT_SIZE
from raidlab.engine.tss.maptable import CRAID5, INVALID, RAID1, RAID5, Compressed, MapTable, Mapping

PRIVATE_OFFSET = 2 * SLOT_SIZE      # after the two superblock slots
COPIES = 2                          # columns 0 and 1
RECORD = struct.Struct("<BBBBIqq4xI")  # kind flags first count size s0 s1 (pad) crc
RECORDS_PER_SECTOR = SECTOR // RECORD.size
HEADER = struct.Struct("<8sqqI")
HEADER_MAGIC = b"TSSMAP\x00\x01"
KIND_CODES = {INVALID: 0, RAID1: 1, RAID5: 2, CRAID5: 3}
FLAG_RAW, FLAG_UNWRITTEN = 1, 2  # the record's flags byte
KINDS = {code: kind for kind, code in KIND_CODES.items()}


def private_area_bytes(logical_stripes: int) -> int:
    """Bytes of the private area for `logical_stripes` records (header sector included)."""
    return SECTOR + -(-logical_stripes // RECORDS_PER_SECTOR) * SECTOR


def encode_record(entry: Mapping) -> bytes:
    if entry.kind == INVALID:
        return bytes(RECORD.size)
    c = entry.compressed
    s0 = entry.stripes[0]
    s1 = entry.stripes[1] if entry.kind == RAID1 else -1
    flags = (int(c.raw) if c else 0) | (FLAG_UNWRITTEN if entry.unwritten else 0)
    fields = (KIND_CODES[entry.kind], flags, c.first if c else 0, c.count if c else 0,
              c.size if c else 0, s0, s1)
    body = RECORD.pack(*fields, 0)[:-4]
    return body + struct.pack("<I", zlib.crc32(body))


def decode_record(raw: bytes, where: str) -> Mapping:
    if raw == bytes(RECORD.size):
        return Mapping()
    kind, raw_flag, first, count, size, s0, s1, crc = RECORD.unpack(raw)
    if zlib.crc32(raw[:-4]) != crc or kind not in KINDS or kind == 0:
        raise ValueError(f"damaged map record at {where}")
    kind_name = KINDS[kind]
    unwritten = bool(raw_flag & FLAG_UNWRITTEN)
    if kind_name == RAID1:
        return Mapping(RAID1, (s0, s1), unwritten=unwritten)
    if kind_name == RAID5:
        return Mapping(RAID5, (s0,), unwritten=unwritten)
    return Mapping(CRAID5, (s0,), Compressed(s0, first, count, size, bool(raw_flag & FLAG_RAW)))


class MapStore:
    """The private area of a TSS device on its first two columns (module doc)."""

    def __init__(self, members: Sequence[Any], logical_stripes: int) -> None:
        self.members = list(members[:COPIES])
        self.logical_stripes = logical_stripes
        self.on_disk: list[Mapping] = [Mapping()] * logical_stripes
        self._sector_locks: dict[int, sched.Lock] = collections.defaultdict(sched.Lock)
        self._header_lock = sched.Lock()
        self.failed: set[int] = set()  # copies that failed to write (a failed column)
        self.counters: collections.Counter[str] = collections.Counter()

    @property
    def size(self) -> int:
        return private_area_bytes(self.logical_stripes)

    async def _write_copies(self, offset: int, data: bytes) -> None:
        async def one(copy: int) -> None:
            try:
                await self.members[copy].write(offset, data, fua=True)
            except OSError:
                self.failed.add(copy)

        async with sched.open_nursery() as nursery:
            for copy in range(COPIES):
                if copy not in self.failed:
                    nursery.start_soon(one, copy)
        if len(self.failed) == COPIES:
            raise OSError(5, "both copies of the TSS map table failed")

    async def write_entry(self, ls: int, entry: Mapping) -> None:
        """Record `entry` for logical stripe `ls` durably (both copies, FUA)."""
        sector = ls // RECORDS_PER_SECTOR
        async with self._sector_locks[sector]:
            self.on_disk[ls] = entry
            first = sector * RECORDS_PER_SECTOR
            raw = b"".join(encode_record(e) for e in self.on_disk[first:first + RECORDS_PER_SECTOR])
            raw += bytes(SECTOR - len(raw))
            await self._write_copies(PRIVATE_OFFSET + SECTOR + sector * SECTOR, raw)
        self.counters["map_record_writes"] += 1

    async def write_header(self, reserved: int, previous: int) -> None:
        body = HEADER.pack(HEADER_MAGIC, reserved, previous, 0)[:-4]
        raw = body + struct.pack("<I", zlib.crc32(body))
        async with self._header_lock:
            await self._write_copies(PRIVATE_OFFSET, raw + bytes(SECTOR - len(raw)))
        self.counters["map_header_writes"] += 1

    async def write_all(self, table: MapTable) -> None:
        """The whole map (creation, or a rewrite after a copy was replaced)."""
        for ls in range(self.logical_stripes):
            self.on_disk[ls] = table.entries[ls]
        await self.write_header(table.reserved, table.reserved)
        raw = b"".join(encode_record(e) for e in self.on_disk)
        raw += bytes(-len(raw) % SECTOR)
        chunk = 64 * SECTOR
        for start in range(0, len(raw), chunk):
            await self._write_copies(PRIVATE_OFFSET + SECTOR + start, raw[start:start + chunk])

    async def load(self, table: MapTable) -> MapTable:
        """The map recorded in the private area, into a fresh `table` of the same geometry
        (its entries invalid); the first copy that reads wins."""
        last_error: Exception | None = None
        for copy, member in enumerate(self.members):
            if copy in self.failed:  # a failed column's copy may be stale
                continue
            try:
                raw = await member.read(PRIVATE_OFFSET, self.size)
                return self._decode(table, raw)
            except (OSError, ValueError) as exc:
                last_error = exc
                self.counters[f"copy_{copy}_unreadable"] += 1
        raise ValueError(f"no readable copy of the TSS map table: {last_error}")

    def _decode(self, table: MapTable, raw: bytes) -> MapTable:
        body = raw[:HEADER.size - 4]
        magic, reserved, previous, crc = HEADER.unpack(raw[:HEADER.size])
        if magic != HEADER_MAGIC or zlib.crc32(body) != crc:
            raise ValueError("no TSS map header")
        entries = {}
        for ls in range(self.logical_stripes):
            at = SECTOR + ls * RECORD.size
            entry = decode_record(raw[at:at + RECORD.size], f"logical stripe {ls}")
            self.on_disk[ls] = entry
            if entry.kind != INVALID:
                entries[ls] = entry
        referenced = {ps for e in entries.values() for ps in e.stripes}
        if reserved in referenced:  # a move through the reserved stripe did not finish
            reserved = previous
        data = {"logical_stripes": table.logical_stripes, "placement": table.placement, "reserved": reserved,
                "entries": {str(ls): [e.kind, list(e.stripes),
                                      [e.compressed.stripe, e.compressed.first, e.compressed.count,
                                       e.compressed.size, e.compressed.raw] if e.compressed else None,
                                      e.unwritten]
                            for ls, e in entries.items()}}
        return MapTable.from_dict(table.geometry, data)
