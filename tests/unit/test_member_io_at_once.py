"""Member I/O done at once (EmulatedDisk.read_now / write_now): on the untimed drive with
nothing injected the array does a member's read or write in its own task instead of a task
per member I/O; everything else (a timed drive, a failed or faulty one, a misaligned
request, a wrapper around a drive) still goes through read/write."""

from __future__ import annotations

import pytest

from raidlab import sched
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.engine import build
from raidlab.sched import run_virtual

KiB, MiB = 1024, 1 << 20


def _started(*disks):
    """Mark disks started without a service task (the untimed drive has none)."""
    for disk in disks:
        disk._started = True


def test_the_untimed_drive_does_its_io_at_once_and_counts_it():
    disk = EmulatedDisk("d0", "none", MemoryBackend(1 * MiB))
    part = disk.partition(256 * KiB, 256 * KiB)

    async def main():
        _started(disk)
        assert disk.write_now(4096, b"a" * 4096) is True
        assert disk.read_now(4096, 4096) == b"a" * 4096
        assert part.write_now(0, b"b" * 512) is True        # the partition's offset 0 ...
        assert disk.read_now(256 * KiB, 512) == b"b" * 512  # ... is the drive's 256 KiB
        assert part.read_now(0, 512) == b"b" * 512

    run_virtual(main)
    stats = disk.statistics()
    assert stats["reads"] == 3 and stats["writes"] == 2
    assert part.statistics()["reads"] == 1 and part.statistics()["writes"] == 1


@pytest.mark.parametrize("case", ["timed", "failed", "read-eio", "slow", "misaligned", "beyond", "not started"])
def test_what_would_wait_or_fail_is_left_to_read_and_write(case):
    disk = EmulatedDisk("d0", "ssd" if case == "timed" else "none", MemoryBackend(1 * MiB))
    if case == "failed":
        disk.failed = True
    if case in ("read-eio", "slow"):
        disk.fault = case
    offset = {"misaligned": 100, "beyond": 1 * MiB}.get(case, 0)

    async def main():
        if case != "not started":
            _started(disk)
        assert disk.write_now(offset, b"x" * 512) is False
        assert disk.read_now(offset, 512) is None

    run_virtual(main)
    assert disk.backend.pread(0, 512) == bytes(512)  # nothing written
    assert disk.statistics()["reads"] == disk.statistics()["writes"] == 0


class CountingTasks:
    """Counts the tasks the running kernel spawns between `start` and `stop`."""

    def __init__(self):
        self.spawned = 0

    def start(self):
        kernel = sched.running_kernel()
        spawn = kernel.spawn

        def counted(*args, **kwargs):
            self.spawned += 1
            return spawn(*args, **kwargs)

        kernel.spawn = counted

    def stop(self):
        del sched.running_kernel().spawn  # the class's own method again


class Wrapped:
    """A member that sees every request (as a capture or a slowed test member does)."""

    def __init__(self, disk):
        self.disk, self.writes = disk, 0

    def __getattr__(self, name):
        return getattr(self.disk, name)

    async def write(self, offset, data, *args, **kwargs):
        self.writes += 1
        return await self.disk.write(offset, data, *args, **kwargs)


@pytest.mark.parametrize("wrapped", [False, True])
def test_a_raid5_small_write_starts_no_task_per_member_io_on_untimed_drives(wrapped):
    disks = [EmulatedDisk(f"d{i}", "none", MemoryBackend(16 * MiB)) for i in range(4)]
    members = [Wrapped(d) for d in disks] if wrapped else disks
    counting = CountingTasks()
    seen = {}

    async def main():
        async with sched.open_nursery() as nursery:
            for d in disks:
                d.start(nursery)
            array, _ = await build.create_array("r", "raid5", members, chunk=64 * KiB, nursery=nursery)
            await array.write(0, b"1" * 64 * KiB)
            counting.start()
            await array.write(8 * KiB, b"2" * 4 * KiB)          # read-modify-write: 2 reads, 2 writes
            counting.stop()
            seen["data"] = await array.read(0, 16 * KiB)
            seen["mismatches"] = await array.scrub()  # the parity written at once is right
            nursery.cancel_scope.cancel()

    run_virtual(main)
    assert seen["data"] == b"1" * 8 * KiB + b"2" * 4 * KiB + b"1" * 4 * KiB
    assert seen["mismatches"] == []
    if wrapped:
        assert counting.spawned >= 2 and sum(m.writes for m in members) >= 2 + 2
    else:
        assert counting.spawned == 0
