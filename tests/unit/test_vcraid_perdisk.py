"""VC-RAID's per-disk configurations 1c and 1d (He & Yang Fig. 1c/1d) on the virtual clock:
each cache disk holds only blocks of its own data disk, parity is cached like data, level 2
goes home on idle; crash recovery (same method as test_vcraid_crash) keeps every durable
write; bad configurations are one UsageError."""

from __future__ import annotations

import collections

import pytest

from raidlab import sched
from raidlab.blockdev import SECTOR
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.engine import metadata
from raidlab.engine.caches.perdisk import assemble_perdisk, create_perdisk
from raidlab.sched import run_virtual
from raidlab.errors import UsageError
from test_dcd_crash import Oracle, Rig, workload

KiB, MiB = 1024, 1 << 20
CACHE = 64 * KiB + 192 * KiB


def pattern(tag: int, length: int) -> bytes:
    return (f"<{tag:08d}>".encode() * (length // 10 + 1))[:length]


def split(disks, n=4):
    return [disks[f"d{i}"] for i in range(n)], [disks[f"c{i}"] for i in range(n)]


def rig(model="hp-c2200a") -> Rig:
    return Rig({**{f"d{i}": 4 * MiB for i in range(4)}, **{f"c{i}": CACHE for i in range(4)}}, model)


@pytest.mark.parametrize("config", ["1c", "1d"])
def test_each_cache_disk_holds_its_own_data_disk_and_level2_goes_home_on_idle(config):
    r = rig()

    async def body(disks, nursery):
        data, caches = split(disks)
        vc = await create_perdisk("p", config, data, caches, nursery=nursery, ram_buffer=64 * KiB)
        for i in range(24):  # scattered 4 KiB writes over the whole volume
            await vc.write(i * 360 * KiB, pattern(i, 4 * KiB))
        await vc.flush()
        s = vc.statistics()
        assert s["config"] == config and s["level1_destages"] > 0
        # Data and parity were cached: every cache disk got log writes.
        assert all(n > 0 for n in s["level1_per_disk"]) and len(s["level1_per_disk"]) == 4
        # 1c's routing / 1d's private caches: cache disk i holds only blocks of data disk i,
        # which is where level 2 writes them.
        before = [d.statistics()["bytes_written"] for d in data]
        await sched.sleep(3.0)
        s = vc.statistics()
        assert s["cache_disk_used_bytes"] == 0 and s["level2_destages"] > 0 and s["idle_periods_found"] > 0
        after = [d.statistics()["bytes_written"] for d in data]
        assert all(a > b for a, b in zip(after, before))
        for i in range(24):
            assert await vc.read(i * 360 * KiB, 4 * KiB) == pattern(i, 4 * KiB)
        assert s["ram_buffer_bytes"] == 64 * KiB  # 1d: split evenly, the same total
        return [vc.statistics()["per_disk_caches"][k]["level2_bytes"] for k in range(len(vc.caches))]

    level2 = r.run(body)
    assert len(level2) == (4 if config == "1d" else 1) and all(b > 0 for b in level2)


@pytest.mark.parametrize("config", ["1c", "1d"])
def test_a_multi_sector_tombstone_goes_to_the_tombstone_area(config):
    # v1 then v2 of 40 scattered blocks of data disk 0, each version one log write. On
    # idle, LWFD pops v2 home first: its tombstone then names the 40 v1 copies, longer than
    # a sector, and goes to the log's tombstone area. A per-disk array made without the
    # journal slot once crashed its idle detector here ("exceeds its journal slot").
    r = rig()
    lbas = [1024 + 2 * k for k in range(40)]  # 1 KiB blocks from 1 MiB on, none adjacent

    async def body(disks, nursery):
        data, caches = split(disks)
        # A segment pops records from the top until it covers 32 KiB: the v2 records (log
        # writes of 8, 16 and 16 blocks, top first), and no v1.
        vc = await create_perdisk("p", config, data, caches, nursery=nursery, ram_buffer=64 * KiB,
                                  destage_segment=32 * KiB)
        cache = vc.caches[0]
        bs = cache.block_size
        for version in (1, 2):
            for lba in lbas:
                await cache.write(lba * bs, pattern(version * 10_000 + lba, bs))
            await cache.flush()
        await sched.sleep(3.0)
        counters = cache.store.counters
        area = await cache.logs[0].scan_area()
        sb = await metadata.read_superblock(caches[0])
        got = [await cache.read(lba * bs, bs) for lba in lbas]
        return (cache.statistics()["cache_disk_used_bytes"], counters["tombstone_entries"],
                sorted(a for rec in area for a in rec.addresses),
                sb.geometry.get("log_tombstone_area"), got, bs)

    used, entries, named, area_flag, got, bs = r.run(body)
    assert used == 0 and entries >= 40
    assert named == lbas and area_flag == 1
    assert got == [pattern(20_000 + lba, bs) for lba in lbas]

    async def reopen(disks, nursery):
        vc = await assemble_perdisk(*split(disks), nursery=nursery)
        return [await vc.caches[0].read(lba * bs, bs) for lba in lbas]

    assert r.run(reopen) == got


def crash_and_check(config: str, fraction: float, seed: int, *, ops=80, region=1 * MiB):
    r = rig()

    async def make(disks, nursery):
        await create_perdisk("p", config, *split(disks), nursery=nursery, ram_buffer=32 * KiB,
                             destage_segment=32 * KiB)

    r.run(make)
    image = {n: b.pread(0, b.size) for n, b in r.backends.items()}
    oracle = Oracle()
    times = {}

    async def work(disks, nursery):
        vc = await assemble_perdisk(*split(disks), nursery=nursery)
        times["start"] = sched.current_time()
        await workload(vc, oracle, seed, ops=ops, region=region, sync_writes=False)
        times["end"] = sched.current_time()
        return vc.statistics()

    stats = r.run(work)
    for n, b in r.backends.items():
        b.pwrite(0, image[n])
    oracle.__init__()
    r.run(work, crash_at=times["start"] + fraction * (times["end"] - times["start"]))

    async def verify(disks, nursery):
        vc = await assemble_perdisk(*split(disks), nursery=nursery)
        data = await vc.read(0, region)
        problems = [p for s in range(region // SECTOR)
                    if (p := oracle.check(s, data[s * SECTOR:(s + 1) * SECTOR]))]
        return problems, vc.statistics()["recovered_blocks"]

    problems, recovered = r.run(verify)
    return problems, stats, oracle, recovered


@pytest.mark.parametrize("config", ["1c", "1d"])
def test_every_durable_write_survives_crashes_at_8_points(config):
    failures, durable, recovered_total = [], 0, 0
    totals = collections.Counter()
    for n in range(8):
        problems, stats, oracle, recovered = crash_and_check(config, (n + 0.5) / 8, seed=300 + n)
        durable += oracle.durable_writes
        recovered_total += recovered
        totals.update({k: v for k, v in stats.items() if isinstance(v, int)})
        if problems:
            failures.append(((n + 0.5) / 8, problems[:3]))
    assert not failures, failures
    assert durable > 20 and recovered_total > 0
    for counter in ("level1_destages", "sync_writes"):
        assert totals[counter] > 0, counter


@pytest.mark.parametrize("config, n_caches, options, words", [
    ("1d", 4, {"ram_buffer": 2 * KiB}, "holds no 1024-byte block"),
    ("1c", 3, {}, "one cache disk per data disk"),
    ("1d", 4, {"ram_buffer": 1 * MiB}, "larger than the cache disks"),
    ("mcd", 4, {}, "not a per-disk"),
])
def test_bad_per_disk_configurations_are_one_usage_error(config, n_caches, options, words):
    data = [EmulatedDisk(f"d{i}", "none", MemoryBackend(4 * MiB)) for i in range(4)]
    caches = [EmulatedDisk(f"c{i}", "none", MemoryBackend(CACHE)) for i in range(n_caches)]

    async def main():
        async with sched.open_nursery() as nursery:
            for d in [*data, *caches]:
                d.start(nursery)
            with pytest.raises(UsageError, match=words):
                await create_perdisk("p", config, data, caches, nursery=nursery, **options)
            nursery.cancel_scope.cancel()

    run_virtual(main)
