"""Properties every layout must have (hypothesis over small geometries, exhaustive inside).

* the mapping is injective and covers the capacity: every logical byte of every copy has its
  own member byte, inside the data area, and `locate` maps it back;
* copies of one byte sit on distinct disks;
* reads and writes executed by the reference executor return what was written;
* `survives(F)` is exact: for every failure set F of a small array, degraded reads of the
  whole array succeed and return the data iff survives(F); a member rebuilt by
  `rebuild_plan` is byte-identical to the member of a never-failed twin;
* bad geometry is refused with a UsageError; geometry survives a JSON round trip.
"""

from __future__ import annotations

import itertools
import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raidlab.engine.layouts import (
    DataUnavailableError,
    create_layout,
    layout_from_geometry,
    layout_names,
)
from raidlab.engine.layouts.raid5 import ALGORITHMS as RAID5_ALGORITHMS
from raidlab.engine.layouts.reference import MemoryArray
from raidlab.engine.layouts.sa import bandwidth_shares
from raidlab.errors import UsageError

SECTOR = 512
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

REDUNDANT = ["raid1", "raid10", "raid5", "chained", "raidx"]
MIN_DISKS = {"raid0": 1, "raid1": 2, "raid10": 2, "raid5": 3, "chained": 2, "raidx": 2,
             "sa1": 1, "sa2": 1, "sa3": 1, "saz": 1}


@st.composite
def layouts(draw, names=tuple(layout_names()), max_disks=6):
    """A small valid layout of one of `names`."""
    name = draw(st.sampled_from(names))
    chunk = draw(st.sampled_from([512, 1024, 4096]))
    data_offset = draw(st.sampled_from([0, 512, 4096]))
    opts: dict = {}
    if name == "raid10":
        opts["layout"] = draw(st.sampled_from(["n2", "f2", "o2", "n3"]))
        min_disks = int(opts["layout"][1:])
    else:
        min_disks = MIN_DISKS[name]
    n = draw(st.integers(min_disks, max_disks))
    if name == "chained":
        opts["image_placement"] = draw(st.sampled_from(["interleaved", "halves"]))
    if name == "raid5":
        opts["algorithm"] = draw(st.sampled_from(list(RAID5_ALGORITHMS)))
    if name == "saz":
        # curves of 1..4 points, 10..40 each: no share rounds to 0; regions 1..5
        opts["bandwidth_curves"] = tuple(tuple(draw(st.lists(st.integers(10, 40), min_size=1, max_size=4)))
                                         for _ in range(n))
        opts["regions"] = draw(st.integers(1, 5))
        rows = draw(st.integers(100, 400))  # at least one cycle on the widest share (<= 100)
    elif name.startswith("sa"):
        # 10..40 with at most 6 disks: every share is >= 4 entries, none rounds to 0
        opts["bandwidths"] = tuple(draw(st.lists(st.integers(10, 40), min_size=n, max_size=n)))
        widest = max(bandwidth_shares(opts["bandwidths"]))  # members hold at least one cycle
        rows = draw(st.integers(widest, widest + 120))
    elif name == "raidx":
        rows = draw(st.integers(2 * (n - 1), 2 * (n - 1) + 12))
    else:
        rows = draw(st.integers(2, 14))
    return create_layout(name, n_disks=n, disk_size=data_offset + rows * chunk, chunk_bytes=chunk,
                         data_offset=data_offset, **opts)


def _all_extents(layout):
    return [ext for piece in layout.copies(0, layout.capacity) for ext in piece]


ALL = layout_names()


