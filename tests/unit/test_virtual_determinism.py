"""run_virtual gives the same timeline whatever the process did before."""

from __future__ import annotations

import random

from raidlab import sched
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.engine.array import Array
from raidlab.engine.layouts.raid5 import Raid5Layout
from raidlab.sched import run_virtual

KiB, MiB = 1024, 1 << 20


async def workload():
    layout = Raid5Layout(n_disks=4, disk_size=4 * MiB, chunk_bytes=16 * KiB, data_offset=64 * KiB)
    disks = [EmulatedDisk(f"d{i}", "hp-c2200a", MemoryBackend(4 * MiB), discipline="sstf") for i in range(4)]
    array = Array("t", layout, disks)
    rng = random.Random(3)
    finish: list[float] = []

    async def client(k):
        for _ in range(12):
            offset = rng.randrange(0, (array.size - 8 * KiB) // 512) * 512
            await array.write(offset, bytes([k]) * (8 * KiB))
            finish.append(sched.current_time())

    async with sched.open_nursery() as nursery:
        for d in disks:
            d.start(nursery)
        async with sched.open_nursery() as clients:
            for k in range(6):  # concurrent clients: many equal deadlines and wake-ups
                clients.start_soon(client, k)
        nursery.cancel_scope.cancel()
    return finish


def test_same_timeline_after_unrelated_allocations():
    first = run_virtual(workload)
    clutter = [object() for _ in range(50_000)]  # move later objects' addresses
    second = run_virtual(workload)
    del clutter
    third = run_virtual(workload)
    assert first == second == third
