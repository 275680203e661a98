"""md's write journal read as the kernel's recovery reads it (raidlab.baselines.md_journal).

The images here are written by the test in md's on-disk format (md_p.h); the lab-VM crash
test reads real journals through the same code."""

from __future__ import annotations

import struct
import uuid

import pytest

from raidlab.baselines import md_journal
from raidlab.baselines.md_superblock import MD_MAGIC, SUPERBLOCK_1_2_OFFSET, sb1_checksum
from raidlab.errors import UsageError

UUID = uuid.UUID("6f1c2b7e-2d4a-4d0e-9c1a-1234567890ab")
DATA_OFFSET = 2048          # sectors
LOG_SECTORS = 64 * 8        # 64 blocks of 4 KiB
SEED = md_journal.crc32c_le(0xFFFFFFFF, UUID.bytes)


def test_crc32c_le_is_the_kernel_s_castagnoli_crc():
    # the check value of CRC-32C (RFC 3720 appendix B.4 lists the algorithm; "123456789" -> e3069283)
    assert md_journal.crc32c_le(0xFFFFFFFF, b"123456789") ^ 0xFFFFFFFF == 0xE3069283
    assert md_journal.crc32c_le(0xFFFFFFFF, bytes(32)) ^ 0xFFFFFFFF == 0x8A9136AA


def _superblock(tail: int, role: int = md_journal.ROLE_JOURNAL, feature: int = md_journal.FEATURE_JOURNAL) -> bytes:
    raw = bytearray(4096)
    struct.pack_into("<III", raw, 0, MD_MAGIC, 1, feature)
    raw[16:32] = UUID.bytes
    struct.pack_into("<iIQ", raw, 72, 5, 2, 100000)
    struct.pack_into("<II", raw, 88, 128, 4)
    struct.pack_into("<QQQQ", raw, 128, DATA_OFFSET, LOG_SECTORS, 8, tail)
    struct.pack_into("<I", raw, 160, 4)                      # dev_number
    max_dev = 8
    struct.pack_into("<I", raw, 220, max_dev)
    for slot in range(max_dev):
        struct.pack_into("<H", raw, 256 + 2 * slot, slot if slot < 4 else 0xFFFF)
    struct.pack_into("<H", raw, 256 + 2 * 4, role)
    struct.pack_into("<I", raw, 216, sb1_checksum(bytes(raw), max_dev))
    return bytes(raw)


def _page(fill: int) -> bytes:
    return bytes([fill]) * 4096


def _meta(position: int, seq: int, pages: list[bytes], parity: bytes | None = None) -> bytes:
    body = b""
    for k, page in enumerate(pages):
        body += struct.pack("<HHIQI", md_journal.PAYLOAD_DATA, 0, 8, 1000 + 8 * k,
                            md_journal.crc32c_le(SEED, page))
    if parity is not None:
        body += struct.pack("<HHIQI", md_journal.PAYLOAD_PARITY, 0, 8, 1000, md_journal.crc32c_le(SEED, parity))
    meta_size = 32 + len(body)
    raw = bytearray(4096)
    struct.pack_into("<IIBBHIQQ", raw, 0, md_journal.R5LOG_MAGIC, 0, 1, 0, 0, meta_size, seq, position)
    raw[32:32 + len(body)] = body
    struct.pack_into("<I", raw, 4, md_journal.crc32c_le(SEED, bytes(raw)))
    return bytes(raw)


class _Image:
    def __init__(self, path, tail: int):
        self.path = path
        path.write_bytes(bytes((DATA_OFFSET + LOG_SECTORS) * 512))
        self.put(SUPERBLOCK_1_2_OFFSET, _superblock(tail))

    def put(self, offset: int, data: bytes) -> None:
        with open(self.path, "r+b") as f:
            f.seek(offset)
            f.write(data)

    def block(self, position: int, data: bytes) -> None:
        self.put((DATA_OFFSET + position) * 512, data)

    def record(self, position: int, seq: int, pages: int, parity: bool = True) -> int:
        """Write a meta block with `pages` data pages (and a parity page); the next position."""
        data = [_page(seq % 251 + k) for k in range(pages)]
        par = _page(0xEE) if parity else None
        self.block(position, _meta(position, seq, data, par))
        at = position
        for page in data + ([par] if par else []):
            at = (at + 8) % LOG_SECTORS
            self.block(at, page)
        return (at + 8) % LOG_SECTORS


