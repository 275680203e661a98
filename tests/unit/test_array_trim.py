"""The engine's trim path under the virtual clock.

Trim cannot reach the engine from the loop device (pyfuse3 3.5 has no fallocate handler; see
raidlab.export.fuse), so this is where it is exercised: Array.trim on byte ranges.
Contract (raidlab.blockdev.BlockTarget): after a trim, reads return zeros or the old data,
and every copy must say the same, so a later failure cannot change what a read returns.
"""

from __future__ import annotations

import pytest

from raidlab import sched
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.engine import build

from virtual_disks import run_in_nursery

KiB, MiB = 1024, 1024 * 1024
DISK = 4 * MiB


def run(body):
    return run_in_nursery(body)


async def make(arch, n, nursery, model="none"):
    disks = [EmulatedDisk(f"d{i}", model, MemoryBackend(DISK)) for i in range(n)]
    for d in disks:
        d.start(nursery)
    array, _keeper = await build.create_array("t", arch, disks, chunk=16 * KiB, data_offset=256 * KiB,
                                              nursery=nursery, image_delay=0.01)
    return array, disks


@pytest.mark.parametrize("arch, n", [("raid0", 4), ("raid1", 2), ("raid10", 4), ("chained", 4), ("raidx", 4)])
def test_trim_zeroes_every_copy_of_the_range_and_nothing_else(arch, n):
    async def body(nursery):
        array, disks = await make(arch, n, nursery, model="hdd-7200")
        data = bytes(range(256)) * (array.size // 256)
        await array.write(0, data)
        start, length = 40 * KiB, 100 * KiB  # crosses chunk boundaries, not chunk-aligned
        await array.trim(start, length)
        got = await array.read(0, array.size)
        expected = data[:start] + bytes(length) + data[start + length:]
        member_trims = sum(d.statistics()["trims"] for d in disks)
        copies_zero = True
        for piece in array.layout.copies(start, length):
            for ext in piece:
                copies_zero &= await disks[ext.disk].read(ext.disk_offset, ext.length) == bytes(ext.length)
        return got == expected, member_trims, copies_zero, array.counters["trims"], sched.current_time()

    same, member_trims, copies_zero, trims, now = run(body)
    assert same and copies_zero and trims == 1
    assert member_trims >= 1
    assert now > 0  # timed disks: the trims took virtual time


def test_raidx_trim_is_not_undone_by_a_pending_image():
    async def body(nursery):
        array, _disks = await make("raidx", 4, nursery)
        array.image_buffer.delay = 1e9  # images stay pending until something drains them
        await array.write(0, b"\xaa" * 64 * KiB)
        assert array.image_buffer.pending
        await array.trim(0, 64 * KiB)
        assert not array.image_buffer.pending
        assert await array.scrub() == []  # the images were trimmed too, after being written home
        return await array.read(0, 64 * KiB)

    assert run(body) == bytes(64 * KiB)


def test_raid5_ignores_trim_and_keeps_parity_consistent():
    async def body(nursery):
        array, disks = await make("raid5", 4, nursery)
        data = bytes(range(256)) * (array.size // 256)
        await array.write(0, data)
        await array.trim(16 * KiB, 64 * KiB)
        got = await array.read(0, array.size)
        return got == data, await array.scrub(), sum(d.statistics()["trims"] for d in disks), array.counters["trims"]

    same, mismatches, member_trims, trims = run(body)
    assert same and mismatches == [] and member_trims == 0 and trims == 1
