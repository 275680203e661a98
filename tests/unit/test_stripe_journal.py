"""The write journal (raidlab.engine.journal): records appended before member writes, a
flush checkpoints them, a full journal flushes the members and starts over, concurrent
writes keep their order, and assembly replays exactly the records after the checkpoint;
a torn last record ends the replay."""

from __future__ import annotations

import random

import pytest

from raidlab import archs, sched
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.engine import build
from raidlab.engine.journal import BLOCK, StripeJournal
from raidlab.errors import UsageError

from virtual_disks import run_on

KiB, MiB = 1024, 1 << 20


def test_a_full_journal_starts_over_and_every_write_reads_back():
    members = [EmulatedDisk(f"d{i}", "none", MemoryBackend(16 * MiB)) for i in range(4)]
    jdisk = EmulatedDisk("j", "none", MemoryBackend(1 * MiB))
    rng = random.Random(3)
    expected = bytearray(6 * MiB)

    async def body():
        array, keeper = await build.create_array("j", "raid5", members, chunk=64 * KiB)
        await build.attach_journal(array, jdisk, keeper.superblock.array_uuid, create=True)

        async def writer(k):
            for _ in range(40):
                offset = rng.randrange(0, 6 * MiB // (16 * KiB)) * 16 * KiB
                data = rng.randbytes(16 * KiB)
                await array.write(offset, data)
                expected[offset:offset + len(data)] = data

        async with sched.open_nursery() as nursery:
            for k in range(4):
                nursery.start_soon(writer, k)
        stats = array.journal.statistics()
        same = await array.read(0, 6 * MiB) == bytes(expected)
        again, _ = await build.assemble_array(members)
        replayed = await build.attach_journal(again, jdisk, keeper.superblock.array_uuid, create=False)
        return stats, same, replayed, await again.read(0, 6 * MiB) == bytes(expected), await again.scrub()

    stats, same, replayed, same_after, mismatches = run_on([*members, jdisk], body)
    assert stats["records"] == 160 and stats["restarts"] > 0 and stats["forced_flushes"] > 0, stats
    assert same and same_after and mismatches == []
    assert replayed < stats["records"]  # only what came after the last checkpoint


def test_a_flush_checkpoints_and_a_torn_record_ends_the_replay():
    members = [EmulatedDisk(f"d{i}", "none", MemoryBackend(8 * MiB)) for i in range(4)]
    jdisk = EmulatedDisk("j", "none", MemoryBackend(2 * MiB))

    async def body():
        array, keeper = await build.create_array("t", "raid5", members, chunk=64 * KiB)
        uuid = keeper.superblock.array_uuid
        await build.attach_journal(array, jdisk, uuid, create=True)
        await array.write(0, b"a" * 4096)
        await array.flush()
        flushed = array.journal.statistics()
        await array.write(8192, b"b" * 4096)
        await array.write(16384, b"c" * 4096)
        position = array.journal.position
        _, records = await StripeJournal.open(jdisk, uuid)
        # Tear the last record: its second block never reached the drive.
        last = records[-1]
        await jdisk.write(position - BLOCK, bytes(BLOCK))
        _, torn = await StripeJournal.open(jdisk, uuid)
        return flushed, len(records), len(torn), last

    flushed, whole, torn, last = run_on([*members, jdisk], body)
    assert flushed["checkpoint"] == flushed["seq"] and flushed["position"] == BLOCK  # nothing live after a flush
    assert whole == 2 and torn == 1
    assert any(payload == b"c" * 4096 for _disk, _offset, payload in last)


@pytest.mark.parametrize("options, words", [({"journal": "1M"}, "too small"), ({"journal": "big"}, "not a size")])
def test_a_bad_journal_option_is_refused_before_anything_starts(options, words):
    with pytest.raises(UsageError, match=words):
        archs.validate("raid5", 4, 32 * MiB, 64 * KiB, options)


def test_only_raid5_takes_a_journal_and_it_is_a_drive_after_the_members():
    with pytest.raises(UsageError, match="no option 'journal'"):
        archs.validate("raid1", 2, 32 * MiB, 64 * KiB, {"journal": "8M"})
    drives = archs.get("raid5").plan(archs.Config("raid5", 4, 32 * MiB, 64 * KiB, {"journal": "8M"}), archs.LIVE)
    assert [d.name for d in drives] == ["d0", "d1", "d2", "d3", "d4"] and drives[-1].size == 8 * MiB
