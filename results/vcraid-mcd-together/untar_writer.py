"""scd against mcd in virtual time, an untar-like synchronous writer: 6,000 files of 1-32 KiB
written sequentially in 4 KiB FUA writes (each acknowledged once on a cache disk, as under
a `sync` mount in the paper's durability mode), each file followed by a FUA write of its
inode-table block and of its directory block. Through a 1 MiB RAM buffer and 16 MiB of
cache disk (scd: one Maxtor 91020D6; mcd: 8 MiB on a 91366U4 and 8 MiB on a 91020D6) in
front of the engine's raid5 over VC-RAID's four Table 1 SCSI drives. About 57 MB pass the
log, so it is destaged in background batches while the writer goes on. Prints the
writer's time and what the array was sent: its write count, mean write size, full-stripe
writes and stripe-lock waits. Run from the repository root:
    .venv/bin/python results/vcraid-mcd-together/untar_writer.py scd mcd
"""
import random
import sys

sys.path.insert(0, "tests/unit")
sys.path.insert(0, "results/vcraid-mcd-turn")

import trio
from sync_writer import rig, started_vcraid
from virtual_disks import run_in_nursery

KiB, MiB = 1024, 1 << 20


def experiment(config, files=6000, cache_total=16 * MiB, seed=1):
    members, caches = rig(config, cache_total, member_bytes=256 * MiB)
    rng = random.Random(seed)

    async def body(nursery):
        vc = await started_vcraid(config, members, caches, nursery)
        before = vc.statistics()["array"]
        started = trio.current_time()
        data = 16 * MiB
        for f in range(files):
            size = rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 24, 32]) * KiB
            for off in range(0, size, 4 * KiB):
                n = min(4 * KiB, size - off)
                await vc.write(data + off, bytes(n), fua=True)
            data += size
            await vc.write((f // 8) * KiB, bytes(KiB), fua=True)  # inode table block
            await vc.write((8 * MiB) + (f // 64) * KiB, bytes(KiB), fua=True)  # directory block
        return trio.current_time() - started, vc.statistics(), before

    return run_in_nursery(body, members + caches, seed=seed)


if __name__ == "__main__":
    for config in sys.argv[1:]:
        secs, st, b = experiment(config)
        a = st["array"]
        w = a["writes"] - b["writes"]
        by = a["bytes_written"] - b["bytes_written"]
        print(config, f"{secs:.2f} s", "array writes", w, "mean KiB", round(by / w / 1024, 2),
              "full stripes", a["full_stripe_writes"] - b["full_stripe_writes"],
              "lock waits", a["stripe_lock_waits"] - b["stripe_lock_waits"],
              {k: st[k] for k in ("level2_watermark_periods", "level2_watermark_batches", "level2_forced",
                                  "level2_bytes", "level1_per_disk")},
              "batches together", st.get("level2_batches_together", 0), flush=True)
