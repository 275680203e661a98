"""Another instance of a running array (assemble_array join=True), as a client on another
cluster node runs one: it reads the superblocks and never writes them, sees what the owner
wrote and the owner sees what it wrote (disjoint regions), writes RAID-x images through
instead of into the owner's logs, and keeps a member failure to itself."""

from __future__ import annotations

import random

import pytest

from raidlab import sched
from raidlab.disks.backend import MemoryBackend
from raidlab.disks.disk import EmulatedDisk
from raidlab.engine import build, metadata
from raidlab.sched import virtual

KiB, MiB = 1024, 1024 * 1024
DISK, CHUNK, N = 8 * MiB, 16 * KiB, 4


def _disks(stores, nursery):
    disks = [EmulatedDisk(f"d{i}", "none", b) for i, b in enumerate(stores)]
    for d in disks:
        d.start(nursery)
    return disks


async def _generations(members):
    return [(await metadata.read_superblock(m)).generation for m in members]


@pytest.mark.parametrize("arch,options", [("raidx", {}), ("raidx", {"image_buffer": "memory"}), ("raid5", {}),
                                          ("chained", {})])
def test_a_joined_instance_shares_the_data_and_leaves_the_metadata_alone(arch, options):
    stores = [MemoryBackend(DISK) for _ in range(N)]

    async def main():
        async with sched.open_nursery() as nursery:
            owner, _keeper = await build.create_array("x", arch, _disks(stores, nursery), chunk=CHUNK,
                                                      options=options, nursery=nursery, image_delay=0.01)
            client_disks = _disks(stores, nursery)   # the same disks, as another node reaches them
            before = await _generations(client_disks)
            client, keeper = await build.assemble_array(client_disks, nursery=nursery, join=True)
            assert await _generations(client_disks) == before and keeper.readonly
            half = owner.size // 2 // (3 * CHUNK) * (3 * CHUNK)    # stripe-aligned for raid5
            rng = random.Random(1)
            mine = rng.randbytes(256 * KiB)
            theirs = rng.randbytes(256 * KiB)
            await owner.write(0, mine)               # each in its own region
            await client.write(half, theirs)
            if client.image_buffer is not None:
                stats = client.image_buffer.statistics()
                if not options:                  # the owner's logs are not the client's to write
                    assert stats["write_through"] and stats["logged"] == 0 and stats["written_through"] > 0
                else:                            # images in the client's own memory
                    assert not stats["write_through"]
                await client.image_buffer.drain()
            assert await client.read(0, len(mine)) == mine
            assert await owner.read(half, len(theirs)) == theirs
            # a member failure is the client's own business: no superblock changes
            client_disks[2].failed = True
            await client.fail_member(2)
            assert 2 in client.failed and 2 not in owner.failed
            assert await _generations(client_disks[:2]) == before[:2]
            assert await client.read(half, len(theirs)) == theirs   # degraded, from the others
            nursery.cancel_scope.cancel()

    virtual.run_virtual(main)


def test_a_new_array_over_disks_of_an_old_one_is_the_one_assembled():
    """A cluster's disks outlive its arrays: an array created over disks that held another,
    whose superblocks reached a higher generation, must be what assembly and joins find."""
    stores = [MemoryBackend(DISK) for _ in range(N)]

    async def main():
        async with sched.open_nursery() as nursery:
            old, keeper = await build.create_array("old", "chained", _disks(stores, nursery), chunk=CHUNK)
            for _ in range(3):
                await keeper.mark_clean(frozenset())          # generations 2, 3, 4 in both slots
            new, _keeper = await build.create_array("new", "raid10", _disks(stores, nursery), chunk=CHUNK)
            found, _k = await build.assemble_array(_disks(stores, nursery), join=True)
            nursery.cancel_scope.cancel()
        return found.name, found.layout.name

    assert virtual.run_virtual(main) == ("new", "raid10")
