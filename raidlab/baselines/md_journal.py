"""md raid5's write journal (raid5-cache), read from its device image as recovery would.

Why: a power cut that loses acknowledged writes on md RAID 5 with a write journal in
write-back mode (md-raid5-wb) leaves two questions the file check cannot answer: where did
the kernel's recovery start, and did it see every log block the journal holds? This module
answers both from the journal device's image, after the cut and before the array is
assembled again, by following the steps of the kernel's recovery (drivers/md/raid5-cache.c):

* `r5l_load_log`: the superblock's `journal_tail` (a sector offset inside the journal's data
  area) must hold a valid meta block written *at that position*; otherwise the kernel starts
  an empty log at position 0 and everything the journal held is dropped ("create_super").
* `r5c_recovery_flush_log`: from the tail, each next meta block must carry the next sequence
  number and its own position; the walk stops at the first block that does not. A data or
  parity page whose checksum does not match its payload entry makes the kernel skip that
  meta block's stripes, but the walk goes on.

So `describe` reports the chain recovery would replay, and every valid meta block it would
not reach that is *newer* than the chain's end (sequence numbers only grow, so such a block
was written after the chain's last one): each is log content the kernel's recovery leaves
out. Blocks older than the chain's first are either already written to the array (the tail
moved past them) or, if the superblock's tail is stale and the log's head has since run over
it, live content recovery skips; the image cannot tell the two apart, so `describe` reports
the unbroken run of sequence numbers just before the chain ("before") and leaves the
reading to the caller, with the tail the superblock holds.

Format (include/uapi/linux/raid/md_p.h): struct r5l_meta_block {le32 magic 0x6433c509,
le32 checksum, u8 version 1, u8 pad, le16 pad, le32 meta_size, le64 seq, le64 position}
(32 bytes), then payloads while their offset is below meta_size: data (type 0) and parity
(type 1) as {le16 type, le16 flags, le32 size in sectors, le64 location, le32 checksum per
page}, flush (type 2) as {le16 type, le16 flags, le32 size in bytes, le64 stripes[]}. A data
payload is followed in the log by its page, a parity payload by its one page (RAID 5). Blocks
are 4 KiB (8 sectors). Checksums are the kernel's crc32c_le seeded with crc32c_le(~0, the
array's uuid), over the 4 KiB page with the meta block's checksum field zeroed. The journal
device's own md superblock has feature bit MD_FEATURE_JOURNAL (0x200) and role 0xfffd;
`journal_tail` shares recovery_offset's place at byte 152.

Pure reading: the only I/O is reading the images.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import uuid as uuidlib
from typing import Any, Iterable

from raidlab.baselines.md_superblock import (SECTOR, SUPERBLOCK_1_2_OFFSET, MdSuperblock, parse_superblock,
                                             read_superblock)
from raidlab.errors import UsageError

R5LOG_MAGIC = 0x6433C509
R5LOG_VERSION = 1
BLOCK = 4096
BLOCK_SECTORS = BLOCK // SECTOR
FEATURE_JOURNAL = 0x200
ROLE_JOURNAL = 0xFFFD
PAYLOAD_DATA, PAYLOAD_PARITY, PAYLOAD_FLUSH = 0, 1, 2
META_HEADER = struct.Struct("<IIBBHIQQ")   # magic, checksum, version, pad, pad, meta_size, seq, position
JOURNAL_TAIL_OFFSET = 152


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c_le(seed: int, data: bytes) -> int:
    """The kernel's crc32c_le: CRC-32C (Castagnoli, reflected) from `seed`, no final inversion.

    The usual CRC-32C of `data` is ``crc32c_le(0xFFFFFFFF, data) ^ 0xFFFFFFFF``."""
    crc = seed & 0xFFFFFFFF
    table = _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc


@dataclasses.dataclass(frozen=True)
class MetaBlock:
    position: int          # sectors into the journal's data area
    seq: int
    meta_size: int
    data_pages: int
    parity_pages: int
    bad_pages: int         # data or parity pages whose checksum does not match (not checked: -1)
    locations: tuple[int, ...] = ()  # each data page's place in the array (sectors), as its payload says
    pages_at: tuple[int, ...] = ()   # where each data page lies in the log (sectors into its data area)
    # its parity and flush payloads in order, each (PAYLOAD_PARITY or PAYLOAD_FLUSH, the stripe
    # it names: a stripe_head's sector on the members, the number of this record's data pages
    # whose payloads come before it)
    marks: tuple[tuple[int, int, int], ...] = ()

    @property
    def flushes(self) -> int:
        """Stripes its flush payloads say reached the array."""
        return sum(kind == PAYLOAD_FLUSH for kind, _, _ in self.marks)

    @property
    def blocks(self) -> int:
        """4 KiB blocks the record takes in the log: itself and its pages."""
        return 1 + self.data_pages + self.parity_pages


@dataclasses.dataclass
class JournalState:
    image: str
    tail: int                      # journal_tail from the journal device's superblock (sectors)
    size: int                      # the log's size in sectors (rounded down to blocks)
    tail_block: str                # what lies at the tail: "meta seq N", "meta written for position P", ...
    starts_empty: bool             # the kernel would start an empty log (create_super)
    chain: list[MetaBlock]         # what recovery walks, from the tail
    stop: str                      # why the walk ends
    newer: list[MetaBlock]         # valid meta blocks newer than the chain's end that it does not reach
    metas: int                     # valid meta blocks anywhere in the log
    before: list[MetaBlock] = dataclasses.field(default_factory=list)  # the unbroken run of seqs just before the chain

    @property
    def summary(self) -> str:
        if self.starts_empty:
            head = f"tail {self.tail}: {self.tail_block}; recovery starts an empty log"
        elif self.chain:
            head = (f"tail {self.tail}: recovery walks seq {self.chain[0].seq}..{self.chain[-1].seq} "
                    f"({len(self.chain)} blocks, {sum(m.data_pages for m in self.chain)} data pages), {self.stop}")
        else:
            head = f"tail {self.tail}: {self.tail_block}"
        if self.before:
            head += f"; seq {self.before[0].seq}..{self.before[-1].seq} just before it are on the log too"
        if self.newer:
            head += (f"; {len(self.newer)} newer meta blocks it does not reach (seq {self.newer[0].seq}.."
                     f"{self.newer[-1].seq}, {sum(m.data_pages for m in self.newer)} data pages)")
        return head

    def records_of(self, sector: int) -> dict[str, list[int]]:
        """The seqs of the records holding the data page of array sector `sector`, by where
        they lie: in the chain recovery replays, just before it, or newer than its end."""
        page = sector - sector % BLOCK_SECTORS
        return {part: [m.seq for m in blocks if page in m.locations]
                for part, blocks in (("chain", self.chain), ("before", self.before), ("newer", self.newer))}

    def as_json(self) -> dict[str, Any]:
        return {"image": self.image, "tail": self.tail, "size": self.size, "tail_block": self.tail_block,
                "starts_empty": self.starts_empty, "chain_blocks": len(self.chain),
                "chain_seq": [self.chain[0].seq, self.chain[-1].seq] if self.chain else None,
                "chain_data_pages": sum(m.data_pages for m in self.chain),
                "chain_bad_pages": sum(max(m.bad_pages, 0) for m in self.chain),
                "stop": self.stop, "newer_blocks": len(self.newer),
                "newer_seq": [self.newer[0].seq, self.newer[-1].seq] if self.newer else None,
                "newer_data_pages": sum(m.data_pages for m in self.newer),
                "before_blocks": len(self.before),
                "before_seq": [self.before[0].seq, self.before[-1].seq] if self.before else None,
                "metas": self.metas, "summary": self.summary}


class _Log:
    """The journal's data area of one image, read a 4 KiB block at a time."""

    def __init__(self, f, data_offset: int, size: int, uuid_checksum: int):
        self.f, self.data_offset, self.size, self.uuid_checksum = f, data_offset, size, uuid_checksum

    def block(self, position: int) -> bytes:
        self.f.seek((self.data_offset + position) * SECTOR)
        raw = self.f.read(BLOCK)
        return raw + bytes(BLOCK - len(raw))

    def add(self, position: int, sectors: int) -> int:
        """r5l_ring_add."""
        return (position + sectors) % self.size

    def metas(self) -> list[MetaBlock]:
        """Every valid meta block anywhere in the log (pages unchecked), by position."""
        return [m for p in range(0, self.size, BLOCK_SECTORS)
                if isinstance(m := self.meta(p, check_pages=False), MetaBlock)]

    def meta(self, position: int, *, check_pages: bool = True) -> MetaBlock | str:
        """The valid meta block at `position`, or why there is none."""
        raw = self.block(position)
        if not any(raw):
            return "zeros"
        magic, checksum, version, _, _, meta_size, seq, written_at = META_HEADER.unpack_from(raw)
        if magic != R5LOG_MAGIC or version != R5LOG_VERSION:
            return "not a meta block"
        zeroed = raw[:4] + b"\0\0\0\0" + raw[8:]
        if crc32c_le(self.uuid_checksum, zeroed) != checksum:
            return "a meta block with a bad checksum"
        if written_at != position:
            return f"a meta block (seq {seq}) written for position {written_at}"
        if meta_size > BLOCK or meta_size < META_HEADER.size:
            return f"a meta block (seq {seq}) with meta_size {meta_size}"
        data = parity = bad = 0
        locations: list[int] = []
        pages_at: list[int] = []
        marks: list[tuple[int, int, int]] = []
        page_at = self.add(position, BLOCK_SECTORS)
        offset = META_HEADER.size
        while offset < meta_size:
            kind, _flags, size = struct.unpack_from("<HHI", raw, offset)
            if kind == PAYLOAD_FLUSH:
                count = min(size, BLOCK - offset - 8) // 8
                marks.extend((kind, stripe, data) for stripe in struct.unpack_from(f"<{count}Q", raw, offset + 8))
                offset += 8 + size
                continue
            if kind not in (PAYLOAD_DATA, PAYLOAD_PARITY):
                return f"a meta block (seq {seq}) with payload type {kind}"
            pages = size // BLOCK_SECTORS
            sums = struct.unpack_from(f"<{pages}I", raw, offset + 16) if offset + 16 + 4 * pages <= BLOCK else ()
            for k in range(pages):
                if check_pages and k < len(sums) and crc32c_le(self.uuid_checksum, self.block(page_at)) != sums[k]:
                    bad += 1
                if kind == PAYLOAD_DATA:
                    pages_at.append(page_at)
                page_at = self.add(page_at, BLOCK_SECTORS)
            if kind == PAYLOAD_DATA:
                data += pages
                location = struct.unpack_from("<Q", raw, offset + 8)[0]
                locations.extend(location + k * BLOCK_SECTORS for k in range(pages))
            else:
                parity += pages
                marks.append((kind, struct.unpack_from("<Q", raw, offset + 8)[0], data))
            offset += 16 + 4 * pages
        return MetaBlock(position, seq, meta_size, data, parity, bad if check_pages else -1,
                         tuple(locations), tuple(pages_at), tuple(marks))


