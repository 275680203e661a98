"""The shared bus (raidlab.disks.bus): drives that share it cannot move more than its rate
together, one drive slower than the bus is not slowed by it, a serial bus adds each
transfer to the request, and a booking takes the first gap that fits even when a later
interval was booked first."""

from __future__ import annotations

import random

import pytest

from raidlab import sched
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.disks.bus import Bus, parse_bus
from raidlab.sched import run_virtual
from raidlab.errors import UsageError

MiB = 1 << 20


def _run(main):
    return run_virtual(main)


def _sequential_reads(disks, total_per_disk, chunk):
    """Each disk reads `total_per_disk` bytes in `chunk` requests, one at a time, all disks
    at once; the virtual seconds it took."""
    async def main():
        async with sched.open_nursery() as nursery:
            for disk in disks:
                disk.start(nursery)
            start = sched.current_time()

            async def stream(disk):
                for offset in range(0, total_per_disk, chunk):
                    await disk.read(offset, chunk)

            async with sched.open_nursery() as readers:
                for disk in disks:
                    readers.start_soon(stream, disk)
            elapsed = sched.current_time() - start
            nursery.cancel_scope.cancel()
        return elapsed
    return _run(main)


def test_drives_faster_than_the_bus_share_its_rate():
    bus = Bus(10.0)
    disks = [EmulatedDisk(f"d{i}", "ssd", MemoryBackend(64 * MiB), bus=bus) for i in range(3)]
    elapsed = _sequential_reads(disks, 16 * MiB, MiB)
    rate = 3 * 16 * MiB / elapsed / 1e6
    assert 9.9 <= rate <= 10.0 + 1e-9
    assert bus.statistics()["bytes"] == 3 * 16 * MiB
    assert bus.statistics()["busy_s"] == pytest.approx(elapsed, rel=0.01)


def test_without_a_bus_the_same_drives_go_at_their_own_rate():
    disks = [EmulatedDisk(f"d{i}", "ssd", MemoryBackend(64 * MiB)) for i in range(3)]
    elapsed = _sequential_reads(disks, 16 * MiB, MiB)
    assert 3 * 16 * MiB / elapsed / 1e6 > 100


def _random_reads(bus, seed=3, n=200):
    async def main():
        disk = EmulatedDisk("d0", "quantum-fireball-1280s", MemoryBackend(512 * MiB), bus=bus)
        rng = random.Random(seed)
        times = []
        async with sched.open_nursery() as nursery:
            disk.start(nursery)
            for _ in range(n):
                offset = rng.randrange(0, 512 * MiB - 8192, 4096)
                start = sched.current_time()
                await disk.read(offset, 8192)
                times.append(sched.current_time() - start)
            nursery.cancel_scope.cancel()
        return times, disk.statistics()
    return _run(main)


def test_one_drive_slower_than_an_overlap_bus_is_not_slowed():
    alone, _ = _random_reads(None)
    shared, stats = _random_reads(Bus(10.0))
    assert shared == alone
    assert stats["bus_wait_s"] == 0.0


def test_a_serial_bus_adds_each_transfer():
    alone, _ = _random_reads(None)
    serial, stats = _random_reads(Bus(10.0, "serial"))
    # the first request pays its transfer after the media work; later ones start later,
    # so the platter is elsewhere and their media times differ
    assert serial[0] == pytest.approx(alone[0] + 8192 / 10e6)
    assert stats["bus_wait_s"] == pytest.approx(len(alone) * 8192 / 10e6)


def test_two_busy_drives_wait_for_each_other():
    async def main():
        bus = Bus(10.0)
        disks = [EmulatedDisk(f"d{i}", "quantum-fireball-1280s", MemoryBackend(64 * MiB), bus=bus)
                 for i in range(2)]
        async with sched.open_nursery() as nursery:
            for disk in disks:
                disk.start(nursery)
            async with sched.open_nursery() as readers:
                for disk in disks:  # the same request at the same moment: the same media time
                    readers.start_soon(disk.read, 0, 256 * 1024)
            nursery.cancel_scope.cancel()
        return bus.statistics(), [d.statistics()["bus_wait_s"] for d in disks]
    stats, waits = _run(main)
    assert stats["waited_transfers"] == 1
    assert sorted(waits) == pytest.approx([0.0, 256 * 1024 / 10e6])


def test_a_booking_takes_the_first_gap_that_fits():
    bus = Bus(1.0)  # 1 MB/s: 1,000,000 bytes take one second
    assert bus.book(0.0, 11.0, 1_000_000) == 11.0          # [10, 11]
    assert bus.book(0.0, 6.0, 1_000_000) == 6.0            # [5, 6]: before the earlier booking
    assert bus.book(0.0, 10.5, 1_000_000) == 12.0          # [9.5, 10.5] overlaps [10, 11]: after it
    assert bus.book(0.0, 9.9, 500_000) == pytest.approx(9.9)  # [9.4, 9.9] is still free
    assert bus.statistics()["waited_transfers"] == 1


def test_parse_bus():
    assert parse_bus(None, ["ssd"]) is None
    assert parse_bus("none", ["ssd"]) is None
    assert parse_bus("10", ["ssd"]) == (10.0, "overlap")
    assert parse_bus("10MB/s,serial", ["ssd"]) == (10.0, "serial")
    assert parse_bus("shared", ["quantum-fireball-1280s"]) == (10.0, "overlap")
    for bad in ("fast", "0", "10,sideways", "-3"):
        with pytest.raises(UsageError):
            parse_bus(bad, ["ssd"])
    with pytest.raises(UsageError):
        parse_bus("shared", ["ssd"])


def test_a_replay_shares_one_bus_among_its_drives_and_reports_it():
    from raidlab.runners.virtual import SimSpec, replay_requests
    from raidlab.traces.formats import Request

    requests = [Request(0.0, "read", i * 64 * 1024, 64 * 1024) for i in range(24)]
    common = dict(disks=3, chunk=64 * 1024, disk_size=64 * MiB)
    private = replay_requests(SimSpec("raid0", "ssd", **common), requests)
    shared = replay_requests(SimSpec("raid0", "ssd", bus="10", **common), requests)
    assert private["bus"] is None
    assert shared["bus"]["bytes"] == 24 * 64 * 1024  # (queued contiguous reads merge per drive)
    assert shared["bus"]["waited_transfers"] > 0
    assert shared["response"]["read"]["mean_ms"] > private["response"]["read"]["mean_ms"]
    assert all("bus_wait_ms" in disk for disk in shared["per_disk"])
    # the three readings of a block's time
    per_block = shared["per_block"]
    assert per_block["request_mean"]["read"] == pytest.approx(per_block["ms_per_kib"]["read"])  # one size
