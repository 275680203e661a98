"""RAID-x Table 3, "theoretical peak performance of distributed RAID architectures", with
numbers: the paper's formulas evaluated on a disk model.

Table 3 (Hwang, Jin & Ho, §3.3-3.4) gives, for n disks, a file of m blocks, a disk's
bandwidth B and its read and write times per block R and W:

    Max. I/O bandwidth        RAID-10  RAID-5       chained  RAID-x
      read                    nB       nB           nB       nB
      large write             nB       (n-1)B       nB       nB
      small write             nB       (n-1)B/2     nB       nB
    Parallel read/write time
      large read              mR/n     mR/n         mR/n     mR/n
      small read              R        R            R        R
      large write             2mW/n    mW/(n-1)     2mW/n    mW/n + mW/(n(n-1))
      small write             2W       R+W          2W       W
    Max. fault coverage       n/2      1            n/2      1

"The peak I/O bandwidth excludes the effects of caching, software overhead, parity or
mirroring penalties, or network delays" (§3.4), so B, R and W are the disk's alone. Here
they are measured on the disk model through EmulatedDisk on the virtual clock, as `raidlab
disk bench` measures it: B the sequential read rate of the outermost zone in requests of
one block; R and W the mean of isolated random one-block reads and writes over the whole
drive, the write cache off (a write cache would hide W, which the table means to count).

The columns are the architectures' own: each of the four declares its column, heading and
formulas, in the registry (raidlab.archs: `peaks`, raidlab.archs.layouts).
"""

from __future__ import annotations

import random
from typing import Any

from raidlab import archs, sched
from raidlab.disks.backend import MemoryBackend
from raidlab.disks.bench import default_size, random_qd1, sequential_rate, zone_ranges
from raidlab.disks import catalog
from raidlab.disks.disk import EmulatedDisk
from raidlab.sched import run_virtual
from raidlab.errors import UsageError

ARCHS = tuple(arch.name for arch in archs.REGISTRY.values() if arch.peaks is not None)  # Table 3's columns


def disk_figures(model: str, block: int, *, samples: int = 400, seed: int = 1) -> dict[str, float]:
    """B (bytes/s), R and W (s) of one drive of `model` for requests of `block` bytes."""
    spec = catalog.get(model)
    if spec.kind != "hdd":
        raise UsageError(f"Table 3 needs a drive with mechanics, not {model!r} ({spec.kind})",
                         hint="use a catalog hdd model, e.g. maxtor-91020d6")

    async def main() -> dict[str, float]:
        async with sched.open_nursery() as nursery:
            disk = EmulatedDisk("d0", model, MemoryBackend(default_size(spec)), write_cache=False)
            disk.start(nursery)
            rng = random.Random(seed)
            reads = await random_qd1(disk, "read", block, samples, rng)
            writes = await random_qd1(disk, "write", block, samples, rng)
            (outer_start, outer_end) = zone_ranges(disk)[0]
            rate = await sequential_rate(disk, "read", outer_start, min(64 << 20, outer_end - outer_start), block)
            nursery.cancel_scope.cancel()
        return {"B": rate or 0.0, "R": sum(reads) / len(reads), "W": sum(writes) / len(writes)}

    return run_virtual(main)


def table3(n: int, m: int, B: float, R: float, W: float) -> dict[str, dict[str, Any]]:
    """Table 3's cells for n disks and a file of m blocks: bandwidths in bytes/s, times in s."""
    if n < 3 or m < 1:
        raise UsageError(f"Table 3 needs at least 3 disks and one block, not n={n}, m={m}")
    return {name: archs.get(name).peaks.cells(n, m, B, R, W) for name in ARCHS}


def peaks(model: str, n: int, block: int, m: int) -> dict[str, Any]:
    """Everything `raidlab cluster peaks` prints (JSON-able)."""
    figures = disk_figures(model, block)
    return {"disk_model": model, "disks": n, "block_bytes": block, "file_blocks": m, **figures,
            "table": table3(n, m, figures["B"], figures["R"], figures["W"])}
