"""Caching architectures: a RAM buffer and log cache-disk(s) in front of slower storage.

log.py      the cache-disk log both share: records with summary sectors, LWFD pops,
            tombstones, the recovery scan
destage.py  when both destage: the idle detector, the forced destage, log writes in progress
activity.py the request bookkeeping both share: idleness, counters, background tasks
dcd.py      DCD, Disk Caching Disk (Hu & Yang, ISCA 96): RAM buffer + cache-disk + data disk
vcraid.py   VC-RAID (He & Yang): RAM buffer + cache disk(s) in front of the engine's RAID5

Each architecture is a BlockTarget built by `create_*` (new) or `assemble_*` (after a stop
or a crash) and started with `start(nursery)`, which runs its background tasks (log writer,
idle detector, destage) in the caller's nursery, under the live or the virtual clock.
"""

from raidlab.engine.caches.dcd import DCD, assemble_dcd, create_dcd
from raidlab.engine.caches.vcraid import VCRAID, assemble_vcraid, create_vcraid

__all__ = ["DCD", "create_dcd", "assemble_dcd", "VCRAID", "create_vcraid", "assemble_vcraid"]
