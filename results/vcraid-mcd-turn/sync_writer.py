"""scd against mcd in virtual time: one writer puts two 1 KiB blocks of a 4 MiB metadata area
and 8 KiB of new data, then flushes (--no-flush: does not), 6,000 times, through a 1 MiB RAM
buffer and 16 MiB of cache disk (scd: one Maxtor 91020D6; mcd: 8 MiB on a 91366U4 and 8 MiB
on a 91020D6) in front of the engine's raid5 over VC-RAID's four Table 1 SCSI drives. About
48 MB pass a 16 MiB log, so the log fills and is destaged in background batches while the
writer goes on: the question is how long the writer waits. Run from the repository root:
    .venv/bin/python results/vcraid-mcd-turn/sync_writer.py [--no-flush] scd mcd
"""
import random
import sys

sys.path.insert(0, "tests/unit")

import trio

from raidlab.disks import EmulatedDisk, MemoryBackend
from raidlab.engine.caches import create_vcraid
from raidlab.engine.caches.log import DEFAULT_LOG_START
from virtual_disks import run_in_nursery

KiB, MiB = 1024, 1 << 20
MEMBERS = ["ibm-dnes-318350", "ibm-dnes-309170", "seagate-st52160n", "seagate-st32151n"]
COUNTERS = ("level2_watermark_periods", "level2_watermark_batches", "level2_forced", "level2_bytes",
            "level1_destages", "level1_per_disk", "idle_periods_found")


def rig(config: str, cache_total: int = 16 * MiB, member_bytes: int = 64 * MiB):
    """VC-RAID's four Table 1 SCSI drives, and its cache disks: scd one Maxtor 91020D6,
    mcd half of `cache_total` on a 91366U4 and half on a 91020D6."""
    members = [EmulatedDisk(f"d{i}", m, MemoryBackend(member_bytes)) for i, m in enumerate(MEMBERS)]
    if config == "scd":
        caches = [EmulatedDisk("c0", "maxtor-91020d6", MemoryBackend(DEFAULT_LOG_START + cache_total))]
    else:
        caches = [EmulatedDisk(f"c{i}", m, MemoryBackend(DEFAULT_LOG_START + cache_total // 2))
                  for i, m in enumerate(["maxtor-91366u4", "maxtor-91020d6"])]
    return members, caches


async def started_vcraid(config: str, members, caches, nursery):
    """A started VC-RAID with a 1 MiB RAM buffer, 1 KiB blocks, the paper's durability."""
    vc = await create_vcraid("v", members, caches, config=config, ram_buffer=1 * MiB,
                             block_size=KiB, durability="paper")
    vc.start(nursery)
    return vc


def experiment(config: str, flush: bool, cache_total: int = 16 * MiB, ops: int = 6000, seed: int = 1):
    members, caches = rig(config, cache_total)
    rng = random.Random(seed)

    async def body(nursery):
        vc = await started_vcraid(config, members, caches, nursery)
        started = trio.current_time()
        data = 0
        for _ in range(ops):
            for _ in range(2):
                await vc.write(rng.randrange(4096) * KiB, bytes(KiB))
            await vc.write((8192 + data) * KiB, bytes(8 * KiB))
            data = (data + 8) % 40000
            if flush:
                await vc.flush()
        return trio.current_time() - started, vc.statistics()

    return run_in_nursery(body, members + caches, seed=seed)


if __name__ == "__main__":
    args = sys.argv[1:]
    flush = "--no-flush" not in args
    for config in [a for a in args if not a.startswith("--")] or ["scd", "mcd"]:
        seconds, stats = experiment(config, flush)
        print(f"{config} {'flush' if flush else 'no-flush'}: {seconds:.2f} s (virtual)",
              {k: stats[k] for k in COUNTERS})
