"""Metadata persistence of a TSS device (Pallipadi & Gopinath §3.2: "the metadata about the
logical stripes, their mapping to the physical stripes, information about the compressed
stripes etc, needs to be persistent across reboots ... a separate private partition").

The private area is a region of the first two columns, between the engine's superblock
slots and the stripes (raidlab.engine.metadata says what the superblock holds; for TSS
it records the geometry and options):

    [PRIVATE_OFFSET, +512)           header: magic, reserved stripe, previous reserved stripe
    [PRIVATE_OFFSET + 512, ...)      one 32-byte record per logical stripe, 16 to a sector

Two copies (columns 0 and 1), so one column's failure leaves the map readable. The bitmap
of free sub-stripes is not stored: it follows from the records and is rebuilt (and checked
against them) on load, which cannot disagree with the map the way a separately written
bitmap could after a crash.

Each record, and the header, carries its own CRC32, seeded with the CRC32 of the device's
array uuid, and a sequence number (the store's count of metadata writes, 32 bits, compared
modulo 2**32), and every record is written, an invalid stripe's too. Load decodes both
copies and takes, for the header and for every logical stripe, the whole one with the newer
sequence number: a damaged piece of one copy (a flipped bit, a zeroed or torn sector, a
sector of another device's map, a sector that missed a write and is stale) is read from the
other, and only what is damaged on both copies, or a map that does not hold together, is
refused. (Format 1, HEADER_MAGIC_V1, made before: no seed, no sequence number, an all-zero
record an invalid stripe, the first copy that decodes wins. Such an area is still read, and
written in its own format.)

Order, the device's duty (raidlab.engine.tss.space): the data of a new location are written
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
from raidlab.engine.metadata import SLOT_SIZE, MetadataError
from raidlab.engine.tss.maptable import CRAID5, INVALID, RAID1, RAID5, Compressed, MapTable, Mapping

PRIVATE_OFFSET = 2 * SLOT_SIZE      # after the two superblock slots
COPIES = 2                          # columns 0 and 1
RECORD = struct.Struct("<BBBBIqqII")  # kind flags first count size s0 s1 seq crc (format 1: seq 0)
RECORDS_PER_SECTOR = SECTOR // RECORD.size
HEADER_V1 = struct.Struct("<8sqqI")   # magic reserved previous crc
HEADER = struct.Struct("<8sqqQI")     # magic reserved previous seq crc
HEADER_MAGIC_V1 = b"TSSMAP\x00\x01"
HEADER_MAGIC = b"TSSMAP\x00\x02"
KIND_CODES = {INVALID: 0, RAID1: 1, RAID5: 2, CRAID5: 3}
FLAG_RAW, FLAG_UNWRITTEN = 1, 2  # the record's flags byte
KINDS = {code: kind for kind, code in KIND_CODES.items()}
SEQ_MODULUS = 1 << 32


def owner_seed(array_uuid: str | None) -> int:
    """The CRC seed of a device's map (module doc); 0 for format 1."""
    return zlib.crc32(array_uuid.encode()) if array_uuid else 0


def newer(a: int, b: int) -> bool:
    """Sequence number `a` is after `b` (modulo 2**32: copies differ by a few writes)."""
    return a != b and (a - b) % SEQ_MODULUS < SEQ_MODULUS // 2