def test_recovery_walks_from_the_tail_to_the_newest_record(tmp_path):
    image = _Image(tmp_path / "j.img", tail=16)
    at = 16
    for seq in range(40, 44):
        at = image.record(at, seq, pages=2)
    assert md_journal.is_journal(image.path)
    state = md_journal.describe(image.path)
    assert not state.starts_empty
    assert [m.seq for m in state.chain] == [40, 41, 42, 43]
    assert [m.data_pages for m in state.chain] == [2, 2, 2, 2]
    assert all(m.bad_pages == 0 for m in state.chain)
    assert state.newer == [] and state.before == []
    assert state.stop == f"stops at {at}: zeros"
    assert "seq 40..43 (4 blocks, 8 data pages)" in state.summary
    assert state.chain[1].locations == (1000, 1008)      # each data payload's place in the array
    assert state.records_of(1012) == {"chain": [40, 41, 42, 43], "before": [], "newer": []}
    assert state.records_of(2000) == {"chain": [], "before": [], "newer": []}


def test_the_log_wraps_at_its_end(tmp_path):
    image = _Image(tmp_path / "j.img", tail=LOG_SECTORS - 16)
    at = image.record(LOG_SECTORS - 16, 7, pages=3)        # meta + 3 data + parity: wraps
    assert at == (LOG_SECTORS - 16 + 5 * 8) % LOG_SECTORS
    image.record(at, 8, pages=1)
    assert [m.seq for m in md_journal.describe(image.path).chain] == [7, 8]


def test_each_walked_record_s_pages_are_read_with_their_array_places_also_across_the_wrap(tmp_path):
    image = _Image(tmp_path / "j.img", tail=LOG_SECTORS - 16)
    at = image.record(LOG_SECTORS - 16, 7, pages=3)        # its second and third page wrap to 0, 8
    image.record(at, 8, pages=1)
    chain = md_journal.describe(image.path).chain
    assert chain[0].pages_at == (LOG_SECTORS - 8, 0, 8)
    places = [(meta.seq, location, at) for meta in chain for location, at in zip(meta.locations, meta.pages_at)]
    pages = md_journal.log_blocks(image.path, [at for _, _, at in places])
    assert [(seq, location, page) for (seq, location, _), page in zip(places, pages)] == [
        (7, 1000, _page(7)), (7, 1008, _page(8)), (7, 1016, _page(9)), (8, 1000, _page(8))]


def test_a_stale_tail_run_over_by_data_starts_an_empty_log_and_leaves_every_record_out(tmp_path):
    # The superblock still names position 0, where a later lap wrote a data page.
    image = _Image(tmp_path / "j.img", tail=0)
    image.block(0, _page(0x11))
    at = image.record(40, 90, pages=1)
    image.record(at, 91, pages=1)
    state = md_journal.describe(image.path)
    assert state.starts_empty and state.tail_block == "not a meta block"
    assert [m.seq for m in state.newer] == [90, 91]


def test_a_newer_record_the_chain_does_not_reach_is_reported(tmp_path):
    image = _Image(tmp_path / "j.img", tail=0)
    at = image.record(0, 5, pages=1)
    at = image.record(at, 6, pages=1)
    image.record(at + 8, 8, pages=1)      # seq 7's block lost, seq 8 on the log past the gap
    state = md_journal.describe(image.path)
    assert [m.seq for m in state.chain] == [5, 6]
    assert [m.seq for m in state.newer] == [8]
    assert "1 newer meta blocks it does not reach (seq 8..8, 1 data pages)" in state.summary


