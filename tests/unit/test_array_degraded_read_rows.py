"""A degraded raid5 computes a failed member's block from the other members of its row; a
write to another block of that row changes two members (its data and the parity), which do
not land at the same moment. The computed block must never mix the two: md computes it in
the row's stripe_head, the engine under the row's lock. In virtual time, with one member's
writes slower than the others'."""

from __future__ import annotations

import random

from raidlab import sched
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.engine import build
from raidlab.sched import run_virtual

KiB, MiB = 1024, 1 << 20
CHUNK = 64 * KiB


class SlowWrites:
    """A member whose writes take 20 ms more (a drive behind a busy queue): the row's
    parity lands well after its data."""

    def __init__(self, disk):
        self.disk = disk

    def __getattr__(self, name):
        return getattr(self.disk, name)

    async def write(self, offset, data, *args, **kwargs):
        await sched.sleep(0.02)
        return await self.disk.write(offset, data, *args, **kwargs)


def test_a_reconstructed_block_never_sees_a_half_written_row():
    disks = [EmulatedDisk(f"d{i}", "none", MemoryBackend(16 * MiB)) for i in range(4)]
    members = [disks[0], disks[1], disks[2], SlowWrites(disks[3])]
    rng = random.Random(3)
    seen = {"reads": 0, "wrong": 0}

    async def main():
        async with sched.open_nursery() as nursery:
            for d in disks:
                d.start(nursery)
            array, _ = await build.create_array("r", "raid5", members, chunk=CHUNK, nursery=nursery)
            stripe = 3 * CHUNK
            rows = 16
            # chunk 1 of every stripe (member 1 of stripe 0 holds it) written; chunk 0 left zero
            blocks = {s: rng.randbytes(CHUNK) for s in range(rows)}
            for s, data in blocks.items():
                await array.write(s * stripe + CHUNK, data)
            await array.flush()
            await array.fail_member(array.layout.read_plan(CHUNK, 4096).reads[0].disk)   # chunk 1's member

            async def writer():
                for s in range(rows):   # the other data chunk of each row: its old bytes are zeros
                    await array.write(s * stripe, rng.randbytes(CHUNK))

            async def reader():
                for _ in range(200):
                    s = rng.randrange(rows)
                    got = await array.read(s * stripe + CHUNK, CHUNK)
                    seen["reads"] += 1
                    seen["wrong"] += got != blocks[s]
                    await sched.sleep(0.0005)

            async with sched.open_nursery() as inner:
                inner.start_soon(writer)
                inner.start_soon(reader)
            seen["degraded"] = array.counters["reconstructed_reads"]
            nursery.cancel_scope.cancel()

    run_virtual(main)
    assert seen["reads"] == 200 and seen["degraded"] > 0, seen
    assert seen["wrong"] == 0, seen