def journal_tail(raw_superblock: bytes) -> int:
    return struct.unpack_from("<Q", raw_superblock, JOURNAL_TAIL_OFFSET)[0]


def _journal_superblock(f) -> tuple[bytes, MdSuperblock]:
    """The raw md 1.2 superblock of the open image `f` and its decoding; UsageError unless it
    is a write-journal device's."""
    f.seek(SUPERBLOCK_1_2_OFFSET)
    raw = f.read(BLOCK)
    sb = parse_superblock(raw)
    if not sb.feature_map & FEATURE_JOURNAL or sb.role != ROLE_JOURNAL:
        raise UsageError(f"{f.name}: not an md write-journal device (role {sb.role:#x})")
    return raw, sb


def _open_log(f) -> tuple[bytes, _Log]:
    """The journal superblock of the open image `f` (raw) and its log's data area."""
    raw, sb = _journal_superblock(f)
    size = sb.data_size_sectors - sb.data_size_sectors % BLOCK_SECTORS
    return raw, _Log(f, sb.data_offset_sectors, size, crc32c_le(0xFFFFFFFF, uuidlib.UUID(sb.set_uuid).bytes))


def is_journal(path: str | os.PathLike) -> bool:
    """Does `path` hold an md 1.2 superblock of a write-journal device?"""
    try:
        with open(path, "rb") as f:
            _journal_superblock(f)
    except (OSError, UsageError):
        return False
    return True


