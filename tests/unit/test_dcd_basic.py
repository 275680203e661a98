"""DCD (Hu & Yang §2) on the virtual clock: levels, report modes, LWFD, idle detector, bypass."""

from __future__ import annotations

import pytest

from raidlab import sched
from raidlab.blockdev import SECTOR
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.engine.caches import assemble_dcd, create_dcd
from raidlab.engine.caches.log import DEFAULT_LOG_START
from raidlab.errors import UsageError

from virtual_disks import run_in_nursery

KiB, MiB = 1024, 1 << 20


def pattern(tag: int, length: int) -> bytes:
    """Bytes that say which write they came from (tag) and where in it (sector index)."""
    return b"".join(
        (f"w{tag:07d}s{i:05d}".encode() * (SECTOR // 14 + 1))[:SECTOR] for i in range(length // SECTOR)
    )


def physical_dcd(model="none", cache=2 * MiB, data=8 * MiB):
    cache_disk = EmulatedDisk("cache", model, MemoryBackend(cache))
    data_disk = EmulatedDisk("data", model, MemoryBackend(data))
    return [cache_disk, data_disk], cache_disk, data_disk


def run(body, disks):
    return run_in_nursery(body, disks)


def test_small_writes_go_through_ram_and_log_then_destage_home():
    disks, cache_disk, data_disk = physical_dcd()

    async def body(nursery):
        dcd = await create_dcd("t", cache_disk, data_disk, ram_buffer=64 * KiB)
        dcd.start(nursery)
        await dcd.write(8 * KiB, pattern(1, 4 * KiB))
        # In RAM (or already in the log write, which the `none` model finishes at once).
        assert await dcd.read(8 * KiB, 4 * KiB) == pattern(1, 4 * KiB)
        await sched.sleep(0.001)
        stats = dcd.statistics()
        assert stats["log_writes"] == 1 and stats["cache_disk_used_bytes"] > 0
        assert await data_disk.read(8 * KiB, 4 * KiB) == bytes(4 * KiB)  # not home yet
        assert await dcd.read(8 * KiB, 4 * KiB) == pattern(1, 4 * KiB)
        assert dcd.statistics()["read_hits_cache_disk_sectors"] == 8
        await sched.sleep(0.2)  # idle: destage
        stats = dcd.statistics()
        assert stats["destages"] >= 1 and stats["cache_disk_used_bytes"] == 0
        assert stats["idle_periods_found"] >= 1
        assert await data_disk.read(8 * KiB, 4 * KiB) == pattern(1, 4 * KiB)
        assert await dcd.read(8 * KiB, 4 * KiB) == pattern(1, 4 * KiB)
        assert dcd.statistics()["read_hits_data_disk_sectors"] == 8
        return stats

    stats = run(body, disks)
    assert stats["destaged_bytes"] == 4 * KiB


def test_large_write_goes_straight_to_the_data_disk_and_supersedes_the_log():
    disks, cache_disk, data_disk = physical_dcd()

    async def body(nursery):
        dcd = await create_dcd("t", cache_disk, data_disk, idle_threshold=10.0)
        dcd.start(nursery)
        await dcd.write(0, pattern(1, 8 * KiB))
        await dcd.flush()
        assert dcd.statistics()["cache_disk_blocks_mapped"] == 16
        big = pattern(2, 128 * KiB)
        await dcd.write(0, big)
        assert await data_disk.read(0, len(big)) == big
        assert await dcd.read(0, len(big)) == big
        stats = dcd.statistics()
        assert stats["large_writes_to_data_disk"] == 1 and stats["cache_disk_blocks_mapped"] == 0
        assert stats["tombstones"] == 1
        # A crash now must not resurrect the logged copy under the large write.
        again = await assemble_dcd(cache_disk, data_disk)
        assert not again.store.mapping
        return True

    assert run(body, disks)


def test_report_after_complete_acknowledges_only_once_the_log_write_is_on_the_cache_disk():
    disks, cache_disk, data_disk = physical_dcd(model="hp-c2200a")

    async def body(nursery):
        dcd = await create_dcd("t", cache_disk, data_disk, report="after-complete")
        dcd.start(nursery)
        before = cache_disk.statistics()["writes"]
        t0 = sched.current_time()
        await dcd.write(64 * KiB, pattern(7, 4 * KiB))
        elapsed = sched.current_time() - t0
        assert cache_disk.statistics()["writes"] == before + 1  # the log write, done
        assert elapsed > 0.005  # a mechanical write (controller overhead 5.1 ms alone)
        immediate = await create_dcd("u", cache_disk, data_disk, report="immediate")
        immediate.start(nursery)
        t0 = sched.current_time()
        await immediate.write(64 * KiB, pattern(8, 4 * KiB))
        assert sched.current_time() == t0  # in RAM: no disk time at all
        return True

    assert run(body, disks)


def test_virtual_clock_burst_shows_log_writes_idle_detection_and_destage_at_expected_times():
    disks, cache_disk, data_disk = physical_dcd(model="hp-c2200a", cache=4 * MiB, data=32 * MiB)

    async def body(nursery):
        dcd = await create_dcd("t", cache_disk, data_disk)  # idle threshold 50 ms
        dcd.start(nursery)
        t0 = sched.current_time()
        for i in range(20):  # a burst: one 4 KiB write every 2 ms to scattered places
            await sched.sleep_until(t0 + i * 0.002)
            await dcd.write((i * 37 % 1000) * 8 * KiB, pattern(i, 4 * KiB))
            assert sched.current_time() == t0 + i * 0.002  # immediate report
        last_request = sched.current_time()
        await sched.sleep(1.0)
        return t0, last_request, list(dcd.timeline), dcd.statistics()

    t0, last_request, timeline, stats = run(body, disks)
    starts = [t for t, ev, _ in timeline if ev == "log_write_start"]
    dones = [t for t, ev, _ in timeline if ev == "log_write_done"]
    # The first log write starts with the first write: the cache-disk was idle.
    assert starts[0] == t0
    # Later log writes start the moment the previous one is done (never waits for a full
    # buffer), and collect several requests each: fewer log writes than requests.
    for prev_done, start in zip(dones, starts[1:]):
        assert start == prev_done
    assert 1 < len(starts) < 20
    assert sum(d["blocks"] for t, ev, d in timeline if ev == "log_write_start") == 20 * 8
    # The idle detector fires 50 ms after the last request (the log writes do not count
    # as requests); the destage starts then, or when the log write still busy on the
    # cache-disk at that moment has finished.
    idle = [t for t, ev, _ in timeline if ev == "idle"]
    assert idle[0] == pytest.approx(last_request + 0.050, abs=1e-9)
    first_destage = min(t for t, ev, _ in timeline if ev == "destage_start")
    assert first_destage == max(idle[0], max(dones))
    assert max(dones) < first_destage + 1e-12
    assert stats["cache_disk_used_bytes"] == 0 and stats["destaged_bytes"] == 20 * 4 * KiB


def test_lwfd_drops_holes_left_by_overwrites_and_a_new_request_suspends_it():
    disks, cache_disk, data_disk = physical_dcd(model="hp-c2200a", cache=4 * MiB, data=32 * MiB)

    async def body(nursery):
        dcd = await create_dcd("t", cache_disk, data_disk, destage_segment=1 * MiB)
        dcd.start(nursery)
        for version in range(3):  # the same 16 KiB three times, each in its own log write
            await dcd.write(0, pattern(version, 16 * KiB))
            await dcd.flush()
        for i in range(40):
            await dcd.write((100 + i * 50) * 4 * KiB, pattern(10 + i, 4 * KiB))
        await dcd.flush()
        # Wait for the idle detector, then interrupt the destage with a read.
        await sched.sleep(0.050 + 0.030)
        assert dcd.statistics()["idle_periods_found"] == 1
        await dcd.read(1 * MiB, 4 * KiB)
        await sched.sleep(3.0)  # 41 scattered writes home take about 15 ms each
        stats = dcd.statistics()
        assert await dcd.read(0, 16 * KiB) == pattern(2, 16 * KiB)
        assert await data_disk.read(0, 16 * KiB) == pattern(2, 16 * KiB)
        return stats, list(dcd.timeline)

    stats, timeline = run(body, disks)
    assert stats["destages_suspended"] == 1
    assert stats["idle_periods_found"] == 2
    assert stats["destage_holes_dropped"] == 2 * 32  # two overwritten 16 KiB copies
    assert stats["destaged_bytes"] == 16 * KiB + 40 * 4 * KiB
    assert stats["cache_disk_used_bytes"] == 0


def test_a_full_ram_buffer_makes_writes_wait_and_a_full_cache_disk_forces_destage():
    cache = DEFAULT_LOG_START + 160 * KiB
    disks, cache_disk, data_disk = physical_dcd(model="hp-c2200a", cache=cache, data=16 * MiB)

    async def body(nursery):
        dcd = await create_dcd("t", cache_disk, data_disk, ram_buffer=32 * KiB, idle_threshold=10.0)
        dcd.start(nursery)
        for i in range(100):
            await dcd.write(i * 8 * KiB, pattern(i, 8 * KiB))
        await dcd.flush()
        for i in range(100):
            assert await dcd.read(i * 8 * KiB, 8 * KiB) == pattern(i, 8 * KiB)
        return dcd.statistics()

    stats = run(body, disks)
    assert stats["waited_for_full_buffer"] > 0
    assert stats["forced_destages"] > 0
    assert stats["idle_periods_found"] == 0


def test_log_writes_go_before_background_batches_while_the_log_has_room():
    """Level 1 (the RAM buffer's log write) has priority over a background batch: a burst
    written while a full log is destaged reaches the cache disk with at most the batch
    already running in between."""
    cache = DEFAULT_LOG_START + 1536 * KiB
    disks, cache_disk, data_disk = physical_dcd(model="hp-c2200a", cache=cache, data=16 * MiB)

    async def body(nursery):
        dcd = await create_dcd("t", cache_disk, data_disk, ram_buffer=32 * KiB, idle_threshold=10.0,
                               high_watermark=0.6, destage_batch=256 * KiB)
        dcd.start(nursery)
        i = 0
        while dcd.statistics()["watermark_batches"] == 0:  # distinct sectors up to the high watermark
            await dcd.write(i * 8 * KiB, pattern(i, 8 * KiB))
            i += 1
        before = dcd.statistics()
        for i in range(16):  # a 128 KiB burst: four log writes of the 32 KiB RAM buffer
            await dcd.write((1000 + i) * 8 * KiB, pattern(1000 + i, 8 * KiB))
        await dcd.flush()
        after = dcd.statistics()
        for i in range(16):
            assert await dcd.read((1000 + i) * 8 * KiB, 8 * KiB) == pattern(1000 + i, 8 * KiB)
        return before, after

    before, after = run(body, disks)
    assert after["log_writes"] - before["log_writes"] >= 4
    assert after["watermark_batches"] - before["watermark_batches"] <= 1
    assert after["forced_destages"] == 0


def test_logical_dcd_lives_in_the_first_sectors_of_the_data_drive():
    drive = EmulatedDisk("drive", "hp-c2200a", MemoryBackend(64 * MiB))
    cache_part = drive.partition(0, 80_000 * SECTOR // 8, name="cache")  # 5 MB (scaled down)
    data_part = drive.partition(10 * MiB, 54 * MiB, name="data")

    async def body(nursery):
        dcd = await create_dcd("logical", cache_part, data_part)
        dcd.start(nursery)
        for i in range(30):
            await dcd.write(i * 64 * KiB, pattern(i, 4 * KiB))
        await dcd.flush()
        await sched.sleep(1.0)
        for i in range(30):
            assert await dcd.read(i * 64 * KiB, 4 * KiB) == pattern(i, 4 * KiB)
        return dcd.statistics()

    stats = run(body, [drive])
    assert stats["destaged_bytes"] == 30 * 4 * KiB
    assert stats["cache_disk"]["disk"] == "drive" and stats["data_disk"]["disk"] == "drive"


def test_bypass_drains_then_serves_as_a_plain_disk():
    disks, cache_disk, data_disk = physical_dcd()

    async def body(nursery):
        dcd = await create_dcd("t", cache_disk, data_disk, idle_threshold=10.0)
        dcd.start(nursery)
        await dcd.write(0, pattern(1, 4 * KiB))
        await dcd.set_bypass(True)
        assert await data_disk.read(0, 4 * KiB) == pattern(1, 4 * KiB)
        log_writes = dcd.statistics()["log_writes"]
        await dcd.write(4 * KiB, pattern(2, 4 * KiB))
        assert await data_disk.read(4 * KiB, 4 * KiB) == pattern(2, 4 * KiB)
        assert dcd.statistics()["log_writes"] == log_writes
        await dcd.set_bypass(False)
        await dcd.write(8 * KiB, pattern(3, 4 * KiB))
        await dcd.flush()
        return dcd.statistics()

    stats = run(body, disks)
    assert stats["log_writes"] == 2 and not stats["bypass"]


@pytest.mark.parametrize("cache, ram, words", [
    (DEFAULT_LOG_START + 256 * KiB, 512 * KiB, "larger than the cache-disk log"),
    (DEFAULT_LOG_START + 560 * KiB, 512 * KiB, "smaller than one log write"),  # log: 516 KiB after the tombstone area
    (DEFAULT_LOG_START + 536 * KiB, 512 * KiB, "larger than the cache-disk log"),  # 494 KiB after it
])
def test_bad_sizes_are_one_clear_usage_error(cache, ram, words):
    disks, cache_disk, data_disk = physical_dcd(cache=cache)

    async def body(nursery):
        with pytest.raises(UsageError) as err:
            await create_dcd("t", cache_disk, data_disk, ram_buffer=ram)
        return str(err.value)

    message = run(body, disks)
    assert words in message and "\n" not in message


def test_drain_moves_everything_to_the_data_disk_and_empties_the_log():
    disks, cache_disk, data_disk = physical_dcd()

    async def body(nursery):
        dcd = await create_dcd("t", cache_disk, data_disk, idle_threshold=10.0)
        dcd.start(nursery)
        for i in range(20):
            await dcd.write(i * 8 * KiB, pattern(i, 4 * KiB))
        destaged = await dcd.drain()
        for i in range(20):
            assert await data_disk.read(i * 8 * KiB, 4 * KiB) == pattern(i, 4 * KiB)
        return destaged, dcd.statistics()

    destaged, stats = run(body, disks)
    assert destaged == 20 * 4 * KiB
    assert stats["log_records"] == 0 and stats["cache_disk_used_bytes"] == 0 and stats["idle_periods_found"] == 0


def test_a_dcd_made_before_the_background_destage_settings_assembles_with_their_defaults():
    import dataclasses

    from raidlab.engine import metadata

    disks, cache_disk, data_disk = physical_dcd()

    async def body(nursery):
        dcd = await create_dcd("t", cache_disk, data_disk)
        old = dict(dcd.superblock.geometry)
        for key in ("high_watermark", "low_watermark", "destage_batch", "destage_order"):
            old.pop(key, None)
        await metadata.write_superblock(cache_disk, dataclasses.replace(dcd.superblock, geometry=old))
        again = await assemble_dcd(cache_disk, data_disk, report="after-complete")
        return again.report, again.high_watermark, again.destage_batch

    assert run(body, disks) == ("after-complete", 0.9, 1 << 20)
