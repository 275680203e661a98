"""VC-RAID crash recovery (He & Yang §3.4) on the virtual clock, scd and mcd, with either
destage order: LWFD (the paper's) or oldest-first (the ablation, whose log is circular).

Same method as test_dcd_crash (its Oracle, workload and Rig): cut the virtual-time run at a
chosen instant, rebuild with `assemble_vcraid` over the same images (which writes everything
not yet destaged from the cache disk headers to the raid5 before use), and check every
sector against what was acknowledged as durable (FUA writes, writes before a completed
flush). VC-RAID acknowledges other writes from its RAM buffer (immediate report).
"""

from __future__ import annotations

import collections

import pytest

from raidlab import sched
from raidlab.blockdev import SECTOR
from raidlab.engine.caches import assemble_vcraid, create_vcraid
from test_dcd_crash import Oracle, Rig, workload

KiB, MiB = 1024, 1 << 20
CACHE = 64 * KiB + 192 * KiB


def rig_for(config: str) -> Rig:
    sizes = {f"d{i}": 4 * MiB for i in range(4)}
    if config == "scd":
        sizes["cache"] = CACHE
    else:  # mcd: the cache partitions live behind the array partitions of d0 and d1
        sizes["d0"] += CACHE
        sizes["d1"] += CACHE
    return Rig(sizes, "hp-c2200a")


def members_of(config: str, disks):
    if config == "scd":
        return [disks[f"d{i}"] for i in range(4)], [disks["cache"]]
    members = [disks[f"d{i}"].partition(0, 4 * MiB, name=f"d{i}a") for i in range(4)]
    caches = [disks[f"d{i}"].partition(4 * MiB, CACHE, name=f"d{i}c") for i in (0, 1)]
    return members, caches


def crash_and_check(config: str, fraction: float, seed: int, *, ops=100, region=1 * MiB, durability="strict",
                    destage_order="lwfd", crash_at=None):
    """Run the workload once whole, then again from the same images cut at `fraction` of its
    span (or at `crash_at(times)`, `times` from the whole run), recover, and check."""
    rig = rig_for(config)

    async def make(disks, nursery):
        members, caches = members_of(config, disks)
        # Half the points with the background destage of a full log, half without it.
        await create_vcraid("v", members, caches, config=config, ram_buffer=32 * KiB,
                            destage_segment=32 * KiB, destage_batch=64 * KiB,
                            high_watermark=0.5 if seed % 2 else 1.0, durability=durability,
                            destage_order=destage_order)

    rig.run(make)
    image = {n: b.pread(0, b.size) for n, b in rig.backends.items()}
    oracle = Oracle()
    times = {}

    async def work(disks, nursery):
        vc = await assemble_vcraid(*members_of(config, disks))
        vc.start(nursery)
        times["start"] = sched.current_time()
        await workload(vc, oracle, seed, ops=ops, region=region, sync_writes=False)
        times["end"] = sched.current_time()
        return vc.statistics()

    stats = rig.run(work)
    times["stats"] = stats
    for n, b in rig.backends.items():
        b.pwrite(0, image[n])
    oracle.__init__()
    cut = crash_at(times) if crash_at else times["start"] + fraction * (times["end"] - times["start"])
    rig.run(work, crash_at=cut)

    async def verify(disks, nursery):
        vc = await assemble_vcraid(*members_of(config, disks))
        vc.start(nursery)
        data = await vc.read(0, region)
        # Recovery wrote everything home: the array alone holds the same bytes.
        assert await vc.array.read(0, region) == data
        problems = [p for s in range(region // SECTOR)
                    if (p := oracle.check(s, data[s * SECTOR:(s + 1) * SECTOR]))]
        return problems, vc.statistics()["recovered_blocks"]

    problems, recovered = rig.run(verify)
    return problems, stats, oracle, recovered


@pytest.mark.parametrize("config, durability, destage_order", [
    ("scd", "strict", "lwfd"), ("mcd", "strict", "lwfd"), ("scd", "paper", "lwfd"),
    ("scd", "strict", "oldest"), ("mcd", "strict", "oldest"), ("scd", "paper", "oldest"),
])
def test_every_durable_write_survives_crashes_at_20_points(config, durability, destage_order):
    failures = []
    durable = recovered_total = 0
    totals = collections.Counter()
    for n in range(20):
        problems, stats, oracle, recovered = crash_and_check(config, (n + 0.5) / 20, seed=200 + n,
                                                             durability=durability, destage_order=destage_order)
        durable += oracle.durable_writes
        recovered_total += recovered
        totals.update({k: v for k, v in stats.items() if isinstance(v, int)})
        if problems:
            failures.append(((n + 0.5) / 20, problems[:3]))
    assert not failures, failures
    assert durable > 50 and recovered_total > 0
    exercised = ["level1_destages", "level2_destages", "level2_holes_dropped", "level2_suspended",
                 "idle_periods_found", "sync_writes", "waited_for_full_buffer", "level2_watermark_batches"]
    if destage_order == "lwfd":
        exercised.append("tombstones")
        if config == "scd":  # mcd's areas (each sized for both logs) do not fill in these runs
            exercised.append("tombstone_area_compactions")
    else:
        # The circular log's head went round: the scan's second pass was needed.
        exercised.append("log_wraps")
        if config == "mcd":  # one log's tail never supersedes a copy; another log's may
            exercised.append("tombstones")
    if config == "mcd":  # both logs over the watermark: batches that destage them together
        exercised.append("level2_batches_together")
    for counter in exercised:
        assert totals[counter] > 0, counter


def test_a_crash_between_the_logs_of_a_batch_destaged_together_loses_nothing(monkeypatch):
    """mcd destages its cache disks together (raidlab.engine.caches.destage): one write home
    for the segments of both logs, then each log forgets its segment and writes its marker in
    turn. A power cut right after the first log's marker leaves the second log holding copies
    of blocks already at home; recovery must give back every durable write all the same."""
    from raidlab.engine.caches import log as logmod

    shares, forget = logmod.LogStore.shares, logmod.LogStore._forget_top
    taking: list[list[int]] = [[]]  # the logs of the destage in progress
    between: list[float] = []  # virtual times at which a joint batch's first log has forgotten

    def noted_shares(self, log_indices, segment_bytes):
        taken = shares(self, log_indices, segment_bytes)
        taking[0] = sorted(taken)
        return taken

    async def noted_forget(self, pop):
        await forget(self, pop)
        if len(taking[0]) > 1 and pop.log_index == taking[0][0]:
            between.append(sched.current_time())

    monkeypatch.setattr(logmod.LogStore, "shares", noted_shares)
    monkeypatch.setattr(logmod.LogStore, "_forget_top", noted_forget)
    checked = 0
    for seed in (201, 203, 205):  # odd seeds: the background destage of full logs is on
        moments: list[float] = []

        def whole_run(times):  # the whole run is over: keep its moments, cut the next at once
            moments.extend(between)
            return times["start"]

        between.clear()
        crash_and_check("mcd", 0.5, seed=seed, crash_at=whole_run)
        assert moments, seed
        for moment in moments[:: max(1, len(moments) // 3)][:3]:
            # The next log's marker takes milliseconds of disk time: cut just after the first.
            problems, _stats, oracle, _recovered = crash_and_check("mcd", 0.5, seed=seed,
                                                                   crash_at=lambda times: moment + 1e-6)
            assert not problems, (seed, moment, problems[:3])
            assert oracle.durable_writes > 0
            checked += 1
    assert checked >= 3