def describe(path: str | os.PathLike) -> JournalState:
    """Follow md's journal recovery over the journal device image `path` (module doc)."""
    with open(path, "rb") as f:
        raw_sb, log = _open_log(f)
        size = log.size
        tail = journal_tail(raw_sb)
        if tail >= size or tail % BLOCK_SECTORS:
            tail = 0  # r5l_load_log: an impossible tail reads as 0
        found = log.metas()
        first = log.meta(tail)
        chain: list[MetaBlock] = []
        if isinstance(first, str):
            return JournalState(str(path), tail, size, first, True, [], "no meta block at the tail",
                                sorted(found, key=lambda m: m.seq), len(found))
        position, seq, stop = tail, first.seq, ""
        while len(chain) <= len(found):
            block = log.meta(position)
            if isinstance(block, str):
                stop = f"stops at {position}: {block}"
                break
            if block.seq != seq:
                stop = f"stops at {position}: seq {block.seq}, not {seq}"
                break
            chain.append(block)
            seq += 1
            position = log.add(position, block.blocks * BLOCK_SECTORS)
        last = chain[-1].seq
        newer = sorted((m for m in found if m.seq > last), key=lambda m: m.seq)
        by_seq = {m.seq: m for m in found}
        before, seq = [], first.seq - 1
        while seq in by_seq and len(before) < len(found):
            before.insert(0, by_seq[seq])
            seq -= 1
        return JournalState(str(path), tail, size, f"meta seq {first.seq}", False, chain, stop, newer,
                            len(found), before)


