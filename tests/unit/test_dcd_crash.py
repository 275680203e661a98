"""DCD crash recovery (Hu & Yang §2.5) on the virtual clock, with either destage order: LWFD
(the paper's) or oldest-first (the ablation, whose log is circular).

A "crash" is the end of the virtual-time run at a chosen instant: every task is cancelled
where it stands, RAM contents are gone, and the member images (MemoryBackend objects) keep
whatever writes reached them. Recovery builds the DCD anew over the same images
(`assemble_dcd`), which scans the cache-disk log. The oracle then checks every sector:
it must read back a version that was written to it, no older than the newest version
acknowledged as durable (a report-after-complete write, or any write acknowledged before a
flush that completed). A value never written fails, and so does a lost durable write.
"""

from __future__ import annotations

import collections
import dataclasses
import random
import zlib

import pytest

from raidlab import sched
from raidlab.blockdev import SECTOR
from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.engine.caches import assemble_dcd, create_dcd
from raidlab.engine.caches.log import KIND_DATA, KIND_TOMBSTONE
from raidlab.sched import run_virtual

KiB, MiB = 1024, 1 << 20


def sector_bytes(tag: int, index: int) -> bytes:
    return (f"w{tag:07d}s{index:05d}|".encode() * 40)[:SECTOR]