@pytest.mark.parametrize("name", ALL)
@FAST
@given(data=st.data())
def test_mapping_is_injective_covers_capacity_and_inverts(name, data):
    layout = data.draw(layouts(names=(name,)))
    pieces = layout.copies(0, layout.capacity)
    # logical side: pieces tile [0, capacity) in order
    pos = 0
    for piece in pieces:
        assert {e.logical_offset for e in piece} == {pos}
        assert len({e.length for e in piece}) == 1
        # copies of one piece are on distinct disks
        assert len({e.disk for e in piece}) == len(piece)
        assert piece[0].role == "data" and piece[0].copy == 0
        pos += piece[0].length
    assert pos == layout.capacity
    # physical side: no two copies of anything overlap, all inside the data area
    ranges = sorted((e.disk, e.disk_offset, e.end) for piece in pieces for e in piece)
    for (d1, _s1, e1), (d2, s2, _e2) in zip(ranges, ranges[1:]):
        assert d1 != d2 or e1 <= s2, "two logical bytes share a member byte"
    lo, hi = layout.data_offset, layout.data_offset + layout.member_data_size
    assert all(lo <= s and e <= hi for _d, s, e in ranges)
    copies = len(pieces[0])
    assert sum(e - s for _d, s, e in ranges) == layout.capacity * copies
    # reverse mapping: first and last sector of every copy of every piece
    for piece in pieces:
        for ext in piece:
            for delta in (0, ext.length - SECTOR):
                loc = layout.locate(ext.disk, ext.disk_offset + delta)
                assert (loc.role, loc.logical_offset, loc.copy) == (ext.role, ext.logical_offset + delta, ext.copy)