def log_blocks(path: str | os.PathLike, positions: Iterable[int]) -> list[bytes]:
    """The 4 KiB blocks at `positions` (sectors into the log's data area) of the journal image `path`."""
    with open(path, "rb") as f:
        _, log = _open_log(f)
        return [log.block(at) for at in positions]


def stripe_of(location: int, chunk_sectors: int, data_disks: int) -> int:
    """The stripe_head sector (on every member) that holds array sector `location` of an md
    RAID 5 with `data_disks` data chunks per stripe (raid5_compute_sector; the same for each
    of md's RAID 5 layouts, which differ only in which member holds which chunk)."""
    chunk, offset = divmod(location, chunk_sectors)
    sector = chunk // data_disks * chunk_sectors + offset
    return sector - sector % BLOCK_SECTORS


def replay_split(chain: Iterable[MetaBlock], chunk_sectors: int,
                 data_disks: int) -> tuple[list[tuple[MetaBlock, int, int]], list[tuple[MetaBlock, int, int]]]:
    """The data pages of the records recovery walks (`chain`, in order), split as
    r5c_recovery_analyze_meta_block splits them: (written, dropped), each a list of (record,
    array sector, place in the log).

    Recovery loads each stripe's pages as it meets them. A flush payload naming a stripe says
    its writes reached the members, so every page of that stripe loaded so far is dropped
    (never written again). A data page for a stripe whose parity is loaded first replays
    what is loaded (data and parity to the members) and starts the stripe anew. At the end,
    stripes with parity are replayed and data-only stripes go through the stripe cache, which
    writes their data and computes their parity: written either way. A record with a page
    whose checksum fails is skipped whole (r5l_recovery_verify_data_checksum_for_mb)."""
    loaded: dict[int, list[tuple[MetaBlock, int, int]]] = {}
    with_parity: set[int] = set()
    dropped: list[tuple[MetaBlock, int, int]] = []
    written: list[tuple[MetaBlock, int, int]] = []
    for meta in chain:
        if meta.bad_pages > 0:
            continue  # a page's checksum fails: recovery skips the whole record, flushes included
        pages = list(zip(meta.locations, meta.pages_at))
        done = 0
        for kind, stripe, before in (*meta.marks, (None, 0, len(pages))):
            for location, at in pages[done:before]:
                home = stripe_of(location, chunk_sectors, data_disks)
                if home in with_parity:
                    written.extend(loaded.pop(home, ()))
                    with_parity.discard(home)
                loaded.setdefault(home, []).append((meta, location, at))
            done = before
            if kind == PAYLOAD_FLUSH:
                dropped.extend(loaded.pop(stripe, ()))
                with_parity.discard(stripe)
            elif kind == PAYLOAD_PARITY:
                with_parity.add(stripe)
    for pages in loaded.values():
        written.extend(pages)
    written.sort(key=lambda entry: entry[0].seq)
    return written, dropped


