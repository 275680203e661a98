"""TSS (raidlab.engine.tss): layout, map table, temperatures and the integrated device.

The device runs in virtual time over in-memory drives; every test checks the bytes a
reader gets against a plain reference buffer and, after the run, the redundancy on the
members themselves: RAID1 copies equal, the parity of every RAID5 and shared cRAID5
physical stripe equal to the XOR of its data units.
"""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raidlab import sched
from raidlab.disks import EmulatedDisk
from raidlab.disks.backend import MemoryBackend
from raidlab.engine.layouts.xor import xor_blocks
from raidlab.engine.tss.device import MigrationRefused, TSSDevice
from raidlab.engine.tss.geometry import TSSGeometry
from raidlab.engine.tss.maptable import CRAID5, FREE, INVALID, RAID1, RAID5, SHARED, MapTable, NoSpace
from raidlab.engine.tss.temperature import Temperatures
from raidlab.errors import UsageError

from virtual_disks import run_in_nursery

KiB = 1024
UNIT = 4 * KiB


def geometry(columns: int = 4, stripes: int = 32, substripes: int = 4) -> TSSGeometry:
    return TSSGeometry(columns=columns, unit=UNIT, column_size=stripes * UNIT, data_offset=8 * KiB,
                       substripes=substripes)


# ---- layout -----------------------------------------------------------------------------

@pytest.mark.parametrize("columns", [3, 4, 5, 7])
def test_each_stripe_has_one_parity_column_and_the_others_hold_its_data(columns):
    g = geometry(columns)
    for ps in range(g.physical_stripes):
        data = [g.data_column(ps, i) for i in range(g.data_units)]
        assert sorted(data + [g.polarity(ps)]) == list(range(columns))
        # neighbouring stripes differ in polarity (a RAID1 pair can be two neighbours)
        if ps:
            assert g.polarity(ps) != g.polarity(ps - 1)


def test_pieces_cover_a_range_in_order_and_split_at_units():
    g = geometry(4)
    for start in range(0, g.data_bytes, 512):
        for length in (512, 1024, UNIT, UNIT + 512, g.data_bytes - start):
            if start + length > g.data_bytes or length <= 0:
                continue
            pieces = g.pieces(5, start, length)
            assert sum(n for *_r, n in pieces) == length
            for index, column, offset, n in pieces:
                assert column == g.data_column(5, index)
                assert g.unit_offset(5) <= offset and offset + n <= g.unit_offset(5) + UNIT


def test_geometry_refuses_what_cannot_be_a_tss():
    with pytest.raises(UsageError):
        TSSGeometry(columns=2, unit=UNIT, column_size=64 * UNIT)
    with pytest.raises(UsageError):
        TSSGeometry(columns=4, unit=1000, column_size=64 * UNIT)
    with pytest.raises(UsageError):  # 3 x 4 KiB does not cut into 5 sub-stripes of whole sectors
        TSSGeometry(columns=4, unit=UNIT, column_size=64 * UNIT, substripes=5)
    with pytest.raises(UsageError):
        TSSGeometry(columns=4, unit=UNIT, column_size=UNIT)


# ---- map table --------------------------------------------------------------------------

@pytest.mark.parametrize("placement,columns,expected", [
    ("halfway", 5, 16), ("halfway", 4, 17),  # 16 has stripe 0's polarity with 4 columns
    ("successive", 4, 1), ("successive", 5, 1)])
def test_mirror_placement(placement, columns, expected):
    g = geometry(columns, stripes=32)
    table = MapTable(g, 10, placement=placement)
    primary, mirror = table.take_mirror_pair()
    assert (primary, mirror) == (0, expected)
    assert g.polarity(primary) != g.polarity(mirror)


def test_the_reserved_stripe_is_never_handed_out():
    g = geometry(4, stripes=8)
    table = MapTable(g)
    assert table.logical_stripes == 7 and table.reserved == 7
    taken = [table.take_whole() for _ in range(7)]
    assert sorted(taken) == list(range(7))
    with pytest.raises(NoSpace):
        table.take_whole()
    with pytest.raises(NoSpace):
        table.take_substripes(1)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["pair", "whole", "subs", "drop"]), st.integers(0, 10**6)),
                max_size=80))
def test_allocation_keeps_the_map_and_bitmap_consistent(ops):
    from raidlab.engine.tss.maptable import Compressed, Mapping

    g = geometry(4, stripes=16)
    table = MapTable(g)
    for op, n in ops:
        invalid = [ls for ls, e in enumerate(table.entries) if e.kind == INVALID]
        used = [ls for ls, e in enumerate(table.entries) if e.kind != INVALID]
        try:
            if op == "pair" and invalid:
                table.set(invalid[0], Mapping(RAID1, table.take_mirror_pair()))
            elif op == "whole" and invalid:
                table.set(invalid[0], Mapping(RAID5, (table.take_whole(),)))
            elif op == "subs" and invalid:
                count = 1 + n % g.substripes
                ps, first, _fresh = table.take_substripes(count)
                table.set(invalid[0], Mapping(CRAID5, (ps,), Compressed(ps, first, count, 100)))
            elif op == "drop" and used:
                old = table.set(used[n % len(used)], Mapping())
                if old.kind == CRAID5:
                    table.release_substripes(old.compressed.stripe, old.compressed.first, old.compressed.count)
                else:
                    for ps in old.stripes:
                        table.release(ps)
        except NoSpace:
            pass
        table.check()
    again = MapTable.from_bytes(g, table.to_bytes())
    assert again.entries == table.entries and again.sub_used == table.sub_used
    assert bytes(again.holder) == bytes(table.holder)


