"""Array.resync (md's resync and repair): every stripe rewritten from its data, so stale
parity or a stale copy is made consistent again, while writes arriving meanwhile are kept.
Which bytes win is the read path's: a stale data chunk (or the copy read) is taken as it is,
as md's repair trusts the data and the first copy; the test allows that one block."""

from __future__ import annotations

import random

import pytest

from raidlab import sched
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.engine import build
from raidlab.sched import run_virtual

KiB, MiB = 1024, 1 << 20


@pytest.mark.parametrize("arch, n", [("raid5", 4), ("raid1", 2), ("raid10", 4), ("raidx", 4), ("chained", 4)])
def test_resync_repairs_a_stale_member_and_keeps_concurrent_writes(arch, n):
    members = [EmulatedDisk(f"d{i}", "none", MemoryBackend(8 * MiB)) for i in range(n)]
    rng = random.Random(2)
    seen = {}

    async def main():
        async with sched.open_nursery() as nursery:
            for m in members:
                m.start(nursery)
            array, _ = await build.create_array("r", arch, members, chunk=64 * KiB, nursery=nursery)
            data = bytearray(rng.randbytes(2 * MiB))
            await array.write(0, bytes(data))
            await array.flush()
            # A member's bytes go stale behind the array's back (a lost cached write).
            where = array.layout.data_offset + 64 * KiB
            members[1].backend.pwrite(where, b"\xee" * 4096)
            seen["found"] = len(await array.scrub())

            async def writer():
                for k in range(16):
                    piece = rng.randbytes(4096)
                    offset = rng.randrange(0, 2 * MiB // 4096) * 4096
                    await array.write(offset, piece)
                    data[offset:offset + 4096] = piece
                    await sched.sleep(0)

            async with sched.open_nursery() as inner:
                inner.start_soon(writer)
                seen["rewritten"] = await array.resync(segment=256 * KiB)
            seen["after"] = await array.scrub()
            got = await array.read(0, 2 * MiB)
            seen["differ"] = [got[k:k + 4096] for k in range(0, 2 * MiB, 4096) if got[k:k + 4096] != data[k:k + 4096]]
            nursery.cancel_scope.cancel()

    run_virtual(main)
    assert seen["found"] > 0 and seen["after"] == [] and seen["rewritten"] > 0, seen
    assert len(seen["differ"]) <= 1 and all(block == b"\xee" * 4096 for block in seen["differ"])