def private_area_bytes(logical_stripes: int) -> int:
    """Bytes of the private area for `logical_stripes` records (header sector included)."""
    return SECTOR + -(-logical_stripes // RECORDS_PER_SECTOR) * SECTOR


def encode_record(entry: Mapping, seq: int = 0, seed: int | None = None) -> bytes:
    """A record of `entry`; `seed` None: format 1 (an invalid stripe is all zeros)."""
    if entry.kind == INVALID and seed is None:
        return bytes(RECORD.size)
    c = entry.compressed
    s0 = entry.stripes[0] if entry.stripes else 0
    s1 = entry.stripes[1] if entry.kind == RAID1 else -1
    flags = (int(c.raw) if c else 0) | (FLAG_UNWRITTEN if entry.unwritten else 0)
    fields = (KIND_CODES[entry.kind], flags, c.first if c else 0, c.count if c else 0,
              c.size if c else 0, s0, s1, seq % SEQ_MODULUS if seed is not None else 0)
    body = RECORD.pack(*fields, 0)[:-4]
    return body + struct.pack("<I", zlib.crc32(body, seed or 0))


def decode_record(raw: bytes, where: str, seed: int | None = None) -> tuple[Mapping, int]:
    """(entry, sequence number) of a whole record; ValueError if it is damaged. `seed` None:
    format 1, where an all-zero record is an invalid stripe."""
    if seed is None and raw == bytes(RECORD.size):
        return Mapping(), 0
    if len(raw) != RECORD.size:
        raise ValueError(f"damaged map record at {where}")
    kind, raw_flag, first, count, size, s0, s1, seq, crc = RECORD.unpack(raw)
    if zlib.crc32(raw[:-4], seed or 0) != crc or kind not in KINDS or (kind == 0 and seed is None):
        raise ValueError(f"damaged map record at {where}")
    kind_name = KINDS[kind]
    unwritten = bool(raw_flag & FLAG_UNWRITTEN)
    if kind_name == INVALID:
        return Mapping(), seq
    if kind_name == RAID1:
        return Mapping(RAID1, (s0, s1), unwritten=unwritten), seq
    if kind_name == RAID5:
        return Mapping(RAID5, (s0,), unwritten=unwritten), seq
    return Mapping(CRAID5, (s0,), Compressed(s0, first, count, size, bool(raw_flag & FLAG_RAW))), seq


def encode_header(reserved: int, previous: int, seq: int = 0, seed: int | None = None) -> bytes:
    """The header sector's fields; `seed` None: format 1."""
    if seed is None:
        body = HEADER_V1.pack(HEADER_MAGIC_V1, reserved, previous, 0)[:-4]
        return body + struct.pack("<I", zlib.crc32(body))
    body = HEADER.pack(HEADER_MAGIC, reserved, previous, seq % SEQ_MODULUS, 0)[:-4]
    return body + struct.pack("<I", zlib.crc32(body, seed))


def decode_header(raw: bytes, seed: int) -> tuple[int, int, int, int | None] | None:
    """(format, reserved, previous, seq) of a whole header (format 1: seq None), else None.
    A format 2 header must carry this device's seed."""
    if raw[:8] == HEADER_MAGIC and len(raw) >= HEADER.size:
        magic, reserved, previous, seq, crc = HEADER.unpack_from(raw)
        if zlib.crc32(raw[:HEADER.size - 4], seed) == crc:
            return 2, reserved, previous, seq
    elif raw[:8] == HEADER_MAGIC_V1 and len(raw) >= HEADER_V1.size:
        magic, reserved, previous, crc = HEADER_V1.unpack_from(raw)
        if zlib.crc32(raw[:HEADER_V1.size - 4]) == crc:
            return 1, reserved, previous, None
    return None


class MapStore:
    """The private area of a TSS device on its first two columns (module doc), of the
    device with uuid `array_uuid` (None: format 1, the area of a device made before)."""

    def __init__(self, members: Sequence[Any], logical_stripes: int, array_uuid: str | None = None) -> None:
        self.members = list(members[:COPIES])
        self.logical_stripes = logical_stripes
        self.seed: int | None = owner_seed(array_uuid) if array_uuid else None
        self._uuid_seed = owner_seed(array_uuid) if array_uuid else 0
        self.on_disk: list[Mapping] = [Mapping()] * logical_stripes
        self.on_disk_seq: list[int] = [0] * logical_stripes
        self.seq = 0  # the last sequence number written (module doc)
        self._sector_locks: dict[int, sched.Lock] = collections.defaultdict(sched.Lock)
        self._header_lock = sched.Lock()
        self.failed: set[int] = set()  # copies that failed to write (a failed column)
        self.counters: collections.Counter[str] = collections.Counter()

    @property
    def size(self) -> int:
        return private_area_bytes(self.logical_stripes)

    def _next_seq(self) -> int:
        self.seq = (self.seq + 1) % SEQ_MODULUS
        return self.seq

    def _sector_bytes(self, sector: int) -> bytes:
        first = sector * RECORDS_PER_SECTOR
        raw = b"".join(encode_record(self.on_disk[ls], self.on_disk_seq[ls], self.seed)
                       for ls in range(first, min(first + RECORDS_PER_SECTOR, self.logical_stripes)))
        return raw + bytes(SECTOR - len(raw))

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
            self.on_disk_seq[ls] = self._next_seq()
            await self._write_copies(PRIVATE_OFFSET + SECTOR + sector * SECTOR, self._sector_bytes(sector))
        self.counters["map_record_writes"] += 1

    async def write_header(self, reserved: int, previous: int) -> None:
        raw = encode_header(reserved, previous, self._next_seq(), self.seed)
        async with self._header_lock:
            await self._write_copies(PRIVATE_OFFSET, raw + bytes(SECTOR - len(raw)))
        self.counters["map_header_writes"] += 1

    async def write_all(self, table: MapTable) -> None:
        """The whole map (creation, or a rewrite after a copy was replaced)."""
        for ls in range(self.logical_stripes):
            if self.on_disk[ls] != table.entries[ls] or not self.on_disk_seq[ls]:
                self.on_disk[ls] = table.entries[ls]
                self.on_disk_seq[ls] = self._next_seq()
        await self.write_header(table.reserved, table.reserved)
        raw = b"".join(self._sector_bytes(sector) for sector in range(-(-self.logical_stripes // RECORDS_PER_SECTOR)))
        chunk = 64 * SECTOR
        for start in range(0, len(raw), chunk):
            await self._write_copies(PRIVATE_OFFSET + SECTOR + start, raw[start:start + chunk])

    async def load(self, table: MapTable) -> MapTable:
        """The map recorded in the private area, into a fresh `table` of the same geometry
        (its entries invalid): from both copies (module doc). Raises MetadataError naming
        what is damaged when no whole, consistent map can be read."""
        raws: dict[int, bytes] = {}
        for copy, member in enumerate(self.members):
            if copy in self.failed:  # a failed column's copy may be stale
                continue
            try:
                raws[copy] = await member.read(PRIVATE_OFFSET, self.size)
            except OSError:
                self.counters[f"copy_{copy}_unreadable"] += 1
        headers = {copy: decode_header(raw, self._uuid_seed) for copy, raw in raws.items()}
        formats = {h[0] for h in headers.values() if h is not None}
        if not formats:
            raise MetadataError("no copy of the TSS map table has a whole header of this device (columns "
                                f"{', '.join(str(c) for c in sorted(raws)) or 'none'} read)",
                                hint="the map is lost: the device cannot be assembled")
        if 2 in formats:
            return self._load_newest(table, raws, headers)
        self.seed = None  # format 1: read, and written, as it was made
        return self._load_first(table, {c: raw for c, raw in raws.items() if headers[c] is not None}, headers)

    def _load_newest(self, table: MapTable, raws: dict[int, bytes], headers: dict) -> MapTable:
        """Format 2: for the header and every logical stripe, the newest whole copy."""
        best_header = None
        for copy in raws:
            if headers[copy] is None or headers[copy][0] != 2:
                continue
            _fmt, reserved, previous, seq = headers[copy]
            if best_header is None or newer(seq, best_header[2]):
                best_header = (reserved, previous, seq)
        reserved, previous, self.seq = best_header
        damaged = []
        for ls in range(self.logical_stripes):
            at = SECTOR + ls * RECORD.size
            best = None
            for copy, raw in raws.items():
                try:
                    entry, seq = decode_record(raw[at:at + RECORD.size], f"logical stripe {ls}", self._uuid_seed)
                except ValueError:
                    self.counters[f"copy_{copy}_damaged_records"] += 1
                    continue
                if best is None or newer(seq, best[1]):
                    best = (entry, seq)
            if best is None:
                damaged.append(ls)
                continue
            self.on_disk[ls], self.on_disk_seq[ls] = best
            if newer(best[1], self.seq):
                self.seq = best[1]
        if damaged:
            shown = ", ".join(str(ls) for ls in damaged[:5]) + (" ..." if len(damaged) > 5 else "")
            raise MetadataError(f"the TSS map record of logical stripe(s) {shown} is damaged on every copy "
                                f"(columns {', '.join(str(c) for c in sorted(raws))})",
                                hint="the map is lost: the device cannot be assembled")
        return self._table(table, reserved, previous, "both copies")

    def _load_first(self, table: MapTable, raws: dict[int, bytes], headers: dict) -> MapTable:
        """Format 1: the first copy that decodes whole and holds together wins."""
        problems = []
        for copy, raw in raws.items():
            _fmt, reserved, previous, _seq = headers[copy]
            try:
                for ls in range(self.logical_stripes):
                    at = SECTOR + ls * RECORD.size
                    self.on_disk[ls], self.on_disk_seq[ls] = decode_record(raw[at:at + RECORD.size],
                                                                           f"logical stripe {ls}")
                return self._table(table, reserved, previous, f"column {copy}")
            except (ValueError, MetadataError) as exc:
                problems.append(f"column {copy}: {exc}")
                self.counters[f"copy_{copy}_unreadable"] += 1
        raise MetadataError(f"no whole copy of the TSS map table ({'; '.join(problems)})",
                            hint="the map is lost: the device cannot be assembled")

    def _table(self, table: MapTable, reserved: int, previous: int, source: str) -> MapTable:
        """The MapTable of the records in `on_disk`; MetadataError if they do not hold
        together (two stripes in one place, a stripe outside the device)."""
        entries = {ls: e for ls, e in enumerate(self.on_disk) if e.kind != INVALID}
        referenced = {ps for e in entries.values() for ps in e.stripes}
        if reserved in referenced:  # a move through the reserved stripe did not finish
            reserved = previous
        data = {"logical_stripes": table.logical_stripes, "placement": table.placement, "reserved": reserved,
                "entries": {str(ls): [e.kind, list(e.stripes),
                                      [e.compressed.stripe, e.compressed.first, e.compressed.count,
                                       e.compressed.size, e.compressed.raw] if e.compressed else None,
                                      e.unwritten]
                            for ls, e in entries.items()}}
        try:
            self._check_ranges(table, reserved, entries)
            return MapTable.from_dict(table.geometry, data)
        except (AssertionError, ValueError, KeyError, IndexError) as exc:
            raise MetadataError(f"the TSS map table read from {source} does not hold together ({exc})",
                                hint="the map is damaged: the device cannot be assembled") from exc

    @staticmethod
    def _check_ranges(table: MapTable, reserved: int, entries: dict[int, Mapping]) -> None:
        g = table.geometry
        stripes = range(g.physical_stripes)
        if reserved not in stripes:
            raise ValueError(f"reserved stripe {reserved} outside 0..{g.physical_stripes - 1}")
        for ls, e in entries.items():
            if any(ps not in stripes for ps in e.stripes):
                raise ValueError(f"logical stripe {ls} maps outside the device: {e.stripes}")
            c = e.compressed
            if c is not None and not (1 <= c.count and 0 <= c.first and c.first + c.count <= g.substripes):
                raise ValueError(f"logical stripe {ls} has sub-stripes {c.first}+{c.count} of {g.substripes}")
