"""The hosts that serve an architecture in the array daemon, one per family.

One daemon per array (raidlab.service.daemon) owns the lab (FUSE mount, member disks, loop
device, control socket); what it serves is built by the host of the architecture's family
(the family comes from the registry, raidlab.archs):

* engine (raid0 ... sa3): an Array over the member disks, exported as `volume`;
* cache (dcd, vcraid): RAM buffer + cache disk(s) in front of a data disk or an engine raid5;
* tss: a TSS device (RAID1 / RAID5 / cRAID5 stripes under one map table), exported as
  `volume`, with the paper's ioctls as control operations;
* md (md-raid0 ... md-raid10, md-raid5-wb, md-raid5-ppl): mdadm over loop devices on the
  lab's `disks/dK` files, natively or in the lab VM;
* kcache (dm-writecache, bcache, dm-cache): the kernel's caches, built in the lab VM by
  dmsetup, make-bcache and mdadm over the same files.

Each host class provides

    __init__(daemon)
    async open(session, mode) -> dict          build or assemble; push cleanups on the session;
                                               return {"device", "capacity", "state", ...}
    async op_status(request, send) -> dict     and any other op_NAME(request, send) it supports
    async settle() -> dict                     cold start before a benchmark (the daemon's op_settle):
                                               what the array holds back written home, the drives
                                               flushed; {"drained_bytes", "note"}
    vm_disks() -> list[Path]                   (optional) the devices a lab VM runner attaches
    fs                                         (optional) the BlockExportFS serving `volume`,
                                               for the daemon's capture op
"""

from __future__ import annotations

import importlib

from raidlab import archs
from raidlab.errors import UsageError


def host_class(arch: str):
    """The host class that serves `arch` live (its family's declared host, imported here: a
    daemon loads its own family's host only), or UsageError naming the known ids (or saying
    that no host serves its family: one that runs in virtual time only)."""
    family = archs.family(archs.get(arch).family)
    if family.host is None:
        raise UsageError(f"{arch} has no live host: its family {family.name!r} runs in virtual time only",
                         hint="run it with `raidlab sim`")
    module, _, name = family.host.partition(":")
    return getattr(importlib.import_module(module), name)
