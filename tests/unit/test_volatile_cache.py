"""A drive's volatile write cache (raidlab.disks.volatile): a power cut takes exactly the
writes that were not durable, in each of its modes, overlapping writes roll back to what a
drive could really hold, and a degraded raid5 whose data and parity writes are torn apart
by the cut returns wrong data for a block nobody wrote: the write hole."""

from __future__ import annotations

import random

import pytest

from raidlab import sched
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.disks.volatile import UNTIMED_CACHE_BYTES, parse, power_cut
from raidlab.engine import build
from raidlab.sched import run_virtual

from virtual_disks import run_on

KiB, MiB = 1024, 1 << 20


class Choices(random.Random):
    """An rng whose random() answers a given list of keep (0.0) / lose (0.99) choices."""

    def __init__(self, keeps):
        super().__init__(0)
        self.answers = [0.0 if keep else 0.99 for keep in keeps]

    def random(self):
        return self.answers.pop(0)


def volatile_disk(model="none", size=8 * MiB, write_cache=None):
    disk = EmulatedDisk("d", model, MemoryBackend(size), write_cache=write_cache)
    disk.enable_volatile_cache(None)
    return disk


def test_a_power_cut_loses_exactly_what_was_not_durable():
    disk = volatile_disk()

    async def body():
        await disk.write(0, b"a" * 4096)
        await disk.flush()                       # durable
        await disk.write(0, b"b" * 4096)         # cached, over the durable one
        await disk.write(4096, b"c" * 4096, fua=True)  # durable at once
        await disk.write(8192, b"d" * 4096)      # cached
        assert await disk.read(0, 12288) == b"b" * 4096 + b"c" * 4096 + b"d" * 4096  # the drive shows all
        return disk.volatile.log_bytes()

    log = run_on([disk], body)
    report = power_cut(log, disk.backend, "all", random.Random(0))
    assert disk.backend.pread(0, 12288) == b"a" * 4096 + b"c" * 4096 + bytes(4096)
    assert report["writes_lost"] == 2 and report["writes_kept"] == 0


@pytest.mark.parametrize("keep_old, keep_new, expected", [
    (True, True, b"a" * 4096 + b"b" * 4096),
    (True, False, b"a" * 8192),
    (False, True, bytes(4096) + b"b" * 4096),
    (False, False, bytes(8192)),
])
def test_overlapping_writes_roll_back_to_what_a_drive_could_hold(keep_old, keep_new, expected):
    disk = volatile_disk()

    async def body():
        await disk.write(0, b"a" * 8192)
        await disk.write(4096, b"b" * 4096)      # newer, over the second half of the first
        return disk.volatile.log_bytes()

    log = run_on([disk], body)
    power_cut(log, disk.backend, "random", Choices([keep_old, keep_new]))
    assert disk.backend.pread(0, 8192) == expected


def test_the_untimed_drive_writes_back_oldest_first_beyond_its_capacity():
    disk = volatile_disk(size=16 * MiB)
    n = UNTIMED_CACHE_BYTES // MiB + 2

    async def body():
        for k in range(n):
            await disk.write(k * MiB, bytes([k + 1]) * MiB)
        return disk.volatile.log_bytes()

    log = run_on([disk], body)
    assert disk.volatile.statistics()["written_back"] == 2
    power_cut(log, disk.backend, "model", random.Random(0))
    assert [disk.backend.pread(k * MiB, 512)[0] for k in range(n)] == [1, 2] + [0] * (n - 2)


def test_a_drive_with_its_write_cache_off_loses_nothing():
    disk = volatile_disk(write_cache=False)

    async def body():
        await disk.write(0, b"x" * 4096)
        return disk.volatile.log_bytes()

    assert run_on([disk], body) == b""


def test_a_timed_drive_loses_what_its_model_had_not_written_back():
    """The Maxtor IDE drive (write cache on, 2 MiB): a write followed by idle time reaches
    the media by the model's own write-back; the write just before the cut does not."""
    disk = volatile_disk(model="maxtor-91366u4", size=64 * MiB)

    async def body():
        await disk.write(0, b"o" * 65536)
        await sched.sleep(1.0)                    # the drive writes it back meanwhile
        await disk.write(32 * MiB, b"n" * 65536)  # the model retires the first write here
        return disk.volatile.log_bytes()

    log = run_on([disk], body)
    assert [r[0] for r in parse(log)] == [b"W", b"E", b"W"]
    power_cut(log, disk.backend, "model", random.Random(0))
    assert disk.backend.pread(0, 65536) == b"o" * 65536
    assert disk.backend.pread(32 * MiB, 65536) == bytes(65536)