def test_a_run_of_records_just_before_the_chain_is_shown(tmp_path):
    # Head lapped a stale tail: the block at the tail is newer than the live ones before it.
    image = _Image(tmp_path / "j.img", tail=0)
    image.record(0, 30, pages=1)
    at = image.record(200, 27, pages=1)
    at = image.record(at, 28, pages=1)
    image.record(at, 29, pages=1)
    state = md_journal.describe(image.path)
    assert [m.seq for m in state.chain] == [30]
    assert [m.seq for m in state.before] == [27, 28, 29]


def test_a_torn_data_page_is_counted_and_the_walk_goes_on(tmp_path):
    image = _Image(tmp_path / "j.img", tail=0)
    at = image.record(0, 1, pages=2)
    image.record(at, 2, pages=1)
    image.block(8, _page(0x77))           # seq 1's first data page, as a cut left it
    state = md_journal.describe(image.path)
    assert [(m.seq, m.bad_pages) for m in state.chain] == [(1, 1), (2, 0)]
    assert state.as_json()["chain_bad_pages"] == 1


def test_a_meta_block_written_for_another_position_stops_recovery(tmp_path):
    image = _Image(tmp_path / "j.img", tail=0)
    image.block(0, _meta(64, 3, [_page(1)]))
    state = md_journal.describe(image.path)
    assert state.starts_empty and state.tail_block == "a meta block (seq 3) written for position 64"


def test_members_are_not_journals(tmp_path):
    path = tmp_path / "d0.img"
    path.write_bytes(bytes(1 << 20))
    with open(path, "r+b") as f:
        f.seek(SUPERBLOCK_1_2_OFFSET)
        f.write(_superblock(0, role=0, feature=0))
    assert not md_journal.is_journal(path)
    assert md_journal.describe_images([path]) is None
    with pytest.raises(UsageError, match="not an md write-journal device"):
        md_journal.describe(path)


def _payloads_record(image: _Image, position: int, seq: int, payloads: list[tuple[str, int]]) -> int:
    """A meta block whose payloads come in the order given: ("data", array sector), ("parity",
    stripe) or ("flush", stripe); its pages follow it. The next position."""
    body, pages = b"", []
    for kind, where in payloads:
        if kind == "flush":
            body += struct.pack("<HHIQ", md_journal.PAYLOAD_FLUSH, 0, 8, where)
            continue
        page = _page((seq * 7 + len(pages)) % 251)
        pages.append(page)
        code = md_journal.PAYLOAD_DATA if kind == "data" else md_journal.PAYLOAD_PARITY
        body += struct.pack("<HHIQI", code, 0, 8, where, md_journal.crc32c_le(SEED, page))
    raw = bytearray(4096)
    struct.pack_into("<IIBBHIQQ", raw, 0, md_journal.R5LOG_MAGIC, 0, 1, 0, 0, 32 + len(body), seq, position)
    raw[32:32 + len(body)] = body
    struct.pack_into("<I", raw, 4, md_journal.crc32c_le(SEED, bytes(raw)))
    image.block(position, bytes(raw))
    for page in pages:
        position = (position + 8) % LOG_SECTORS
        image.block(position, page)
    return (position + 8) % LOG_SECTORS


def test_stripe_of_is_the_stripe_head_sector_on_the_members():
    # 64 KiB chunks (128 sectors), 3 data chunks per stripe: array sector 1000 lies in chunk 7
    # (stripe 2), 104 sectors into it, so on each member at 2 * 128 + 104, in the row at 360.
    assert md_journal.stripe_of(1000, 128, 3) == 360
    assert md_journal.stripe_of(1007, 128, 3) == 360
    assert md_journal.stripe_of(1008, 128, 3) == 368
    assert md_journal.stripe_of(2000, 128, 3) == 720


