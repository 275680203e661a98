"""Oldest-first destage, the ablation next to LWFD (raidlab.engine.caches.log): the circular
log's scan after its head wrapped, the tail record that says where the chain starts, what
the order changes in what goes home, and the option `destage_order` on its way from an
architecture's options to its logs.

The crash tests of both orders under a random workload are test_dcd_crash and
test_vcraid_crash; these build the situations that matter one by one on a LogStore.
"""

from __future__ import annotations

import random

import pytest

from raidlab import sched
from raidlab.blockdev import SECTOR
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.engine.caches import create_dcd
from raidlab.engine.caches.log import (ORDER_OLDEST, CacheDiskLog, LogStore, parse_first_sector,
                                       record_bytes)
from raidlab.sched import run_virtual
from raidlab.errors import UsageError
from raidlab.runners.virtual import SimSpec, replay_requests
from raidlab.traces.formats import Request

KiB, MiB = 1024, 1 << 20
BS = 1 * KiB
LOG_ID = 0x5EED
START = 4 * KiB
REGION = 64 * KiB
PER_RECORD = 4                      # blocks per log write, consecutive: one extent
RECORD = record_bytes(1, PER_RECORD, BS)


def block(addr: int, version: int) -> bytes:
    return f"{addr}:{version}|".encode().ljust(BS, b".")


class Bench:
    """A circular log on one cache disk, the home locations as a dict, and what was written."""

    def __init__(self, disk: EmulatedDisk, epoch: int = 1) -> None:
        self.disk = disk
        self.log = CacheDiskLog(disk, 0, START, START + REGION, BS, LOG_ID)
        self.store = LogStore([self.log], BS, epoch=epoch, order=ORDER_OLDEST)
        self.home: dict[int, bytes] = {}
        self.version = 0

    async def write_back(self, live: list[tuple[int, bytes]]) -> bool:
        self.home.update(live)
        return True

    async def log_write(self, first: int) -> None:
        self.version += 1
        items = [(a, block(a, self.version)) for a in range(first, first + PER_RECORD)]
        async with self.log.lock:
            await self.store.append(0, items, self.store.next_seq())

    async def destage(self, records: int) -> int | None:
        async with self.log.lock:
            return await self.store.destage(0, records * RECORD, self.write_back)

    async def contents(self) -> dict[int, bytes]:
        """What each block reads: its mapped copy in the log, else home."""
        out = dict(self.home)
        for addr, loc in self.store.mapping.items():
            out[addr] = await self.store.read_block(loc)
        return out

    def chain(self) -> list[tuple[int, int]]:
        return [(r.seq, r.offset) for r in self.log.records]


def run(body):
    async def main():
        async with sched.open_nursery() as nursery:
            disk = EmulatedDisk("cache", "none", MemoryBackend(START + REGION))
            disk.start(nursery)
            result = await body(disk)
            nursery.cancel_scope.cancel()
        return result

    return run_virtual(main)


async def wrapped_bench(disk: EmulatedDisk) -> Bench:
    """A log filled with log writes of 5 groups of blocks in turn (so older copies are
    holes), its 3 oldest records destaged, then 2 more log writes: the first wraps."""
    bench = Bench(disk)
    await bench.store.format()
    n = 0
    while bench.log.free >= RECORD:
        await bench.log_write(PER_RECORD * (n % 5))
        n += 1
    assert await bench.destage(3) is not None
    await bench.log_write(100)
    await bench.log_write(PER_RECORD * (n % 5))
    return bench


async def recovered(disk: EmulatedDisk, epoch: int = 2, *, paper: bool = False) -> Bench:
    """The log as assembly finds it after a crash: a new LogStore of a new epoch, recovered;
    `paper`: its log writes were plain writes (VC-RAID's durability=paper), so one may be
    lost from the cache disk's write cache while later ones are not."""
    again = Bench(disk, epoch=epoch)
    again.log.data_fua = not paper
    await again.store.recover()
    return again


def test_the_scan_finds_the_chain_of_a_wrapped_log():
    async def body(disk):
        bench = await wrapped_bench(disk)
        log = bench.log
        assert log.wraps == 1 and log.wrapped
        assert log.records[-2].offset == START          # the head went round
        assert log.records[0].offset > START            # the tail had moved on
        before, contents = bench.chain(), await bench.contents()
        room = (log.used, log.free)
        again = await recovered(disk)
        again.home = bench.home
        return (before, contents, room, again.chain(), await again.contents(), (again.log.used, again.log.free),
                bench.store.counters)

    before, contents, room, after, contents_after, room_after, counters = run(body)
    assert after == before
    assert contents_after == contents
    assert room_after == room
    assert counters["destage_holes_dropped"] > 0      # the oldest copies were overwritten


