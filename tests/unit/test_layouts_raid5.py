"""RAID5 as md lays it out: md's mapping for every sector and every algorithm, write costs,
parity, degraded plans.

The md reference below transliterates raid5_compute_sector() (level 5, every
ALGORITHM_* of RAID 5) from Linux drivers/md/raid5.c (torvalds/linux at commit
0021b7bc045e4b0b85d8c53614342aaf84ca96a5), keeping its variable names and sector_div()
semantics (divide in place, return the remainder), so the layout is checked against md's
code and not only against the formula in its docstring.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raidlab.engine.layouts import DataUnavailableError, create_layout
from raidlab.engine.layouts.raid5 import ALGORITHMS, Raid5Layout
from raidlab.engine.layouts.reference import MemoryArray
from raidlab.engine.layouts.xor import xor_blocks, xor_bytes

SECTOR = 512
KiB = 1024
LEFT_ASYMMETRIC, RIGHT_ASYMMETRIC, LEFT_SYMMETRIC, RIGHT_SYMMETRIC, PARITY_0, PARITY_N = range(6)


def md_raid5_compute_sector(r_sector: int, raid_disks: int, sectors_per_chunk: int,
                            algorithm: int = LEFT_SYMMETRIC) -> tuple[int, int, int]:
    """(new_sector, dd_idx, pd_idx) exactly as md computes them for RAID5 `algorithm`."""

    def sector_div(value: int, divisor: int) -> tuple[int, int]:  # (quotient, remainder)
        return value // divisor, value % divisor

    max_degraded = 1
    data_disks = raid_disks - max_degraded
    r_sector, chunk_offset = sector_div(r_sector, sectors_per_chunk)
    chunk_number = r_sector
    stripe = chunk_number
    stripe, dd_idx = sector_div(stripe, data_disks)
    stripe2 = stripe
    if algorithm == LEFT_ASYMMETRIC:
        _q, rem = sector_div(stripe2, raid_disks)
        pd_idx = data_disks - rem
        if dd_idx >= pd_idx:
            dd_idx += 1
    elif algorithm == RIGHT_ASYMMETRIC:
        _q, pd_idx = sector_div(stripe2, raid_disks)
        if dd_idx >= pd_idx:
            dd_idx += 1
    elif algorithm == LEFT_SYMMETRIC:
        _q, rem = sector_div(stripe2, raid_disks)
        pd_idx = data_disks - rem
        dd_idx = (pd_idx + 1 + dd_idx) % raid_disks
    elif algorithm == RIGHT_SYMMETRIC:
        _q, pd_idx = sector_div(stripe2, raid_disks)
        dd_idx = (pd_idx + 1 + dd_idx) % raid_disks
    elif algorithm == PARITY_0:
        pd_idx = 0
        dd_idx += 1
    else:  # PARITY_N
        pd_idx = data_disks
    new_sector = stripe * sectors_per_chunk + chunk_offset
    return new_sector, dd_idx, pd_idx


GEOMETRIES = [  # (disks, chunk bytes, chunks per disk, data offset)
    (3, 4 * KiB, 12, 0),
    (4, 4 * KiB, 9, 0),
    (5, 64 * KiB, 6, 1 << 20),
    (6, 512, 14, 4096),
    (7, 32 * KiB, 8, 8192),
]


@pytest.mark.parametrize("n, chunk, rows, data_offset", GEOMETRIES)
def test_every_sector_matches_md_and_the_issue_formula(n, chunk, rows, data_offset):
    layout = Raid5Layout(n_disks=n, disk_size=data_offset + rows * chunk, chunk_bytes=chunk, data_offset=data_offset)
    assert layout.capacity == rows * (n - 1) * chunk
    spc = chunk // SECTOR
    for sector in range(layout.capacity // SECTOR):
        (ext,) = layout.map(sector * SECTOR, SECTOR)
        new_sector, dd_idx, pd_idx = md_raid5_compute_sector(sector, n, spc)
        assert (ext.disk, ext.disk_offset) == (dd_idx, data_offset + new_sector * SECTOR)
        stripe = new_sector // spc
        d = (sector // spc) % (n - 1)
        assert layout.parity_disk(stripe) == pd_idx == (n - 1) - (stripe % n)
        assert ext.disk == (pd_idx + 1 + d) % n
        loc = layout.locate(pd_idx, data_offset + new_sector * SECTOR)
        assert loc.role == "parity" and loc.stripe == stripe


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("n, chunk, rows, data_offset", GEOMETRIES)
def test_every_sector_of_every_algorithm_matches_md(algorithm, n, chunk, rows, data_offset):
    layout = Raid5Layout(n_disks=n, disk_size=data_offset + rows * chunk, chunk_bytes=chunk, data_offset=data_offset,
                         algorithm=algorithm)
    spc = chunk // SECTOR
    for sector in range(0, layout.capacity // SECTOR, max(1, spc // 4)):
        (ext,) = layout.map(sector * SECTOR, SECTOR)
        new_sector, dd_idx, pd_idx = md_raid5_compute_sector(sector, n, spc, ALGORITHMS[algorithm])
        assert (ext.disk, ext.disk_offset) == (dd_idx, data_offset + new_sector * SECTOR)
        assert layout.parity_disk(new_sector // spc) == pd_idx
        parity = layout.locate(pd_idx, data_offset + new_sector * SECTOR)
        assert parity.role == "parity" and parity.stripe == new_sector // spc
        assert layout.locate(dd_idx, data_offset + new_sector * SECTOR).logical_offset == sector * SECTOR


@pytest.mark.parametrize(("algorithm", "picture"), [
    ("left-asymmetric", [[0, 1, 2, None], [3, 4, None, 5], [6, None, 7, 8], [None, 9, 10, 11]]),
    ("right-asymmetric", [[None, 0, 1, 2], [3, None, 4, 5], [6, 7, None, 8], [9, 10, 11, None]]),
    ("right-symmetric", [[None, 0, 1, 2], [5, None, 3, 4], [7, 8, None, 6], [9, 10, 11, None]]),
    ("parity-first", [[None, 0, 1, 2], [None, 3, 4, 5], [None, 6, 7, 8], [None, 9, 10, 11]]),
    ("parity-last", [[0, 1, 2, None], [3, 4, 5, None], [6, 7, 8, None], [9, 10, 11, None]]),
])
def test_the_pictures_of_md_s_other_algorithms_on_four_disks(algorithm, picture):
    """As md's documentation draws them (rows = stripes, None = parity); parity-last is
    md's RAID 4."""
    layout = Raid5Layout(n_disks=4, disk_size=4 * 4096, chunk_bytes=4096, algorithm=algorithm)
    grid = [[None] * 4 for _ in range(4)]
    for chunk in range(12):
        (ext,) = layout.map(chunk * 4096, 4096)
        grid[ext.disk_offset // 4096][ext.disk] = chunk
    assert grid == picture


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(list(ALGORITHMS)), st.integers(3, 6), st.integers(0, 2**32))
def test_every_algorithm_keeps_parity_through_writes_and_a_failed_member(algorithm, n, seed):
    """Random writes, then a member lost (its bytes scribbled over), more writes degraded,
    the member rebuilt and another lost: every read returns what was written."""
    rng = random.Random(seed)
    layout = Raid5Layout(n_disks=n, disk_size=16 * 1024, chunk_bytes=1024, algorithm=algorithm)
    array = MemoryArray(layout)
    reference = bytearray(layout.capacity)

    def writes(count):
        for _ in range(count):
            length = rng.randrange(1, 9) * 512
            offset = rng.randrange(0, (layout.capacity - length) // 512 + 1) * 512
            data = rng.randbytes(length)
            array.write(offset, data)
            reference[offset:offset + length] = data

    writes(12)
    lost = rng.randrange(n)
    array.fail([lost])
    assert array.read(0, layout.capacity) == bytes(reference)
    writes(6)
    assert array.read(0, layout.capacity) == bytes(reference)
    array.replace(lost)
    array.fail([(lost + 1) % n])
    assert array.read(0, layout.capacity) == bytes(reference)


def test_picture_matches_md_left_symmetric_on_four_disks():
    # md's left-symmetric, 4 disks (rows = stripes; Pn = parity; numbers = chunks):
    #   0  1  2  P      stripe 0: parity on disk 3
    #   4  5  P  3      stripe 1: parity on disk 2, data continues after it and wraps
    #   8  P  6  7
    #   P  9 10 11
    layout = Raid5Layout(n_disks=4, disk_size=4 * 4096, chunk_bytes=4096)
    grid = [[None] * 4 for _ in range(4)]
    for chunk in range(12):
        (ext,) = layout.map(chunk * 4096, 4096)
        grid[ext.disk_offset // 4096][ext.disk] = chunk
    assert grid == [[0, 1, 2, None], [4, 5, None, 3], [8, None, 6, 7], [None, 9, 10, 11]]


def _layout(n, chunk=4 * KiB, rows=8):
    return Raid5Layout(n_disks=n, disk_size=rows * chunk, chunk_bytes=chunk)


@pytest.mark.parametrize("n", [4, 5, 6, 8])
def test_small_write_costs_two_reads_and_two_writes(n):
    layout = _layout(n)
    for chunk in range(layout.capacity // layout.chunk_bytes):
        for offset, length in ((chunk * 4096, 4096), (chunk * 4096 + 1024, 512)):
            plan = layout.write_plan(offset, length)
            counts = plan.io_counts()
            assert (counts["reads"], counts["writes"]) == (2, 2)
            # md's rule: RMW only when it reads less; on 4 disks both read two chunks: RCW.
            (data,) = layout.map(offset, length)
            stripe = offset // 4096 // (n - 1)
            parity = layout.parity_disk(stripe)
            if n == 4:
                assert [s.method for s in plan.stripes] == ["rcw"]
                others = set(range(n)) - {data.disk, parity}
                assert {(r.disk, r.disk_offset, r.length) for r in plan.reads} == {
                    (d, data.disk_offset, length) for d in others}
            else:
                assert [s.method for s in plan.stripes] == ["rmw"]
                assert {(r.disk, r.disk_offset, r.length) for r in plan.reads} == {
                    (data.disk, data.disk_offset, length), (parity, data.disk_offset, length)}
            assert {w.role for w in plan.writes} == {"data", "parity"}
            assert not plan.full_stripe


def test_small_write_on_three_disks_is_reconstruct_write_with_one_read():
    layout = _layout(3)
    plan = layout.write_plan(4096, 4096)
    assert plan.stripes[0].method == "rcw"
    assert (plan.stripes[0].rmw_reads, plan.stripes[0].rcw_reads) == (2, 1)
    assert plan.io_counts()["reads"] == 1 and plan.io_counts()["writes"] == 2


@pytest.mark.parametrize("n", [3, 4, 5, 7])
def test_full_stripe_write_costs_no_reads(n):
    layout = _layout(n)
    stripe_bytes = (n - 1) * layout.chunk_bytes
    plan = layout.write_plan(stripe_bytes, 2 * stripe_bytes)
    assert plan.full_stripe and plan.reads == ()
    assert [s.method for s in plan.stripes] == ["full-stripe", "full-stripe"]
    assert plan.io_counts()["writes"] == 2 * n
    partial = layout.write_plan(stripe_bytes, stripe_bytes + 4096)
    assert not partial.full_stripe
    assert [s.method for s in partial.stripes][0] == "full-stripe"


@settings(max_examples=60, deadline=None)
@given(st.integers(3, 7), st.sampled_from([512, 2048, 4096]), st.integers(0, 2**32))
def test_planner_picks_the_cheaper_method_and_parity_stays_consistent(n, chunk, seed):
    rnd = random.Random(seed)
    layout = _layout(n, chunk=chunk, rows=6)
    array = MemoryArray(layout)
    model = bytearray(layout.capacity)
    sectors = layout.capacity // SECTOR
    for _ in range(15):
        start = rnd.randrange(sectors)
        count = rnd.randint(1, min(sectors - start, (n + 1) * chunk // SECTOR))
        data = rnd.randbytes(count * SECTOR)
        plan = array.write(start * SECTOR, data)
        model[start * SECTOR : (start + count) * SECTOR] = data
        for s in plan.stripes:
            if s.method == "full-stripe":
                assert s.reads == 0
            else:
                # md's rule per row: RMW only where it reads strictly fewer bytes
                assert s.rows and all(r.method == ("rmw" if r.rmw_read_bytes < r.rcw_read_bytes else "rcw")
                                      for r in s.rows)
                assert s.method == "+".join(m for m in ("rmw", "rcw") if m in {r.method for r in s.rows})
                chosen = sum(r.rmw_read_bytes if r.method == "rmw" else r.rcw_read_bytes for r in s.rows)
                assert chosen <= min(s.rmw_read_bytes, s.rcw_read_bytes)  # never more than one method for all
                if s.method != "rmw+rcw":
                    assert s.reads == (s.rmw_reads if s.method == "rmw" else s.rcw_reads)
        assert sum(s.writes for s in plan.stripes) == len(plan.writes)
    # parity invariant: every stripe XORs to zero; data reads back
    for stripe in range(layout.stripes):
        parity, data_exts = layout.stripe_members(stripe)
        blocks = [array.disks[e.disk][e.disk_offset : e.end] for e in (parity, *data_exts)]
        assert xor_blocks(blocks) == bytes(layout.chunk_bytes)
    assert array.read(0, layout.capacity) == bytes(model)


@settings(max_examples=40, deadline=None)
@given(st.integers(3, 6), st.integers(0, 2**32))
def test_degraded_reads_reconstruct_random_data(n, seed):
    rnd = random.Random(seed)
    layout = _layout(n, chunk=2048, rows=5)
    array = MemoryArray(layout)
    model = rnd.randbytes(layout.capacity)
    array.write(0, model)
    for failed in range(n):
        victim = MemoryArray(layout)
        victim.disks = [bytearray(d) for d in array.disks]
        victim.fail([failed])
        for _ in range(10):
            start = rnd.randrange(layout.capacity // SECTOR)
            count = rnd.randint(1, min(layout.capacity // SECTOR - start, 3 * 2048 // SECTOR))
            plan = layout.degraded_read_plan(start * SECTOR, count * SECTOR, [failed])
            assert all(r.disk != failed for r in plan.reads)
            touched = {e.disk for e in layout.map(start * SECTOR, count * SECTOR)}
            assert plan.reconstructs == (failed in touched)
            assert victim.execute_read(plan) == model[start * SECTOR : (start + count) * SECTOR]


def test_degraded_write_methods_avoid_the_failed_disk():
    layout = _layout(4)
    # chunk 4 is stripe 1, data index 1, on disk 0; parity of stripe 1 on disk 2
    plan = layout.write_plan(4 * 4096, 4096, [0])
    assert plan.stripes[0].method == "rcw" and plan.stripes[0].rmw_reads is None
    assert all(r.disk != 0 for r in plan.reads) and [e.disk for e in plan.skipped] == [0]
    plan = layout.write_plan(4 * 4096, 4096, [3])  # failed disk holds unwritten data
    assert plan.stripes[0].method == "rmw" and plan.stripes[0].rcw_reads is None
    plan = layout.write_plan(4 * 4096, 4096, [2])  # parity disk failed: md still reads as RCW
    assert plan.stripes[0].method == "no-parity"
    assert sorted(r.disk for r in plan.reads) == [1, 3]  # the stripe's two other data chunks
    assert [e.role for e in plan.skipped] == ["parity"] and [e.disk for e in plan.writes] == [0]
    # spanning the failed chunk and a healthy one in the same stripe: both methods
    plan = layout.write_plan(3 * 4096 + 2048, 4096, [3])
    assert plan.stripes[0].method == "rmw+rcw"
    with pytest.raises(DataUnavailableError):
        layout.write_plan(0, 4096, [0, 1])
    with pytest.raises(DataUnavailableError):
        layout.degraded_read_plan(0, 3 * 4096, [0, 1])


def test_xor_helpers():
    rnd = random.Random(7)
    a, b, c = (rnd.randbytes(40000) for _ in range(3))
    expected = bytes(x ^ y ^ z for x, y, z in zip(a, b, c))
    assert xor_blocks([a, b, c]) == expected
    assert xor_bytes(xor_bytes(a, b), b) == a
    assert xor_blocks([a]) == a
    with pytest.raises(ValueError):
        xor_blocks([a, b[:-1]])
    with pytest.raises(ValueError):
        xor_blocks([])


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5).flatmap(lambda k: st.integers(0, 3000).flatmap(
    lambda n: st.lists(st.binary(min_size=n, max_size=n), min_size=k, max_size=k))))
def test_xor_of_any_buffers_and_lengths_is_the_bytewise_xor(blocks):
    expected = bytearray(len(blocks[0]))
    for block in blocks:
        for i, byte in enumerate(block):
            expected[i] ^= byte
    kinds = [bytes, bytearray, memoryview]
    mixed = [kinds[i % 3](block) for i, block in enumerate(blocks)]
    assert xor_blocks(mixed) == bytes(expected)


def test_registry_builds_md_default_chunk():
    layout = create_layout("raid5", n_disks=3, disk_size=8 << 20)
    assert layout.chunk_bytes == 512 * KiB and layout.capacity == 2 * (8 << 20)


def _draw_write_inside_one_chunk(layout: Raid5Layout, data) -> tuple[int, int]:
    """(offset, length) of a sector-aligned write that lies inside one data chunk."""
    sectors = layout.chunk_bytes // 512
    chunk = data.draw(st.integers(0, layout.capacity // layout.chunk_bytes - 1))
    first = data.draw(st.integers(0, sectors - 1))
    count = data.draw(st.integers(1, sectors - first))
    return chunk * layout.chunk_bytes + first * 512, count * 512


@settings(max_examples=400, deadline=None)
@given(n_disks=st.integers(3, 7), chunk_kib=st.sampled_from([4, 16, 64]), data=st.data())
def test_the_one_chunk_planner_gives_the_general_planners_plan(n_disks, chunk_kib, data):
    algorithm = data.draw(st.sampled_from(list(ALGORITHMS)))
    """A write inside one chunk of a healthy array is planned directly (_one_chunk_plan);
    its plan must be the general planner's, with and without a stripe cache that holds any
    set of the members' ranges."""
    layout = Raid5Layout(n_disks=n_disks, disk_size=64 * chunk_kib * 1024, chunk_bytes=chunk_kib * 1024,
                         algorithm=algorithm)
    offset, length = _draw_write_inside_one_chunk(layout, data)
    held = data.draw(st.frozensets(st.integers(0, n_disks - 1)))
    for cached in (None, lambda disk, _offset, _length: disk in held):
        assert layout.write_plan(offset, length, cached=cached) == layout._write_plan(offset, length, frozenset(), cached)


@settings(max_examples=200, deadline=None)
@given(n_disks=st.integers(3, 7), chunk_kib=st.sampled_from([4, 16, 64]), data=st.data())
def test_the_full_stripes_planner_gives_the_general_planners_plan(n_disks, chunk_kib, data):
    layout = Raid5Layout(n_disks=n_disks, disk_size=64 * chunk_kib * 1024, chunk_bytes=chunk_kib * 1024,
                         algorithm=data.draw(st.sampled_from(list(ALGORITHMS))))
    stripe_bytes = layout.data_disks * layout.chunk_bytes
    stripes = layout.capacity // stripe_bytes
    first = data.draw(st.integers(0, stripes - 1))
    count = data.draw(st.integers(1, min(8, stripes - first)))
    offset, length = first * stripe_bytes, count * stripe_bytes
    held = data.draw(st.frozensets(st.integers(0, n_disks - 1)))
    for cached in (None, lambda disk, _offset, _length: disk in held):
        assert layout.write_plan(offset, length, cached=cached) == layout._write_plan(offset, length, frozenset(), cached)


@settings(max_examples=300, deadline=None)
@given(n_disks=st.integers(3, 7), chunk_kib=st.sampled_from([4, 16, 64]), data=st.data())
def test_the_span_of_a_write_holds_every_member_io_of_its_plans(n_disks, chunk_kib, data):
    """parity_write_span lets the array take a write's rows without planning: every member
    range of every plan of that write (healthy or with any one member failed, with any
    stripe cache) lies in the span, and the data member's write covers it whole. Beyond
    one chunk there is no span."""
    layout = Raid5Layout(n_disks=n_disks, disk_size=64 * chunk_kib * 1024, chunk_bytes=chunk_kib * 1024)
    offset, length = _draw_write_inside_one_chunk(layout, data)
    lo, hi = layout.parity_write_span(offset, length)
    assert hi - lo == length
    held = data.draw(st.frozensets(st.integers(0, n_disks - 1)))
    for failed in [(), *[(d,) for d in range(n_disks)]]:
        for cached in (None, lambda disk, _offset, _length: disk in held):
            plan = layout.write_plan(offset, length, failed, cached=cached)
            for rng in (*plan.reads, *plan.writes, *plan.skipped):
                assert (rng.disk_offset, rng.disk_offset + rng.length) == (lo, hi)
    if offset % layout.chunk_bytes:
        assert layout.parity_write_span(offset - 512, length + layout.chunk_bytes) is None


def test_rows_of_one_stripe_choose_their_method_apart_as_md_does():
    """5 disks, 16 KiB chunks, 4 KiB blocks: blocks 0..5 are chunk 0 (rows 0-3) and chunk 1
    (rows 0-1). Rows 0-1 have two chunks written: RCW reads the other two data chunks (2
    blocks a row), RMW would read 3. Rows 2-3 have one: RMW reads its old data and parity (2),
    RCW would read 3. Per row: 8 blocks read, where either method for the whole stripe reads
    10 (a tie that would go to RCW)."""
    layout = Raid5Layout(n_disks=5, disk_size=64 * 16 * KiB, chunk_bytes=16 * KiB)
    (stripe,) = layout.write_plan(0, 6 * 4 * KiB).stripes
    assert stripe.method == "rmw+rcw"
    assert [(r.start, r.end, r.method) for r in stripe.rows] == [(0, 8 * KiB, "rcw"), (8 * KiB, 16 * KiB, "rmw")]
    assert [(r.rmw_read_bytes, r.rcw_read_bytes) for r in stripe.rows] == [(24 * KiB, 16 * KiB), (16 * KiB, 24 * KiB)]
    assert stripe.rmw_read_bytes == stripe.rcw_read_bytes == 40 * KiB
    plan = layout.write_plan(0, 6 * 4 * KiB)
    assert sum(r.length for r in plan.reads) == 32 * KiB
    array = MemoryArray(layout)
    data = random.Random(2).randbytes(6 * 4 * KiB)
    array.write(0, data)
    assert array.read(0, len(data)) == data
    parity, data_exts = layout.stripe_members(0)
    assert xor_blocks([array.disks[e.disk][e.disk_offset:e.end] for e in (parity, *data_exts)]) == bytes(16 * KiB)
