"""md's levels as architectures: md-raid0, md-raid1, md-raid5, md-raid10.

The real kernel md driver builds these, with mdadm's defaults (raidlab.baselines.mdadm),
on the lab's emulated member disks: natively where the kernel has md, otherwise in the lab
VM. So there is no engine builder here: the service's md host runs mdadm
(raidlab.service.hosts.md). Options are mdadm's (`layout`, `assume_clean`, and raid5's
`journal`, the size of a write-journal drive after the members, as the engine's raid5 has).

In the campaigns: the crash test runs md's raid1, raid5 (also in the papers' world, where no
drive gets a flush or FUA, and with its write journal) and raid10 in the lab VM over the same
emulated drives, the kernel's own contract. Fresh images are all zeros, so parity and copies
already agree: --assume-clean skips an initial resync that would change nothing. md-raid5
runs the write-hole campaign without and with its journal. The fault campaign fails no md
drive (faulttest injects drive faults under the engine's hosts, not under md).
"""

from __future__ import annotations

from raidlab.archs.base import Architecture, Config, CrashPreset, Family, Option, WriteHoleCase
from raidlab.archs.layouts import journal_bytes
from raidlab.baselines import mdadm
from raidlab.errors import CapabilityError, UsageError

MIN_MEMBER_BYTES = 8 << 20

# The md family: served by the md host, natively where the kernel has md and mdadm is there.
FAMILY = Family("md", {"native": "native-md", "vm": "vm"})
CLEAN = {"assume_clean": True}

# The campaigns, by level: crash presets (name suffix, members, options, flush world) and write-hole cases.
CRASH = {
    1: (("", 2, CLEAN, "honoured"),),
    5: (("", 4, CLEAN, "honoured"), ("-paper-world", 4, CLEAN, "dropped"),
        ("-journal", 4, {**CLEAN, "journal": "4M"}, "honoured")),
    10: (("", 4, CLEAN, "honoured"),),
}
WRITE_HOLE = {5: (("", CLEAN), ("-journal", {**CLEAN, "journal": "4M"}))}


def check(config: Config, runner: str) -> None:
    mdadm.check_md_config(config.arch, config.disks, config.chunk, dict(config.options))
    journal_bytes(config.options)
    if config.disk_size < MIN_MEMBER_BYTES:
        raise UsageError(f"md members of {config.disk_size} bytes are too small", hint="use --disk-size 8M or more")
    if runner == "native" and not mdadm.kernel_has_md():
        raise CapabilityError("this kernel has no md driver (/proc/mdstat is missing), so mdadm cannot "
                              "build an array here", hint="use --runner vm (md runs in the lab VM)",
                              capability="md")


OPTIONS = (Option("layout", None, "md's layout (raid5: left-symmetric ...; raid10: n2, f2, o2 ...)"),
           Option("assume_clean", False, "skip the initial resync (mdadm --assume-clean)"),
           Option("journal", None, "md-raid5: a write journal of this size on one more drive "
                                   "(mdadm --write-journal); e.g. journal=16M"))

ARCHITECTURES = tuple(
    Architecture(name=name, family=FAMILY.name, summary=f"kernel md RAID {level} built by mdadm (the baseline)",
                 source="Linux md, mdadm's defaults", options=OPTIONS, runners=("native", "vm"), check=check,
                 crash_presets=tuple(CrashPreset(name + suffix, disks, dict(options), flushes=flushes)
                                     for suffix, disks, options, flushes in CRASH.get(level, ())),
                 fault_cells=(),
                 write_hole_cases=tuple(WriteHoleCase(name + suffix, dict(options), runner="vm")
                                        for suffix, options in WRITE_HOLE.get(level, ())))
    for name, level in mdadm.LEVELS.items()
)
