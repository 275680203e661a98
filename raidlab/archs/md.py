"""md's levels as architectures: md-raid0, md-raid1, md-raid5, md-raid10, and two raid5s
that are the kernel's descendants of the papers' ideas: md-raid5-wb (a write journal in
write-back mode, VC-RAID's cache disk in front of RAID 5 as md does it) and md-raid5-ppl
(the partial parity log, md's other answer to the write hole).

The real kernel md driver builds these, with mdadm's defaults (raidlab.baselines.mdadm),
on the lab's emulated member disks: natively where the kernel has md, otherwise in the lab
VM. So there is no engine builder here: the service's md host runs mdadm
(raidlab.service.hosts.md). Options are mdadm's (`layout`, `assume_clean`, and raid5's
`journal`, the size of a write-journal drive after the members, as the engine's raid5 has,
with its drive model and mode, and `consistency_policy`).

In the campaigns: the crash test runs md's raid1, raid5 (also in the papers' world, where no
drive gets a flush or FUA, and with its write journal) and raid10 in the lab VM over the same
emulated drives, the kernel's own contract. Fresh images are all zeros, so parity and copies
already agree: --assume-clean skips an initial resync that would change nothing. md-raid5
runs the write-hole campaign without and with its journal, md-raid5-wb with its journal in
write-back mode; md-raid5-wb and md-raid5-ppl run the crash test as md-raid5 does. PPL is
not in the write-hole campaign: md starts a dirty degraded array with PPL and, by its own
documentation (Documentation/driver-api/md/raid5-ppl.rst), does not recover a stripe whose
dirty member was lost, so the campaign's two expectations (refused, or journalled and
whole) fit it neither. The fault campaign fails no md
drive (faulttest injects drive faults under the engine's hosts, not under md).
"""

from __future__ import annotations

from typing import Any

from raidlab.archs.base import Architecture, Config, CrashPreset, Family, Option, WriteHoleCase
from raidlab.archs.layouts import journal_bytes
from raidlab.baselines import mdadm
from raidlab.disks import catalog
from raidlab.errors import CapabilityError, UsageError

MIN_MEMBER_BYTES = 8 << 20

# The md family: served by the md host, natively where the kernel has md and mdadm is there.
FAMILY = Family("md", {"native": "native-md", "vm": "vm"}, host="raidlab.service.hosts.md:MdHost")
CLEAN = {"assume_clean": True}

# The campaigns, by id: crash presets (name suffix, members, options, flush world) and write-hole cases.
# md RAID 0 and RAID 5 are the baselines of VC-RAID's claims, so both are tested in both flush
# worlds: today's (every flush honoured) and the papers' (no drive gets a flush or FUA).
CRASH = {
    "md-raid0": (("", 4, {}, "honoured"), ("-paper-world", 4, {}, "dropped")),
    "md-raid1": (("", 2, CLEAN, "honoured"),),
    "md-raid5": (("", 4, CLEAN, "honoured"), ("-paper-world", 4, CLEAN, "dropped"),
                 ("-journal", 4, {**CLEAN, "journal": "4M"}, "honoured")),
    "md-raid10": (("", 4, CLEAN, "honoured"),),
    "md-raid5-wb": (("", 4, {**CLEAN, "journal": "4M"}, "honoured"),),
    "md-raid5-ppl": (("", 4, CLEAN, "honoured"),),
}
WRITE_HOLE = {"md-raid5": (("", CLEAN), ("-journal", {**CLEAN, "journal": "4M"})),
              "md-raid5-wb": (("", {**CLEAN, "journal": "4M"}),)}
SUMMARIES = {
    "md-raid5-wb": "kernel md RAID 5 with a write journal in write-back mode (VC-RAID's descendant)",
    "md-raid5-ppl": "kernel md RAID 5 with a partial parity log (the write hole closed without a journal drive)",
}