def test_a_damaged_map_table_is_refused_on_load():
    g = geometry(4, stripes=16)
    table = MapTable(g)
    from raidlab.engine.tss.maptable import Compressed, Mapping

    for ls in (0, 1):
        ps, first, _ = table.take_substripes(2)
        table.set(ls, Mapping(CRAID5, (ps,), Compressed(ps, first, 2, 10)))
    data = table.to_dict()
    data["entries"]["1"][2][1] = 1  # overlaps logical stripe 0's sub-stripes
    with pytest.raises(ValueError):
        MapTable.from_dict(g, data)


# ---- temperatures -----------------------------------------------------------------------

def test_aging_adds_recent_accesses_and_degradation_cools_only_the_idle():
    t = Temperatures(3)
    for _ in range(3):
        t.touch(0)
    t.touch(1)
    assert t.age() == 2
    assert t.temperature == [3.0, 1.0, 0.0]
    assert t.degrade(0.5) == 0  # both were accessed since the (first) degradation
    t.touch(1)
    assert t.degrade(0.5) == 1  # stripe 0 idle since the last degradation; 1 was touched
    assert t.temperature == [1.5, 1.0, 0.0]
    assert t.age() == 1 and t.temperature[1] == 2.0
    t.reset(1)
    assert t.temperature[1] == 0.0
    with pytest.raises(UsageError):
        t.degrade(1.5)


# ---- the device -------------------------------------------------------------------------

def make_device(nursery, *, mode="tss", stripes=32, logical=None, columns=4, placement="halfway", model="none"):
    g = geometry(columns, stripes=stripes)
    disks = [EmulatedDisk(f"d{i}", model, MemoryBackend(g.data_offset + g.column_size)) for i in range(columns)]
    for disk in disks:
        disk.start(nursery)
    table = MapTable(g, logical, placement=placement)
    return TSSDevice("t", disks, table, mode=mode)


def payload(rng: random.Random, length: int, compressible: float) -> bytes:
    """Bytes of which about `compressible` are runs of one byte."""
    out = bytearray()
    while len(out) < length:
        n = min(512, length - len(out))
        out += bytes([rng.randrange(4)]) * n if rng.random() < compressible else rng.randbytes(n)
    return bytes(out)


def check_redundancy(device: TSSDevice) -> None:
    """RAID1 copies hold the same data; every RAID5 and shared stripe has right parity."""
    g = device.geometry
    table = device.table
    table.check()

    def unit(column, ps):
        return device.members[column].backend.pread(g.unit_offset(ps), g.unit)

    def data_units(ps):
        return [unit(g.data_column(ps, i), ps) for i in range(g.data_units)]

    for ls, entry in enumerate(table.entries):
        if entry.unwritten:
            continue  # allocated by a read: what its stripes hold is not its data
        if entry.kind == RAID1:
            a, b = entry.stripes
            assert data_units(a) == data_units(b), f"RAID1 copies of {ls} differ"
        if entry.kind == RAID5:
            ps = entry.stripes[0]
            assert xor_blocks(data_units(ps)) == unit(g.polarity(ps), ps), f"parity of {ls} (stripe {ps})"
    for ps in range(g.physical_stripes):
        if table.holder[ps] == SHARED:
            assert xor_blocks(data_units(ps)) == unit(g.polarity(ps), ps), f"parity of shared stripe {ps}"


def run(body):
    return run_in_nursery(body)


