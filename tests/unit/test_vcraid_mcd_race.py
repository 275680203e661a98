"""VC-RAID mcd: log writes of one block on different cache disks. A block is in at most one
level-1 write at a time, reads return the newest write, and recovery keeps every flushed one.

Regression tests. `raidlab crashtest vcraid-mcd` once showed fsync'ed files damaged under
load; looking for the cause found two races between log writes on different cache disks:
(1) a block's RAM slot was freed when an *older* log write of it completed, if the slot had
been freed and taken again meanwhile (a per-entry version counter restarted), so reads fell
back to an older copy while the newest was still in flight (needs three cache disks);
(2) a tombstone hid every copy of a block with a smaller sequence number, including a newer
copy whose log write was in flight on the other cache disk: a flushed write was lost in
recovery (two cache disks suffice)."""

from __future__ import annotations

from raidlab import sched
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.engine.caches import create_vcraid
from raidlab.sched import run_virtual

KiB, MiB = 1024, 1 << 20


def block(tag: int) -> bytes:
    return (f"<v{tag:06d}>".encode() * 120)[:1024]


def test_a_block_is_in_one_log_write_at_a_time_and_reads_return_the_newest():
    members = [EmulatedDisk(f"d{i}", "none", MemoryBackend(8 * MiB)) for i in range(3)]
    # Cache disk 1 is instant, 0 slow, 2 slower: without the rule, the log write of v2 (on 1)
    # would finish before that of v1 (on 0), and v3's (on 2) be in flight when v1's completes.
    caches = [EmulatedDisk(f"c{i}", model, MemoryBackend(1 * MiB))
              for i, model in enumerate(("hdd-7200", "none", "hp-c2200a"))]

    async def main():
        async with sched.open_nursery() as nursery:
            for d in [*members, *caches]:
                d.start(nursery)
            vc = await create_vcraid("v", members, caches, config="mcd", ram_buffer=64 * KiB,
                                     idle_threshold=100.0)
            vc.start(nursery)
            where = 40 * KiB
            seen = set()
            for tag in (1, 2, 3):
                await vc.write(where, block(tag))
                await sched.sleep(0.0001)  # the other cache disks' writers are free now
                seen.add(await vc.read(where, 1024))
            assert seen == {block(1), block(2), block(3)}
            seen = set()
            for _ in range(400):  # until every log write is done
                seen.add(await vc.read(where, 1024))
                await sched.sleep(0.0002)
            assert seen == {block(3)}
            await vc.flush()
            events = [(t, ev) for t, ev, d in vc.timeline if ev.startswith("level1_")]
            # One log write of the block at a time: each starts after the previous is done.
            assert [ev for _, ev in events] == ["level1_start", "level1_done"] * (len(events) // 2)
            assert 2 <= len(events) // 2 <= 3  # v2 and v3 may share the second log write
            assert vc.store.mapping[where // 1024].seq == max(r.seq for log in vc.logs for r in log.records)
            assert await vc.read(where, 1024) == block(3)
            nursery.cancel_scope.cancel()

    run_virtual(main)


def test_a_tombstone_on_one_cache_disk_does_not_hide_a_newer_log_write_in_flight_on_another():
    """mcd: block X's newest copy goes home from cache disk 1 (its older copy on disk 0 is
    then "superseded" and named in tombstones); X is written again, and while that log write
    is in flight on disk 0 a pop on disk 1 writes a new tombstone naming X, with a *later*
    sequence number. After a crash, recovery must still map X to the in-flight (now done,
    flushed) copy: tombstones only hide copies that existed when X went home."""
    from raidlab.engine.caches import assemble_vcraid

    # Media that outlive a run; cache disk 0 is slow so its log writes stay in flight.
    media = {**{f"d{i}": MemoryBackend(8 * MiB) for i in range(3)}, "c0": MemoryBackend(1 * MiB),
             "c1": MemoryBackend(1 * MiB)}
    models = {"c0": "hp-c2200a"}

    def run(body):
        disks = {name: EmulatedDisk(name, models.get(name, "none"), b) for name, b in media.items()}

        async def main():
            async with sched.open_nursery() as nursery:
                for d in disks.values():
                    d.start(nursery)
                result = await body([disks[f"d{i}"] for i in range(3)], [disks["c0"], disks["c1"]], nursery)
                nursery.cancel_scope.cancel()
            return result

        return run_virtual(main)

    X, Y, Z = 40 * KiB, 80 * KiB, 120 * KiB

    async def first(members, caches, nursery):
        vc = await create_vcraid("v", members, caches, config="mcd", ram_buffer=64 * KiB, idle_threshold=100.0)
        vc.start(nursery)

        async def pop(index):
            async with vc.logs[index].lock:
                await vc.destage_level2([vc.logs[index]], interruptible=False)

        for where, tag in ((X, 1), (X, 2)):  # X v1 on cache disk 0, X v2 on cache disk 1
            await vc.write(where, block(tag))
            await vc.flush()
        await pop(1)  # X v2 home; X's v1 on disk 0 is superseded
        for where, tag in ((Z, 10), (Y, 11)):  # Z on disk 0, Y on disk 1
            await vc.write(where, block(tag))
            await vc.flush()
        await vc.write(X, block(3))
        await sched.sleep(0.0001)
        assert vc._inflight and vc._inflight[0].blocks.keys() == {X // 1024}  # X v3 in flight on disk 0
        await pop(1)  # Y home: a new tombstone on disk 1, X still superseded
        await vc.flush()  # X v3 on cache disk 0: durable
        assert await vc.read(X, 1024) == block(3)
        return True

    async def second(members, caches, nursery):
        vc = await assemble_vcraid(members, caches)
        vc.start(nursery)
        return await vc.read(X, 1024), await vc.read(Y, 1024), await vc.read(Z, 1024)

    assert run(first)  # then a crash: nothing drained, new disks over the same media
    assert run(second) == (block(3), block(11), block(10))
