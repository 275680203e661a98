"""VC-RAID crash recovery (He & Yang §3.4) on the virtual clock, scd and mcd, with either
destage order: LWFD (the paper's) or oldest-first (the ablation, whose log is circular).

Same method as test_dcd_crash (its Oracle, workload and Rig): cut the trio run at a chosen
virtual time, rebuild with `assemble_vcraid` over the same images (which writes everything
not yet destaged from the cache disk headers to the raid5 before use), and check every
sector against what was acknowledged as durable (FUA writes, writes before a completed
flush). VC-RAID acknowledges other writes from its RAM buffer (immediate report).
"""

from __future__ import annotations

import collections

import pytest
import trio

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
                    destage_order="lwfd"):
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
        times["start"] = trio.current_time()
        await workload(vc, oracle, seed, ops=ops, region=region, sync_writes=False)
        times["end"] = trio.current_time()
        return vc.statistics()

    stats = rig.run(work, seed=seed)
    for n, b in rig.backends.items():
        b.pwrite(0, image[n])
    oracle.__init__()
    rig.run(work, crash_at=times["start"] + fraction * (times["end"] - times["start"]), seed=seed)

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
    for counter in exercised:
        assert totals[counter] > 0, counter