def test_a_log_cut_short_by_the_kill_is_read_up_to_its_last_whole_record():
    disk = volatile_disk()

    async def body():
        await disk.write(0, b"a" * 4096)
        await disk.write(4096, b"b" * 4096)
        return disk.volatile.log_bytes()

    log = run_on([disk], body)
    assert len(parse(log)) == 2 and len(parse(log[:-100])) == 1


def test_the_raid5_write_hole_a_torn_partial_stripe_write_corrupts_a_block_nobody_wrote():
    """Degraded raid5 (member 1 gone): a partial-stripe write updates one data chunk and the
    parity. The cut keeps the data and loses the parity: member 1's chunk, which nobody
    wrote, is then rebuilt from the new data and the old parity: wrong. Kept together (or
    lost together) the stripe stays consistent and the chunk reads back right."""
    chunk = 64 * KiB

    def outcome(keep_data: bool, keep_parity: bool) -> bool:
        members = [EmulatedDisk(f"d{i}", "none", MemoryBackend(8 * MiB)) for i in range(4)]
        for m in members:
            m.enable_volatile_cache(None)
        box = {}

        async def body():
            array, _ = await build.create_array("w", "raid5", members, chunk=chunk)
            stripe = bytes(random.Random(1).randbytes(3 * chunk))
            await array.write(0, stripe)
            await array.flush()
            await array.fail_member(1)
            await array.write(0, b"N" * 4096)        # partial stripe: data on one member, parity on another
            box["stripe"] = stripe
            box["logs"] = [m.volatile.log_bytes() for m in members]
            box["pending"] = [m.volatile.statistics()["pending_writes"] for m in members]
            return array.layout

        run_on(members, body)
        touched = [i for i, n in enumerate(box["pending"]) if n]
        assert len(touched) == 2 and 1 not in touched, box["pending"]  # the data member and the parity member
        # The member that holds the new data has it in its image (the drive shows its cache).
        new_data = [i for i in touched if b"N" * 64 in members[i].backend.pread(0, 8 * MiB)]
        assert len(new_data) == 1
        data_i = new_data[0]
        parity_i = next(i for i in touched if i != data_i)
        power_cut(box["logs"][data_i], members[data_i].backend, "random", Choices([keep_data]))
        power_cut(box["logs"][parity_i], members[parity_i].backend, "random", Choices([keep_parity]))
        fresh = [EmulatedDisk(f"d{i}", "none", m.backend) for i, m in enumerate(members)]

        async def read_back():
            again, _ = await build.assemble_array(fresh)
            assert 1 in again.failed
            return await again.read(0, 3 * chunk)

        got = run_on(fresh, read_back)
        member1_block = slice(chunk, 2 * chunk)  # the second data chunk of stripe 0 is member 1's
        return got[member1_block] == box["stripe"][member1_block]

    assert outcome(keep_data=True, keep_parity=True)
    assert outcome(keep_data=False, keep_parity=False)
    assert not outcome(keep_data=True, keep_parity=False)   # the hole
    assert not outcome(keep_data=False, keep_parity=True)   # and its mirror image


