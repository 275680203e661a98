"""VC-RAID (He & Yang §2-3) on the virtual clock: RAM buffer, level-1 and level-2 destage,
synchronous writes, scd and mcd, bad configurations."""

from __future__ import annotations

import pytest

from raidlab import sched
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.engine.caches import create_vcraid
from raidlab.engine.caches.log import DEFAULT_LOG_START
from raidlab.errors import UsageError

from virtual_disks import run_in_nursery

KiB, MiB = 1024, 1 << 20


def pattern(tag: int, length: int) -> bytes:
    return (f"<{tag:08d}>".encode() * (length // 10 + 1))[:length]


def scd_disks(model="none", cache=1 * MiB):
    array_disks = [EmulatedDisk(f"d{i}", model, MemoryBackend(8 * MiB)) for i in range(4)]
    cache_disk = EmulatedDisk("cache", model, MemoryBackend(cache))
    return array_disks + [cache_disk], array_disks, [cache_disk]


def mcd_disks(model="none", cache=1 * MiB):
    whole = [EmulatedDisk(f"d{i}", model, MemoryBackend(8 * MiB + cache)) for i in range(4)]
    members = [d.partition(0, 8 * MiB, name=f"d{i}a") for i, d in enumerate(whole)]
    caches = [whole[i].partition(8 * MiB, cache, name=f"d{i}c") for i in (0, 1)]
    return whole, members, caches


def run(body, disks):
    return run_in_nursery(body, disks)


def test_writes_pass_ram_buffer_cache_disk_and_array_and_read_back_from_each_level():
    disks, members, caches = scd_disks()

    async def body(nursery):
        vc = await create_vcraid("v", members, caches, ram_buffer=64 * KiB, idle_threshold=0.05)
        vc.start(nursery)
        await vc.write(10 * KiB, pattern(1, 8 * KiB))
        assert vc.statistics()["ram_dirty_blocks"] in (0, 8)
        await vc.write(10 * KiB, pattern(2, 8 * KiB))  # overwrite
        assert await vc.read(10 * KiB, 8 * KiB) == pattern(2, 8 * KiB)
        await vc.flush()
        s = vc.statistics()
        assert s["ram_dirty_blocks"] == 0 and s["cache_disk_blocks_mapped"] == 8
        assert await vc.read(10 * KiB, 8 * KiB) == pattern(2, 8 * KiB)
        assert vc.statistics()["read_hits_cache_disk_blocks"] == 8
        await sched.sleep(0.2)  # idle: level 2 to the array
        s = vc.statistics()
        assert s["cache_disk_used_bytes"] == 0 and s["level2_destages"] >= 1 and s["idle_periods_found"] >= 1
        assert await vc.array.read(10 * KiB, 8 * KiB) == pattern(2, 8 * KiB)
        assert await vc.read(10 * KiB, 8 * KiB) == pattern(2, 8 * KiB)
        assert vc.statistics()["read_hits_array_blocks"] == 8
        return vc.statistics()

    s = run(body, disks)
    assert s["read_hits_ram_blocks"] >= 0 and s["level2_bytes"] == 8 * KiB


def test_partial_block_writes_are_merged():
    disks, members, caches = scd_disks()

    async def body(nursery):
        vc = await create_vcraid("v", members, caches, block_size=4 * KiB, ram_buffer=64 * KiB)
        vc.start(nursery)
        await vc.write(0, pattern(1, 8 * KiB))
        await vc.write(1024 + 512, b"x" * 1024)
        want = bytearray(pattern(1, 8 * KiB))
        want[1536:2560] = b"x" * 1024
        assert await vc.read(0, 8 * KiB) == bytes(want)
        return vc.statistics()["partial_block_writes"]

    assert run(body, disks) == 1


def test_a_sync_write_is_acknowledged_only_once_on_the_cache_disk():
    disks, members, caches = scd_disks(model="hp-c2200a", cache=2 * MiB)

    async def body(nursery):
        vc = await create_vcraid("v", members, caches, ram_buffer=256 * KiB, idle_threshold=10.0)
        vc.start(nursery)
        t0 = sched.current_time()
        await vc.write(0, pattern(1, 4 * KiB))
        assert sched.current_time() == t0  # immediate report
        before = caches[0].statistics()["writes"]
        await vc.write(64 * KiB, pattern(2, 4 * KiB), fua=True)
        assert sched.current_time() > t0 + 0.005
        assert caches[0].statistics()["writes"] > before
        assert 64 * KiB // 1024 in vc.store.mapping
        return True

    assert run(body, disks)


def test_a_flush_waits_for_the_cache_disk_and_leaves_the_array_to_level_2():
    """The array is flushed by level 2 before log entries are dropped, not by every flush of
    the volume (each would cost the members a flush behind their queued I/O)."""
    disks, members, caches = scd_disks(model="hp-c2200a", cache=2 * MiB)

    def array_flushes(vc):
        a = vc.statistics()["array"]
        return a["flushes"], [m["flushes"] for m in a["members"]]

    async def body(nursery):
        vc = await create_vcraid("v", members, caches, ram_buffer=256 * KiB, idle_threshold=1.0)
        vc.start(nursery)
        before = array_flushes(vc)
        for i in range(8):
            await vc.write(i * 16 * KiB, pattern(i, 4 * KiB))
            await vc.flush()
        s = vc.statistics()
        assert s["flushes"] == 8 and s["ram_dirty_blocks"] == 0
        assert all(i * 16 + j in vc.store.mapping for i in range(8) for j in range(4))
        assert array_flushes(vc) == before
        await sched.sleep(2.0)  # idle: level 2 writes the blocks home and flushes the array
        s = vc.statistics()
        assert s["level2_destages"] >= 1 and s["cache_disk_blocks_mapped"] == 0
        after = array_flushes(vc)
        assert after[0] > before[0] and all(a > b for a, b in zip(after[1], before[1]))
        for i in range(8):
            assert await vc.array.read(i * 16 * KiB, 4 * KiB) == pattern(i, 4 * KiB)
        return True

    assert run(body, disks)


def test_level1_writes_are_at_most_64_kb_and_go_round_robin_in_mcd():
    whole, members, caches = mcd_disks(model="hp-c2200a", cache=2 * MiB)

    async def body(nursery):
        vc = await create_vcraid("v", members, caches, config="mcd", ram_buffer=512 * KiB,
                                 idle_threshold=10.0)
        vc.start(nursery)
        for i in range(64):
            await vc.write(i * 16 * KiB, pattern(i, 8 * KiB))
        await vc.flush()
        for i in range(64):
            assert await vc.read(i * 16 * KiB, 8 * KiB) == pattern(i, 8 * KiB)
        return vc.statistics(), list(vc.timeline)

    s, timeline = run(body, whole)
    starts = [d for t, ev, d in timeline if ev == "level1_start"]
    assert all(d["blocks"] * KiB <= 64 * KiB for d in starts)
    assert [d["disk"] for d in starts] == [i % 2 for i in range(len(starts))]
    assert abs(s["level1_per_disk"][0] - s["level1_per_disk"][1]) <= 1
    assert sum(d["blocks"] for d in starts) == 64 * 8
    # The two cache partitions wrote at the same time at least once (parallel log writes).
    busy = {}
    overlap = False
    for t, ev, d in timeline:
        if ev == "level1_start":
            busy[d["disk"]] = True
            overlap = overlap or all(busy.get(k) for k in (0, 1))
        elif ev == "level1_done":
            busy[d["disk"]] = False
    assert overlap


def test_a_full_cache_disk_forces_level2_and_a_full_ram_buffer_makes_writes_wait():
    disks, members, caches = scd_disks(model="hp-c2200a", cache=DEFAULT_LOG_START + 160 * KiB)

    async def body(nursery):
        vc = await create_vcraid("v", members, caches, ram_buffer=32 * KiB, idle_threshold=10.0)
        vc.start(nursery)
        for i in range(80):
            await vc.write(i * 12 * KiB, pattern(i, 8 * KiB))
        await vc.flush()
        for i in range(80):
            assert await vc.read(i * 12 * KiB, 8 * KiB) == pattern(i, 8 * KiB)
        return vc.statistics()

    s = run(body, disks)
    assert s["waited_for_full_buffer"] > 0 and s["level2_forced"] > 0 and s["idle_periods_found"] == 0


def test_level2_waits_for_idle_and_is_suspended_by_a_new_request():
    disks, members, caches = scd_disks(model="hp-c2200a", cache=4 * MiB)

    async def body(nursery):
        vc = await create_vcraid("v", members, caches, ram_buffer=256 * KiB, destage_segment=1 * MiB)
        vc.start(nursery)
        for i in range(60):
            await vc.write(i * 40 * KiB, pattern(i, 4 * KiB))
        await vc.flush()
        last = sched.current_time()
        await sched.sleep(0.051)
        await vc.read(3 * MiB, 4 * KiB)  # arrives during the level-2 segment
        await sched.sleep(5.0)
        return last, vc.statistics(), list(vc.timeline)

    last, s, timeline = run(body, disks)
    idle = [t for t, ev, _ in timeline if ev == "idle"]
    assert idle[0] == pytest.approx(last + 0.05, abs=1e-9)
    assert s["level2_suspended"] == 1 and s["idle_periods_found"] == 2
    assert s["cache_disk_used_bytes"] == 0 and s["level2_bytes"] == 60 * 4 * KiB


@pytest.mark.parametrize("config, n_caches, options, words", [
    ("mcd", 1, {}, "mcd needs cache partitions on at least two disks"),
    ("scd", 1, {"block_size": 1536}, "block size 1536 is not one a filesystem uses"),
    ("scd", 1, {"ram_buffer": 4 * MiB}, "larger than the cache disks"),
    ("scd", 1, {"ram_buffer": 16 * KiB, "cache": DEFAULT_LOG_START + 32 * KiB}, "smaller than one log write"),
])
def test_bad_configurations_are_one_clear_usage_error(config, n_caches, options, words):
    cache = options.pop("cache", 1 * MiB)
    array_disks = [EmulatedDisk(f"d{i}", "none", MemoryBackend(8 * MiB)) for i in range(4)]
    caches = [EmulatedDisk(f"c{i}", "none", MemoryBackend(cache)) for i in range(n_caches)]

    async def body(nursery):
        with pytest.raises(UsageError) as err:
            await create_vcraid("v", array_disks, caches, config=config, **options)
        return str(err.value)

    message = run(body, array_disks + caches)
    assert words in message and "\n" not in message


def test_drain_leaves_ram_buffer_and_cache_disk_empty_and_every_block_at_home():
    disks, members, caches = scd_disks()

    async def body(nursery):
        vc = await create_vcraid("v", members, caches, ram_buffer=64 * KiB, idle_threshold=10.0)
        vc.start(nursery)
        for i in range(40):  # more than the RAM buffer: some on the cache disk, some in RAM
            await vc.write(i * 4 * KiB, pattern(i, 4 * KiB))
        assert vc.statistics()["cache_disk_used_bytes"] + vc.statistics()["ram_used_bytes"] > 0
        destaged = await vc.drain()
        s = vc.statistics()
        assert s["ram_used_bytes"] == 0 and s["cache_disk_used_bytes"] == 0 and s["cache_disk_blocks_mapped"] == 0
        assert destaged == 40 * 4 * KiB and s["idle_periods_found"] == 0
        for i in range(40):
            assert await vc.array.read(i * 4 * KiB, 4 * KiB) == pattern(i, 4 * KiB)
        return s

    run(body, disks)


def test_a_read_of_logged_blocks_is_one_cache_disk_io_per_run():
    disks, members, caches = scd_disks(model="maxtor-91020d6", cache=4 * MiB)

    async def body(nursery):
        vc = await create_vcraid("v", members, caches, ram_buffer=64 * KiB, idle_threshold=10.0)
        vc.start(nursery)
        await vc.write(0, pattern(1, 32 * KiB), fua=True)   # one log write: 32 consecutive blocks
        await vc.write(1 * MiB, pattern(2, 16 * KiB), fua=True)
        before = vc.statistics()
        assert await vc.read(0, 32 * KiB) == pattern(1, 32 * KiB)
        assert await vc.read(1 * MiB - 16 * KiB, 48 * KiB) == bytes(16 * KiB) + pattern(2, 16 * KiB) + bytes(16 * KiB)
        after = vc.statistics()
        return before, after

    before, after = run(body, disks)
    assert after["read_hits_cache_disk_blocks"] - before["read_hits_cache_disk_blocks"] == 48
    assert after["cache_disk_reads"] - before["cache_disk_reads"] == 2
    assert after["read_hits_array_blocks"] - before["read_hits_array_blocks"] == 32


def test_a_log_write_into_a_range_being_read_waits_for_the_read():
    from raidlab.engine.caches.log import KIND_DATA, CacheDiskLog

    disk = EmulatedDisk("c", "none", MemoryBackend(1 * MiB))
    order = []

    async def body(nursery):
        log = CacheDiskLog(disk, 0, DEFAULT_LOG_START, disk.size, 1 * KiB, 7)
        rec = await log.write_record(1, KIND_DATA, [5], pattern(1, 1 * KiB))
        log.records.clear()  # popped: the next record goes to the same place

        async def writer():
            await log.write_record(2, KIND_DATA, [6], pattern(2, 1 * KiB))
            order.append("written")

        with log.pinned([(rec.block_offset(0), rec.block_offset(0) + 1 * KiB)]):
            nursery.start_soon(writer)
            await sched.sleep(1.0)
            order.append("read")
            assert await disk.read(rec.block_offset(0), 1 * KiB) == pattern(1, 1 * KiB)
        await sched.sleep(0.1)
        return log.pin_waits

    waits = run(body, [disk])
    assert order == ["read", "written"] and waits >= 1


async def write_without_pause(vc, count: int, blocks: int) -> None:
    """`count` 4 KiB writes scattered over `blocks` blocks, back to back (no idle period
    comes), then a flush; each block reads back as its last write."""
    last = {}
    for i in range(count):
        block = i * 37 % blocks
        await vc.write(block * 4 * KiB, pattern(i, 4 * KiB))
        last[block] = i
    await vc.flush()
    for block, i in last.items():
        assert await vc.read(block * 4 * KiB, 4 * KiB) == pattern(i, 4 * KiB)


@pytest.mark.parametrize("high_watermark", [0.6, 1.0])
def test_a_filling_log_is_destaged_in_background_batches_before_the_write_path_must(high_watermark):
    disks, members, caches = scd_disks(model="maxtor-91020d6", cache=DEFAULT_LOG_START + 1536 * KiB)

    async def body(nursery):
        vc = await create_vcraid("v", members, caches, ram_buffer=64 * KiB, idle_threshold=10.0,
                                 high_watermark=high_watermark, destage_batch=256 * KiB)
        vc.start(nursery)
        await write_without_pause(vc, 600, 1500)  # 2.4 MB
        return vc.statistics()

    s = run(body, disks)
    assert s["idle_periods_found"] == 0
    if high_watermark < 1:
        assert s["level2_watermark_periods"] >= 1 and s["level2_watermark_batches"] >= 1
        assert s["level2_forced"] <= s["level2_watermark_batches"]
    else:
        assert s["level2_watermark_batches"] == 0 and s["level2_forced"] > 0


def test_mcd_drains_both_cache_disks_together_once_they_cross_the_high_watermark():
    """Level 1 fills mcd's two logs in turn, so they cross the high watermark together. The
    background batches then go to the fuller of them each time: both drain, and the write
    path does not have to destage the log that waited while the other went to empty."""
    members = [EmulatedDisk(f"d{i}", "maxtor-91020d6", MemoryBackend(8 * MiB)) for i in range(4)]
    caches = [EmulatedDisk(f"c{i}", "maxtor-91020d6", MemoryBackend(DEFAULT_LOG_START + 1536 * KiB))
              for i in range(2)]

    async def body(nursery):
        vc = await create_vcraid("v", members, caches, config="mcd", ram_buffer=64 * KiB,
                                 idle_threshold=10.0, high_watermark=0.6, destage_batch=256 * KiB)
        vc.start(nursery)
        await write_without_pause(vc, 1200, 1900)  # 4.7 MB
        return vc.statistics(), vc.timeline

    s, timeline = run(body, members + caches)
    assert s["idle_periods_found"] == 0
    assert {detail["disk"] for _t, event, detail in timeline if event == "watermark"} == {0, 1}
    assert s["level2_watermark_batches"] >= 4
    assert s["level2_forced"] == 0


def mcd_sync_writes(n_writes, where, pause=None, **options):
    """mcd over four members and two 1.5 MiB cache logs; `n_writes` synchronous 4 KiB writes
    (each acknowledged once on a cache disk) at block `where(i)`, read back after; `pause`
    (every, seconds): a sleep before every `every`-th write. The statistics, the timeline
    and the sizes of the array's writes."""
    members = [EmulatedDisk(f"d{i}", "maxtor-91020d6", MemoryBackend(8 * MiB)) for i in range(4)]
    caches = [EmulatedDisk(f"c{i}", "maxtor-91020d6", MemoryBackend(DEFAULT_LOG_START + 1536 * KiB))
              for i in range(2)]
    array_writes = []

    async def body(nursery):
        vc = await create_vcraid("v", members, caches, config="mcd", ram_buffer=64 * KiB, durability="paper",
                                 **options)
        array_write = vc.array.write

        async def counted(offset, data, **kw):
            array_writes.append(len(data))
            return await array_write(offset, data, **kw)

        vc.array.write = counted
        vc.start(nursery)
        last = {}
        for i in range(n_writes):
            if pause and i % pause[0] == 0:
                await sched.sleep(pause[1])
            block = where(i)
            await vc.write(block * 4 * KiB, pattern(i, 4 * KiB))
            await vc.flush()
            last[block] = i
        for block, i in last.items():
            assert await vc.read(block * 4 * KiB, 4 * KiB) == pattern(i, 4 * KiB)
        return vc.statistics(), list(vc.timeline)

    stats, timeline = run(body, members + caches)
    return stats, timeline, array_writes


def test_mcd_destages_its_cache_disks_together_so_the_array_gets_whole_runs():
    """Level 1 hands consecutive log writes to mcd's cache disks in turn, so each log holds
    every other 4 KiB of a file written synchronously. While both logs are over the high
    watermark, a background batch pops both (the newest records of either first) and writes
    their live blocks home in one pass: the array gets the file in long runs, not in pieces
    of one log write each."""
    stats, timeline, array_writes = mcd_sync_writes(1000, lambda i: i, idle_threshold=10.0, high_watermark=0.6,
                                                    destage_batch=256 * KiB)
    assert stats["level2_forced"] == 0 and stats["level2_batches_together"] >= 3, stats
    assert min(stats["level1_per_disk"]) >= 400, stats["level1_per_disk"]  # pieces on both disks
    together = [d for _t, event, d in timeline if event == "level2_done" and len(d["disks"]) == 2]
    assert len(together) == stats["level2_batches_together"]
    # A batch of 256 KiB from each log: one log alone would give 64 runs of 4 KiB.
    assert sum(array_writes) / len(array_writes) >= 128 * KiB, array_writes


def test_mcd_log_writes_go_to_the_other_cache_disk_while_one_destages():
    """While one of mcd's cache disks is busy with a level-2 destage of its own (an idle
    period destages one log at a time), the log writes of synchronous writes go to the other
    one (§2: the RAM buffer goes "to one of the cache disks" that is idle) instead of
    waiting behind the destage for their round-robin turn; and the write path does not have
    to destage. Pauses between bursts of writes let idle periods start; the next burst
    arrives while a destage segment is being written home, which it does not suspend."""
    s, timeline, _array_writes = mcd_sync_writes(500, lambda i: i * 37 % 1900, pause=(50, 0.06),
                                                 idle_threshold=0.05, destage_segment=512 * KiB,
                                                 high_watermark=1.0)
    assert s["idle_periods_found"] >= 2 and s["level2_forced"] == 0
    beside = []  # per level-2 destage: the log writes started on the other disk meanwhile
    destaging = None
    for _t, event, detail in timeline:
        if event == "level2_start":
            destaging = detail["disk"]
            beside.append(0)
        elif event in ("level2_done", "level2_suspended"):
            destaging = None
        elif event == "level1_start" and destaging is not None:
            assert detail["disk"] != destaging
            beside[-1] += 1
    # strict turns would let at most one log write pass a destage (the one whose turn it was)
    assert max(beside) >= 5, beside


@pytest.mark.parametrize("ram_buffer", [64 * KiB, 512 * KiB])
def test_level1_goes_before_background_batches_while_the_log_has_room(ram_buffer):
    """VC-RAID §3.3.3: level 1 has priority over level 2 and, once started, empties the RAM
    buffer. A burst written while a full log is destaged in batches reaches the cache disk
    with at most the batch already running in between, not one batch per log write; also
    with a RAM buffer near the room left above the high watermark."""
    disks, members, caches = scd_disks(model="maxtor-91020d6", cache=DEFAULT_LOG_START + 1536 * KiB)

    async def body(nursery):
        vc = await create_vcraid("v", members, caches, ram_buffer=ram_buffer, idle_threshold=10.0,
                                 high_watermark=0.6, destage_batch=256 * KiB)
        vc.start(nursery)
        for i in range(240):  # 960 KiB of distinct blocks: past the high watermark
            await vc.write(i * 4 * KiB, pattern(i, 4 * KiB))
        await vc.flush()
        while vc.statistics()["level2_watermark_batches"] == 0:
            await sched.sleep(0.001)
        before = vc.statistics()
        for i in range(64):  # a 256 KiB burst: four 64 KiB log writes
            await vc.write((1000 + i) * 4 * KiB, pattern(1000 + i, 4 * KiB))
        await vc.flush()
        after = vc.statistics()
        for i in range(64):
            assert await vc.read((1000 + i) * 4 * KiB, 4 * KiB) == pattern(1000 + i, 4 * KiB)
        return before, after

    before, after = run(body, disks)
    assert after["level1_destages"] - before["level1_destages"] >= 4
    assert after["level2_watermark_batches"] - before["level2_watermark_batches"] <= 1
    assert after["level2_forced"] == 0


def test_paper_durability_reports_a_sync_write_once_the_cache_disk_has_it_in_its_write_cache():
    elapsed = {}
    for durability in ("paper", "strict"):
        disks, members, caches = scd_disks(model="maxtor-91020d6", cache=4 * MiB)

        async def body(nursery):
            vc = await create_vcraid("v", members, caches, ram_buffer=64 * KiB, idle_threshold=10.0,
                                     durability=durability)
            vc.start(nursery)
            await vc.write(0, pattern(0, 4 * KiB), fua=True)  # the arm is now at the log
            start = sched.current_time()
            for i in range(1, 9):
                await vc.write(i * 64 * KiB, pattern(i, 4 * KiB), fua=True)
            took = sched.current_time() - start
            assert vc.statistics()["durability"] == durability and vc.statistics()["sync_writes"] == 9
            return took

        elapsed[durability] = run(body, disks)
    # strict: each log write waits for the media (a rotation behind the last); paper: the
    # drive's write cache takes it (maxtor-91020d6: an IDE drive, write cache on).
    assert elapsed["paper"] < elapsed["strict"] / 2


@pytest.mark.parametrize("kw, words", [
    (dict(durability="lazy"), "unknown durability mode"),
    (dict(high_watermark=0.0), "high watermark"),
    (dict(high_watermark=0.5, low_watermark=0.5), "low watermark"),
    (dict(destage_batch=16 * KiB), "destage batch"),
])
def test_bad_destage_policy_is_one_clear_usage_error(kw, words):
    disks, members, caches = scd_disks()

    async def body(nursery):
        with pytest.raises(UsageError) as err:
            await create_vcraid("v", members, caches, ram_buffer=64 * KiB, **kw)
        return str(err.value)

    assert words in run(body, disks)