def test_a_destage_whose_tail_record_was_torn_leaves_its_records_in_the_chain():
    # The newest tail record (the destage's last write) torn: the scan starts at the tail
    # the other slot names, whose records are all still there. They map the copies that
    # went home, so every block reads the same.
    async def body(disk):
        bench = Bench(disk)
        await bench.store.format()
        for n in range(8):
            await bench.log_write(PER_RECORD * (n % 3))
        assert await bench.destage(1) is not None
        chain_before_second = bench.chain()
        assert await bench.destage(2) is not None
        newest_slot = bench.log.tail_start + (1 - bench.log._tail_slot) * SECTOR
        await disk.write(newest_slot, bytes(SECTOR // 2) + b"x" * (SECTOR // 2))
        contents = await bench.contents()
        again = await recovered(disk)
        again.home = bench.home
        return chain_before_second, again.chain(), contents, await again.contents()

    chain_before, chain_after, contents, contents_after = run(body)
    assert chain_after == chain_before
    assert contents_after == contents


def test_an_emptied_log_brings_back_none_of_its_destaged_records():
    # Everything destaged: the tail record names the start of the region again, where the
    # first destaged record is still whole. Its sequence number is not above the floor, so
    # the scan ignores it (replayed, it would map blocks that may have changed at home since).
    async def body(disk):
        bench = Bench(disk)
        await bench.store.format()
        for n in range(6):
            await bench.log_write(PER_RECORD * n)
        while bench.log.records:
            assert await bench.destage(2) is not None
        stale = parse_first_sector(await disk.read(START, SECTOR), LOG_ID, BS)
        again = await recovered(disk)
        return stale, again.chain(), again.store.mapping, await again.log.read_tail()

    stale, chain, mapping, tail = run(body)
    assert stale is not None
    assert chain == [] and mapping == {}
    assert tail[0] == START


def test_recovery_rewrites_the_tail_record_when_the_chain_starts_elsewhere():
    # The record the tail record names is lost (a log write the cache disk's write cache
    # never wrote, possible under durability=paper): the scan finds the chain's wrapped part
    # at the start of the region, and recovery makes the tail record name it, so that later
    # log writes that reach the old tail cannot make the next scan start there.
    async def body(disk):
        bench = await wrapped_bench(disk)
        await disk.write(bench.log.tail, bytes(SECTOR))
        again = await recovered(disk, paper=True)
        offsets = [offset for _, offset in again.chain()]
        return offsets, await again.log.read_tail(), bench.log.records[0].offset

    offsets, (tail, _floor), lost_at = run(body)
    assert offsets and offsets[0] == START and lost_at not in offsets
    assert tail == START


# --------------------------------------------------------------- LWFD and oldest-first side by side


HOT_BLOCKS, WRITES = 8, 1500


def hot_set_workload(order: str, seed: int = 7):
    """A DCD under many small overwrites of a hot set of 4 KiB blocks, destaged only when
    its log is 80% full, down to 60% (no idle period), then drained: its statistics, and
    whether every block reads its newest data at home."""
    cache = EmulatedDisk("cache", "none", MemoryBackend(64 * KiB + 136 * KiB))
    data = EmulatedDisk("data", "none", MemoryBackend(4 * MiB))
    rng = random.Random(seed)
    newest: dict[int, bytes] = {}

    async def main():
        async with sched.open_nursery() as nursery:
            for d in (cache, data):
                d.start(nursery)
            dcd = await create_dcd("c", cache, data, ram_buffer=16 * KiB, idle_threshold=100.0,
                                   destage_segment=16 * KiB, high_watermark=0.8, low_watermark=0.6,
                                   destage_batch=16 * KiB, destage_order=order)
            dcd.start(nursery)
            for tag in range(WRITES):
                offset = rng.randrange(HOT_BLOCKS) * 4 * KiB
                payload = f"{tag}|".encode().ljust(4 * KiB, b"-")
                await dcd.write(offset, payload)
                newest[offset] = payload
                await sched.sleep(rng.uniform(0, 0.003))
            await dcd.drain()
            home = {offset: await data.read(offset, 4 * KiB) for offset in newest}
            stats = dcd.statistics()
            nursery.cancel_scope.cancel()
        return stats, home == newest

    return run_virtual(main)


@pytest.mark.parametrize("seed", [7, 8])
def test_oldest_first_drops_more_holes_and_writes_less_home_than_lwfd(seed):
    lwfd, lwfd_ok = hot_set_workload("lwfd", seed)
    oldest, oldest_ok = hot_set_workload("oldest", seed)
    assert lwfd_ok and oldest_ok
    assert (lwfd["destage_order"], oldest["destage_order"]) == ("lwfd", "oldest")
    assert lwfd["log_wraps"] == 0 and oldest["log_wraps"] > 0
    # Either way every logged copy leaves the log once: written home, or dropped as a hole.
    logged = WRITES * 4 * KiB // SECTOR
    for stats in (lwfd, oldest):
        assert stats["destaged_bytes"] // SECTOR + stats["destage_holes_dropped"] == logged
    # The log keeps 60-80% of its records. At its tail a hot block has nearly always been
    # logged again since: a hole. LWFD takes the newest copies, live, and writes a block
    # home again each time it is rewritten and destaged, while the older copies below wait.
    assert oldest["destage_holes_dropped"] > lwfd["destage_holes_dropped"]
    assert 2 * oldest["destaged_bytes"] < lwfd["destaged_bytes"]


# --------------------------------------------------------------- the option, from the arch to the logs


@pytest.mark.parametrize("arch, options", [("dcd", {}), ("vcraid", {"config": "mcd"}), ("vcraid", {"config": "1d"})])
def test_the_destage_order_option_reaches_the_logs(arch, options):
    spec = SimSpec(arch, "hp-c2200a", disks=1 if arch == "dcd" else 3, disk_size=64 * MiB,
                   options={"cache_size": "24M", "destage_order": "oldest", **options})
    report = replay_requests(spec, [Request(0.0, "write", 0, 4096)])
    assert report["architecture"]["destage_order"] == "oldest"
    assert report["architecture"]["log_wraps"] == 0


def test_an_unknown_destage_order_is_a_usage_error():
    with pytest.raises(UsageError) as info:
        replay_requests(SimSpec("dcd", "hp-c2200a", options={"destage_order": "fifo"}), [Request(0.0, "read", 0, 512)])
    assert str(info.value).startswith("option destage_order='fifo': use one of lwfd, oldest")