@pytest.mark.parametrize("mode", ["tss", "raid1", "raid5", "craid5"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_io_and_migrations_read_back_what_was_written(mode, seed):
    """Reads, writes (in and across stripes, any sector size) and, in the integrated
    device, promotions and victimizations interleaved, against a reference buffer."""

    async def body(nursery):
        device = make_device(nursery, mode=mode, logical=15 if mode == "raid1" else 20)
        rng = random.Random(seed)
        reference = bytearray(device.size)
        for step in range(160):
            roll = rng.random()
            if mode == "tss" and roll < 0.25:
                ls = rng.randrange(device.table.logical_stripes)
                try:
                    await (device.promote(ls) if rng.random() < 0.5 else device.victimize(ls))
                except MigrationRefused:
                    pass
                continue
            length = rng.choice([512, 1024, 3 * KiB, UNIT, 12 * KiB, 20 * KiB])
            offset = rng.randrange(0, (device.size - length) // 512) * 512
            if roll < 0.65:
                data = payload(rng, length, compressible=0.6)
                await device.write(offset, data)
                reference[offset:offset + length] = data
            else:
                assert await device.read(offset, length) == reference[offset:offset + length], step
            device.table.check()
        assert await device.read(0, device.size) == reference
        check_redundancy(device)
        return device.statistics()

    stats = run(body)
    kinds = {RAID1, RAID5, CRAID5} if mode == "tss" else {mode}
    assert set(k for k, v in stats["personalities"].items() if v and k != INVALID) <= kinds
    if mode == "tss":
        assert stats["personalities"][CRAID5] + stats["personalities"][RAID5] > 0


def test_concurrent_writes_to_compressed_stripes_sharing_a_physical_stripe():
    """Many small writers at once on cRAID5 stripes: their sub-stripes share physical
    stripes and parity, which the physical stripe locks keep right."""

    async def body(nursery):
        device = make_device(nursery, mode="craid5", logical=24, model="hp-c2200a")
        rng = random.Random(7)
        reference = bytearray(device.size)
        for _round in range(6):
            writes = []
            for ls in rng.sample(range(device.table.logical_stripes), 12):
                offset = ls * device.geometry.data_bytes + rng.randrange(0, 20) * 512
                data = payload(rng, 2 * KiB, compressible=0.8)
                writes.append((offset, data))
                reference[offset:offset + len(data)] = data
            async with sched.open_nursery() as inner:
                for offset, data in writes:
                    inner.start_soon(device.write, offset, data)
        assert await device.read(0, device.size) == reference
        check_redundancy(device)
        return device.statistics()

    stats = run(body)
    assert stats["space"]["shared_stripes"] < 24  # compressed stripes did share
    assert stats["decompressions"] > 0


def test_compression_saves_space_and_incompressible_stripes_are_stored_whole():
    async def body(nursery):
        device = make_device(nursery, mode="craid5", logical=8)
        stripe = device.geometry.data_bytes
        await device.write(0, bytes(stripe))                       # compresses to one sub-stripe
        await device.write(stripe, os.urandom(stripe))             # does not compress
        assert await device.read(stripe, stripe) != bytes(stripe)
        first, second = device.table[0].compressed, device.table[1].compressed
        assert first.count == 1 and not first.raw
        assert second.count == device.geometry.substripes and second.raw
        check_redundancy(device)
        return device.table.space()

    space = run(body)
    stripe_bytes = 4 * UNIT
    assert space["physical_craid5"] == stripe_bytes // 4 + stripe_bytes


def test_promotion_and_victimization_follow_the_paper_order_and_reset_temperature():
    async def body(nursery):
        device = make_device(nursery, mode="tss", logical=8)
        stripe = device.geometry.data_bytes
        data = payload(random.Random(3), stripe, 0.7)
        await device.write(0, data)
        assert device.table[0].kind == RAID1  # plenty of free stripes: first access is RAID1
        device.temperatures.touch(0)
        device.temperatures.age()
        assert await device.victimize(0) == RAID5
        assert device.temperatures.get(0) == 0.0
        assert await device.victimize(0) == CRAID5
        with pytest.raises(MigrationRefused):
            await device.victimize(0)
        assert await device.promote(0) == RAID5
        assert await device.promote(0) == RAID1
        with pytest.raises(MigrationRefused):
            await device.promote(0)
        a, b = device.table[0].stripes
        assert device.geometry.polarity(a) != device.geometry.polarity(b)
        assert await device.read(0, stripe) == data
        with pytest.raises(MigrationRefused):
            await device.promote(5)  # invalid: nothing to move
        check_redundancy(device)
        return dict(device.counters)

    counters = run(body)
    for move in ("victimize_raid1_to_raid5", "victimize_raid5_to_craid5", "promote_craid5_to_raid5",
                 "promote_raid5_to_raid1"):
        assert counters[move] == 1


def test_a_full_device_moves_through_the_reserved_stripe_and_victimizes_on_its_own():
    """Every physical stripe but the reserved one holds data: a RAID5 stripe can still be
    victimized (into the reserved stripe, whose place the vacated stripe takes), and a
    first write into a full integrated device victimizes the coldest RAID1 stripe."""

    async def body(nursery):
        device = make_device(nursery, mode="tss", stripes=8, logical=7)
        stripe = device.geometry.data_bytes
        rng = random.Random(5)
        reference = bytearray(device.size)
        for ls in range(7):  # 3 RAID1 pairs, then one RAID5 in the last free stripe
            data = payload(rng, stripe, 0.9)
            await device.write(ls * stripe, data)
            reference[ls * stripe:(ls + 1) * stripe] = data
        stats = device.statistics()
        assert device.table.free_stripes() == 0
        assert stats["forced_victimizations"] >= 1
        raid5 = device.table.logical_of(RAID5)
        reserved = device.table.reserved
        await device.victimize(raid5[0])
        assert device.counters["reserved_stripe_moves"] == 1
        assert device.table.reserved != reserved
        assert device.table[raid5[0]].compressed.stripe == reserved
        assert await device.read(0, device.size) == reference
        check_redundancy(device)

    run(body)


def test_trim_of_whole_stripes_frees_their_space():
    async def body(nursery):
        device = make_device(nursery, mode="tss", logical=8)
        stripe = device.geometry.data_bytes
        await device.write(0, b"x" * (2 * stripe))
        free = device.table.free_stripes()
        await device.trim(0, stripe + 512)  # stripe 0 whole, stripe 1 only in part
        assert device.table[0].kind == INVALID and device.table[1].kind != INVALID
        assert device.table.free_stripes() == free + 2
        assert await device.read(0, stripe) == bytes(stripe)
        device.table.check()

    run(body)


def test_bad_modes_and_stripes_are_refused():
    async def body(nursery):
        with pytest.raises(UsageError):
            make_device(nursery, mode="raid6")
        device = make_device(nursery)
        with pytest.raises(UsageError):
            await device.promote(10**6)

    run(body)


# ---- persistence and crashes ------------------------------------------------------------

def columns_over(backends, nursery, model="none"):
    disks = [EmulatedDisk(f"d{i}", model, backend) for i, backend in enumerate(backends)]
    for disk in disks:
        disk.start(nursery)
    return disks


def test_the_map_survives_an_orderly_reassembly():
    from raidlab.engine.tss.build import TSSOptions, assemble_tss, create_tss

    backends = [MemoryBackend(2 * 1024 * KiB) for _ in range(4)]

    async def body(nursery):
        device = await create_tss("t", columns_over(backends, nursery), unit=UNIT,
                                  options=TSSOptions(logical_stripes=16))
        rng = random.Random(11)
        reference = bytearray(device.size)
        for _ in range(80):
            length = rng.choice([512, 4 * KiB, 12 * KiB])
            offset = rng.randrange(0, (device.size - length) // 512) * 512
            data = payload(rng, length, 0.7)
            await device.write(offset, data)
            reference[offset:offset + length] = data
            if rng.random() < 0.5:
                ls = rng.randrange(device.table.logical_stripes)
                try:
                    await (device.victimize(ls) if rng.random() < 0.6 else device.promote(ls))
                except MigrationRefused:
                    pass
        again = await assemble_tss(columns_over(backends, nursery))
        assert again.table.entries == device.table.entries
        assert again.table.reserved == device.table.reserved
        assert bytes(again.table.holder) == bytes(device.table.holder)
        assert await again.read(0, again.size) == reference
        check_redundancy(again)
        return device.table.counts

    counts = run(body)
    assert counts[CRAID5] and counts[RAID5] and counts[RAID1]


class CrashWorkload:
    """Writers and a migrating policy on a device until a crash cuts them off (with `flush`,
    each write is followed by a flush before it counts as acknowledged). Writer i owns
    the i-th share of every logical stripe (one share per data unit): writers meet in
    stripes (locks, parity) but never in a sector, whose last write is then the last one
    acknowledged. `acked` holds each sector's last acknowledged content, `pending` the
    contents of writes still in flight."""

    def __init__(self, device, seed: int, *, flush: bool = False) -> None:
        self.device, self.seed, self.flush = device, seed, flush
        self.acked: dict[int, bytes] = {}
        self.pending: dict[int, list[bytes]] = {}

    async def writer(self, index: int, shares: int) -> None:
        device, sector = self.device, 512
        stripe = device.geometry.data_bytes
        lane = stripe // shares
        wrng = random.Random(self.seed * 100 + index)
        while True:
            length = wrng.choice([512, 2 * KiB, lane])
            ls = wrng.randrange(device.table.logical_stripes)
            offset = ls * stripe + index * lane + wrng.randrange(0, (lane - length) // sector + 1) * sector
            data = payload(wrng, length, 0.7)
            chunks = {(offset + i) // sector: data[i:i + sector] for i in range(0, length, sector)}
            for s, chunk in chunks.items():
                self.pending.setdefault(s, []).append(chunk)
            await device.write(offset, data)
            if self.flush:  # acknowledged only once durable (an fsync)
                await device.flush()
            for s, chunk in chunks.items():
                self.pending[s].remove(chunk)
                self.acked[s] = chunk

    async def policy(self) -> None:
        prng = random.Random(self.seed)
        while True:
            await sched.sleep(prng.uniform(0.01, 0.1))
            ls = prng.randrange(self.device.table.logical_stripes)
            try:
                await (self.device.victimize(ls) if prng.random() < 0.6 else self.device.promote(ls))
            except MigrationRefused:
                pass

    def start(self, nursery) -> None:
        shares = self.device.geometry.data_units
        for index in range(shares):
            nursery.start_soon(self.writer, index, shares)
        nursery.start_soon(self.policy)

    async def check(self, again, crash_at: float) -> None:
        """Every sector of the reassembled device holds its last acknowledged write or one
        that was in flight."""
        sector = 512
        image = await again.read(0, again.size)
        for s in range(again.size // sector):
            got = image[s * sector:(s + 1) * sector]
            allowed = [self.acked.get(s, bytes(sector))] + self.pending.get(s, [])
            assert got in allowed, f"sector {s} lost its acknowledged content (crash at {crash_at:.3f} s)"


@pytest.mark.parametrize("seed", range(100))
def test_a_crash_at_any_moment_keeps_every_acknowledged_write(seed):
    """Writers and a migrating policy (CrashWorkload) run on a slow drive model until the
    daemon "dies" at a random moment (everything in flight stops where it is); the device
    assembled from the members returns, for every sector, the last acknowledged write or
    one still in flight at the crash, and its map loads consistent."""
    from raidlab.engine.tss.build import TSSOptions, assemble_tss, create_tss

    backends = [MemoryBackend(2 * 1024 * KiB) for _ in range(4)]
    crash_at = random.Random(seed).uniform(0.3, 3.0)

    async def body(nursery):
        device = await create_tss("t", columns_over(backends, nursery, "hp-c2200a"), unit=UNIT,
                                  options=TSSOptions(logical_stripes=12))
        work = CrashWorkload(device, seed)
        with sched.CancelScope(deadline=sched.current_time() + crash_at):
            async with sched.open_nursery() as nursery_of_work:
                work.start(nursery_of_work)
        again = await assemble_tss(columns_over(backends, nursery))
        await work.check(again, crash_at)
        acked = work.acked
        return len(acked)

    assert run(body) > 0


def test_space_a_durable_record_points_at_is_not_reused_before_the_new_record_is_durable():
    """A cRAID5 rewrite moves the stripe; while its new map record is still being written,
    another stripe's allocation must not get the old sub-stripes, or a crash then (the old
    record still on disk) would find another stripe's bytes there."""
    from raidlab.engine.tss.build import TSSOptions, assemble_tss, create_tss

    backends = [MemoryBackend(2 * 1024 * KiB) for _ in range(4)]

    async def body(nursery):
        device = await create_tss("t", columns_over(backends, nursery), unit=UNIT,
                                  options=TSSOptions(mode="craid5", logical_stripes=8))
        stripe = device.geometry.data_bytes
        old = payload(random.Random(1), stripe, 0.9)
        await device.write(0, old)
        held = device.table[0].compressed
        never = sched.Event()
        write_entry = device.store.write_entry

        async def stalled(ls, entry):
            if ls == 0:
                await never.wait()  # the record of the move never becomes durable
            await write_entry(ls, entry)

        device.store.write_entry = stalled
        with sched.move_on_after(5):
            async with sched.open_nursery() as work:
                work.start_soon(device.write, 0, payload(random.Random(2), stripe, 0.9))
                await sched.sleep(1)
                for ls in range(1, 6):  # allocations that would like the lowest sub-stripes
                    await device.write(ls * stripe, payload(random.Random(ls + 10), stripe, 0.9))
        again = await assemble_tss(columns_over(backends, nursery))
        assert again.table[0].compressed == held
        assert await again.read(0, stripe) == old

    run(body)


# ---- the data log and asynchronous writes (§3.8, §4) ------------------------------------

def logged_device(nursery, backends, log_backend, *, mode="tss", writes="async", logical=12, model="none",
                  create=True):
    from raidlab.engine.tss.build import TSSOptions, assemble_tss, create_tss

    drives = columns_over(backends + [log_backend], nursery, model)
    if create:
        return create_tss("t", drives, unit=UNIT, options=TSSOptions(mode=mode, logical_stripes=logical, log=True,
                                                                      writes=writes))
    return assemble_tss(drives)


@pytest.mark.parametrize("writes", ["sync", "async", "logged"])
@pytest.mark.parametrize("mode", ["tss", "raid5", "craid5"])
def test_logged_writes_read_back_in_every_mode(writes, mode):
    backends = [MemoryBackend(2 * 1024 * KiB) for _ in range(4)]

    async def body(nursery):
        device = await logged_device(nursery, backends, MemoryBackend(256 * KiB), mode=mode, writes=writes)
        device.start(nursery)
        rng = random.Random(5)
        reference = bytearray(device.size)
        for _ in range(120):
            length = rng.choice([512, 2 * KiB, 12 * KiB, 20 * KiB])
            offset = rng.randrange(0, (device.size - length) // 512) * 512
            if rng.random() < 0.6:
                data = payload(rng, length, 0.6)
                await device.write(offset, data)
                reference[offset:offset + length] = data
            else:  # reads wait for the acknowledged writes of their stripes
                assert await device.read(offset, length) == reference[offset:offset + length]
            if mode == "tss" and rng.random() < 0.2:
                try:
                    await device.victimize(rng.randrange(device.table.logical_stripes))
                except MigrationRefused:
                    pass
        await device.drain()
        assert await device.read(0, device.size) == reference
        check_redundancy(device)
        return device.statistics()

    stats = run(body)
    assert stats["log"]["records"] > 0 and stats["log"]["commits"] == stats["log"]["records"]
    if writes != "sync":
        assert stats["async_writes_applied"] == stats["log"]["records"]


def test_what_each_write_mode_waits_for():
    """sync waits for the log, the stripe write and the commit; async (§4) for the log and a
    partial stripe write's pre-reads, not the member writes; logged for the log alone."""
    def one(writes):
        backends = [MemoryBackend(2 * 1024 * KiB) for _ in range(4)]

        async def body(nursery):
            device = await logged_device(nursery, backends, MemoryBackend(512 * KiB), mode="raid5", writes=writes,
                                         model="quantum-fireball-1280s", logical=40)
            device.start(nursery)
            stripe = device.geometry.data_bytes
            await device.write(5 * stripe, bytes(range(256)) * (stripe // 256))  # a whole stripe
            await device.drain()
            log_writes = device.log.statistics()["records"]
            started = sched.current_time()
            await device.write(5 * stripe + 1024, b"x" * 1024)  # a partial stripe write
            response = sched.current_time() - started
            await device.drain()
            assert await device.read(5 * stripe + 1024, 1024) == b"x" * 1024
            partial = device.counters["rmw_writes"] + device.counters["rcw_writes"]  # pre-reads either way
            return response, partial, device.log.statistics()["records"] - log_writes

        return run(body)

    times = {writes: one(writes) for writes in ("sync", "async", "logged")}
    assert all(rmw == 1 and records == 1 for _t, rmw, records in times.values()), times
    assert times["sync"][0] > times["async"][0] > times["logged"][0]


@pytest.mark.parametrize("writes", ["async", "logged"])
def test_an_asynchronous_write_is_acknowledged_before_its_stripe_is_written_with_at_most_8_behind(writes):
    backends = [MemoryBackend(2 * 1024 * KiB) for _ in range(4)]

    async def body(nursery):
        device = await logged_device(nursery, backends, MemoryBackend(512 * KiB), mode="raid5",
                                     model="quantum-fireball-1280s", logical=40, writes=writes)
        device.start(nursery)
        stripe = device.geometry.data_bytes
        started = sched.current_time()
        async with sched.open_nursery() as writers:  # 20 writers at once, as a busy filesystem
            for ls in range(20):
                writers.start_soon(device.write, ls * stripe, b"a" * 1024)
        acknowledged = sched.current_time() - started
        await device.drain()
        applied = sched.current_time() - started
        assert await device.read(0, 20 * stripe) == b"".join(b"a" * 1024 + bytes(stripe - 1024) for _ in range(20))
        return device.counters["async_in_flight_max"], acknowledged, applied, device.counters["async_writes_applied"]

    most, acknowledged, applied, count = run(body)
    assert most == 8 and count == 20
    assert acknowledged < applied  # the columns were still being written after the last ack


@pytest.mark.parametrize("seed", range(40))
def test_with_the_log_a_crash_keeps_acknowledged_writes_and_the_parity(seed):
    """As the crash test above (one writer per data unit's share of every stripe), with the
    data log and asynchronous writes, and a log small enough to wrap many times: after recovery every acknowledged write is there, and
    every RAID1 pair and parity is consistent again (replayed reconstruct-writes, shared
    stripes resynced), which without the log a torn read-modify-write leaves wrong."""
    # Five columns: with four data units a small write is a read-modify-write (with three,
    # md's rule makes every one-unit write a reconstruct-write), so the replay's choice matters.
    backends = [MemoryBackend(2 * 1024 * KiB) for _ in range(5)]
    log_backend = MemoryBackend(12 * KiB)
    crash_at = random.Random(seed).uniform(0.3, 3.0)

    async def body(nursery):
        with sched.CancelScope(deadline=sched.current_time() + crash_at):
            async with sched.open_nursery() as nursery_of_work:
                device = await logged_device(nursery_of_work, backends, log_backend, model="hp-c2200a", logical=12)
                device.start(nursery_of_work)
                work = CrashWorkload(device, seed)
                work.start(nursery_of_work)
        again = await logged_device(nursery, backends, log_backend, model="none", create=False)
        await work.check(again, crash_at)
        check_redundancy(again)
        return len(work.acked), device.log.counters["record_bytes"], again.counters["recovered_records"]

    acked, logged, _recovered = run(body)
    assert acked > 0 and logged > 12 * KiB  # the log wrapped


def power_cut_drives(disks, seed: int) -> int:
    """Cut the power of drives built with volatile caches: each keeps or loses each write
    it had not made durable, at random, each drive apart. Returns the writes lost."""
    from raidlab.disks.volatile import power_cut

    rng = random.Random(seed)
    return sum(power_cut(d.volatile.log_bytes(), d.backend, "random", rng)["writes_lost"] for d in disks)


def volatile_columns(backends, nursery, model="maxtor-91366u4"):
    """Drives whose write cache is on (an ATA model) and volatile: a power cut takes what
    they hold in it."""
    disks = [EmulatedDisk(f"d{i}", model, backend) for i, backend in enumerate(backends)]
    for disk in disks:
        disk.enable_volatile_cache(None)
        disk.start(nursery)
    return disks


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("writes", ["sync", "async"])
def test_with_the_log_a_power_cut_keeps_every_acknowledged_write(writes, seed):
    """The crash test above with the drives' write caches on and a power cut at the crash
    (each drive keeps or loses each unflushed write at random): a write acknowledged once its
    record is on the log (FUA) must survive, so a record may be committed only once its
    stripe write is durable (flushed), not merely reported by a drive holding it in cache."""
    from raidlab.engine.tss.build import TSSOptions, assemble_tss, create_tss

    backends = [MemoryBackend(2 * 1024 * KiB) for _ in range(5)]
    log_backend = MemoryBackend(64 * KiB)
    crash_at = random.Random(seed).uniform(0.3, 2.0)
    box = {}

    async def body(nursery):
        with sched.CancelScope(deadline=sched.current_time() + crash_at):
            async with sched.open_nursery() as nursery_of_work:
                drives = volatile_columns(backends + [log_backend], nursery_of_work)
                device = await create_tss("t", drives, unit=UNIT, options=TSSOptions(
                    mode="raid5", logical_stripes=12, log=True, writes=writes))
                device.start(nursery_of_work)
                box["drives"] = drives
                work = CrashWorkload(device, seed)
                work.start(nursery_of_work)
        box["lost"] = power_cut_drives(box["drives"], seed)
        again = await assemble_tss(columns_over(backends + [log_backend], nursery))
        await work.check(again, crash_at)
        check_redundancy(again)
        return len(work.acked), device.counters["durability_flushes"]

    acked, flushes = run(body)
    assert acked > 0 and flushes > 0


@pytest.mark.parametrize("seed", range(30))
def test_a_power_cut_keeps_every_flushed_write_while_stripes_migrate(seed):
    """No log: a write counts once a flush after it returned. Migrations move flushed data
    to new places and write map records; a power cut that takes the drives' unflushed writes
    must not take the moved data from under a durable record that points at it."""
    from raidlab.engine.tss.build import TSSOptions, assemble_tss, create_tss

    backends = [MemoryBackend(2 * 1024 * KiB) for _ in range(4)]
    crash_at = random.Random(seed).uniform(0.3, 2.0)
    box = {}

    async def body(nursery):
        with sched.CancelScope(deadline=sched.current_time() + crash_at):
            async with sched.open_nursery() as nursery_of_work:
                drives = volatile_columns(backends, nursery_of_work)
                device = await create_tss("t", drives, unit=UNIT, options=TSSOptions(logical_stripes=12))
                box["drives"] = drives
                work = CrashWorkload(device, seed, flush=True)
                work.start(nursery_of_work)
        power_cut_drives(box["drives"], seed)
        again = await assemble_tss(columns_over(backends, nursery))
        await work.check(again, crash_at)
        return len(work.acked), device.counters["durability_flushes"]

    acked, flushes = run(body)
    assert acked > 0 and flushes > 0


# ---- a failed column, degraded service, rebuild (§3.7) ----------------------------------

@pytest.mark.parametrize("column", [0, 1, 3])
@pytest.mark.parametrize("mode", ["tss", "raid1", "raid5", "craid5"])
def test_a_failed_column_loses_nothing_and_a_rebuild_restores_the_redundancy(mode, column):
    """The column's drive starts answering EIO in the middle of a workload: every byte
    still reads back, writes and (tss) migrations go on degraded; a replacement drive is
    rebuilt while a writer keeps writing, after which every RAID1 pair and parity is whole
    again and the device reassembles from its members."""
    from raidlab.engine.tss.build import TSSOptions, assemble_tss, create_tss

    backends = [MemoryBackend(2 * 1024 * KiB) for _ in range(4)]

    async def body(nursery):
        drives = columns_over(backends, nursery)
        device = await create_tss("t", drives, unit=UNIT,
                                  options=TSSOptions(mode=mode, logical_stripes=12 if mode == "raid1" else 20))
        rng = random.Random(column * 10 + len(mode))
        reference = bytearray(device.size)

        async def step(i: int) -> None:
            length = rng.choice([512, 3 * KiB, 12 * KiB])
            offset = rng.randrange(0, (device.size - length) // 512) * 512
            if rng.random() < 0.6:
                data = payload(rng, length, 0.6)
                await device.write(offset, data)
                reference[offset:offset + length] = data
            else:
                assert await device.read(offset, length) == reference[offset:offset + length], i
            if mode == "tss" and rng.random() < 0.25:
                try:
                    await (device.victimize if rng.random() < 0.6 else device.promote)(
                        rng.randrange(device.table.logical_stripes))
                except MigrationRefused:
                    pass

        for i in range(60):
            await step(i)
        drives[column].failed = True  # EIO from now on
        for i in range(60):
            await step(i)
        assert device.failed == {column}
        assert await device.read(0, device.size) == reference
        spare = MemoryBackend(2 * 1024 * KiB)
        replacement = columns_over([spare], nursery)[0]

        async def writer():
            for i in range(30):
                length = 2 * KiB
                offset = rng.randrange(0, (device.size - length) // 512) * 512
                data = payload(rng, length, 0.6)
                await device.write(offset, data)
                reference[offset:offset + length] = data

        async with sched.open_nursery() as both:
            both.start_soon(writer)
            both.start_soon(device.rebuild, column, replacement)
        assert device.failed == set()
        check_redundancy(device)
        backends[column] = spare
        again = await assemble_tss(columns_over(backends, nursery))
        assert again.failed == set()
        assert await again.read(0, again.size) == reference
        return device.counters

    counters = run(body)
    assert counters["column_failures"] == 1 and counters["rebuilds"] == 1
    assert counters["degraded_reads"] > 0


def test_a_second_failed_column_fails_the_device_and_assembly_keeps_the_first():
    from raidlab.engine.tss.build import TSSOptions, assemble_tss, create_tss

    backends = [MemoryBackend(2 * 1024 * KiB) for _ in range(4)]

    async def body(nursery):
        drives = columns_over(backends, nursery)
        device = await create_tss("t", drives, unit=UNIT, options=TSSOptions(mode="raid5", logical_stripes=20))
        data = payload(random.Random(1), 8 * device.geometry.data_bytes, 0.5)
        await device.write(0, data)
        await device.fail(1)
        await device.write(0, data[:4096])  # degraded: recorded, the copy on column 1 now stale
        again = await assemble_tss(columns_over(backends, nursery))
        assert again.failed == {1}  # the superblocks said so: column 1's stale image is not used
        assert await again.read(0, len(data)) == data
        drives[2].failed = True
        with pytest.raises(OSError):
            await device.read(0, len(data))

    run(body)


def test_the_scrub_finds_a_planted_parity_error_and_a_diverging_copy():
    async def body(nursery):
        device = make_device(nursery, mode="tss", logical=8)
        stripe = device.geometry.data_bytes
        await device.write(0, payload(random.Random(1), 2 * stripe, 0.5))
        await device.victimize(1)  # logical 1: RAID5; logical 0 stays RAID1
        assert (await device.scrub())[0] == []
        g = device.geometry
        raid5 = device.table[1].stripes[0]
        device.members[g.polarity(raid5)].backend.pwrite(g.unit_offset(raid5), b"\xff" * 512)
        mirror = device.table[0].stripes[1]
        device.members[g.data_column(mirror, 0)].backend.pwrite(g.unit_offset(mirror), b"\xee" * 512)
        found, checked = await device.scrub()
        assert sorted(m["stripe"] for m in found) == sorted([raid5, mirror])
        assert checked == (g.columns + 2 * g.data_units) * g.unit

    run(body)


def test_flush_and_fua_writes_go_on_without_a_failed_column():
    async def body(nursery):
        device = make_device(nursery, mode="raid5", logical=8)
        await device.write(0, b"x" * 4096)
        device.members[2].failed = True
        await device.write(0, b"y" * 4096, fua=True)  # FUA: a flush of every column in service
        await device.flush()
        assert device.failed == {2}
        assert await device.read(0, 4096) == b"y" * 4096

    run(body)


# ---- allocation on first access (§3.6) --------------------------------------------------

def test_a_first_read_allocates_reads_the_disks_and_answers_zeros():
    from raidlab.engine.tss.build import TSSOptions, assemble_tss, create_tss

    backends = [MemoryBackend(2 * 1024 * KiB) for _ in range(4)]
    for backend in backends:  # stale bytes of an earlier owner everywhere
        backend.pwrite(0, b"\xab" * (2 * 1024 * KiB))

    async def body(nursery):
        drives = columns_over(backends, nursery)
        device = await create_tss("t", drives, unit=UNIT, options=TSSOptions(logical_stripes=16))
        stripe = device.geometry.data_bytes
        reads_before = sum(d.statistics()["reads"] for d in drives)
        assert await device.read(stripe, 4096) == bytes(4096)
        assert device.table[1].kind == RAID1 and device.table[1].unwritten
        assert sum(d.statistics()["reads"] for d in drives) > reads_before  # the disks were read
        await device.write(stripe + 1024, b"w" * 1024)  # the first write: the whole stripe
        assert not device.table[1].unwritten
        assert await device.read(stripe, 4096) == bytes(1024) + b"w" * 1024 + bytes(2048)
        await device.read(5 * stripe, 512)  # unwritten, then moved: it moves as zeros
        assert await device.victimize(5) == RAID5 and not device.table[5].unwritten
        assert await device.read(5 * stripe, stripe) == bytes(stripe)
        await device.read(7 * stripe, 512)
        check_redundancy(device)
        again = await assemble_tss(columns_over(backends, nursery))
        assert again.table[7].unwritten and again.table.entries == device.table.entries
        assert await again.read(7 * stripe, stripe) == bytes(stripe)
        off = await create_tss("u", columns_over([MemoryBackend(2 * 1024 * KiB) for _ in range(4)], nursery),
                               unit=UNIT, options=TSSOptions(logical_stripes=16, allocate_on_read=False))
        assert await off.read(0, 4096) == bytes(4096) and off.table[0].kind == INVALID
        return device.counters

    counters = run(body)
    assert counters["allocations_on_read"] == 3 and counters["unwritten_reads"] >= 3


def test_a_craid5_devices_first_read_stores_compressed_zeros_and_reads_them():
    from raidlab.engine.tss.build import TSSOptions, create_tss

    async def body(nursery):
        drives = columns_over([MemoryBackend(2 * 1024 * KiB) for _ in range(4)], nursery)
        device = await create_tss("c", drives, unit=UNIT, options=TSSOptions(mode="craid5", logical_stripes=16))
        before = [d.statistics() for d in drives]
        assert await device.read(3 * device.geometry.data_bytes, 4096) == bytes(4096)
        after = [d.statistics() for d in drives]
        assert device.table[3].kind == CRAID5 and not device.table[3].unwritten
        assert sum(a["writes"] - b["writes"] for a, b in zip(after, before)) > 0  # stored
        assert sum(a["reads"] - b["reads"] for a, b in zip(after, before)) > 0   # and read back
        check_redundancy(device)
        return device.counters

    counters = run(body)
    assert counters["allocations_on_read"] == 1 and counters["decompressions"] >= 1


def test_the_device_is_its_members_block_layer_and_clusters_their_requests():
    """§4.1: TSS relies on the kernel clustering the stripe I/Os below it; queued contiguous
    member requests are served as one, as below an engine array."""
    from raidlab.engine.tss.build import TSSOptions, create_tss

    async def body(nursery):
        drives = columns_over([MemoryBackend(2 * 1024 * KiB) for _ in range(4)], nursery, "quantum-fireball-1280s")
        device = await create_tss("m", drives, unit=UNIT, options=TSSOptions(mode="raid5", logical_stripes=32))
        stripe = device.geometry.data_bytes
        async with sched.open_nursery() as writers:  # consecutive whole stripes, all at once
            for ls in range(16):
                writers.start_soon(device.write, ls * stripe, bytes([ls]) * stripe)
        assert await device.read(0, 16 * stripe) == b"".join(bytes([ls]) * stripe for ls in range(16))
        return sum(d.statistics()["merged_requests"] for d in drives)

    assert run(body) > 0


@pytest.mark.parametrize("fault", ["write-eio", "vanish"])
@pytest.mark.parametrize("writes", ["sync", "async", "logged"])
def test_a_failed_log_drive_leaves_the_writes_on_the_columns_and_a_new_one_logs_again(writes, fault):
    """The data log's drive failing is not a lost column: writes go straight to the columns
    from then on (every one of them reads back), the device says the log failed, and a new
    log drive (replace_log) is logged to again."""
    backends = [MemoryBackend(2 * 1024 * KiB) for _ in range(4)]

    async def body(nursery):
        device = await logged_device(nursery, backends, MemoryBackend(256 * KiB), writes=writes)
        device.start(nursery)
        rng = random.Random(7)
        reference = bytearray(device.size)

        async def some_writes(count):
            for _ in range(count):
                length = rng.choice([512, 4 * KiB, 12 * KiB])
                offset = rng.randrange(0, (device.size - length) // 512) * 512
                data = payload(rng, length, 0.5)
                await device.write(offset, data)
                reference[offset:offset + length] = data

        await some_writes(30)
        log_drive = device.log.device
        if fault == "vanish":
            log_drive.failed = True
            await device.fail_log()
        else:
            log_drive.fault = "write-eio"
        await some_writes(40)
        await device.flush()
        await device.drain()
        failed = device.statistics()["log_failed"]
        assert await device.read(0, device.size) == reference
        records_before = device.log.statistics()["records"]
        fresh = columns_over([MemoryBackend(256 * KiB)], nursery)[0]
        await device.replace_log(fresh)
        await some_writes(20)
        await device.drain()
        assert await device.read(0, device.size) == reference
        return failed, device.statistics(), records_before

    failed, stats, records_before = run(body)
    assert failed and "failed" in failed
    assert stats["log_failed"] is None and stats["log_failures"] == 1
    assert stats["log"]["records"] > 0  # the new log took records again
