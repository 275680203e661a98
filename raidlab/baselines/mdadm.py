"""mdadm command lines and the parsing of what md reports. Pure functions: the same argv
runs natively (raidlab.tools.base.run) and in the lab VM (as a shell line), and the same
parsers read /proc/mdstat and `mdadm --detail` from either place.

Why mdadm's defaults are kept: the papers compare with "Linux software RAID" as shipped, so
the baseline is whatever mdadm chooses (metadata 1.2, chunk 512 KiB, raid5 left-symmetric,
raid10 n2) unless a scenario names a chunk or layout. The chunk is passed only when it
differs from md's default, so the recorded command line says exactly what was chosen.
"""

from __future__ import annotations

import re
from pathlib import Path

from raidlab.baselines import sysfs
from raidlab.errors import UsageError

MD_DEFAULT_CHUNK = 512 * 1024
LEVELS = {"md-raid0": 0, "md-raid1": 1, "md-raid5": 5, "md-raid10": 10, "md-raid5-wb": 5, "md-raid5-ppl": 5}
MIN_DISKS = {0: 2, 1: 2, 5: 3, 10: 2}
RAID5_LAYOUTS = ("left-asymmetric", "left-symmetric", "right-asymmetric", "right-symmetric",
                 "parity-first", "parity-last")
RAID10_LAYOUT = re.compile(r"^[nof]([2-9])$")
OPTIONS = ("layout", "assume_clean", "journal", "journal_mode", "journal_model", "consistency_policy",
           "stripe_cache_size")
STRIPE_CACHE = (17, 32768)  # what md takes for stripe_cache_size (raid5.c: raid5_set_cache_size)
JOURNAL_MODES = ("write-through", "write-back")
CONSISTENCY_POLICIES = ("resync", "ppl")


def kernel_has_md() -> bool:
    """Whether this kernel has the md driver (it shows /proc/mdstat)."""
    return Path("/proc/mdstat").exists()


def check_md_config(arch: str, disks: int, chunk: int, options: dict) -> None:
    """Refuse what md would refuse (or what raidlab cannot express), naming the fix."""
    if arch not in LEVELS:
        raise UsageError(f"unknown md architecture {arch!r}", hint=f"use one of: {', '.join(LEVELS)}")
    level = LEVELS[arch]
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise UsageError(f"{arch} has no option {unknown[0]!r}", hint=f"options: {', '.join(OPTIONS)}")
    if disks < MIN_DISKS[level]:
        raise UsageError(f"{arch} needs at least {MIN_DISKS[level]} disks, not {disks}")
    if level != 1 and (chunk < 4096 or chunk & (chunk - 1)):
        raise UsageError(f"md chunk size must be a power of two of at least 4K, not {chunk}",
                         hint="e.g. --chunk 64K (md's default is 512K)")
    layout = options.get("layout")
    if layout is not None:
        if level == 5 and layout not in RAID5_LAYOUTS:
            raise UsageError(f"md raid5 has no layout {layout!r}", hint=f"use one of: {', '.join(RAID5_LAYOUTS)}")
        if level == 10:
            match = RAID10_LAYOUT.match(str(layout))
            if not match:
                raise UsageError(f"md raid10 layout {layout!r} is not n2/o2/f2 (or nK/oK/fK)")
            if int(match.group(1)) > disks:
                raise UsageError(f"md raid10 layout {layout} keeps {match.group(1)} copies but there are "
                                 f"only {disks} disks")
        if level in (0, 1):
            raise UsageError(f"{arch} takes no layout option")
    if options.get("assume_clean") not in (None, True, False):
        raise UsageError("assume_clean is true or false")
    journal = options.get("journal") not in (None, "off", False)
    if journal and level != 5:
        raise UsageError(f"{arch} takes no journal option", hint="md's write journal is raid5's (md-raid5)")
    for key in ("journal_mode", "journal_model"):
        if options.get(key) is not None and not journal:
            raise UsageError(f"{arch}: {key} is an option of a write journal, and there is none",
                             hint="give the journal's size too, e.g. -o journal=16M")
    mode = options.get("journal_mode")
    if mode is not None and mode not in JOURNAL_MODES:
        raise UsageError(f"md's journal_mode is {' or '.join(JOURNAL_MODES)}, not {mode!r}")
    size = options.get("stripe_cache_size")
    if size is not None:
        if level != 5:
            raise UsageError(f"{arch} has no stripe cache", hint="stripe_cache_size is md raid5's")
        if isinstance(size, bool) or not str(size).isdigit() or not STRIPE_CACHE[0] <= int(size) <= STRIPE_CACHE[1]:
            raise UsageError(f"md's stripe_cache_size is a number of pages from {STRIPE_CACHE[0]} to "
                             f"{STRIPE_CACHE[1]}, not {size!r}")
    policy = options.get("consistency_policy")
    if policy is not None:
        if level != 5 or policy not in CONSISTENCY_POLICIES:
            raise UsageError(f"{arch}: consistency_policy={policy!r} is not one md raid5 takes here",
                             hint=f"use one of: {', '.join(CONSISTENCY_POLICIES)} (on md-raid5)")
        if policy == "ppl" and journal:
            raise UsageError(f"{arch}: md keeps a partial parity log or a write journal, not both",
                             hint="leave out the journal option, or consistency_policy")


