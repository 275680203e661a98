"""The cache-disk log shared by DCD and VC-RAID: records with summary sectors, LWFD pops,
and the scan that rebuilds the mapping after a crash.

Papers: DCD (Hu & Yang, ISCA 96) §2.1 (log writes at the Current Log Position, CLP), §2.3
(Last-Write-First-Destage: a destage segment is read back *from the CLP*, holes left by
overwrites are dropped, the segment is marked blank and the CLP moves back), §2.5 (a summary
sector with each log write; recovery scans the cache-disk and rebuilds the mapping).
VC-RAID (He & Yang) §3.2: the cache disk holds "cache disk headers" of cache-disk-block-index
/ array-LBA pairs, used only for crash recovery; our summary sectors are those headers.

Why one module: both architectures put a log on a disk in front of slower storage and
destage it last-write-first. Since LWFD moves the CLP *back*, the log is a stack: it grows
from the start of the log region, and a destage pops records off its top.

On-disk record (sector aligned, written with one FUA write):

    summary sector(s): HEADER | extents (u64 first block address, u32 block count) ...
    data blocks:       n_blocks x block_size, in extent order

HEADER carries a magic, the log id (from the architecture's uuid, so a record of a former
architecture on the same disk is never taken), a sequence number, the kind (data or
tombstone), and two CRC32s (summary, data): a torn log write fails a checksum and ends the
chain; the scan never goes past it.

Where this departs from the papers, and why:

* Stale records above the top. After a pop the bytes above the CLP still hold old records.
  Each pop therefore writes a *marker* at the new CLP (the paper's "marked as blank"): an
  end record (below), in the older layouts a blank sector. The scan also requires sequence
  numbers to increase along the chain, and every assembly starts a new epoch (the
  superblock generation is the high bits of every sequence number), so an old record that
  happens to sit right after the top can never extend the chain.
* Ends of the chain (every log made now: geometry key `log_end_markers`). A pop's marker,
  and the start of an empty log, is an *end record*: one sector with its own sequence
  number, taken after every record it pops. So whatever the chain ends at, a whole record
  after it with a larger number than the chain's top and than the end's own is proof of
  damage, not of a crash (CacheDiskLog._check_end), and so is a newer end record: the
  records below a marker were whole when it was written. A record zeroed, overwritten by a
  stale or foreign one, or damaged beyond recognition in the middle of the log is refused at
  assembly, never taken for the end of the log with the acknowledged writes after it lost.
  The older layouts' marker is a blank sector, which cannot be told from a zeroed record.
  What no format can tell from a torn last write: damage to the top record when nothing
  was written after it.
* Tombstones. LWFD destages the *newest* copy of a block first, while older copies of the
  same block may remain lower in the stack (holes). Replaying the log after a crash would
  resurrect such an older copy over the newer data already on the data disk; the papers do
  not discuss this. So a pop (and a large write that bypasses the log) leaves a tombstone
  record listing every block that has copies in the log but whose current version is on
  the data disk ("superseded"), each with a *bound*: the sequence number of the newest copy
  that went home. Recovery replays records in sequence order: a data record maps its
  blocks, a tombstone unmaps a block whose mapped copy is not newer than its bound. A
  tombstone entry stays true for ever (the copies up to its bound are older than what went
  home; later copies have larger sequence numbers, new epochs included), so a stale
  tombstone hides nothing live.
  The bound (rather than "everything before the tombstone") matters with several cache
  disks (VC-RAID mcd): a newer log write of the block may be in flight on another cache
  disk while the tombstone is written, with a smaller sequence number (allocated before).
* The tombstone area (LAYOUT_AREA, every log made now). Tombstones are not on the stack:
  they are appended (FUA, before the pop's blank marker) to an area at the end of the log
  region, in two halves, each sized for the largest possible tombstone (one 20-byte extent
  per block of all log regions: ~2% of a log of 1 KiB blocks, ~4% of DCD's log of 512-byte
  blocks, per half). A tombstone carries only the entries no earlier one carries (those
  this pop or large write added or raised). When the current half is full, the whole
  superseded set is written at the start of the other half, which becomes current; the
  full half stays intact until then, so a torn write loses nothing. Recovery applies the
  tombstones of both halves (each a chain of increasing sequence numbers from its start).
  A torn tombstone means its pop's marker was never written: the popped records are still
  in the chain and map the copies that went home.
  Why: the two older layouts kept tombstones on the stack, where the next pop took the top
  one off and its still-superseded entries had to be written again. With a full cache
  disk under a synchronous workload every pop then rewrote the whole set (Fig. 7 sync,
  mcd: ~10,700 entries, ~214 KB written twice and read back for each pop, whose 64 KB
  segment then held one ~7 KB data record: 15,459 forced pops moved 152 MB in 1,930 s).
* The older layouts, still assembled (geometry keys: see LOG_GEOMETRY). LAYOUT_JOURNAL
  (cf7eb3e): a pop's marker is a tombstone at the new CLP when there are unrecorded
  entries, and the still-superseded entries of tombstones a pop takes off the stack are
  unrecorded again. A marker longer than one sector is first written (FUA) to a journal
  slot at the end of the log region (sized as one area half), then at the CLP, since a
  crash that tears a marker of several sectors ends the chain there and what it hid would
  come back; recovery also applies the journal slot, and its entries are carried again by
  the next marker. LAYOUT_PLAIN (before cf7eb3e): the same without the journal slot; the
  marker is written in place only.
* The paper's LWFD also "picks up the current destage segment from the RAM buffer" when the
  newest writes are still there; we always read the segment back from the cache-disk (one
  sequential read) to keep one destage path.

Oldest-first destage (ORDER_OLDEST, geometry `destage_order = "oldest"`; no key: LWFD). An
ablation, not the papers': every destage takes the *oldest* records, at the bottom of the
log, instead of the top, so the log is circular. Log writes go on at the head (the CLP); a
destage frees space at the tail; a record that does not fit between the head and the end
of the log goes to the start of the region (the head wraps) if the tail has moved on far
enough. What it costs or gains: the oldest copy of a block is the likeliest to have been
overwritten since, so more of a tail segment are holes, read back but never written home,
and a copy goes home only if no newer one was logged meanwhile; LWFD writes home the
newest copies, which may be overwritten and destaged again, but keeps the log a stack, so
its reads for destaging are next to where the head writes (DCD §2.3: "the disk head is
always physically close to the blank track"), where a circular log's tail may be anywhere.

* Where the chain starts: a *tail record* (one sector, FUA, KIND_TAIL) holds the offset of
  the oldest record in the chain and a *floor*: the sequence number of the newest record
  destaged so far. Every destage of a tail segment writes one, after the live blocks are
  durable at home and after its tombstone, and before the log lock is released, so no log
  write can reuse the freed space before the chain no longer starts in it. Two tail slots
  (one sector each, at the end of the log, before the tombstone area) take them in turn;
  the scan uses the whole one with the larger sequence number. A crash before the tail record
  lands leaves the old tail, whose records are all still there: they map copies that went
  home, as a popped segment does when LWFD's marker was not written.
* The scan walks from the tail to the end of the log, then from the start of the region up
  to the tail, each step requiring a sequence number above the one before (the first above
  the floor). No wrap marker is needed: everything left of a former lap (before the head,
  after the wrap point, or in the space the tail has freed) was destaged, so its sequence
  numbers are at most the floor and below every record of the chain. An empty log starts
  again at the start of the region, and its tail record says so; recovery rewrites the
  tail record when the chain it found starts elsewhere (a log write lost from the cache
  disk's cache under VC-RAID's durability=paper), so the tail record always names the
  first record of the chain the next scan must find.
* Tombstones keep their meaning. Within one log a destaged live copy is the oldest of its
  block there, so no tombstone is needed for it; a newer copy higher up makes the older one
  a hole, dropped and never written home; the newer copy is written home when the tail
  reaches it. With several cache disks (VC-RAID mcd) a block destaged from one log may
  still have an older copy in another, and a large write (DCD) may supersede logged
  copies: those are "superseded" and recorded in tombstones exactly as under LWFD.
  Tombstones on the stack (the older layouts) do not fit a circular log: oldest-first
  needs LAYOUT_AREA.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import struct
import zlib
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any

from raidlab import sched
from raidlab.blockdev import SECTOR
from raidlab.engine.metadata import MetadataError

MAGIC = b"RLCDLOG1"
# magic, log id, seq, kind, n_summary_sectors, n_extents, n_blocks, block_size, data_crc, summary_crc
HEADER = struct.Struct("<8sQQB3xIIIIII")
# The three bytes after the kind: zero in the older layouts; with end markers, the state of
# the log's tombstone area when a data or end record was written (module doc: ends of the
# chain), `area_word`. Covered by the summary checksum like the rest of the header.
AREA_BYTES = slice(25, 28)
EXTENT = struct.Struct("<QI")
TOMB_EXTENT = struct.Struct("<QIQ")  # first address, count, bound (see module doc: tombstones)
TAIL = struct.Struct("<QQ")  # offset of the chain's oldest record, floor (module doc: oldest-first)
KIND_DATA, KIND_TOMBSTONE, KIND_TAIL, KIND_END = 1, 2, 3, 4
BLANK_SECTOR = bytes(SECTOR)
# Default start of the log region on a cache disk: [0, 8 KiB) holds the superblock slots
# (raidlab.engine.metadata), the rest up to 64 KiB is reserved.
DEFAULT_LOG_START = 64 * 1024
EPOCH_SHIFT = 40
# How far past the end of a chain the scan looks for newer records (CacheDiskLog._check_end).
CHECK_WINDOW = 256 * 1024


def area_word(half: int, pos: int) -> int:
    """The tombstone area's state (current half, bytes used in it) in the three header bytes:
    0 when it does not fit (no claim is made)."""
    sectors = pos // SECTOR
    return 1 | half << 1 | sectors << 2 if sectors < 1 << 22 else 0


def area_of(word: int) -> tuple[int, int] | None:
    """(half, bytes used) that `area_word` encoded, or None for no claim."""
    return ((word >> 1) & 1, (word >> 2) * SECTOR) if word & 1 else None


def _with_area(header: bytes, word: int) -> bytes:
    return header[:AREA_BYTES.start] + word.to_bytes(3, "little") + header[AREA_BYTES.stop:]


def _area_word_in(raw: bytes) -> int:
    return int.from_bytes(raw[AREA_BYTES], "little")


def log_id_of(array_uuid: str) -> int:
    """The log id (HEADER) of the logs of the architecture with this uuid."""
    return int(array_uuid.replace("-", "")[:16], 16)


def extents_of(addresses: Iterable[int]) -> list[tuple[int, int]]:
    """Runs of consecutive block addresses, in the given order: [(first, count), ...]."""
    runs: list[tuple[int, int]] = []
    for addr in addresses:
        if runs and runs[-1][0] + runs[-1][1] == addr:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((addr, 1))
    return runs


def runs_of(blocks: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """(first address, joined data) of each run of consecutive addresses, in address order."""
    runs: list[tuple[int, list[bytes]]] = []
    last = None
    for addr, data in sorted(blocks):
        if runs and last is not None and addr == last + 1:
            runs[-1][1].append(data)
        else:
            runs.append((addr, [data]))
        last = addr
    return [(addr, b"".join(parts)) for addr, parts in runs]


def summary_sectors_for(n_extents: int, kind: int = KIND_DATA) -> int:
    extent = TOMB_EXTENT if kind == KIND_TOMBSTONE else EXTENT
    return -(-(HEADER.size + extent.size * n_extents) // SECTOR)


def record_bytes(n_extents: int, n_blocks: int, block_size: int, kind: int = KIND_DATA) -> int:
    """Bytes a record with these many extents and blocks occupies on the cache disk."""
    return summary_sectors_for(n_extents, kind) * SECTOR + n_blocks * block_size


def tombstone_runs(bounds: dict[int, int]) -> list[tuple[int, int, int]]:
    """A tombstone's extents: (first address, count, bound), runs of consecutive addresses
    with one bound."""
    runs: list[tuple[int, int, int]] = []
    for addr in sorted(bounds):
        bound = bounds[addr]
        if runs and runs[-1][0] + runs[-1][1] == addr and runs[-1][2] == bound:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1, bound)
        else:
            runs.append((addr, 1, bound))
    return runs


# The layout of a cache-disk log is recorded in its array's geometry (module doc):
#   no key:                    LAYOUT_PLAIN, made before cf7eb3e; records may reach the region's end
#   log_journal = 1:           LAYOUT_JOURNAL, one marker journal slot at the region's end (cf7eb3e)
#   log_journal = 1, log_tombstone_area = 1: LAYOUT_AREA, tombstones in their own area (every
#                              log made now; LOG_GEOMETRY)
LAYOUT_PLAIN, LAYOUT_JOURNAL, LAYOUT_AREA = "plain", "journal", "area"
#   log_end_markers = 1:       a pop's marker (and an empty log's start) is an end record with
#                              a sequence number, not a blank sector (module doc: ends of the chain)
LOG_GEOMETRY = {"log_journal": 1, "log_tombstone_area": 1, "log_end_markers": 1}
# The destage order, geometry key `destage_order` (no key: LWFD, the papers'); oldest-first
# is the ablation of the module doc, with a circular log and two tail slots.
ORDER_LWFD, ORDER_OLDEST = "lwfd", "oldest"
DESTAGE_ORDERS = (ORDER_LWFD, ORDER_OLDEST)
TAIL_SLOTS_BYTES = 2 * SECTOR


def log_layout(geometry: dict) -> str:
    """The layout of the logs of the array whose superblock geometry this is."""
    if geometry.get("log_tombstone_area"):
        return LAYOUT_AREA
    return LAYOUT_JOURNAL if geometry.get("log_journal") else LAYOUT_PLAIN


def end_markers_of(geometry: dict) -> bool:
    """Whether the logs of the array whose superblock geometry this is mark the end of their
    chain with end records (module doc: ends of the chain) rather than blank sectors."""
    return bool(geometry.get("log_end_markers"))


def destage_order_of(geometry: dict) -> str:
    """The destage order of the logs of the array whose superblock geometry this is."""
    return geometry.get("destage_order", ORDER_LWFD)


def marker_journal_bytes(region_bytes: Sequence[int], block_size: int) -> int:
    """The largest possible tombstone (module doc): one naming every block of all the log
    regions, one extent each. A journal slot, and each half of a tombstone area, hold one."""
    most = sum(max(r, 0) // block_size for r in region_bytes)
    return record_bytes(most, 0, block_size, KIND_TOMBSTONE)


def reserved_bytes(region_bytes: Sequence[int], block_size: int, layout: str = LAYOUT_AREA,
                   order: str = ORDER_LWFD) -> int:
    """What each log region gives up at its end for `layout`: nothing, the journal slot, or
    the two halves of the tombstone area; and for oldest-first, the two tail slots."""
    if layout == LAYOUT_PLAIN:
        return 0
    slot = marker_journal_bytes(region_bytes, block_size)
    tail = TAIL_SLOTS_BYTES if order == ORDER_OLDEST else 0
    return (2 * slot if layout == LAYOUT_AREA else slot) + tail


def max_record_bytes(n_blocks: int, block_size: int) -> int:
    """Worst case (no two blocks adjacent) for a log write of n_blocks blocks."""
    return record_bytes(n_blocks, n_blocks, block_size)


def encode_record(log_id: int, seq: int, kind: int, addresses: Sequence[int],
                  data: bytes, block_size: int, bounds: dict[int, int] | None = None, area: int = 0) -> bytes:
    """One record; `addresses` in data order (data records), or for a tombstone `bounds`
    (address -> the newest sequence number of the copies it hides); `area`: an `area_word`."""
    if kind == KIND_TOMBSTONE:
        tomb = tombstone_runs(bounds or {})
        n_summary = summary_sectors_for(len(tomb), kind)
        body = b"".join(TOMB_EXTENT.pack(a, n, b) for a, n, b in tomb)
        runs_count = len(tomb)
    else:
        runs = extents_of(addresses)
        n_summary = summary_sectors_for(len(runs))
        body = b"".join(EXTENT.pack(a, n) for a, n in runs)
        runs_count = len(runs)
    n_blocks = len(addresses) if kind == KIND_DATA else 0
    if kind == KIND_DATA and len(data) != n_blocks * block_size:
        raise ValueError("data does not match the addresses")
    data_crc = zlib.crc32(data) if kind == KIND_DATA else 0
    unsigned = _with_area(HEADER.pack(MAGIC, log_id, seq, kind, n_summary, runs_count, n_blocks,
                                      block_size, data_crc, 0), area) + body
    summary = unsigned.ljust(n_summary * SECTOR, b"\0")
    crc = zlib.crc32(summary)
    summary = _with_area(HEADER.pack(MAGIC, log_id, seq, kind, n_summary, runs_count, n_blocks,
                                     block_size, data_crc, crc), area) + summary[HEADER.size:]
    return summary + (data if kind == KIND_DATA else b"")


def _encode_sector(log_id: int, seq: int, kind: int, payload: bytes, block_size: int, area: int = 0) -> bytes:
    """A one-sector record of `kind` (a tail or an end record) carrying `payload`."""
    fields = (MAGIC, log_id, seq, kind, 1, 0, 0, block_size, 0)
    sector = (_with_area(HEADER.pack(*fields, 0), area) + payload).ljust(SECTOR, b"\0")
    return _with_area(HEADER.pack(*fields, zlib.crc32(sector)), area) + sector[HEADER.size:]


def _parse_sector(raw: bytes, log_id: int, block_size: int, kind: int) -> int | None:
    """The sequence number of a whole one-sector record of `kind` of this log, else None."""
    if len(raw) != SECTOR:
        return None
    magic, lid, seq, got, n_summary, n_ext, n_blocks, bsize, dcrc, crc = HEADER.unpack_from(raw)
    if magic != MAGIC or lid != log_id or got != kind or bsize != block_size:
        return None
    zeroed = _with_area(HEADER.pack(magic, lid, seq, got, n_summary, n_ext, n_blocks, bsize, dcrc, 0),
                        _area_word_in(raw))
    if zlib.crc32(zeroed + raw[HEADER.size:]) != crc:
        return None
    return seq


def encode_tail(log_id: int, seq: int, offset: int, floor: int, block_size: int) -> bytes:
    """A tail record (module doc: oldest-first): one sector naming where the chain starts."""
    return _encode_sector(log_id, seq, KIND_TAIL, TAIL.pack(offset, floor), block_size)


def parse_tail(raw: bytes, log_id: int, block_size: int) -> tuple[int, int, int] | None:
    """(seq, offset, floor) of a whole tail record of this log in `raw` (one sector), else None."""
    seq = _parse_sector(raw, log_id, block_size, KIND_TAIL)
    if seq is None:
        return None
    offset, floor = TAIL.unpack_from(raw, HEADER.size)
    return seq, offset, floor


def encode_end(log_id: int, seq: int, block_size: int, area: int = 0) -> bytes:
    """An end record (module doc: ends of the chain): one sector, where the chain stops;
    `area`: an `area_word`."""
    return _encode_sector(log_id, seq, KIND_END, b"", block_size, area)


def parse_end(raw: bytes, log_id: int, block_size: int) -> int | None:
    """The sequence number of a whole end record of this log in `raw` (one sector), else None."""
    return _parse_sector(raw, log_id, block_size, KIND_END)


@dataclasses.dataclass
class ParsedSummary:
    seq: int
    kind: int
    n_summary: int
    n_blocks: int
    data_crc: int
    addresses: list[int]
    bounds: list[int] | None = None  # tombstones: per address
    area: int = 0                    # an area_word, or 0


def parse_first_sector(raw: bytes, log_id: int, block_size: int) -> tuple[int, int] | None:
    """(seq, n_summary_sectors) if `raw` starts a record of this log, else None."""
    if len(raw) < HEADER.size:
        return None
    magic, lid, seq, kind, n_summary, _n_ext, _n_blocks, bsize, _dcrc, _scrc = HEADER.unpack_from(raw)
    if magic != MAGIC or lid != log_id or bsize != block_size or kind not in (KIND_DATA, KIND_TOMBSTONE):
        return None
    if n_summary < 1:
        return None
    return seq, n_summary


def parse_summary(summary: bytes, log_id: int, block_size: int) -> ParsedSummary | None:
    """Decode and check the summary sectors of a record (None if torn or foreign)."""
    first = parse_first_sector(summary, log_id, block_size)
    if first is None:
        return None
    magic, lid, seq, kind, n_summary, n_ext, n_blocks, bsize, data_crc, crc = HEADER.unpack_from(summary)
    extent = TOMB_EXTENT if kind == KIND_TOMBSTONE else EXTENT
    if len(summary) != n_summary * SECTOR or HEADER.size + n_ext * extent.size > len(summary):
        return None
    zeroed = _with_area(HEADER.pack(magic, lid, seq, kind, n_summary, n_ext, n_blocks, bsize, data_crc, 0),
                        _area_word_in(summary))
    if zlib.crc32(zeroed + summary[HEADER.size:]) != crc:
        return None
    addresses: list[int] = []
    bounds: list[int] | None = None
    if kind == KIND_TOMBSTONE:
        bounds = []
        for i in range(n_ext):
            first_addr, count, bound = TOMB_EXTENT.unpack_from(summary, HEADER.size + i * TOMB_EXTENT.size)
            addresses.extend(range(first_addr, first_addr + count))
            bounds.extend([bound] * count)
    else:
        for i in range(n_ext):
            first_addr, count = EXTENT.unpack_from(summary, HEADER.size + i * EXTENT.size)
            addresses.extend(range(first_addr, first_addr + count))
    if kind == KIND_DATA and len(addresses) != n_blocks:
        return None
    return ParsedSummary(seq, kind, n_summary, n_blocks, data_crc, addresses, bounds, _area_word_in(summary))


@dataclasses.dataclass
class LogRecord:
    """A record of the chain as kept in memory (its data stays on the cache disk)."""

    seq: int
    offset: int          # byte offset of its first summary sector on the cache disk
    kind: int
    addresses: list[int]
    summary_bytes: int
    block_size: int
    bounds: list[int] | None = None  # tombstones: per address, the newest seq it hides

    @property
    def length(self) -> int:
        n = len(self.addresses) if self.kind == KIND_DATA else 0
        return self.summary_bytes + n * self.block_size

    @property
    def end(self) -> int:
        return self.offset + self.length

    def block_offset(self, index: int) -> int:
        return self.offset + self.summary_bytes + index * self.block_size


class CacheDiskLog:
    """The stack-shaped log on one cache disk: region [start, end) of `target`; circular
    after `reserve_tail` (module doc: oldest-first).

    The caller serialises what changes the log through `lock` (log writes, destage steps).
    Reads of cached blocks do not take it: they pin the ranges they read (`pinned`), and a
    write into a pinned range (a popped region reused by the next log write) waits.
    """

    def __init__(self, target: Any, index: int, start: int, end: int, block_size: int, log_id: int):
        self.target = target
        self.index = index
        self.start = start
        self.end = end  # of the log; [end, region_end) is the journal slot or tombstone area
        self.region_end = end
        self.block_size = block_size
        self.log_id = log_id
        self.records: list[LogRecord] = []
        self.lock = sched.Lock()
        self.data_fua = True  # data records written FUA (VC-RAID's durability=paper: plain writes)
        self.end_markers = False  # the chain's ends are end records (LogStore: end_markers)
        # The newest record of the chain (or its end record) that states the tombstone area:
        # (its sequence number, the area_word), found by `scan`, checked by `scan_area`.
        self.vouched: tuple[int, int] | None = None
        # Byte ranges of this log being read now (`pinned`): a write into one waits.
        self._pins: list[tuple[int, int]] = []
        self._unpinned = sched.Event()
        self.pin_waits = 0
        # The tombstone area (LAYOUT_AREA): two halves of `area_half` bytes from `end`;
        # tombstones are appended to the current half at `area_pos`.
        self.area_half = 0
        self.area_current = 0
        self.area_pos = 0
        self.area_start = end
        # Oldest-first (module doc): records in chain order from the tail; the two tail slots
        # at `tail_start`, the next tail record going to `_tail_slot`; `floor` the newest
        # sequence number destaged; `durable_tail` the offset the newest tail record names.
        self.circular = False
        self.tail_start = 0
        self._tail_slot = 0
        self.tail_seq = -1
        self.floor = -1
        self.durable_tail = start
        # Sequence numbers on the disk are below this (the epoch after the store's; set by
        # LogStore.recover): one at or above it names a record whose own header is damaged.
        self.seq_ceiling: int | None = None
        self.wraps = 0
        self.wrap_end = start  # while wrapped: the end of the last record before the wrap

    @contextlib.contextmanager
    def pinned(self, ranges: Iterable[tuple[int, int]]) -> Iterator[None]:
        """Keep the byte ranges [start, end) of cached blocks from being overwritten while the
        caller reads them, without holding `lock`: a read then never waits for a log write
        or a destage step, nor they for it, unless the log reuses a popped region the read
        still covers (its blocks were destaged meanwhile; the bytes read are still theirs).
        Pin synchronously right after looking the blocks up, so no pop can come between."""
        ranges = list(ranges)
        self._pins.extend(ranges)
        try:
            yield
        finally:
            for r in ranges:
                self._pins.remove(r)
            self._unpinned.set()
            self._unpinned = sched.Event()

    async def _wait_unpinned(self, start: int, end: int) -> None:
        while any(s < end and start < e for s, e in self._pins):
            self.pin_waits += 1
            await self._unpinned.wait()

    def reserve_journal(self, nbytes: int) -> None:
        """Take the marker journal slot (module doc, `nbytes` whole sectors) off the end of
        the region."""
        self._reserve(nbytes, "marker journal")

    def reserve_area(self, half: int) -> None:
        """Take the tombstone area (module doc: two halves of `half` bytes) off the end."""
        self._reserve(2 * half, "tombstone area")
        self.area_half = half
        self.area_start = self.end

    def reserve_tail(self) -> None:
        """Make the log circular (module doc: oldest-first): take the two tail slots off the
        end of the log, before the tombstone area."""
        if self.end - TAIL_SLOTS_BYTES <= self.start:
            raise ValueError(f"log {self.index}: region of {self.region_end - self.start} bytes "
                             f"has no room for its tail slots")
        self.end -= TAIL_SLOTS_BYTES
        self.tail_start = self.end
        self.circular = True

    def _reserve(self, nbytes: int, what: str) -> None:
        if nbytes >= self.region_end - self.start:
            raise ValueError(f"log {self.index}: region of {self.region_end - self.start} bytes "
                             f"has no room for a {nbytes}-byte {what}")
        self.end = self.region_end - nbytes

    def _half_start(self, half: int) -> int:
        return self.area_start + half * self.area_half

    async def area_append(self, seq: int, bounds: dict[int, int], *, compact: bool = False) -> bool:
        """Write a tombstone to the tombstone area (FUA): after the current half's last one,
        or with `compact` (the whole superseded set) at the start of the other half, which
        then becomes current. False if it does not fit after the current half's last one."""
        raw = encode_record(self.log_id, seq, KIND_TOMBSTONE, [], b"", self.block_size, bounds)
        half, pos = (1 - self.area_current, 0) if compact else (self.area_current, self.area_pos)
        if pos + len(raw) > self.area_half:
            if compact:
                raise RuntimeError(f"log {self.index}: a tombstone of {len(raw)} bytes exceeds its "
                                   f"area's half of {self.area_half} bytes")
            return False
        await self.target.write(self._half_start(half) + pos, raw, fua=True)
        self.area_current, self.area_pos = half, pos + len(raw)
        return True

    async def scan_area(self) -> list[LogRecord]:
        """The tombstones of both halves of the area (each half a chain of increasing sequence
        numbers from its start); the half with the newest one becomes current, and the next
        append goes after it."""
        found: list[LogRecord] = []
        newest = (-1, 0, 0)
        for half in (0, 1):
            base, pos, last = self._half_start(half), 0, -1
            while True:
                parsed = await self._summary_at(base + pos, base + self.area_half, last)
                if parsed is None or parsed.kind != KIND_TOMBSTONE:
                    if last >= 0:  # a half's first tombstone may sit on an earlier use's: no bar yet
                        await self._check_end(base + pos, base + self.area_half, last, always_fua=True)
                    break
                found.append(LogRecord(parsed.seq, base + pos, KIND_TOMBSTONE, parsed.addresses,
                                       parsed.n_summary * SECTOR, self.block_size, parsed.bounds))
                pos += parsed.n_summary * SECTOR
                last = parsed.seq
            if last > newest[0]:
                newest = (last, half, pos)
        _, self.area_current, self.area_pos = newest
        self._check_area(newest[0])
        return found

    async def clear_area(self) -> None:
        for half in (0, 1):
            await self.target.write(self._half_start(half), BLANK_SECTOR, fua=True)
        self.area_current = self.area_pos = 0

    @property
    def clp(self) -> int:
        """Current Log Position: where the next log write goes (a circular log's head: if the
        write fits before the end of the log)."""
        return self.records[-1].end if self.records else self.start

    @property
    def tail(self) -> int:
        """Where the chain starts: the oldest record (the start of the region if none)."""
        return self.records[0].offset if self.records else self.start

    @property
    def wrapped(self) -> bool:
        """A circular log whose head has gone round to the start of the region, behind its tail."""
        return len(self.records) > 1 and self.records[-1].offset < self.records[0].offset

    @property
    def capacity(self) -> int:
        return self.end - self.start

    @property
    def used(self) -> int:
        """Bytes of the log its records hold (a wrapped log: not counting what its head
        skipped at the end, so that both orders' watermarks weigh the same data)."""
        if not self.circular:
            return self.clp - self.start
        if self.wrapped:
            return (self.wrap_end - self.tail) + (self.clp - self.start)
        return self.clp - self.tail

    @property
    def free(self) -> int:
        """The largest log write that fits now."""
        if not self.circular:
            return self.end - self.clp
        if not self.records:
            return self.end - self.start
        if self.wrapped:
            return self.tail - self.clp
        return max(self.end - self.clp, self.tail - self.start)

    def _place(self, nbytes: int) -> int | None:
        """Where a record of `nbytes` goes: the CLP, or (circular) the start of the region
        when it does not fit before the end of the log and the tail has moved on; None if
        it fits nowhere."""
        if nbytes > self.free:
            return None
        if self.circular and self.records and not self.wrapped and self.clp + nbytes > self.end:
            return self.start
        return self.clp

    def _area_word(self) -> int:
        """What a data or end record written now states of the tombstone area (module doc:
        ends of the chain); 0 without end markers."""
        return area_word(self.area_current, self.area_pos) if self.end_markers and self.area_half else 0

    async def write_record(self, seq: int, kind: int, addresses: list[int], data: bytes,
                           bounds: dict[int, int] | None = None, journal: bool = False) -> LogRecord:
        """Append one record at the CLP (or the start, wrapping a circular log); `journal`: a
        marker, copied to the journal slot first when longer than a sector (module doc)."""
        raw = encode_record(self.log_id, seq, kind, addresses, data, self.block_size, bounds,
                            self._area_word() if kind == KIND_DATA else 0)
        offset = self._place(len(raw))
        if offset is None:
            raise RuntimeError(f"log {self.index}: record of {len(raw)} bytes does not fit ({self.free} free)")
        await self._wait_unpinned(offset, offset + len(raw))
        if journal and len(raw) > SECTOR:
            if len(raw) > self.region_end - self.end:
                raise RuntimeError(f"log {self.index}: marker of {len(raw)} bytes exceeds its journal slot")
            await self.target.write(self.end, raw, fua=True)
        await self.target.write(offset, raw, fua=self.data_fua or kind != KIND_DATA)
        summary_bytes = len(raw) - (len(data) if kind == KIND_DATA else 0)
        if kind == KIND_TOMBSTONE:
            addresses = sorted(bounds or {})
        rec = LogRecord(seq, offset, kind, list(addresses), summary_bytes, self.block_size,
                        [bounds[a] for a in addresses] if kind == KIND_TOMBSTONE else None)
        if self.records and offset < self.records[-1].offset:
            self.wraps += 1
            self.wrap_end = self.records[-1].end
        self.records.append(rec)
        return rec

    async def write_tail(self, seq: int, floor: int) -> None:
        """Record where the chain starts now (module doc: oldest-first), FUA, in the slot that
        does not hold the newest tail record; `floor`: the newest sequence number destaged."""
        self.floor = floor
        raw = encode_tail(self.log_id, seq, self.tail, floor, self.block_size)
        await self.target.write(self.tail_start + self._tail_slot * SECTOR, raw, fua=True)
        self._tail_slot ^= 1
        self.tail_seq, self.durable_tail = seq, self.tail

    async def read_tail(self) -> tuple[int, int]:
        """(offset, floor) of the newest whole tail record. The next tail record goes to the
        other slot. `format` writes a tail record, and each later one goes to the slot not
        holding the newest, so a crash can tear one slot only: a log with no whole tail
        record is damaged, and where its chain starts is not known. That is refused
        (MetadataError) rather than guessed: walked from the start of the region, the
        chain would take destaged records back and miss the live ones after the tail."""
        best: tuple[int, int, int, int] | None = None
        for slot in (0, 1):
            raw = await self.target.read(self.tail_start + slot * SECTOR, SECTOR)
            parsed = parse_tail(raw, self.log_id, self.block_size)
            if parsed is not None and self.start <= parsed[1] < self.end and (best is None or parsed[0] > best[0]):
                best = (*parsed, slot)
        if best is None:
            raise self.damaged(f"neither tail record slot (bytes {self.tail_start}..{self.tail_start + 2 * SECTOR}) "
                               f"holds a whole tail record")
        seq, offset, floor, slot = best
        self._tail_slot, self.tail_seq, self.durable_tail = 1 - slot, seq, offset
        return offset, floor

    def damaged(self, what: str) -> MetadataError:
        """The refusal of a log whose damage recovery cannot get round (`what` is wrong)."""
        name = getattr(self.target, "name", f"cache disk {self.index}")
        return MetadataError(f"{name}: the cache-disk log is damaged: {what}",
                             hint="its logged writes cannot all be recovered; the cache disk cannot be assembled",
                             member=name)

    async def clear_tail(self, seq: int, floor: int) -> None:
        """An empty circular log: the second slot blank, then a tail record at the start."""
        await self.target.write(self.tail_start + SECTOR, BLANK_SECTOR, fua=True)
        self._tail_slot = 0
        await self.write_tail(seq, floor)

    async def write_blank(self, offset: int) -> None:
        if offset < self.end:
            await self._wait_unpinned(offset, offset + SECTOR)
            await self.target.write(offset, BLANK_SECTOR, fua=True)

    async def write_end(self, offset: int, seq: int) -> None:
        """Where the chain stops (module doc: ends of the chain): an end record numbered
        `seq` with end markers, else a blank sector."""
        if not self.end_markers:
            await self.write_blank(offset)
        elif offset < self.end:
            await self._wait_unpinned(offset, offset + SECTOR)
            await self.target.write(offset, encode_end(self.log_id, seq, self.block_size, self._area_word()),
                                    fua=True)

    async def clear_journal(self) -> None:
        if self.end < self.region_end:
            await self.target.write(self.end, BLANK_SECTOR, fua=True)

    async def read_journal(self) -> ParsedSummary | None:
        """The tombstone in the journal slot, if one of this log is there whole."""
        parsed = await self._summary_at(self.end, self.region_end)
        return parsed if parsed is not None and parsed.kind == KIND_TOMBSTONE else None

    async def _summary_at(self, pos: int, limit: int, after_seq: int = -1) -> ParsedSummary | None:
        """The checked summary of a record of this log at `pos` whose summary sectors end
        by `limit` and whose sequence number is above `after_seq`, else None."""
        if pos + SECTOR > limit:
            return None
        first = parse_first_sector(await self.target.read(pos, SECTOR), self.log_id, self.block_size)
        if first is None or first[0] <= after_seq or pos + first[1] * SECTOR > limit:
            return None
        return parse_summary(await self.target.read(pos, first[1] * SECTOR), self.log_id, self.block_size)

    async def scan(self) -> list[LogRecord]:
        """Walk the chain from the start of the region (DCD §2.5): every record whose
        checksums hold and whose sequence number is above its predecessor's. A circular log:
        from its tail record's offset to the end of the log, then from the start of the
        region up to that offset (module doc: oldest-first)."""
        await self._check_owner()
        self.vouched = None
        if not self.circular:
            chain = await self._walk(self.start, self.end, -1)
        else:
            tail, self.floor = await self.read_tail()
            chain = await self._walk(tail, self.end, self.floor)
            if tail > self.start:
                wrapped = await self._walk(self.start, tail, chain[-1].seq if chain else self.floor)
                if chain and wrapped:
                    self.wrap_end = chain[-1].end
                chain += wrapped
        self.records = chain
        return chain

    async def _check_owner(self) -> None:
        """Refuse a log whose region starts with a whole record of another log: `format`
        blanks the start of the region and only this log writes there after, so the
        superblock that gave this log its id is not the one of the records (a slot of
        another array, or another array's log region)."""
        first = await self.target.read(self.start, SECTOR)
        if len(first) < HEADER.size:
            return
        magic, lid, _seq, _kind, n_summary, _n_ext, _n_blocks, bsize, _dcrc, _crc = HEADER.unpack_from(first)
        if magic != MAGIC or lid == self.log_id or not 1 <= n_summary or self.start + n_summary * SECTOR > self.end:
            return
        summary = first if n_summary == 1 else await self.target.read(self.start, n_summary * SECTOR)
        if parse_summary(summary, lid, bsize) is not None:
            raise self.damaged(f"its first record is of another log (id {lid:#x}, this one's {self.log_id:#x}): "
                               f"the superblock and the log are not of one array")

    async def _walk(self, pos: int, limit: int, last_seq: int) -> list[LogRecord]:
        """The records of the chain from `pos`, each ending by `limit`, the first with a
        sequence number above `last_seq`."""
        chain: list[LogRecord] = []
        while True:
            parsed = await self._summary_at(pos, limit, last_seq)
            if parsed is None:
                await self._check_end(pos, limit, last_seq)
                break
            seq, n_summary = parsed.seq, parsed.n_summary
            data_len = parsed.n_blocks * self.block_size if parsed.kind == KIND_DATA else 0
            if pos + n_summary * SECTOR + data_len > limit:
                break
            if data_len:
                data = await self.target.read(pos + n_summary * SECTOR, data_len)
                if zlib.crc32(data) != parsed.data_crc:
                    await self._check_end(pos, limit, last_seq)
                    break  # a torn log write: ignored, the chain ends here
            rec = LogRecord(seq, pos, parsed.kind, parsed.addresses, n_summary * SECTOR, self.block_size,
                            parsed.bounds)
            chain.append(rec)
            self._vouch(seq, parsed.area)
            pos, last_seq = rec.end, seq
        return chain

    async def _check_end(self, pos: int, limit: int, last_seq: int, *, always_fua: bool = False) -> None:
        """The chain ends at `pos`: refuse the log if that is damage rather than its end.

        Records of one log are written one at a time, each FUA (data_fua; `always_fua` for
        tombstones), so a record was whole before the next one was begun, and the next one
        has a larger sequence number than every record written before it. What the chain
        can legitimately end at: a pop's marker (popped records above it may be newer than
        the top, but not than the marker, numbered after them), the record a crash tore (the
        newest written), or what was there before the top was written (older records). In
        every case no record within CHECK_WINDOW after `pos` is newer than both the top and
        the marker, or than what a torn record at `pos` claims to be. So a whole newer record
        after `pos` proves damage: the records after it hold acknowledged writes the chain
        would silently lose.

        With end markers (module doc: ends of the chain) that holds whatever `pos` holds: a
        blank sector, a marker, a first sector of this log failing its checksum, or one
        damaged beyond recognition. The older layouts' marker is a blank sector, with no
        number to bar the popped records above it, so there a blank sector, or a first
        sector no longer recognisable as this log's, ends the chain unchecked.

        Past the window, the one place looked at is where the failing record's own length
        fields say it ends, where the next record would begin.

        Not caught: damage to the newest record when nothing newer follows it (what a torn
        last write leaves too), and a failing record of several summary sectors whose first
        sector still reads as this log's but names a larger sequence number than it was
        written with (a flipped bit of the number): a torn write may leave its first sector
        new and the others old, so its number is taken, and it excuses the newer records
        after it. A one-sector summary cannot be torn that way (_claimed_seq)."""
        if not (self.data_fua or always_fua) or pos + SECTOR > limit:
            return
        window = await self.target.read(pos, (min(limit, pos + CHECK_WINDOW) - pos) // SECTOR * SECTOR)
        marker = parse_end(window[:SECTOR], self.log_id, self.block_size) if self.end_markers else None
        if marker is not None:
            claimed: int | None = marker
            if marker > last_seq:
                self._vouch(marker, _area_word_in(window[:SECTOR]))
        elif window[:SECTOR] == BLANK_SECTOR:
            if not self.end_markers:
                return
            claimed = last_seq
        else:
            claimed = await self._claimed_seq(pos, window[:SECTOR], limit)
            if claimed is None:
                if not self.end_markers:
                    return
                claimed = last_seq
        if self.seq_ceiling is not None and claimed >= self.seq_ceiling:
            claimed = last_seq  # a sequence number of an epoch not begun: its own field is damaged
        bar = max(claimed, last_seq)
        for at in range(SECTOR, len(window), SECTOR):
            end = parse_end(window[at:at + SECTOR], self.log_id, self.block_size) if self.end_markers else None
            if end is not None and end > bar:
                raise self.damaged(f"the chain ends at byte {pos}, but a newer end record (epoch "
                                   f"{end >> EPOCH_SHIFT}, number {end & ((1 << EPOCH_SHIFT) - 1)}) "
                                   f"follows at byte {pos + at}")
            await self._refuse_newer_at(pos, pos + at, window[at:at + SECTOR], limit, bar)
        # A failing record longer than the window: where its own length fields say it ends,
        # the next record begins, past the window.
        after = self._claimed_end(pos, window[:SECTOR], limit)
        if after is not None and after >= pos + len(window) and after + SECTOR <= limit:
            await self._refuse_newer_at(pos, after, await self.target.read(after, SECTOR), limit, bar)

    def _claimed_end(self, pos: int, first: bytes, limit: int) -> int | None:
        """Where the record at `pos` ends by its header's length fields (which may be damaged
        too), if that is inside the log; None for a blank sector, a marker or no header."""
        if len(first) < HEADER.size or first == BLANK_SECTOR:
            return None
        magic, _lid, _seq, kind, n_summary, _n_ext, n_blocks, _bs, _dcrc, _crc = HEADER.unpack_from(first)
        if magic != MAGIC or not 1 <= n_summary:
            return None
        end = pos + n_summary * SECTOR + (n_blocks * self.block_size if kind == KIND_DATA else 0)
        return end if end <= limit else None

    async def _refuse_newer_at(self, pos: int, at: int, first: bytes, limit: int, bar: int) -> None:
        """Refuse the log if a whole record of it numbered above `bar` starts at byte `at`
        (its first sector `first`), past the chain's end at `pos`."""
        parsed = parse_first_sector(first, self.log_id, self.block_size)
        if parsed is None or parsed[0] <= bar:
            return
        newer = await self._summary_at(at, limit, bar)
        if newer is None:
            return
        data_len = newer.n_blocks * self.block_size if newer.kind == KIND_DATA else 0
        start = at + newer.n_summary * SECTOR
        if start + data_len > limit or (data_len and zlib.crc32(await self.target.read(start, data_len))
                                         != newer.data_crc):
            return
        raise self.damaged(f"the chain ends at byte {pos}, but a newer whole record (epoch "
                           f"{newer.seq >> EPOCH_SHIFT}, number {newer.seq & ((1 << EPOCH_SHIFT) - 1)}) "
                           f"follows at byte {at}")

    def _vouch(self, seq: int, word: int) -> None:
        if word and (self.vouched is None or seq > self.vouched[0]):
            self.vouched = (seq, word)

    def _check_area(self, newest_seq: int) -> None:
        """Refuse the tombstone area if it holds less than the chain's newest record says it
        did when it was written (module doc: ends of the chain): a tombstone the record
        vouches for is missing. `newest_seq`: the newest tombstone found."""
        if self.vouched is None or newest_seq > self.vouched[0]:
            return  # none stated, or the area has moved on since (appended, or compacted)
        seq, word = self.vouched
        stated = area_of(word)
        if stated is not None and (stated[0] != self.area_current or self.area_pos < stated[1]):
            raise self.damaged(f"the tombstone area holds {self.area_pos} bytes in half {self.area_current}, "
                               f"but record {seq & ((1 << EPOCH_SHIFT) - 1)} (epoch {seq >> EPOCH_SHIFT}) was "
                               f"written after {stated[1]} bytes in half {stated[0]}")

    async def _claimed_seq(self, pos: int, first: bytes, limit: int) -> int | None:
        """The sequence number the (failing) record at `pos` names: its first sector's, if
        it is one of this log's and could be the start of a torn write; or, if only its
        magic, log id, kind or block size is damaged (its summary checksum holds with this
        log's values), that. Else None.

        A one-sector summary is written whole or not at all (a sector is the drive's unit of
        atomicity), so a torn write leaves it either new, with its checksum holding, or as it
        was. One that fails its checksum was damaged after it was written, its number with
        it: a flipped bit of the number would otherwise excuse every newer record after it."""
        parsed = parse_first_sector(first, self.log_id, self.block_size)
        if parsed is not None:
            if parsed[1] == 1 and parse_summary(first[:SECTOR], self.log_id, self.block_size) is None:
                return None
            return parsed[0]
        _magic, _lid, seq, _kind, n_summary, n_ext, n_blocks, _bs, dcrc, crc = HEADER.unpack_from(first)
        if not 1 <= n_summary or pos + n_summary * SECTOR > limit:
            return None
        rest = (await self.target.read(pos, n_summary * SECTOR))[HEADER.size:] if n_summary > 1 else first[HEADER.size:]
        for kind in (KIND_DATA, KIND_TOMBSTONE):
            header = _with_area(HEADER.pack(MAGIC, self.log_id, seq, kind, n_summary, n_ext, n_blocks,
                                            self.block_size, dcrc, 0), _area_word_in(first))
            if zlib.crc32(header + rest) == crc:
                return seq
        return None


@dataclasses.dataclass(frozen=True)
class Location:
    """Where the newest logged copy of a block is: log (cache disk) index and byte offset."""

    log: int
    offset: int
    seq: int


@dataclasses.dataclass
class _Pop:
    """A destage segment taken from a log and read back, not yet forgotten: its records, its
    live blocks (address, data) with their sequence numbers, and its holes."""

    log_index: int
    segment: list[LogRecord]
    live: list[tuple[int, bytes]]
    live_seq: dict[int, int]
    holes: int


class LogStore:
    """The mapping block address -> newest copy on a cache disk, over one or more logs.

    Invariant kept for crash recovery: replaying the chains of all logs in sequence order
    (data records map, tombstones unmap) gives exactly `mapping` as of the last completed
    log write or destage. `copies[a]` counts the data records holding block a; `superseded`
    maps {a : copies[a] > 0 and a not in mapping} to the newest sequence number of the
    copies that went home, and is what the next tombstone carries.
    """

    def __init__(self, logs: Sequence[CacheDiskLog], block_size: int, epoch: int,
                 layout: str = LAYOUT_AREA, order: str = ORDER_LWFD, end_markers: bool = True) -> None:
        """`layout` (from `log_layout` of the array's geometry): where tombstones go and what
        each log reserves at its end; `order` (`destage_order_of`): LWFD pops the top of each
        log, oldest-first destages its tail and makes it circular (module doc); `end_markers`
        (`end_markers_of`): the chain's ends are end records, not blank sectors."""
        if order not in DESTAGE_ORDERS:
            raise ValueError(f"unknown destage order {order!r}")
        if order == ORDER_OLDEST and layout != LAYOUT_AREA:
            raise ValueError(f"oldest-first destage needs the tombstone area, not the {layout} layout")
        self.logs = list(logs)
        self.block_size = block_size
        self.layout = layout
        self.order = order
        self.end_markers = end_markers and layout == LAYOUT_AREA
        slot = marker_journal_bytes([log.region_end - log.start for log in self.logs], block_size)
        for log in self.logs:
            log.end_markers = self.end_markers
            if layout == LAYOUT_AREA:
                log.reserve_area(slot)
            elif layout == LAYOUT_JOURNAL:
                log.reserve_journal(slot)
            if order == ORDER_OLDEST:
                log.reserve_tail()
        self._seq = epoch << EPOCH_SHIFT
        self.mapping: dict[int, Location] = {}
        self.copies: collections.Counter[int] = collections.Counter()
        self.superseded: dict[int, int] = {}
        # Superseded entries (with their current bound) that no tombstone in the chains
        # carries yet: what the next marker must write (module doc: tombstones).
        self.unrecorded: set[int] = set()
        self.counters = collections.Counter()

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    @property
    def used(self) -> int:
        return sum(log.used for log in self.logs)

    @property
    def capacity(self) -> int:
        return sum(log.capacity for log in self.logs)

    def lookup(self, addr: int) -> Location | None:
        return self.mapping.get(addr)

    async def append(self, log_index: int, items: Sequence[tuple[int, bytes]], seq: int) -> LogRecord:
        """One log write of `items` (address, block) to log `log_index`; caller holds its lock.
        A block's mapping moves to this copy unless a newer copy is already mapped."""
        log = self.logs[log_index]
        items = sorted(items)
        addresses = [a for a, _ in items]
        rec = await log.write_record(seq, KIND_DATA, addresses, b"".join(d for _, d in items))
        for i, addr in enumerate(addresses):
            self.copies[addr] += 1
            current = self.mapping.get(addr)
            # Newer than the mapped copy *and* than a copy already written home (with several
            # cache disks a newer log write of the block can finish, and be destaged, first).
            if (current is None or current.seq < seq) and self.superseded.get(addr, -1) < seq:
                self.mapping[addr] = Location(log_index, rec.block_offset(i), seq)
                self.superseded.pop(addr, None)
                self.unrecorded.discard(addr)
        self.counters["log_writes"] += 1
        self.counters["log_write_bytes"] += rec.length
        return rec

    async def read_block(self, loc: Location) -> bytes:
        return await self.logs[loc.log].target.read(loc.offset, self.block_size)

    def shares(self, log_indices: Sequence[int], segment_bytes: int) -> dict[int, list[LogRecord]]:
        """The records one destage of the logs `log_indices` together takes from each, in the
        store's order over all of them: LWFD takes the newest record of any of the logs next
        (from the tops, the CLPs, down), oldest-first the oldest one (from the tails on).
        Records are taken until `segment_bytes` of log per log are covered and a data record
        is among them; each log's share of a top also ends with a data record (so that
        popping a lone tombstone, which would only be rewritten, never loops; every record
        of a circular log is a data record). A log that gives nothing is left out."""
        newest = self.order != ORDER_OLDEST
        queues = {i: list(reversed(self.logs[i].records)) if newest else list(self.logs[i].records)
                  for i in log_indices}
        taken: dict[int, list[LogRecord]] = {i: [] for i in log_indices}
        total, has_data = 0, False
        goal = segment_bytes * len(log_indices)
        while not (total >= goal and has_data):
            heads = [i for i in log_indices if len(taken[i]) < len(queues[i])]
            if not heads:
                break
            pick = (max if newest else min)(heads, key=lambda i: queues[i][len(taken[i])].seq)
            rec = queues[pick][len(taken[pick])]
            taken[pick].append(rec)
            total += rec.length
            has_data = has_data or rec.kind == KIND_DATA
        for i in log_indices:
            while taken[i] and taken[i][-1].kind != KIND_DATA and len(taken[i]) < len(queues[i]):
                taken[i].append(queues[i][len(taken[i])])
        return {i: (list(reversed(recs)) if newest else recs) for i, recs in taken.items() if recs}

    async def destage(
        self,
        log_index: int,
        segment_bytes: int,
        write_back: Callable[[list[tuple[int, bytes]]], Awaitable[bool]],
    ) -> int | None:
        """One destage segment of log `log_index` home, in the store's order: LWFD's pop of
        the top (`_take_top`), or oldest-first from the tail (`_take_tail`); the caller holds
        its lock. `write_back` writes the live blocks to their home locations durably and
        returns False when it was suspended. Returns the live bytes destaged, or None if
        suspended."""
        return await self.destage_together([log_index], segment_bytes, write_back)

    async def destage_together(
        self,
        log_indices: Sequence[int],
        segment_bytes: int,
        write_back: Callable[[list[tuple[int, bytes]]], Awaitable[bool]],
    ) -> int | None:
        """One destage segment of each log in `log_indices`, written home in one pass; the
        caller holds their locks.

        The segments are read back from their cache disks in parallel, and the live blocks
        of all of them go to one `write_back` in address order. They are disjoint: a block's
        newest copy is in one log only. So the blocks a level-1 destage spread over several
        cache disks (mcd's round robin) meet again in the runs written home. Once
        `write_back` has made them durable, each log forgets its segment and writes its
        marker in turn, as if it had been destaged alone after the others: a crash between
        two of these steps leaves a log holding copies of blocks already at home, which
        recovery maps again with the same data. Returns the live bytes destaged, or None if
        `write_back` was suspended (every segment then stays in its log)."""
        take = self._take_tail if self.order == ORDER_OLDEST else self._take_top
        shares = self.shares(log_indices, segment_bytes)
        pops: dict[int, _Pop] = {}

        async def take_one(log_index: int) -> None:
            pops[log_index] = await take(log_index, shares[log_index])

        async with sched.open_nursery() as nursery:
            for log_index in shares:
                nursery.start_soon(take_one, log_index)
        taken = [pops[log_index] for log_index in shares]
        if not taken:
            return 0
        if not await write_back(sorted(item for pop in taken for item in pop.live)):
            self.counters["destages_suspended"] += 1
            return None
        if len(taken) > 1:
            self.counters["destages_together"] += 1
        total = 0
        for pop in taken:
            if self.order == ORDER_OLDEST:
                await self._forget_tail(pop)
            else:
                await self._forget_top(pop)
            total += self._count_destage(pop.live, pop.holes)
        return total

    def _live_blocks(self, log_index: int, segment: list[LogRecord],
                     block_at: Callable[[int], bytes]) -> tuple[list[tuple[int, bytes]], dict[int, int], int]:
        """The blocks of `segment` whose newest copy they are (address, data from `block_at`
        of its offset), their sequence numbers, and the count of the others (holes)."""
        live: list[tuple[int, bytes]] = []
        live_seq: dict[int, int] = {}
        holes = 0
        for rec in segment:
            if rec.kind != KIND_DATA:
                continue
            for i, addr in enumerate(rec.addresses):
                loc = self.mapping.get(addr)
                if loc is not None and loc.log == log_index and loc.offset == rec.block_offset(i):
                    live.append((addr, block_at(rec.block_offset(i))))
                    live_seq[addr] = loc.seq
                else:
                    holes += 1
        return live, live_seq, holes

    def _drop_copies(self, segment: list[LogRecord], live: list[tuple[int, bytes]],
                     live_seq: dict[int, int]) -> None:
        """Forget the copies of a segment that left the log (its live blocks already unmapped):
        a block without copies is no longer superseded; a live block that still has copies
        elsewhere is, bound by the copy that went home."""
        for rec in segment:
            if rec.kind == KIND_DATA:
                for addr in rec.addresses:
                    self.copies[addr] -= 1
                    if self.copies[addr] <= 0:
                        del self.copies[addr]
                        self.superseded.pop(addr, None)
                        self.unrecorded.discard(addr)
        for rec in segment:
            if rec.kind == KIND_TOMBSTONE:  # off the stack: what it hides and still must
                self.unrecorded.update(a for a in rec.addresses if a in self.superseded)
        for addr, _ in live:
            if self.copies.get(addr, 0) > 0 and addr not in self.mapping:
                self._supersede(addr, live_seq[addr])

    def _count_destage(self, live: list[tuple[int, bytes]], holes: int) -> int:
        nbytes = len(live) * self.block_size
        self.counters["destages"] += 1
        self.counters["destaged_bytes"] += nbytes
        self.counters["destage_holes_dropped"] += holes
        return nbytes

    async def _take_top(self, log_index: int, segment: list[LogRecord]) -> _Pop:
        """LWFD (DCD §2.3): `segment`, the top records of log `log_index`, read back from
        the CLP down in one sequential read, with its live blocks; the holes (blocks whose
        newest copy is elsewhere) are counted and dropped. The segment stays in the log until
        `_forget_top`: a write home that was suspended did no harm."""
        log = self.logs[log_index]
        base = segment[0].offset
        raw = await log.target.read(base, log.clp - base)
        live, live_seq, holes = self._live_blocks(
            log_index, segment, lambda offset: raw[offset - base:offset - base + self.block_size])
        return _Pop(log_index, segment, live, live_seq, holes)

    async def _forget_top(self, pop: _Pop) -> None:
        """After the live blocks of a top segment are durable at home: forget the segment,
        then write the marker at the new CLP."""
        log = self.logs[pop.log_index]
        base = pop.segment[0].offset
        del log.records[len(log.records) - len(pop.segment):]
        for addr, _ in pop.live:
            loc = self.mapping.get(addr)
            if loc is not None and loc.log == pop.log_index and loc.offset >= base:
                del self.mapping[addr]
        self._drop_copies(pop.segment, pop.live, pop.live_seq)
        await self._write_marker(log)

    async def _take_tail(self, log_index: int, segment: list[LogRecord]) -> _Pop:
        """Oldest-first (module doc; the ablation): `segment`, the tail records of the
        circular log `log_index`, read back in one read (two where it wraps), with its live
        blocks and its holes counted."""
        log = self.logs[log_index]
        runs: list[list[int]] = []  # [start, end) of the segment's contiguous pieces
        for rec in segment:
            if runs and runs[-1][1] == rec.offset:
                runs[-1][1] = rec.end
            else:
                runs.append([rec.offset, rec.end])
        pieces = [(start, await log.target.read(start, end - start)) for start, end in runs]

        def block_at(offset: int) -> bytes:
            for start, raw in pieces:
                if start <= offset < start + len(raw):
                    return raw[offset - start:offset - start + self.block_size]
            raise AssertionError(f"offset {offset} outside the destage segment")

        live, live_seq, holes = self._live_blocks(log_index, segment, block_at)
        return _Pop(log_index, segment, live, live_seq, holes)

    async def _forget_tail(self, pop: _Pop) -> None:
        """After the live blocks of a tail segment are durable at home: forget the segment,
        record what it superseded, then move the tail past it before any log write may
        reuse its space."""
        log = self.logs[pop.log_index]
        del log.records[:len(pop.segment)]
        for addr, _ in pop.live:
            loc = self.mapping.get(addr)
            if loc is not None and loc.log == pop.log_index and loc.seq == pop.live_seq[addr]:
                del self.mapping[addr]
        self._drop_copies(pop.segment, pop.live, pop.live_seq)
        if self.unrecorded:
            await self._write_tombstone(log)
        await log.write_tail(self.next_seq(), max(log.floor, pop.segment[-1].seq))

    def _supersede(self, addr: int, bound: int) -> None:
        if self.superseded.get(addr, -1) < bound:
            self.superseded[addr] = bound
            self.unrecorded.add(addr)

    async def _write_marker(self, log: CacheDiskLog) -> None:
        """What ends the chain at the new CLP (module doc): an end record (a blank sector
        without end markers), after the tombstone of this pop in the tombstone area; in the
        older layouts, a blank or the tombstone itself."""
        if self.layout == LAYOUT_AREA:
            if self.unrecorded:
                await self._write_tombstone(log)
            await log.write_end(log.clp, self.next_seq())
        elif self.unrecorded:
            await self._write_tombstone(log, journal=self.layout == LAYOUT_JOURNAL)
        else:
            await log.write_blank(log.clp)

    async def _write_tombstone(self, log: CacheDiskLog, journal: bool = False) -> None:
        """A tombstone of the unrecorded entries (in `log`'s tombstone area, or at its CLP).
        Taken before the write: an entry another cache disk adds or raises meanwhile stays
        unrecorded for the next tombstone. When the area's current half is full, the whole
        superseded set goes to the start of its other half instead."""
        taken, self.unrecorded = self.unrecorded, set()
        try:
            bounds = {a: self.superseded[a] for a in taken}
            if self.layout != LAYOUT_AREA:
                await log.write_record(self.next_seq(), KIND_TOMBSTONE, [], b"", bounds, journal=journal)
            elif not await log.area_append(self.next_seq(), bounds):
                bounds = dict(self.superseded)
                await log.area_append(self.next_seq(), bounds, compact=True)
                self.counters["tombstone_area_compactions"] += 1
        except BaseException:
            self.unrecorded |= {a for a in taken if a in self.superseded}
            raise
        self.counters["tombstones"] += 1
        self.counters["tombstone_entries"] += len(bounds)

    async def forget(self, log_index: int, addresses: Iterable[int]) -> None:
        """Blocks just written at home by a path around the log (a large write): unmap
        their logged copies, and record that in a tombstone before the caller acknowledges.
        Caller holds the lock of log `log_index` and has made the home writes durable."""
        dropped = False
        for addr in addresses:
            loc = self.mapping.pop(addr, None)
            if loc is not None:
                dropped = True
                if self.copies.get(addr, 0) > 0:
                    self._supersede(addr, loc.seq)
        if dropped and self.unrecorded:
            await self._write_tombstone(self.logs[log_index])

    def tombstone_bytes(self) -> int:
        """Room the next marker may need in the log: none with a tombstone area; else at
        most every superseded entry, one extent each (an upper bound that costs nothing to
        compute; the exact run count meant sorting the whole set before every log write)."""
        if self.layout == LAYOUT_AREA:
            return 0
        return record_bytes(len(self.superseded) or 1, 0, self.block_size, KIND_TOMBSTONE)

    async def recover(self) -> None:
        """Scan every log and rebuild mapping, copies and superseded (DCD §2.5)."""
        records: list[tuple[int, int, LogRecord]] = []
        for log in self.logs:
            log.seq_ceiling = ((self._seq >> EPOCH_SHIFT) + 1) << EPOCH_SHIFT
            for rec in await log.scan():
                records.append((rec.seq, log.index, rec))
            if self.layout == LAYOUT_AREA:
                records.extend((rec.seq, log.index, rec) for rec in await log.scan_area())
        records.sort(key=lambda r: r[0])
        self.mapping.clear()
        self.copies.clear()
        newest: dict[int, int] = {}
        for seq, log_index, rec in records:
            if rec.kind == KIND_DATA:
                for i, addr in enumerate(rec.addresses):
                    self.copies[addr] += 1
                    self.mapping[addr] = Location(log_index, rec.block_offset(i), seq)
                    newest[addr] = seq
            else:
                # A tombstone hides the copies up to its bound only: a copy whose log write
                # was still in flight (on another cache disk) when it was written is newer.
                self._hide(rec.addresses, rec.bounds or [])
        # The journal slots: a marker torn after its copy there landed (module doc). Their
        # entries are in no chain tombstone, so the next marker carries them again.
        journaled: set[int] = set()
        for log in self.logs if self.layout == LAYOUT_JOURNAL else ():
            slot = await log.read_journal()
            if slot is not None:
                self._hide(slot.addresses, slot.bounds or [])
                journaled.update(slot.addresses)
                self._seq = max(self._seq, slot.seq)
        self.superseded = {a: newest[a] for a in self.copies if a not in self.mapping}
        self.unrecorded = journaled & self.superseded.keys()
        self.counters["recovered_records"] = len(records)
        self.counters["recovered_blocks"] = len(self.mapping)
        if records:
            self._seq = max(self._seq, records[-1][0])
        for log in self.logs:
            if log.circular:
                # The next scan must start where this one's chain does (module doc).
                self._seq = max(self._seq, log.tail_seq)
                if log.durable_tail != log.tail:
                    await log.write_tail(self.next_seq(), log.floor)

    def _hide(self, addresses: Sequence[int], bounds: Sequence[int]) -> None:
        """Replay a tombstone: unmap each block whose mapped copy is not newer than its bound."""
        for addr, bound in zip(addresses, bounds):
            loc = self.mapping.get(addr)
            if loc is not None and loc.seq <= bound:
                del self.mapping[addr]

    async def format(self) -> None:
        """An empty log on every cache disk: an end record (or a blank sector) at each log
        start, and a blank sector at the start of each journal slot or area half."""
        for log in self.logs:
            log.records = []
            await log.write_end(log.start, self.next_seq())
            if self.layout == LAYOUT_AREA:
                await log.clear_area()
            else:
                await log.clear_journal()
            if log.circular:
                await log.clear_tail(self.next_seq(), self._seq)
        self.mapping.clear()
        self.copies.clear()
        self.superseded.clear()
        self.unrecorded.clear()