@pytest.mark.parametrize("parity_kept", [False, True], ids=["parity lost", "parity kept"])
def test_vcraid_s_log_keeps_the_write_but_not_the_degraded_raid5_s_parity(parity_kept):
    """VC-RAID over a degraded raid5: a 4 KiB write is logged (FUA) and acknowledged, then
    destaged; the power fails after the destage wrote data and parity to the members' caches
    and before it flushed them, and takes the parity. The log still holds the block, and
    assembly destages it again, but as a small write, by read-modify-write against the stale
    parity: the block comes back as written, member 1's chunk of the stripe (never written)
    does not. The log keeps acknowledged writes; it does not close the raid5's write hole."""
    from raidlab.engine.caches import assemble_vcraid, create_vcraid

    chunk = 64 * KiB
    members = [EmulatedDisk(f"d{i}", "none", MemoryBackend(8 * MiB)) for i in range(4)]
    cache = EmulatedDisk("cache", "none", MemoryBackend(4 * MiB))
    for disk in [*members, cache]:
        disk.enable_volatile_cache(None)
    box = {}

    async def body():
        async with sched.open_nursery() as nursery:
            for disk in [*members, cache]:
                disk.start(nursery)
            vc = await create_vcraid("v", members, [cache], ram_buffer=64 * KiB, idle_threshold=3600.0, chunk=chunk)
            vc.start(nursery)
            stripe = bytes(random.Random(7).randbytes(3 * chunk))
            await vc.write(0, stripe)
            await vc.flush()
            await vc.drain()                       # on the raid5, flushed
            await vc.array.fail_member(1)
            await vc.write(0, b"V" * 4096)
            await vc.flush()                       # in the log, durable (FUA)

            async def cut_before_flush():          # the destage's member flush never comes
                await sched.Event().wait()  # never set

            for m in members:
                m.flush = cut_before_flush
            with sched.move_on_after(5):
                await vc.drain()
            box["stripe"] = stripe
            box["logs"] = [d.volatile.log_bytes() for d in [*members, cache]]
            box["pending"] = [d.volatile.statistics()["pending_writes"] for d in members]
            nursery.cancel_scope.cancel()

    run_virtual(body)
    touched = [i for i, n in enumerate(box["pending"]) if n]
    assert len(touched) == 2 and 0 in touched and 1 not in touched, box["pending"]
    parity_i = next(i for i in touched if i != 0)
    power_cut(box["logs"][0], members[0].backend, "random", Choices([True]))         # the data reached the media
    power_cut(box["logs"][parity_i], members[parity_i].backend, "random", Choices([parity_kept]))
    power_cut(box["logs"][4], cache.backend, "all", random.Random(0))                 # the log was durable
    fresh = [EmulatedDisk(f"d{i}", "none", m.backend) for i, m in enumerate(members)]
    fresh_cache = EmulatedDisk("cache", "none", cache.backend)

    async def read_back():
        async with sched.open_nursery() as nursery:
            for disk in [*fresh, fresh_cache]:
                disk.start(nursery)
            vc = await assemble_vcraid(fresh, [fresh_cache])
            vc.start(nursery)
            out = (vc.counters["recovered_blocks"], 1 in vc.array.failed, await vc.read(0, 3 * chunk))
            nursery.cancel_scope.cancel()
            return out

    recovered, degraded, got = run_virtual(read_back)
    assert recovered > 0 and degraded                          # the log's block was destaged again
    assert got[:4096] == b"V" * 4096                           # the acknowledged write is kept
    # Member 1's chunk: wrong when the parity was lost (the hole), right when it was kept.
    assert (got[chunk:2 * chunk] == box["stripe"][chunk:2 * chunk]) is parity_kept


@pytest.mark.parametrize("journal", [False, True], ids=["no journal", "write journal"])
def test_a_write_journal_closes_the_raid5_write_hole(journal):
    """The torn stripe of the write-hole test, once more: with a write journal (md's
    --write-journal), the data and the new parity were journalled (FUA) before the members
    were written, and assembly writes both again: member 1's chunk comes back right."""
    chunk = 64 * KiB
    members = [EmulatedDisk(f"d{i}", "none", MemoryBackend(8 * MiB)) for i in range(4)]
    jdisk = EmulatedDisk("j", "none", MemoryBackend(2 * MiB))
    for disk in [*members, jdisk]:
        disk.enable_volatile_cache(None)
    box = {}

    async def body():
        array, keeper = await build.create_array("w", "raid5", members, chunk=chunk)
        if journal:
            await build.attach_journal(array, jdisk, keeper.superblock.array_uuid, create=True)
        stripe = bytes(random.Random(1).randbytes(3 * chunk))
        await array.write(0, stripe)
        await array.flush()
        await array.fail_member(1)
        await array.write(0, b"J" * 4096)
        box["stripe"] = stripe
        box["logs"] = [m.volatile.log_bytes() for m in members]
        box["uuid"] = keeper.superblock.array_uuid
        box["journal"] = array.journal.statistics() if journal else None

    run_on([*members, jdisk], body)
    if journal:
        assert box["journal"]["records"] >= 2 and box["journal"]["checkpoint"] >= 1, box["journal"]
    touched = [i for i, log in enumerate(box["logs"]) if log]
    data_i = next(i for i in touched if b"J" * 64 in members[i].backend.pread(0, 8 * MiB))
    parity_i = next(i for i in touched if i != data_i)
    power_cut(box["logs"][data_i], members[data_i].backend, "random", Choices([True]))
    power_cut(box["logs"][parity_i], members[parity_i].backend, "all", random.Random(0))
    fresh = [EmulatedDisk(f"d{i}", "none", m.backend) for i, m in enumerate(members)]
    fresh_j = EmulatedDisk("j", "none", jdisk.backend)

    async def read_back():
        again, _ = await build.assemble_array(fresh)
        replayed = await build.attach_journal(again, fresh_j, box["uuid"], create=False) if journal else 0
        return replayed, await again.read(0, 3 * chunk)

    replayed, got = run_on([*fresh, fresh_j], read_back)
    assert got[:4096] == b"J" * 4096
    assert (got[chunk:2 * chunk] == box["stripe"][chunk:2 * chunk]) is journal  # closed only with the journal
    assert (replayed > 0) is journal
