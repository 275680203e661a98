"""md's levels as architectures: md-raid0, md-raid1, md-raid5, md-raid10.

The real kernel md driver builds these, with mdadm's defaults (raidlab.baselines.mdadm),
on the lab's emulated member disks: natively where the kernel has md, otherwise in the lab
VM. So there is no engine builder here: the service's md host runs mdadm
(raidlab.service.hosts.md). Options are mdadm's (`layout`, `assume_clean`, and raid5's
`journal`, the size of a write-journal drive after the members, as the engine's raid5 has).
"""

from __future__ import annotations

from raidlab.archs.base import Architecture, Config, Option
from raidlab.archs.layouts import journal_bytes
from raidlab.baselines import mdadm
from raidlab.errors import CapabilityError, UsageError

MIN_MEMBER_BYTES = 8 << 20


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
    Architecture(name=name, family="md", summary=f"kernel md RAID {level} built by mdadm (the baseline)",
                 source="Linux md, mdadm's defaults", options=OPTIONS, runners=("native", "vm"), check=check)
    for name, level in mdadm.LEVELS.items()
)