def payload(tag: int, length: int) -> bytes:
    return b"".join(sector_bytes(tag, i) for i in range(length // SECTOR))


class Oracle:
    """What each sector may read back after a crash."""

    def __init__(self) -> None:
        self.history: dict[int, list[bytes]] = {}   # sector -> versions in issue order
        self.floor: dict[int, int] = {}             # sector -> index of newest durable version
        self.acked: list[tuple[int, int]] = []      # (sector, index) acknowledged, not yet durable
        self.durable_writes = 0

    def issue(self, offset: int, data: bytes) -> list[tuple[int, int]]:
        versions = []
        for i in range(len(data) // SECTOR):
            sector = offset // SECTOR + i
            hist = self.history.setdefault(sector, [])
            hist.append(data[i * SECTOR:(i + 1) * SECTOR])
            versions.append((sector, len(hist) - 1))
        return versions

    def ack(self, versions: list[tuple[int, int]], durable: bool) -> None:
        if durable:
            self.durable_writes += 1
            for sector, index in versions:
                self.floor[sector] = max(self.floor.get(sector, -1), index)
        else:
            self.acked.extend(versions)

    def flush_started(self) -> list[tuple[int, int]]:
        snapshot, self.acked = self.acked, []
        return snapshot

    def flush_done(self, snapshot: list[tuple[int, int]]) -> None:
        self.ack(snapshot, durable=True)

    def latest(self, sector: int) -> bytes:
        hist = self.history.get(sector)
        return hist[-1] if hist else bytes(SECTOR)

    def check(self, sector: int, value: bytes) -> str | None:
        """None if `value` is allowed for `sector`, else what is wrong."""
        hist = self.history.get(sector, [])
        floor = self.floor.get(sector, -1)
        allowed = hist[max(floor, 0):] if floor >= 0 else [bytes(SECTOR), *hist]
        if value in allowed:
            return None
        if value in hist or value == bytes(SECTOR):
            return f"sector {sector}: an older version than the durable one (floor {floor})"
        return f"sector {sector}: a value never written ({value[:16]!r})"


async def workload(target, oracle: Oracle, seed: int, *, ops: int, region: int,
                   sync_writes: bool, large_every: int = 12) -> None:
    """Small writes (some FUA), a few large writes, flushes, reads checked against the
    newest write, and think times long enough for the idle detector now and then."""
    rng = random.Random(seed)
    for tag in range(1, ops + 1):
        roll = rng.random()
        if tag % large_every == 0:
            length = rng.choice([72, 96, 128]) * KiB
        else:
            length = rng.choice([1, 2, 4, 8, 8, 8, 16]) * SECTOR
        offset = rng.randrange(0, (region - length) // SECTOR) * SECTOR
        if roll < 0.12:
            snapshot = oracle.flush_started()
            await target.flush()
            oracle.flush_done(snapshot)
        elif roll < 0.22:
            got = await target.read(offset, length)
            want = b"".join(oracle.latest(offset // SECTOR + i) for i in range(length // SECTOR))
            assert got == want, f"read at {offset} ({length}) does not return the newest write"
        else:
            fua = rng.random() < 0.1
            data = payload(tag, length)
            versions = oracle.issue(offset, data)
            await target.write(offset, data, fua=fua)
            oracle.ack(versions, durable=fua or sync_writes)
        pause = rng.random()
        if pause < 0.08:
            await sched.sleep(rng.uniform(0.06, 0.3))   # idle: destage runs
        elif pause < 0.6:
            await sched.sleep(rng.uniform(0, 0.004))


class Rig:
    """Images that outlive a run, and fresh disk objects over them for each run."""

    def __init__(self, sizes: dict[str, int], model: str) -> None:
        self.backends = {name: MemoryBackend(size) for name, size in sizes.items()}
        self.model = model

    def disks(self) -> dict[str, EmulatedDisk]:
        return {name: EmulatedDisk(name, self.model, b) for name, b in self.backends.items()}

    def run(self, body, *, crash_at: float | None = None):
        disks = self.disks()

        async def main():
            result = None
            with sched.CancelScope(deadline=crash_at if crash_at is not None else float("inf")):
                async with sched.open_nursery() as nursery:
                    for d in disks.values():
                        d.start(nursery)
                    result = await body(disks, nursery)
                    nursery.cancel_scope.cancel()
            return result

        return run_virtual(main)

    def fingerprint(self) -> int:
        return zlib.crc32(b"".join(b.pread(0, b.size) for b in self.backends.values()))


def dcd_rig(model="hp-c2200a") -> Rig:
    return Rig({"cache": 64 * KiB + 136 * KiB, "data": 4 * MiB}, model)


def crash_and_check(report: str, crash_fraction: float, seed: int, *, ops=120, region=1 * MiB,
                    destage_order="lwfd"):
    rig = dcd_rig()
    ram = 16 * KiB

    async def make(disks, nursery):
        # Half the points with the background destage of a full log, half without it (the
        # forced destage in the write path is then the only way to make room).
        await create_dcd("c", disks["cache"], disks["data"], ram_buffer=ram, report=report,
                         destage_segment=32 * KiB, high_watermark=0.6 if seed % 2 else 1.0,
                         destage_batch=64 * KiB, destage_order=destage_order)

    rig.run(make)
    oracle = Oracle()
    times = {}

    async def work(disks, nursery):
        dcd = await assemble_dcd(disks["cache"], disks["data"])
        dcd.start(nursery)
        times["start"] = sched.current_time()
        await workload(dcd, oracle, seed, ops=ops, region=region, sync_writes=report == "after-complete")
        times["end"] = sched.current_time()
        return dcd.statistics()

    # A full run first gives the workload's length in virtual time; the crash run replays
    # it exactly (the same seed, on the deterministic kernel) and is cut at the chosen fraction of it.
    image = {n: b.pread(0, b.size) for n, b in rig.backends.items()}
    full_stats = rig.run(work)
    crash_at = times["start"] + crash_fraction * (times["end"] - times["start"])
    for n, b in rig.backends.items():
        b.pwrite(0, image[n])
    oracle.__init__()
    rig.run(work, crash_at=crash_at)

    async def verify(disks, nursery):
        dcd = await assemble_dcd(disks["cache"], disks["data"])
        dcd.start(nursery)
        recovered = dcd.statistics()["recovered_blocks"]
        data = await dcd.read(0, region)
        problems = [p for s in range(region // SECTOR)
                    if (p := oracle.check(s, data[s * SECTOR:(s + 1) * SECTOR]))]
        return problems, recovered

    problems, recovered = rig.run(verify)
    return problems, full_stats, oracle, recovered


CRASH_POINTS = [(i + 0.5) / 24 for i in range(24)]


@pytest.mark.parametrize("report, destage_order", [("immediate", "lwfd"), ("after-complete", "lwfd"),
                                                   ("immediate", "oldest"), ("after-complete", "oldest")])
def test_every_durable_write_survives_crashes_at_24_points(report, destage_order):
    failures = []
    durable = recovered_total = 0
    totals = collections.Counter()
    for n, fraction in enumerate(CRASH_POINTS):
        problems, stats, oracle, recovered = crash_and_check(report, fraction, seed=100 + n,
                                                             destage_order=destage_order)
        durable += oracle.durable_writes
        recovered_total += recovered
        totals.update({k: v for k, v in stats.items() if isinstance(v, int)})
        if problems:
            failures.append((fraction, problems[:3]))
    assert not failures, failures
    # The runs did exercise what matters: durable writes, and logs left to recover.
    assert durable > 100 and recovered_total > 0
    exercised = ["destages", "destage_holes_dropped", "destages_suspended", "tombstones",
                 "large_writes_to_data_disk", "forced_destages", "idle_periods_found", "watermark_batches"]
    if report == "immediate":  # one writer waiting for each log write never fills the buffer
        exercised.append("waited_for_full_buffer")
    if destage_order == "lwfd":
        exercised.append("tombstone_area_compactions")  # oldest-first's only come from large writes
    else:
        exercised.append("log_wraps")  # the circular log's head went round
    for counter in exercised:
        assert totals[counter] > 0, counter


def test_a_torn_last_log_write_is_ignored():
    rig = dcd_rig(model="none")
    first, second = payload(1, 4 * KiB), payload(2, 4 * KiB)

    async def body(disks, nursery):
        dcd = await create_dcd("c", disks["cache"], disks["data"], ram_buffer=64 * KiB, idle_threshold=100.0)
        dcd.start(nursery)
        await dcd.write(0, first)
        await dcd.flush()
        await dcd.write(0, second)       # immediate report: not durable without a flush
        await sched.sleep(0.001)          # its log write happens
        top = dcd.log.records[-1]
        return top.offset, top.length

    offset, length = rig.run(body)
    cache = rig.backends["cache"]
    # Tear it: the tail of the log write never reached the platter.
    cache.pwrite(offset + length - 1024, bytes(1024))

    async def recover(disks, nursery):
        dcd = await assemble_dcd(disks["cache"], disks["data"])
        dcd.start(nursery)
        return await dcd.read(0, 4 * KiB), len(dcd.log.records)

    value, records = rig.run(recover)
    assert value == first
    assert records == 1


def test_an_older_copy_under_a_destaged_one_is_not_resurrected():
    # Log: A (elsewhere), v2 of sector 0, v3 of sector 0. LWFD pops v3 (the newest) home;
    # v2 stays lower in the log. Then a large write puts v4 on the data disk. Replaying the
    # log after a crash must not bring v2 back: the pop left a tombstone for sector 0.
    rig = dcd_rig(model="none")

    async def body(disks, nursery):
        dcd = await create_dcd("c", disks["cache"], disks["data"], ram_buffer=64 * KiB,
                               idle_threshold=100.0, destage_segment=SECTOR)
        dcd.start(nursery)
        for tag, offset in ((1, 1 * MiB), (2, 0), (3, 0)):
            await dcd.write(offset, payload(tag, 4 * KiB))
            await dcd.flush()
        async with dcd.log.lock:
            assert await dcd.destage_lwfd(interruptible=False) == 4 * KiB
        await dcd.write(0, payload(4, 96 * KiB))  # large: straight to the data disk
        await dcd.flush()
        area = await dcd.log.scan_area()
        return [r.kind for r in dcd.log.records], [sorted(r.addresses) for r in area], dcd.statistics()

    kinds, area, stats = rig.run(body)
    # The chain keeps only data records; the pop's tombstone (sector 0's 8 sectors, v2
    # still below) is in the tombstone area; the large write added nothing new to say.
    assert kinds == [KIND_DATA, KIND_DATA]
    assert area == [list(range(8))]
    assert stats["tombstones"] == 1

    async def recover(disks, nursery):
        dcd = await assemble_dcd(disks["cache"], disks["data"])
        dcd.start(nursery)
        return await dcd.read(0, 4 * KiB), await dcd.read(1 * MiB, 4 * KiB)

    low, high = rig.run(recover)
    assert low == payload(4, 96 * KiB)[:4 * KiB]
    assert high == payload(1, 4 * KiB)


def test_a_tombstone_taken_off_the_stack_is_written_again_while_it_still_hides_a_copy():
    # Log: A, then v1, v2, v3 of sector 0. LWFD pops v3 home: tombstone T1 names sector 0
    # (v1 and v2 are still in the log). A log write of B and its pop leave a blank, not
    # a second tombstone: T1 still says everything. The next pop takes T1 with v2 (a hole);
    # v1 is still in the log, so the new marker must name sector 0 again, or recovery
    # would bring v1 back over v3. (The journal layout, where tombstones are on the stack.)
    rig = dcd_rig(model="none")

    async def made(disks, nursery):
        await create_dcd("c", disks["cache"], disks["data"], ram_buffer=64 * KiB,
                         idle_threshold=100.0, destage_segment=SECTOR)
        await age_layout(disks, JOURNAL_LAYOUT)

    rig.run(made)

    async def body(disks, nursery):
        dcd = await assemble_dcd(disks["cache"], disks["data"])
        dcd.start(nursery)
        for tag, offset in ((1, 1 * MiB), (2, 0), (3, 0), (4, 0)):
            await dcd.write(offset, payload(tag, 4 * KiB))
            await dcd.flush()
        kinds, live = [], []

        async def pop():
            async with dcd.log.lock:
                live.append(await dcd.destage_lwfd(interruptible=False))
            kinds.append([r.kind for r in dcd.log.records])

        await pop()                                   # v3 home
        await dcd.write(2 * MiB, payload(5, 4 * KiB))
        await dcd.flush()
        await pop()                                   # B home
        await pop()                                   # T1 and the hole v2
        return kinds, live, dcd.statistics()

    kinds, live, stats = rig.run(body)
    D, T = KIND_DATA, KIND_TOMBSTONE
    assert live == [4 * KiB, 4 * KiB, 0]
    assert kinds == [[D, D, D, T], [D, D, D, T], [D, D, T]]
    assert stats["tombstones"] == 2
    assert stats["tombstone_entries"] == 8 * 2  # the 8 sectors of v3, once per tombstone

    async def recover(disks, nursery):
        dcd = await assemble_dcd(disks["cache"], disks["data"])
        dcd.start(nursery)
        return [await dcd.read(off, 4 * KiB) for off in (0, 1 * MiB, 2 * MiB)]

    assert rig.run(recover) == [payload(4, 4 * KiB), payload(1, 4 * KiB), payload(5, 4 * KiB)]



async def age_layout(disks, drop: tuple[str, ...]) -> None:
    """Rewrite the DCD's superblock as an older raidlab wrote it: without the geometry keys
    `drop` ("log_tombstone_area": the journal layout; both: the plain layout of before the
    journal; raidlab.engine.caches.log)."""
    from raidlab.engine import metadata

    sb = await metadata.read_superblock(disks["cache"])
    geometry = {k: v for k, v in sb.geometry.items() if k not in drop}
    await metadata.write_superblock(disks["cache"], dataclasses.replace(sb, geometry=geometry))


JOURNAL_LAYOUT = ("log_tombstone_area",)
PLAIN_LAYOUT = ("log_tombstone_area", "log_journal")


SCATTERED = [2 * i for i in range(40)]   # no two adjacent: a tombstone of them has 40 runs


async def two_versions_then_pop(disks, nursery, drop: tuple[str, ...] = ()):
    """A DCD (of the layout without the geometry keys `drop`) whose log holds v1 then v2 of
    the SCATTERED sectors, one record each, after one LWFD pop of the 40 v2 records home
    (its tombstone: two sectors)."""
    await create_dcd("c", disks["cache"], disks["data"], ram_buffer=64 * KiB,
                     idle_threshold=100.0, destage_segment=40 * KiB)
    await age_layout(disks, drop)
    dcd = await assemble_dcd(disks["cache"], disks["data"])
    dcd.start(nursery)
    for tag in (1, 2):
        for s in SCATTERED:
            await dcd.write(s * SECTOR, payload(tag, SECTOR))
            await dcd.flush()
    async with dcd.log.lock:
        assert await dcd.destage_lwfd(interruptible=False) == 40 * SECTOR
    return dcd


async def read_scattered(disks, nursery):
    dcd = await assemble_dcd(disks["cache"], disks["data"])
    dcd.start(nursery)
    got = [await dcd.read(s * SECTOR, SECTOR) for s in SCATTERED]
    return got, dcd


def test_a_torn_multi_sector_marker_does_not_bring_older_copies_back():
    # Log: v1 then v2 of 40 scattered sectors. LWFD pops the 40 v2 records home; the
    # marker at the new top is a tombstone naming the 40 sectors (two summary sectors,
    # since the runs do not merge). A crash tears it: its second sector never lands, so
    # the chain ends there. The copy of the marker in the log's journal slot, written
    # before it, still hides the v1 copies: recovery must read v2, not v1. (The journal
    # layout: the tombstone area keeps tombstones off the stack.)
    rig = dcd_rig(model="none")

    async def body(disks, nursery):
        dcd = await two_versions_then_pop(disks, nursery, JOURNAL_LAYOUT)
        top = dcd.log.records[-1]
        return [r.kind for r in dcd.log.records], top.offset, top.length

    kinds, offset, length = rig.run(body)
    assert kinds == [KIND_DATA] * 40 + [KIND_TOMBSTONE]
    assert length == 2 * SECTOR
    rig.backends["cache"].pwrite(offset + SECTOR, bytes(SECTOR))   # torn

    async def recover(disks, nursery):
        got, dcd = await read_scattered(disks, nursery)
        return got, [r.kind for r in dcd.log.records], set(dcd.store.unrecorded)

    got, kinds_after, unrecorded = rig.run(recover)
    assert kinds_after == [KIND_DATA] * 40    # the chain ends at the torn marker
    assert got == [payload(2, SECTOR)] * 40
    assert unrecorded == set(SCATTERED)       # the next marker names them in the chain


@pytest.mark.parametrize("layout", ["journal", "area"])
def test_a_stale_tombstone_hides_no_newer_copy(layout):
    # After the pop, v3 of the same sectors is logged. The pop's tombstone (bound: the v2
    # sequence numbers) is still on the cache disk: in the journal slot (journal layout) or
    # the tombstone area. Recovery applies it and must still map every v3 copy, in this
    # epoch and the next.
    rig = dcd_rig(model="none")

    async def body(disks, nursery):
        dcd = await two_versions_then_pop(disks, nursery, JOURNAL_LAYOUT if layout == "journal" else ())
        for s in SCATTERED:
            await dcd.write(s * SECTOR, payload(3, SECTOR))
        await dcd.flush()
        if layout == "journal":
            slot = await dcd.log.read_journal()
            return [sorted(slot.addresses)] if slot else []
        return [sorted(r.addresses) for r in await dcd.log.scan_area()]

    assert rig.run(body) == [SCATTERED]

    async def recover(disks, nursery):
        got, dcd = await read_scattered(disks, nursery)
        return got, dcd.statistics()["recovered_blocks"]

    for _ in range(2):
        got, recovered = rig.run(recover)
        assert got == [payload(3, SECTOR)] * 40
        assert recovered == 40


def test_a_dcd_made_before_the_marker_journal_keeps_its_whole_log_region():
    # A superblock without log_journal (a DCD made before the journal existed) has log
    # records up to the end of its region: assembling it reserves no journal slot, so no
    # record is cut off; a new DCD reserves the slot and says so in its geometry.
    rig = dcd_rig(model="none")
    from raidlab.engine import metadata

    async def made_then_aged(disks, nursery):
        dcd = await create_dcd("c", disks["cache"], disks["data"], ram_buffer=16 * KiB)
        new_end = dcd.log.end
        sb = await metadata.read_superblock(disks["cache"])
        await age_layout(disks, PLAIN_LAYOUT)
        return sb.geometry.get("log_journal"), sb.geometry.get("log_tombstone_area"), new_end, disks["cache"].size

    flag, area_flag, new_end, size = rig.run(made_then_aged)
    assert flag == 1 and area_flag == 1 and new_end < size

    async def assemble(disks, nursery):
        dcd = await assemble_dcd(disks["cache"], disks["data"])
        return dcd.log.end

    assert rig.run(assemble) == size


def test_a_dcd_made_before_the_marker_journal_still_pops_a_multi_sector_marker():
    # Without a journal slot the marker goes in place only, as before the journal existed
    # (the pop used to ask for the slot anyway and failed: "exceeds its journal slot").
    rig = dcd_rig(model="none")

    async def made_without_journal(disks, nursery):
        await create_dcd("c", disks["cache"], disks["data"], ram_buffer=64 * KiB,
                         idle_threshold=100.0, destage_segment=40 * KiB)
        await age_layout(disks, PLAIN_LAYOUT)

    rig.run(made_without_journal)

    async def two_versions_then_pop_old(disks, nursery):
        dcd = await assemble_dcd(disks["cache"], disks["data"])
        dcd.start(nursery)
        assert dcd.log.end == disks["cache"].size  # no slot
        for tag in (1, 2):
            for s in SCATTERED:
                await dcd.write(s * SECTOR, payload(tag, SECTOR))
                await dcd.flush()
        async with dcd.log.lock:
            popped = await dcd.destage_lwfd(interruptible=False)
        top = dcd.log.records[-1]
        return popped, top.kind, top.length

    assert rig.run(two_versions_then_pop_old) == (40 * SECTOR, KIND_TOMBSTONE, 2 * SECTOR)

    async def recover(disks, nursery):
        got, _dcd = await read_scattered(disks, nursery)
        return got

    assert rig.run(recover) == [payload(2, SECTOR)] * 40


# --------------------------------------------------------------- the tombstone area (LAYOUT_AREA)


def test_a_pop_whose_tombstone_was_torn_before_its_marker_is_not_lost():
    # Log: v1 then v2 of 40 scattered sectors. The pop of the v2 records writes their
    # tombstone (two sectors: naming the v1 copies) to the tombstone area, then the blank
    # marker at the new top. A crash after the tombstone's first sector only: the marker
    # never landed, so the chain still holds the v2 records above v1, and recovery maps v2.
    rig = dcd_rig(model="none")
    before = {}

    async def body(disks, nursery):
        await create_dcd("c", disks["cache"], disks["data"], ram_buffer=64 * KiB,
                         idle_threshold=100.0, destage_segment=40 * KiB)
        dcd = await assemble_dcd(disks["cache"], disks["data"])
        dcd.start(nursery)
        for tag in (1, 2):
            for s in SCATTERED:
                await dcd.write(s * SECTOR, payload(tag, SECTOR))
                await dcd.flush()
        top = dcd.log.records[-40]
        before["marker"] = (top.offset, rig.backends["cache"].pread(top.offset, SECTOR))
        async with dcd.log.lock:
            assert await dcd.destage_lwfd(interruptible=False) == 40 * SECTOR
        area = await dcd.log.scan_area()
        return [r.kind for r in dcd.log.records], [(r.offset, r.summary_bytes, sorted(r.addresses)) for r in area]

    kinds, area = rig.run(body)
    assert kinds == [KIND_DATA] * 40
    [(offset, length, addresses)] = area
    assert length == 2 * SECTOR and addresses == SCATTERED
    cache = rig.backends["cache"]
    cache.pwrite(offset + SECTOR, bytes(SECTOR))      # the tombstone torn
    marker_at, old_sector = before["marker"]
    cache.pwrite(marker_at, old_sector)               # and the marker never written

    async def recover(disks, nursery):
        got, dcd = await read_scattered(disks, nursery)
        return got, [r.kind for r in dcd.log.records]

    got, kinds_after = rig.run(recover)
    assert kinds_after == [KIND_DATA] * 80
    assert got == [payload(2, SECTOR)] * 40


def test_a_full_tombstone_area_half_is_compacted_into_the_other_and_still_hides_older_copies():
    # v1 then v2 of 40 scattered sectors, one record each; then pop the v2 records one by
    # one (a segment of one sector): each pop's tombstone names one sector, one summary
    # sector each. The rig's area halves hold 11 sectors, so the 12th tombstone does not
    # fit: the whole superseded set goes to the start of the other half, and appending
    # goes on there. After a crash every sector must read v2 (home), never v1.
    rig = dcd_rig(model="none")

    async def body(disks, nursery):
        await create_dcd("c", disks["cache"], disks["data"], ram_buffer=64 * KiB,
                         idle_threshold=100.0, destage_segment=SECTOR)
        dcd = await assemble_dcd(disks["cache"], disks["data"])
        dcd.start(nursery)
        for tag in (1, 2):
            for s in SCATTERED:
                await dcd.write(s * SECTOR, payload(tag, SECTOR))
                await dcd.flush()
        halves = []
        for _ in SCATTERED:
            async with dcd.log.lock:
                assert await dcd.destage_lwfd(interruptible=False) == SECTOR
            halves.append(dcd.log.area_current)
        area = await dcd.log.scan_area()
        return (dcd.log.area_half, halves, dcd.statistics(), len(area),
                sorted(a for r in area for a in r.addresses), dict(dcd.store.superseded))

    half, halves, stats, n_area, named, superseded = rig.run(body)
    assert half == 11 * SECTOR
    assert halves[:11] == [0] * 11 and halves[11] == 1
    assert stats["tombstones"] == 40
    switches = sum(1 for a, b in zip(halves, halves[1:]) if a != b)
    assert stats["tombstone_area_compactions"] == switches >= 1
    assert stats["tombstone_entries"] > 40  # a compaction writes the whole set again
    assert sorted(superseded) == SCATTERED and set(named) == set(SCATTERED)

    async def recover(disks, nursery):
        got, dcd = await read_scattered(disks, nursery)
        return got

    assert rig.run(recover) == [payload(2, SECTOR)] * 40
