"""RAID-x's persistent buffer of pending images (raidlab.engine.imagebuffer), in virtual time.

A "crash" is the end of the virtual-time run that served the array: the memory backends keep
every byte the member disks wrote, new disks over them are assembled, and the pending images
found in the members' logs must be rewritten so that nothing acknowledged is lost and every
block and its image agree. Failures are injected the way `raidlab fail` does it.
"""

from __future__ import annotations

import random
import sys

import pytest

from raidlab import sched
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.engine import build
from raidlab.engine.imagebuffer import (LOG_START, ImageBuffer, PendingImage, _Ring, decode_tails, encode_tail,
                                         merge_runs, parse_log)

from virtual_disks import run_in_nursery

KiB, MiB = 1024, 1024 * 1024
DISK = 4 * MiB
DATA_OFFSET = 256 * KiB
CHUNK = 16 * KiB
N = 4
FOREVER = 1e9  # an image delay that never expires: images stay pending


def backends():
    return [MemoryBackend(DISK) for _ in range(N)]


def disks_over(store, nursery, model="none"):
    disks = [EmulatedDisk(f"d{i}", model, b) for i, b in enumerate(store)]
    for d in disks:
        d.start(nursery)
    return disks


def writes(capacity: int, seed: int, count: int):
    rng = random.Random(seed)
    for _ in range(count):
        length = rng.choice([4 * KiB, 16 * KiB, 24 * KiB, 64 * KiB])
        offset = rng.randrange(0, (capacity - length) // 4096) * 4096
        yield offset, rng.randbytes(length)


async def create(store, nursery, delay=FOREVER, model="none"):
    members = disks_over(store, nursery, model)
    array, keeper = await build.create_array("x", "raidx", members, chunk=CHUNK, data_offset=DATA_OFFSET,
                                             nursery=nursery, image_delay=delay)
    return array, keeper, members


async def assemble(store, nursery, delay=FOREVER):
    members = disks_over(store, nursery)
    array, keeper = await build.assemble_array(members, nursery=nursery, image_delay=delay)
    return array, keeper, members


def run(body):
    return run_in_nursery(body)  # cancelling the nursery is the "crash"


async def read_all(array) -> bytes:
    return await array.read(0, array.size)


async def fail(array, members, index):
    members[index].failed = True
    await array.fail_member(index)


def test_images_are_buffered_then_written_home_in_the_background():
    store = backends()

    async def body(nursery):
        array, _keeper, _members = await create(store, nursery, delay=0.05)
        reference = bytearray(array.size)
        for offset, data in writes(array.size, 1, 30):
            await array.write(offset, data)
            reference[offset : offset + len(data)] = data
        pending_now = array.image_buffer.statistics()["pending"]
        await sched.sleep(1)  # virtual: the background writer's delay passes
        stats = array.image_buffer.statistics()
        assert await array.scrub() == []  # every image home equals its data copy
        return pending_now, stats, await read_all(array) == bytes(reference)

    pending_now, stats, same = run(body)
    assert pending_now > 0 and stats["pending"] == 0
    assert stats["logged"] == stats["written_home"] > 0
    assert same


def test_crash_with_pending_images_restarts_from_the_logs():
    store = backends()
    reference = {}

    async def first(nursery):
        array, _keeper, _members = await create(store, nursery)
        ref = bytearray(array.size)
        for offset, data in writes(array.size, 2, 40):
            await array.write(offset, data)
            ref[offset : offset + len(data)] = data
        reference["bytes"] = bytes(ref)
        # The images were never written home: only the logs hold them.
        assert array.image_buffer.statistics()["pending"] > 0
        return array.image_buffer.statistics()["pending"]

    pending = run(first)

    async def second(nursery):
        array, _keeper, members = await assemble(store, nursery)
        recovered = array.image_buffer.stats["recovered"]
        assert await array.scrub() == []
        assert await read_all(array) == reference["bytes"]
        # Any single failure now leaves the whole array readable from the other copy.
        await fail(array, members, 2)
        assert await read_all(array) == reference["bytes"]
        return recovered

    assert run(second) == pending


def test_data_disk_failure_with_pending_images_reads_and_recovers_from_the_buffer():
    store = backends()
    reference = {}

    async def first(nursery):
        array, _keeper, members = await create(store, nursery)
        ref = bytearray(array.size)
        for offset, data in writes(array.size, 3, 40):
            await array.write(offset, data)
            ref[offset : offset + len(data)] = data
        victim = 1
        pending_images_of_victim = [e for e in array.image_buffer.pending
                                    if victim in {x.disk for x in array.layout.map(e.logical, e.length)}]
        assert pending_images_of_victim  # the failure strikes while its images are pending
        await fail(array, members, victim)
        # Degraded reads of the victim's blocks come from image homes + the buffer.
        assert await read_all(array) == bytes(ref)
        # Degraded writes keep working; their images are buffered too.
        for offset, data in writes(array.size, 4, 10):
            await array.write(offset, data)
            ref[offset : offset + len(data)] = data
        assert await read_all(array) == bytes(ref)
        reference["bytes"] = bytes(ref)
        return len(pending_images_of_victim)

    run(first)  # crash with the data disk failed and its images still only in the logs

    async def second(nursery):
        array, _keeper, members = await assemble(store, nursery)
        assert array.failed == frozenset({1})
        assert array.image_buffer.stats["recovered"] > 0
        assert await read_all(array) == reference["bytes"]
        # Rebuild the failed member onto a blank disk; then everything is consistent again.
        blank = EmulatedDisk("d1new", "none", MemoryBackend(DISK))
        blank.start(nursery)
        await array.rebuild(1, blank)
        assert not array.failed and await array.scrub() == []
        assert await read_all(array) == reference["bytes"]

    run(second)


def test_images_in_memory_cover_a_disk_failure_but_write_no_log():
    """image_buffer = memory: no log entry is written, a data disk that fails while its
    images wait in memory loses nothing (reads lay them over, the background writes them
    home, a rebuild restores the disk); assembly after a crash has nothing to replay."""
    store = backends()

    async def body(nursery):
        members = disks_over(store, nursery)
        array, _keeper = await build.create_array("x", "raidx", members, chunk=CHUNK, data_offset=DATA_OFFSET,
                                                  nursery=nursery, image_delay=0.05,
                                                  options={"image_buffer": "memory"})
        assert not array.image_buffer.persistent
        before = sum(m.statistics()["bytes_written"] for m in members)
        ref = bytearray(array.size)
        written = 0
        for offset, data in writes(array.size, 3, 40):
            await array.write(offset, data)
            ref[offset : offset + len(data)] = data
            written += len(data)
        assert array.image_buffer.statistics()["pending"] > 0
        await fail(array, members, 1)
        assert await read_all(array) == bytes(ref)
        await sched.sleep(1)  # the background writes every image home
        assert array.image_buffer.statistics()["pending"] == 0
        assert await read_all(array) == bytes(ref)
        blank = EmulatedDisk("d1new", "none", MemoryBackend(DISK))
        blank.start(nursery)
        await array.rebuild(1, blank)
        assert await array.scrub() == [] and await read_all(array) == bytes(ref)
        # every byte went to its data copy and its image home, none to a log
        return sum(m.statistics()["bytes_written"] for m in members) - before, written

    total, written = run(body)
    assert total <= 2 * written

    store = backends()

    async def crash(nursery):
        members = disks_over(store, nursery)
        array, _keeper = await build.create_array("x", "raidx", members, chunk=CHUNK, data_offset=DATA_OFFSET,
                                                  nursery=nursery, options={"image_buffer": "memory"})
        for offset, data in writes(array.size, 5, 10):
            await array.write(offset, data)
        return array.image_buffer.statistics()["pending"]

    assert run(crash) > 0   # the crash takes the pending images with it

    async def again(nursery):
        array, _keeper, _members = await assemble(store, nursery)
        return array.image_buffer.persistent, array.image_buffer.stats["recovered"]

    assert run(again) == (False, 0)


def test_image_disk_failure_drops_its_pending_images_and_keeps_the_data():
    store = backends()

    async def body(nursery):
        array, _keeper, members = await create(store, nursery)
        ref = bytearray(array.size)
        for offset, data in writes(array.size, 5, 30):
            await array.write(offset, data)
            ref[offset : offset + len(data)] = data
        victim = 3
        assert any(e.disk == victim for e in array.image_buffer.pending)
        await fail(array, members, victim)
        await array.image_buffer.drain()
        assert not array.image_buffer.pending and array.image_buffer.stats["dropped"] > 0
        return await read_all(array) == bytes(ref)

    assert run(body)


@pytest.mark.parametrize("crash_at", [0.004, 0.011, 0.023, 0.037, 0.052, 0.071])
def test_crash_at_any_moment_leaves_copies_that_agree_and_keeps_acknowledged_writes(crash_at):
    """Timed disks, concurrent writers, a background writer with a short delay, and a crash
    at `crash_at` virtual seconds: after assembly every acknowledged write reads back and
    the two copies of every block agree (unacknowledged writes may be old or new)."""
    store = backends()
    acked: dict[int, bytes] = {}
    attempted: dict[int, list[bytes]] = {}

    async def first(nursery):
        array, _keeper, _members = await create(store, nursery, delay=0.003, model="hdd-7200")

        async def writer(seed):
            rng = random.Random(seed)
            while True:
                block = rng.randrange(0, array.size // (16 * KiB))
                data = rng.randbytes(16 * KiB)
                attempted.setdefault(block, []).append(data)
                await array.write(block * 16 * KiB, data)
                acked[block] = data

        with sched.move_on_after(crash_at):
            async with sched.open_nursery() as writers:
                for seed in range(4):
                    writers.start_soon(writer, seed)

    run(first)

    async def second(nursery):
        array, _keeper, _members = await assemble(store, nursery)
        assert await array.scrub() == []
        for block, versions in attempted.items():
            got = await array.read(block * 16 * KiB, 16 * KiB)
            if block in acked and acked[block] is versions[-1]:
                assert got == acked[block]
            else:
                assert got in versions or got == bytes(16 * KiB) or got == acked.get(block)

    run(second)
    assert acked


def test_log_format_round_trip_and_torn_entries_are_ignored():
    import uuid

    from raidlab.engine.imagebuffer import PendingImage, encode_entry

    owner = uuid.uuid4().bytes
    entries = [PendingImage(seq, 0, DATA_OFFSET + seq * 4096, seq * 4096, bytes([seq]) * 4096, 0)
               for seq in (1, 2, 3)]
    region = bytearray(64 * KiB)
    pos = 0
    for e in entries:
        raw = encode_entry(owner, e)
        region[pos : pos + len(raw)] = raw
        pos += len(raw)
    found = parse_log(owner, bytes(region), 1000 * 512, cleared=1)
    assert [(seq, home) for seq, home, *_ in found] == [(2, entries[1].home), (3, entries[2].home)]
    torn = bytearray(region)
    torn[2 * (512 + 4096) + 512 + 7] ^= 0xFF  # a byte of entry 3's data
    assert [seq for seq, *_ in parse_log(owner, bytes(torn), 0, cleared=0)] == [1, 2]
    assert parse_log(uuid.uuid4().bytes, bytes(region), 0, cleared=0) == []  # another array's
    tails = encode_tail(owner, 7, 41) + encode_tail(owner, 8, 42)
    assert decode_tails(owner, tails) == (8, 42)
    assert LOG_START % 512 == 0


def test_ring_reuses_space_only_behind_the_oldest_pending_entry():
    ring = _Ring(0, 10 * 512)
    assert ring.place(4 * 512) == 0
    from raidlab.engine.imagebuffer import PendingImage

    a = PendingImage(1, 0, 0, 0, bytes(3 * 512), 0)
    ring.entries.append(a)
    ring.head = 4 * 512
    b = PendingImage(2, 0, 0, 0, bytes(3 * 512), 4 * 512)
    ring.entries.append(b)
    ring.head = 8 * 512
    assert ring.place(4 * 512) is None  # 2 sectors left at the end, nothing before a
    ring.entries.pop(0)  # a written home
    assert ring.place(4 * 512) == 0  # wraps into a's space
    ring.head = 4 * 512
    ring.entries.append(PendingImage(3, 0, 0, 0, bytes(3 * 512), 0))
    assert ring.place(1 * 512) is None  # head == b's start: full


def test_without_a_background_task_a_full_buffer_is_written_out_inline():
    store = backends()

    async def body(nursery):
        members = disks_over(store, nursery)
        array, _keeper = await build.create_array("x", "raidx", members, chunk=CHUNK, data_offset=DATA_OFFSET)
        assert isinstance(array.image_buffer, ImageBuffer) and not array.image_buffer.running
        ref = bytearray(array.size)
        for offset, data in writes(array.size, 6, 80):
            await array.write(offset, data)
            ref[offset : offset + len(data)] = data
        stats = array.image_buffer.statistics()
        await array.image_buffer.drain()
        assert await array.scrub() == []
        return stats, await read_all(array) == bytes(ref)

    stats, same = run(body)
    assert stats["waits_for_space"] > 0 and stats["written_home"] > 0 and same


def test_a_write_waiting_for_log_space_freed_while_it_logged_is_not_left_waiting():
    """The background writer can free a full ring while a write is logging what it placed
    so far; that write must see the space, not wait for a wake-up that has already come
    (it once waited for ever with nothing pending). The interleaving is made certain here:
    every append is followed by the background's work before the writer looks again."""
    store = backends()

    async def body(nursery):
        array, _keeper, _members = await create(store, nursery, delay=FOREVER)
        buffer = array.image_buffer
        logged = buffer._append

        async def append_then_background_writes_home(entries, fua):
            # Called by ImageBuffer.log from inside its wait for space (its `where` is None
            # there): the background writer empties the rings while this batch is logged.
            waiting = sys._getframe(1).f_locals.get("where", 0) is None
            await logged(entries, fua)
            if waiting:
                await buffer.write_pending()

        buffer._append = append_then_background_writes_home
        rng = random.Random(1)
        reference = bytearray(array.size)
        with sched.move_on_after(60) as deadline:
            for offset in range(0, array.size - 256 * KiB, 192 * KiB):
                data = rng.randbytes(192 * KiB)
                await array.write(offset, data)
                reference[offset:offset + len(data)] = data
        assert not deadline.cancelled_caught, "a write waited for log space that was free"
        assert await read_all(array) == reference
        return buffer.statistics()

    stats = run(body)
    assert stats["logged"] > 0 and stats["written_home"] > 0


def _pending(seq, home, length, origin):
    return PendingImage(seq, 0, home, home, bytes(length), log_offset=0, logged=True, origin=origin)


def test_merge_runs_joins_contiguous_images_of_one_node_up_to_the_limit():
    a = _pending(1, 0, 16 * KiB, origin=2)
    b = _pending(2, 16 * KiB, 16 * KiB, origin=2)
    c = _pending(3, 32 * KiB, 16 * KiB, origin=2)
    other_node = _pending(4, 48 * KiB, 16 * KiB, origin=5)
    gap = _pending(5, 96 * KiB, 16 * KiB, origin=5)
    runs = merge_runs([gap, c, a, other_node, b], 32 * KiB)
    assert [[e.seq for e in run] for run in runs] == [[1, 2], [3], [4], [5]]
    assert [[e.seq for e in run] for run in merge_runs([a, b, c], 64 * KiB)] == [[1, 2, 3]]
    assert [[e.seq for e in run] for run in merge_runs([a, b, c], 16 * KiB)] == [[1], [2], [3]]


@pytest.mark.parametrize(("merge", "writes_per_group"), [("group", 1), ("16K", N - 1)])
def test_the_background_writer_sends_a_mirror_group_home_in_one_write_unless_told_not_to(merge, writes_per_group):
    """N mirror groups written one chunk per write (as a client hands a file over in
    stripe units), each group's N-1 images in consecutive rows of one image disk: with
    image_merge = group each group goes home as one member write; with one chunk, as N-1
    writes. Either way the images agree with the data."""
    store = backends()

    async def body(nursery):
        members = disks_over(store, nursery)
        array, _keeper = await build.create_array("x", "raidx", members, chunk=CHUNK, data_offset=DATA_OFFSET,
                                                  nursery=nursery, image_delay=FOREVER,
                                                  options={"image_buffer": "memory", "image_merge": merge})
        groups = N
        data = random.Random(5).randbytes(groups * (N - 1) * CHUNK)
        for offset in range(0, len(data), CHUNK):
            await array.write(offset, data[offset : offset + CHUNK])
        home_writes_before = sum(m.statistics()["writes"] for m in members)
        await array.image_buffer.drain()
        home_writes = sum(m.statistics()["writes"] for m in members) - home_writes_before
        assert await array.scrub() == []
        return groups, home_writes, array.image_buffer.stats, await array.read(0, len(data)) == data

    groups, home_writes, stats, same = run(body)
    assert same
    assert stats["written_home"] == groups * (N - 1)
    assert stats["merged_writes"] == groups * writes_per_group
    assert home_writes == groups * writes_per_group


def test_image_merge_refuses_what_is_not_a_size():
    from raidlab.engine.layouts.raidx import RaidxLayout
    from raidlab.errors import UsageError

    layout = RaidxLayout(n_disks=N, disk_size=DISK, chunk_bytes=CHUNK, data_offset=DATA_OFFSET)
    assert layout.image_merge_bytes == (N - 1) * CHUNK
    with pytest.raises(UsageError, match="image_merge"):
        RaidxLayout(n_disks=N, disk_size=DISK, chunk_bytes=CHUNK, data_offset=DATA_OFFSET, image_merge="lots")