@pytest.mark.parametrize("name", ALL)
@FAST
@given(data=st.data())
def test_map_agrees_with_sector_by_sector_mapping(name, data):
    layout = data.draw(layouts(names=(name,)))
    sectors = layout.capacity // SECTOR
    start = data.draw(st.integers(0, sectors - 1))
    count = data.draw(st.integers(1, min(sectors - start, 64)))
    extents = layout.map(start * SECTOR, count * SECTOR)
    expanded = []
    for ext in extents:
        assert ext.copy == 0 and ext.role == "data"
        for k in range(0, ext.length, SECTOR):
            expanded.append((ext.logical_offset + k, ext.disk, ext.disk_offset + k))
    expected = []
    for s in range(start, start + count):
        (one,) = layout.map(s * SECTOR, SECTOR)
        expected.append((one.logical_offset, one.disk, one.disk_offset))
    assert expanded == expected
    # a piece never crosses a chunk boundary unless its neighbour is contiguous on disk too
    chunk = layout.chunk_bytes
    for ext in extents:
        if (ext.logical_offset // chunk) != ((ext.logical_offset + ext.length - 1) // chunk):
            first = layout.map(ext.logical_offset, SECTOR)[0]
            assert first.disk == ext.disk


@pytest.mark.parametrize("name", ALL)
@FAST
@given(data=st.data(), seed=st.integers(0, 2**32))
def test_random_writes_read_back_and_copies_agree(name, data, seed):
    layout = data.draw(layouts(names=(name,)))
    rnd = random.Random(seed)
    array = MemoryArray(layout)
    model = bytearray(layout.capacity)
    sectors = layout.capacity // SECTOR
    for _ in range(12):
        start = rnd.randrange(sectors)
        count = rnd.randint(1, min(sectors - start, 3 * layout.chunk_bytes // SECTOR))
        payload = rnd.randbytes(count * SECTOR)
        plan = array.write(start * SECTOR, payload)
        assert not plan.skipped
        model[start * SECTOR : (start + count) * SECTOR] = payload
    assert array.read(0, layout.capacity) == bytes(model)
    # every copy holds the data (mirrors / images consistent)
    for piece in layout.copies(0, layout.capacity):
        for ext in piece:
            assert array.disks[ext.disk][ext.disk_offset : ext.end] == model[ext.logical_offset : ext.logical_offset + ext.length]


def _fill(array, layout, rnd):
    payload = rnd.randbytes(layout.capacity)
    step = layout.chunk_bytes * 3
    for pos in range(0, layout.capacity, step):
        array.write(pos, payload[pos : pos + step])
    return bytearray(payload)


@pytest.mark.parametrize("name", REDUNDANT)
@FAST
@given(data=st.data(), seed=st.integers(0, 2**32))
def test_any_single_failure_is_recoverable_and_rebuild_is_exact(name, data, seed):
    layout = data.draw(layouts(names=(name,)))
    rnd = random.Random(seed)
    assert layout.redundancy.any_failures >= 1
    twin = MemoryArray(layout)
    model = _fill(twin, layout, rnd)
    for disk in range(layout.n_disks):
        array = MemoryArray(layout)
        array.disks = [bytearray(d) for d in twin.disks]
        assert layout.survives([disk])
        array.fail([disk])
        assert array.read(0, layout.capacity) == bytes(model)
        # writes while degraded, mirrored on the healthy twin
        twin_copy = MemoryArray(layout)
        twin_copy.disks = [bytearray(d) for d in twin.disks]
        local_model = bytearray(model)
        sectors = layout.capacity // SECTOR
        for _ in range(4):
            start = rnd.randrange(sectors)
            count = rnd.randint(1, min(sectors - start, 2 * layout.chunk_bytes // SECTOR))
            payload = rnd.randbytes(count * SECTOR)
            plan = array.write(start * SECTOR, payload)
            assert all(e.disk == disk for e in plan.skipped)
            twin_copy.write(start * SECTOR, payload)
            local_model[start * SECTOR : (start + count) * SECTOR] = payload
        assert array.read(0, layout.capacity) == bytes(local_model)
        array.replace(disk)
        lo, hi = layout.data_offset, layout.data_offset + layout.member_data_size
        for d in range(layout.n_disks):
            assert array.disks[d][lo:hi] == twin_copy.disks[d][lo:hi], f"member {d} differs after rebuild of {disk}"
        assert array.read(0, layout.capacity) == bytes(local_model)


def _paper_rule(layout, failed: frozenset[int]) -> bool | None:
    """What the papers / md say about failure set `failed` (None: no claim for this layout)."""
    n = layout.n_disks
    name = layout.name
    if name == "chained":
        return not any(d in failed and (d + 1) % n in failed for d in range(n)) if n > 2 else len(failed) <= 1
    if name == "raid10" and layout.layout == "n2" and n % 2 == 0:
        return not any({2 * i, 2 * i + 1} <= failed for i in range(n // 2))
    if name == "raid1":
        return len(failed) < n
    if name in ("raid5",):
        return len(failed) <= 1
    if name == "raidx" and n >= 3:
        return len(failed) <= 1
    if name in ("raid0", "sa1", "sa2", "sa3"):
        return not failed
    return None


@pytest.mark.parametrize("name", ALL)
@FAST
@given(data=st.data(), seed=st.integers(0, 2**32))
def test_every_failure_set_survives_exactly_when_claimed(name, data, seed):
    layout = data.draw(layouts(names=(name,)))
    rnd = random.Random(seed)
    array = MemoryArray(layout)
    model = _fill(array, layout, rnd)
    for size in range(0, layout.n_disks + 1):
        for combo in itertools.combinations(range(layout.n_disks), size):
            failed = frozenset(combo)
            claim = _paper_rule(layout, failed)
            if claim is not None:
                assert layout.survives(failed) == claim, (layout.name, sorted(failed))
            victim = MemoryArray(layout)
            victim.disks = [bytearray(d) for d in array.disks]
            victim.fail(failed)
            if layout.survives(failed):
                assert victim.read(0, layout.capacity) == bytes(model)
            else:
                with pytest.raises(DataUnavailableError):
                    victim.read(0, layout.capacity)


@pytest.mark.parametrize("name", REDUNDANT)
def test_redundancy_numbers_match_the_papers(name):
    # Table 3 of the RAID-x paper: RAID-10 and chained declustering n/2, RAID-5 and RAID-x 1.
    expected = {"raid10": 4, "chained": 4, "raid5": 1, "raidx": 1, "raid1": 7}
    layout = create_layout(name, n_disks=8, disk_size=64 * 4096, chunk_bytes=4096)
    assert layout.redundancy.any_failures == (7 if name == "raid1" else 1)
    assert layout.redundancy.max_failures == expected[name]
    assert layout.redundancy.rule


def test_non_redundant_layouts_report_failure():
    raid0 = create_layout("raid0", n_disks=3, disk_size=16 * 4096, chunk_bytes=4096)
    assert raid0.redundancy.any_failures == 0 and not raid0.survives([1])
    with pytest.raises(DataUnavailableError) as info:
        raid0.degraded_read_plan(4096, 4096, [1])
    assert info.value.errno == 5 and info.value.failed_disks == (1,)
    with pytest.raises(DataUnavailableError):
        raid0.write_plan(4096, 4096, [1])
    # a range entirely on healthy members is still served
    assert raid0.degraded_read_plan(0, 4096, [1]).reads[0].disk == 0


@pytest.mark.parametrize(
    "name, params, words",
    [
        ("raid5", dict(n_disks=2), "at least 3 disks"),
        ("raid1", dict(n_disks=1), "at least 2 disks"),
        ("raid10", dict(n_disks=2, layout="n3"), "at least 3 disks"),
        ("raid10", dict(n_disks=4, layout="x2"), "not understood"),
        ("raid0", dict(n_disks=2, chunk_bytes=1000), "multiple of 512"),
        ("raid5", dict(n_disks=3, chunk_bytes=3 * 4096), "does not divide"),
        ("raid0", dict(n_disks=2, data_offset=300), "data offset"),
        ("raid0", dict(n_disks=2, data_offset=1 << 20), "does not fit"),
        ("chained", dict(n_disks=3, image_placement="diagonal"), "image placement"),
        ("raidx", dict(n_disks=40, chunk_bytes=4096), "too small"),
        ("sa1", dict(n_disks=2), "bandwidths"),
        ("sa2", dict(n_disks=2, bandwidths=(10.0,)), "1 bandwidths for 2 disks"),
        ("sa3", dict(n_disks=2, bandwidths=(1000.0, 1.0)), "rounds to 0"),
        ("sa3", dict(n_disks=2, bandwidths=(10.0, -1.0)), "positive"),
        ("sa1", dict(n_disks=2, bandwidths=(3.0, 1.0), disk_size=70 * 4096), "smaller than one cycle"),
        ("raid6", dict(n_disks=4), "unknown layout"),
        ("raid0", dict(n_disks=2, bogus=1), "bogus"),
    ],
)
def test_bad_geometry_is_refused_with_one_clear_line(name, params, words):
    params = {"disk_size": 64 * 4096, "chunk_bytes": 4096, **params}
    with pytest.raises(UsageError) as info:
        create_layout(name, **params)
    assert words in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", ALL)
@FAST
@given(data=st.data())
def test_geometry_json_round_trip_gives_the_same_mapping(name, data):
    layout = data.draw(layouts(names=(name,)))
    restored = layout_from_geometry(json.loads(json.dumps(layout.geometry())))
    assert restored == layout
    assert restored.capacity == layout.capacity
    assert restored.copies(0, layout.capacity) == layout.copies(0, layout.capacity)


@FAST
@given(layouts())
def test_requests_outside_or_unaligned_are_programming_errors(layout):
    with pytest.raises(ValueError):
        layout.map(layout.capacity, SECTOR)
    with pytest.raises(ValueError):
        layout.map(1, SECTOR)
    with pytest.raises(ValueError):
        layout.write_plan(0, 0)


def test_rebuild_of_unused_space_is_zeros():
    layout = create_layout("raidx", n_disks=4, disk_size=9 * 4096, chunk_bytes=4096)
    # 9 chunks: half = 4 rows, data rows 3 (a multiple of n-1), row 3 and row 7, 8 unused
    assert layout.locate(0, 3 * 4096).role == "unused"
    plan = layout.rebuild_plan(0, 3 * 4096, 4096)
    assert plan.reads == () and plan.assemble([]) == bytes(4096)
    assert layout.locate(0, 9 * 4096).role == "reserved"


def test_raid1_member_need_not_be_a_multiple_of_the_chunk():
    layout = create_layout("raid1", n_disks=3, disk_size=10 * 4096 + 1024, chunk_bytes=4096, data_offset=512)
    assert layout.capacity == 10 * 4096 + 512
    array = MemoryArray(layout)
    payload = random.Random(3).randbytes(layout.capacity)
    plan = array.write(0, payload)
    assert [(w.disk, w.length) for w in plan.writes] == [(0, layout.capacity), (1, layout.capacity), (2, layout.capacity)]
    array.fail([0, 2])
    assert array.read(0, layout.capacity) == payload
    array.replace(0)
    array.replace(2)
    assert array.disks[0] == array.disks[1] == array.disks[2]