# What md-raid5-wb and md-raid5-ppl are (an option that contradicts one is refused), and
# what they start with: md raid5 with a write journal in write-back mode (raid5-cache: a
# write is acknowledged once it is in the journal, and stripes go home later), and with the
# partial parity log (raid5-ppl).
PRESETS = {"md-raid5-wb": {"journal_mode": "write-back"}, "md-raid5-ppl": {"consistency_policy": "ppl"}}
DEFAULTS = {"md-raid5-wb": {"journal": "16M"}}


def options_of(arch: str, options: dict[str, Any]) -> dict[str, Any]:
    """The options `arch` runs with: its defaults and preset, then what was given."""
    return {**DEFAULTS.get(arch, {}), **PRESETS.get(arch, {}), **options}


def check(config: Config, runner: str) -> None:
    options = options_of(config.arch, dict(config.options))
    preset = PRESETS.get(config.arch, {})
    if preset.get("journal_mode") and options.get("journal") in (None, "off", False):
        raise UsageError(f"{config.arch} is md raid5 with a write journal; journal={options.get('journal')} "
                         f"leaves it none", hint="give the journal's size, e.g. -o journal=16M, or use md-raid5")
    for key, value in preset.items():
        if options.get(key) != value:
            raise UsageError(f"{config.arch} is md raid5 with {key}={value}; {key}={options.get(key)} is another "
                             f"array", hint=f"use md-raid5 for that (with -o {key}=...)")
    mdadm.check_md_config(config.arch, config.disks, config.chunk, options)
    journal_bytes(options)
    if options.get("journal_model") is not None:
        catalog.get(options["journal_model"])
    if config.disk_size < MIN_MEMBER_BYTES:
        raise UsageError(f"md members of {config.disk_size} bytes are too small", hint="use --disk-size 8M or more")
    if runner == "native" and not mdadm.kernel_has_md():
        raise CapabilityError("this kernel has no md driver (/proc/mdstat is missing), so mdadm cannot "
                              "build an array here", hint="use --runner vm (md runs in the lab VM)",
                              capability="md")


OPTIONS = (Option("layout", None, "md's layout (raid5: left-symmetric ...; raid10: n2, f2, o2 ...)"),
           Option("assume_clean", False, "skip the initial resync (mdadm --assume-clean)"))
RAID5_OPTIONS = (Option("journal", None, "a write journal of this size on one more drive (mdadm --write-journal); "
                                         "e.g. journal=16M"),
                 Option("journal_model", None, "the journal drive's catalog model (default: the first member's)"),
                 Option("journal_mode", None, "the journal's mode: write-through (md's default) or write-back"),
                 Option("consistency_policy", None, "resync (md's default) or ppl (mdadm --consistency-policy)"),
                 Option("stripe_cache_size", None, "md's stripe cache, in 4 KiB pages per drive (md: 256; "
                                                   "md's documentation wants it large for a write-back journal)"))


def _options(name: str, level: int) -> tuple[Option, ...]:
    """md's options for `name`, its defaults and presets (mdadm.with_presets) shown as defaults."""
    if level != 5:
        return OPTIONS
    defaults = options_of(name, {})
    return OPTIONS + tuple(Option(o.name, defaults.get(o.name, o.default), o.help) for o in RAID5_OPTIONS)


ARCHITECTURES = tuple(
    Architecture(name=name, family=FAMILY.name,
                 summary=SUMMARIES.get(name, f"kernel md RAID {level} built by mdadm (the baseline)"),
                 source="Linux md, mdadm's defaults", options=_options(name, level), runners=("native", "vm"),
                 check=check,
                 crash_presets=tuple(CrashPreset(name + suffix, disks, dict(options), flushes=flushes)
                                     for suffix, disks, options, flushes in CRASH.get(name, ())),
                 fault_cells=(),
                 write_hole_cases=tuple(WriteHoleCase(name + suffix, dict(options), runner="vm")
                                        for suffix, options in WRITE_HOLE.get(name, ())))
    for name, level in mdadm.LEVELS.items()
)
