"""One durability world for all of a comparison's drives (raidlab.disks.disk, "Flushes"): in
the papers' world (`flushes = "dropped"`: a host that never sends a flush or a FUA write, as
Linux 2.0 did not) no flush and no FUA reaches any drive, members and cache disks alike; in
today's (`honoured`) every drive gets the flushes its array sends."""

from __future__ import annotations

import pytest

from raidlab import sched
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.sched import run_virtual
from raidlab.errors import UsageError
from raidlab.runners.virtual import SimSpec, _drive_of, build_virtual

KiB, MiB = 1024, 1 << 20


def test_a_dropped_flush_and_fua_never_reach_the_drive():
    seen = {}

    async def main():
        async with sched.open_nursery() as nursery:
            disk = EmulatedDisk("d", "none", MemoryBackend(1 * MiB), flushes="dropped")
            disk.start(nursery)
            await disk.write(0, b"a" * 4096, fua=True)
            await disk.write(4096, b"b" * 4096)
            await disk.flush()
            seen.update(disk.statistics())
            nursery.cancel_scope.cancel()

    run_virtual(main)
    assert seen["flushes"] == 0 and seen["flushes_dropped"] == 1
    assert seen["fua_dropped"] == 1 and seen["fua_writes"] == 0
    assert seen["writes"] == 2 and seen["flushes_setting"] == "dropped"


def test_an_honoured_flush_and_fua_reach_the_drive():
    seen = {}

    async def main():
        async with sched.open_nursery() as nursery:
            disk = EmulatedDisk("d", "none", MemoryBackend(1 * MiB))
            disk.start(nursery)
            await disk.write(0, b"a" * 4096, fua=True)
            await disk.flush()
            seen.update(disk.statistics())
            nursery.cancel_scope.cancel()

    run_virtual(main)
    assert seen["flushes"] == 1 and seen["flushes_dropped"] == 0
    assert seen["fua_writes"] == 1 and seen["fua_dropped"] == 0


def test_an_unknown_setting_is_refused():
    with pytest.raises(UsageError, match="flushes"):
        EmulatedDisk("d", "none", MemoryBackend(1 * MiB), flushes="sometimes")


@pytest.mark.parametrize("arch, disks, options", [
    ("raid0", 4, {}), ("raid5", 4, {}),
    ("vcraid", 4, {"config": "scd", "cache_size": "2M", "ram_buffer": "256K", "durability": "strict"}),
    ("vcraid", 4, {"config": "scd", "cache_size": "2M", "ram_buffer": "256K", "durability": "paper"}),
    ("dcd", 1, {"cache_size": "2M", "ram_buffer": "256K"}),
])
@pytest.mark.parametrize("world", ["dropped", "honoured"])
def test_every_drive_of_an_architecture_lives_in_the_world_its_comparison_sets(arch, disks, options, world):
    """Synchronous writes and flushes to the volume, then a drain home: with flushes dropped
    no drive (member or cache disk) served a flush or a FUA write; with them honoured the
    drives served what the architecture sent (every raid member a flush; VC-RAID's and
    DCD's cache disk its FUA log writes)."""
    out = {}

    async def main():
        async with sched.open_nursery() as nursery:
            spec = SimSpec(arch=arch, disk_model="none", disks=disks, chunk=64 * KiB, disk_size=16 * MiB,
                           options=dict(options), flushes=world)
            captured: list = []
            built = await build_virtual(spec, nursery, wrap_members=lambda ds: captured.extend(ds) or ds)
            target = built.target
            for i in range(16):
                await target.write(i * 64 * KiB, bytes([i]) * (8 * KiB), fua=True)
                await target.flush()
            if hasattr(target, "drain"):
                await target.drain()
            await target.flush()
            out["drives"] = [_drive_of(m).statistics() for m in captured]
            nursery.cancel_scope.cancel()

    run_virtual(main)
    drives = out["drives"]
    assert drives and all(d["flushes_setting"] == world for d in drives)
    if world == "dropped":
        assert all(d["flushes"] == 0 and d["fua_writes"] == 0 for d in drives), drives
        assert sum(d["flushes_dropped"] + d["fua_dropped"] for d in drives) > 0
    else:
        assert all(d["flushes_dropped"] == 0 and d["fua_dropped"] == 0 for d in drives)
        assert all(d["flushes"] + d["fua_writes"] > 0 for d in drives), drives


def test_a_drive_writes_its_cache_back_on_its_own_whatever_the_host_sends():
    """A settle ends with each drive writing its cache back (raidlab.service.hosts.volume
    write_back_drives): in the papers' world that is the drive's own doing, not a host flush."""
    seen = {}

    async def main():
        async with sched.open_nursery() as nursery:
            disk = EmulatedDisk("d", "none", MemoryBackend(1 * MiB), flushes="dropped")
            volatile = disk.enable_volatile_cache(None)
            disk.start(nursery)
            await disk.write(0, b"a" * 4096)
            await disk.flush()  # dropped: the write stays in the cache
            seen["held after the host's flush"] = volatile.pending_bytes
            await disk.write_back()
            seen["held after the write-back"] = volatile.pending_bytes
            seen.update(disk.statistics())
            nursery.cancel_scope.cancel()

    run_virtual(main)
    assert seen["held after the host's flush"] == 4096 and seen["held after the write-back"] == 0
    assert seen["flushes_dropped"] == 1 and seen["write_backs"] == 1 and seen["flushes"] == 1