def test_recovery_drops_what_a_flush_payload_says_reached_the_members_and_keeps_the_rest(tmp_path):
    image = _Image(tmp_path / "j.img", tail=0)
    at = _payloads_record(image, 0, 1, [("data", 1000), ("data", 1008)])
    at = _payloads_record(image, at, 2, [("flush", 360), ("data", 1000)])       # written out, then written again
    at = _payloads_record(image, at, 3, [("data", 2000), ("parity", 720)])      # a stripe with its parity
    at = _payloads_record(image, at, 4, [("data", 2000)])                       # replays seq 3's first
    _payloads_record(image, at, 5, [("flush", 720)])
    chain = md_journal.describe(image.path).chain
    assert [m.seq for m in chain] == [1, 2, 3, 4, 5]
    assert chain[1].marks == ((md_journal.PAYLOAD_FLUSH, 360, 0),)
    assert chain[2].marks == ((md_journal.PAYLOAD_PARITY, 720, 1),)
    written, dropped = md_journal.replay_split(chain, 128, 3)
    assert [(m.seq, location) for m, location, _ in written] == [(1, 1008), (2, 1000), (3, 2000)]
    assert [(m.seq, location) for m, location, _ in dropped] == [(1, 1000), (4, 2000)]
    assert written[0][2] == 16                 # seq 1's second data page, right after its first


def test_flush_drops_counts_the_dropped_pages_the_members_do_not_hold(tmp_path):
    # Four members (3 data chunks of 128 sectors per stripe, md's left-symmetric layout) and
    # the journal: seq 1 logs array pages 1000 and 1008, seq 2 says both stripes reached the
    # members. The members hold page 1000 as logged, and not page 1008 (the cut took it).
    from raidlab.baselines.md_oracle import read_pages
    from raidlab.baselines.md_superblock import engine_layout_params, read_superblock
    from raidlab.engine.layouts import create_layout

    members = []
    for slot in range(4):
        path = tmp_path / f"d{slot}.img"
        with open(path, "wb") as f:
            f.truncate((DATA_OFFSET + 100000) * 512)
            f.seek(SUPERBLOCK_1_2_OFFSET)
            f.write(_superblock(0, role=slot, feature=0))
        members.append(path)
    image = _Image(tmp_path / "j.img", tail=0)
    at = _payloads_record(image, 0, 1, [("data", 1000), ("data", 1008)])
    _payloads_record(image, at, 2, [("flush", 360), ("flush", 368)])
    logged = md_journal.log_blocks(image.path, [8, 16])
    arch, params = engine_layout_params(read_superblock(members[0]), (DATA_OFFSET + 100000) * 512)
    for extent in create_layout(arch, **params).map(1000 * 512, 4096):
        with open(members[extent.disk], "r+b") as f:   # slots are in file order here
            f.seek(extent.disk_offset)
            f.write(logged[0])
    assert read_pages(members, [1000 * 512, 1008 * 512]) == [logged[0], bytes(4096)]

    drops = md_journal.flush_drops(image.path, members)
    assert drops == {"dropped_pages": 2, "dropped_pages_the_members_lack": 1, "dropped_stripes_lacking": [368]}
    found = md_journal.describe_images([*members, image.path])
    assert found["dropped_pages_the_members_lack"] == 1
    assert "recovery drops 2 walked data pages that a later flush payload says reached the members, " \
           "which lack 1 of them" in found["summary"]


def test_recovery_skips_a_record_with_a_torn_page_flush_payloads_and_all(tmp_path):
    image = _Image(tmp_path / "j.img", tail=0)
    at = _payloads_record(image, 0, 1, [("data", 1000)])
    second = at
    at = _payloads_record(image, at, 2, [("flush", 360), ("data", 2000)])
    image.block(second + 8, _page(0x55))          # seq 2's data page, as a cut left it
    chain = md_journal.describe(image.path).chain
    assert [(m.seq, m.bad_pages) for m in chain] == [(1, 0), (2, 1)]
    written, dropped = md_journal.replay_split(chain, 128, 3)
    assert [(m.seq, location) for m, location, _ in written] == [(1, 1000)] and dropped == []
