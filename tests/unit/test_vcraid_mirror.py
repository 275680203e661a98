"""VC-RAID's mirrored cache disk (He & Yang §3.4) on the virtual clock: level-1 writes reach
both sides; when one side fails the other carries on, and after a crash `assemble` recovers
from the survivor only, even when the failed side is readable again (stale)."""

from __future__ import annotations

import random

import pytest

from raidlab import sched
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.engine.caches import assemble_vcraid, create_vcraid
from raidlab.engine.caches.mirror import MIRROR_HEADER_OFFSET, MirroredCacheDisk
from raidlab.engine.metadata import MetadataError

from virtual_disks import run_in_nursery

KiB, MiB = 1024, 1 << 20


def pattern(tag: int, length: int) -> bytes:
    return (f"<{tag:08d}>".encode() * (length // 10 + 1))[:length]


def disks(model="hp-c2200a"):
    members = [EmulatedDisk(f"d{i}", model, MemoryBackend(8 * MiB)) for i in range(3)]
    primary = EmulatedDisk("c0", model, MemoryBackend(2 * MiB))
    backup = EmulatedDisk("c1", model, MemoryBackend(2 * MiB))
    return members, primary, backup


def run(body, all_disks):
    return run_in_nursery(body, all_disks)


@pytest.mark.parametrize("failing", [0, 1])
def test_one_side_fails_the_other_carries_on_and_recovery_uses_the_survivor(failing):
    members, primary, backup = disks()
    sides = [primary, backup]
    written = {}

    async def first_run(nursery):
        mirror = await MirroredCacheDisk.create("m", primary, backup)
        vc = await create_vcraid("v", members, [mirror], ram_buffer=64 * KiB, idle_threshold=100.0)
        vc.start(nursery)
        for i in range(20):
            written[i * 16 * KiB] = pattern(i, 4 * KiB)
            await vc.write(i * 16 * KiB, written[i * 16 * KiB])
        await vc.flush()
        # Level 1 wrote the log to both sides in parallel: the log regions are identical.
        used = vc.statistics()["cache_disk_used_bytes"]
        assert used > 0
        log = [await s.read(64 * KiB, used) for s in sides]
        assert log[0] == log[1]
        sides[failing].failed = True  # the next cache-disk write finds the failure
        for i in range(20, 40):
            written[i * 16 * KiB] = pattern(i, 4 * KiB)
            await vc.write(i * 16 * KiB, written[i * 16 * KiB])
        await vc.flush()
        assert mirror.failed == {failing}
        for offset, data in written.items():  # served with one side gone
            assert await vc.read(offset, len(data)) == data
        return vc.statistics()

    stats = run(first_run, [*members, primary, backup])
    assert stats["level2_destages"] == 0 and stats["cache_disk_blocks_mapped"] == 40 * 4
    # Crash (nothing drained): new disks over the same media; the failed side comes back
    # readable but stale.
    members = [EmulatedDisk(d.name, "hp-c2200a", d.backend) for d in members]
    primary, backup = (EmulatedDisk(d.name, "hp-c2200a", d.backend) for d in (primary, backup))

    async def second_run(nursery):
        mirror = await MirroredCacheDisk.assemble("m", primary, backup)
        assert mirror.failed == {failing}
        vc = await assemble_vcraid(members, [mirror])
        vc.start(nursery)
        assert vc.statistics()["recovered_blocks"] == 40 * 4
        for offset, data in written.items():
            assert await vc.array.read(offset, len(data)) == data
        return True

    assert run(second_run, [*members, primary, backup])


def test_cache_disks_without_mirror_headers_are_refused():
    members, primary, backup = disks(model="none")

    async def body(nursery):
        with pytest.raises(MetadataError, match="mirror header"):
            await MirroredCacheDisk.assemble("m", primary, backup)
        await MirroredCacheDisk.create("m", primary, backup)
        await backup.write(MIRROR_HEADER_OFFSET, bytes(512))
        with pytest.raises(MetadataError, match="backup"):
            await MirroredCacheDisk.assemble("m", primary, backup)
        return True

    assert run(body, [*members, primary, backup])


def test_a_replaced_side_is_refilled_while_writes_go_on_and_the_sides_then_agree():
    _members, primary, backup = disks(model="none")
    fresh = EmulatedDisk("c1new", "none", MemoryBackend(2 * MiB))

    async def body(nursery):
        fresh.start(nursery)
        mirror = await MirroredCacheDisk.create("cache", primary, backup)
        for k in range(16):
            await mirror.write(64 * KiB + k * 64 * KiB, pattern(k, 64 * KiB))
        await mirror.fail_side(1)
        await mirror.write(128 * KiB, pattern(100, 4 * KiB))           # only the survivor has it
        seen = []

        async def writer():
            for k in range(40):
                await mirror.write(1 * MiB + (k % 8) * 64 * KiB, pattern(200 + k, 64 * KiB))
                await sched.sleep(0)

        async with sched.open_nursery() as inner:
            inner.start_soon(writer)
            await mirror.replace_side(1, fresh, segment=128 * KiB, progress=lambda d, t: seen.append((d, t)))
        with pytest.raises(OSError, match="has not failed"):
            await mirror.replace_side(0, fresh)
        agree = await mirror.compare()
        await fresh.write(1536 * KiB, b"\x5a" * 512)                    # behind the mirror's back
        return mirror, seen, agree, await mirror.compare(segment=512 * KiB), await fresh.read(128 * KiB, 4 * KiB)

    mirror, seen, differences, after, copied = run(body, [primary, backup])
    assert mirror.failed == set() and mirror.sides[1] is fresh and differences == []
    assert after == [{"disk": 1, "offset": 1536 * KiB, "length": 512 * KiB}]
    assert copied == pattern(100, 4 * KiB)
    assert seen[-1] == (2 * MiB, 2 * MiB)


@pytest.mark.parametrize("op", ["write", "read"])
def test_a_side_that_vanishes_under_requests_in_flight_fails_none_of_them(op):
    """A drive that vanishes fails every request it had in flight, and the array is told of
    it at the same time (`raidlab fail --mode vanish`): the requests that meet the failure
    after the side was dropped are served by the survivor, not failed as if it were the last."""
    _members, primary, backup = disks()
    failing = primary if op == "read" else backup   # reads come from the primary
    outcome = {}

    async def body(nursery):
        mirror = await MirroredCacheDisk.create("m", primary, backup)
        await mirror.write(128 * KiB, pattern(7, 64 * KiB))
        errors = []

        async def request(k):
            try:
                if op == "write":
                    await mirror.write(128 * KiB + k * 4 * KiB, pattern(k, 4 * KiB))
                else:
                    assert await mirror.read(128 * KiB + k * 4 * KiB, 4 * KiB) == pattern(7, 64 * KiB)[
                        k * 4 * KiB:(k + 1) * 4 * KiB]
            except OSError as exc:
                errors.append(exc)

        async with sched.open_nursery() as inner:
            for k in range(8):
                inner.start_soon(request, k)
            await sched.sleep(0.002)          # the requests are queued on the drive
            failing.failed = True            # it vanishes: what it has queued fails ...
            await mirror.fail_side(sides_index := [primary, backup].index(failing))  # ... and the array is told
        outcome.update(errors=errors, failed=sorted(mirror.failed), side=sides_index,
                       failures=mirror.counters["side_failures"])
        if op == "write":
            survivor = backup if failing is primary else primary
            outcome["landed"] = [await survivor.read(128 * KiB + k * 4 * KiB, 4 * KiB) == pattern(k, 4 * KiB)
                                 for k in range(8)]

    run(body, [primary, backup])
    assert outcome["errors"] == []
    assert outcome["failed"] == [outcome["side"]] and outcome["failures"] == 1
    assert all(outcome.get("landed", [True]))


def test_a_check_under_writes_sees_no_difference_that_is_not_there():
    """Writes go on while the sides are compared (VC-RAID destages in the background; a user
    may check under load), one side slower than the other: a segment is compared with writes
    held off, so a write landing between its two reads is not taken for a difference."""
    _members, primary, backup = disks(model="none")
    slow = SlowSide(primary)  # read first by the comparison
    outcome = {}

    async def body(nursery):
        mirror = await MirroredCacheDisk.create("m", slow, backup)
        stop = sched.Event()

        async def writer(seed):
            rng = random.Random(seed)
            k = 0
            while not stop.is_set():
                await mirror.write(rng.randrange(1, 31) * 64 * KiB + rng.randrange(16) * 4 * KiB,
                                   pattern(k, 4 * KiB))
                k += 1
                await sched.sleep(rng.random() * 0.002)
            outcome["writes"] = outcome.get("writes", 0) + k

        for seed in range(4):
            nursery.start_soon(writer, seed)
        outcome["mismatches"] = [await mirror.compare(segment=64 * KiB) for _ in range(5)]
        stop.set()
        await sched.sleep(1)

    run(body, [primary, backup])
    assert outcome["writes"] > 10
    assert outcome["mismatches"] == [[]] * 5


class SlowSide:
    """A side whose reads and writes take 1 ms (the faulttest's slow drive, in small)."""

    def __init__(self, disk):
        self.disk = disk

    def __getattr__(self, name):
        return getattr(self.disk, name)

    async def read(self, offset, length):
        await sched.sleep(0.001)
        return await self.disk.read(offset, length)

    async def write(self, offset, data, **kwargs):
        await sched.sleep(0.001)
        return await self.disk.write(offset, data, **kwargs)