def create_argv(arch: str, md_device: str, members: list[str], chunk: int, options: dict,
                name: str | None = None, journal: str | None = None) -> list[str]:
    """`mdadm --create` for the baseline; defaults left to mdadm (see the header). With
    `journal`, that device is md raid5's write journal (--write-journal: raid5-cache in its
    default write-through mode, every stripe's data and parity logged before the members)."""
    level = LEVELS[arch]
    argv = ["mdadm", "--create", md_device, "--run", f"--level={level}", f"--raid-devices={len(members)}"]
    if level != 1 and chunk != MD_DEFAULT_CHUNK:
        argv.append(f"--chunk={chunk // 1024}K")
    if options.get("layout"):
        argv.append(f"--layout={options['layout']}")
    if options.get("assume_clean"):
        argv.append("--assume-clean")
    if name:
        argv.append(f"--name={name}")
    if journal:
        argv += ["--write-journal", journal]
    if options.get("consistency_policy"):
        argv.append(f"--consistency-policy={options['consistency_policy']}")
    return argv + list(members)


def assemble_argv(md_device: str, members: list[str], *, force: bool = False) -> list[str]:
    """`mdadm --assemble`; `force` starts what md refuses alone (a dirty degraded raid5: its
    parity may not match its data) and marks it clean, as `mdadm --assemble --force` does."""
    return ["mdadm", "--assemble", "--run", *(["--force"] if force else []), md_device, *members]


def stop_argv(md_device: str) -> list[str]:
    return ["mdadm", "--stop", md_device]


def detail_fields(text: str) -> dict[str, str]:
    """`mdadm --detail` key : value lines as a dict (keys as mdadm prints them)."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" : ")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


_PROGRESS = re.compile(r"(resync|recovery|reshape|check|repair)\s*=\s*([\d.]+)%.*?finish=([\d.]+min)?"
                       r"(?:.*?speed=(\d+K/sec))?")


def mdstat_progress(text: str, md_name: str) -> dict | None:
    """What md is doing on `md_name` (e.g. "md0") per /proc/mdstat: {"action", "percent",
    "finish", "speed"}, or None when it is idle. Also "resync=PENDING" / DELAYED."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith(f"{md_name} :"):
            continue
        for follow in lines[i + 1:]:
            if not follow.strip() or re.match(r"^md\d+ :", follow):
                break
            match = _PROGRESS.search(follow)
            if match:
                return {"action": match.group(1), "percent": float(match.group(2)),
                        "finish": match.group(3), "speed": match.group(4)}
            pending = re.search(r"(resync|recovery)\s*=\s*(PENDING|DELAYED)", follow)
            if pending:
                return {"action": pending.group(1), "percent": 0.0, "finish": None, "speed": None}
        return None
    return None


# md's sysfs attributes (/sys/block/mdN/md/NAME) a status shows, where the array has them.
MD_ATTRIBUTES = ("consistency_policy", "journal_mode", "stripe_cache_size", "stripe_cache_active")


def md_attributes(text: str) -> dict[str, str]:
    """MD_ATTRIBUTES as sysfs.read_script printed them (raidlab.baselines.sysfs.parse)."""
    return sysfs.parse(text, MD_ATTRIBUTES)