def flush_drops(journal: str | os.PathLike, members: list[str | os.PathLike],
                state: JournalState | None = None) -> dict[str, Any]:
    """What md's recovery of `journal` drops on the strength of flush payloads, checked
    against the member images: the array pages whose walked writes it drops (`replay_split`)
    and how many of them the members do not hold as the walk last wrote them. md appends a
    stripe's flush payload once the stripe's member writes have completed, and sends the
    members no flush before it; a member that completed a write from its volatile cache can
    still lose it to a power cut, and recovery will then neither find it on the member nor
    replay it."""
    from raidlab.baselines.md_oracle import read_pages  # the engine's map of md's placement

    state = state or describe(journal)
    sb = read_superblock(members[0])
    written, dropped = replay_split(state.chain, sb.chunk_sectors, sb.raid_disks - 1)
    if not dropped:
        return {"dropped_pages": 0, "dropped_pages_the_members_lack": 0, "dropped_stripes_lacking": []}
    last_at: dict[int, int] = {}
    for meta, location, at in sorted(written + dropped, key=lambda entry: entry[0].seq):
        last_at[location] = at
    places = sorted({location for _, location, _ in dropped})
    on_members = dict(zip(places, read_pages(members, [p * SECTOR for p in places], BLOCK)))
    journal_pages = dict(zip(places, log_blocks(journal, [last_at[p] for p in places])))
    lacking = [p for p in places if on_members[p] != journal_pages[p]]
    return {"dropped_pages": len(places), "dropped_pages_the_members_lack": len(lacking),
            "dropped_stripes_lacking": sorted({stripe_of(p, sb.chunk_sectors, sb.raid_disks - 1) for p in lacking})}


def describe_images(images: Iterable[str | os.PathLike]) -> dict[str, Any] | None:
    """`describe` the first write-journal device among `images`, as JSON, with what its
    recovery drops on the strength of flush payloads (`flush_drops`, over the other images
    as md's members); None if there is none."""
    images = list(images)
    for image in images:
        if is_journal(image):
            state = describe(image)
            found = state.as_json()
            members = [i for i in images if i != image]
            if members and not state.starts_empty:
                drops = flush_drops(image, members, state)
                found.update(drops)
                found["summary"] += (f"; recovery drops {drops['dropped_pages']} walked data pages that a later "
                                     f"flush payload says reached the members, which lack "
                                     f"{drops['dropped_pages_the_members_lack']} of them")
            return found
    return None


__all__ = ["JournalState", "MetaBlock", "crc32c_le", "describe", "describe_images", "flush_drops",
           "is_journal", "journal_tail", "log_blocks", "replay_split", "stripe_of"]
