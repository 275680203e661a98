"""The architecture registry: every architecture raidlab builds, each declared once.

`raidlab create`, the array daemon, `raidlab sim`, scenarios, `raidlab crashtest` and
`raidlab doctor` all look architectures up here, so an id, its options and its checks mean
the same everywhere. Each family's module declares its architectures (raidlab.archs.base
says what a declaration holds):

    raidlab.archs.layouts   engine layouts: raid0, raid1, raid10, raid5, chained, raidx, sa1-3
    raidlab.archs.dcd       dcd
    raidlab.archs.vcraid    vcraid (raidlab.archs.caching: the options both caching ids share)
    raidlab.archs.tss       tss
    raidlab.archs.md        md-raid0, md-raid1, md-raid5, md-raid10 (kernel md, the baselines),
                            md-raid5-wb, md-raid5-ppl
    raidlab.archs.kcache    dm-writecache, bcache, dm-cache (the kernel's caches, in the lab VM)
    raidlab.archs.disk      disk (one drive; virtual time only)

Adding an architecture: its mechanism in raidlab.engine (a layout in engine/layouts needs
nothing more: archs.layouts declares every layout), its declaration in one of these modules
(or a new one), and one line in FAMILIES below (docs/adding-an-architecture.md). A module
that fails to import is an error naming it, never a silent omission: the import below is
not guarded. Every module of FAMILIES names its `Family` (FAMILY); an architecture of an
undeclared family, a live runner its family has no doctor runner for, an architecture that
runs live and says nothing of the crash and fault campaigns, and a campaign name declared
twice are errors when the registry is built.

Other modules ask the registry (`get`, `names`, `family`, `REGISTRY`), never compare an id:
tests/unit/test_registry_owns_ids.py holds the tree to that.
"""

from __future__ import annotations

import difflib
from typing import Any

from raidlab.archs import dcd, disk, kcache, layouts, md, tss, vcraid
from raidlab.archs.base import (LIVE, RUNNERS, VIRTUAL, Architecture, BuildContext, Built, Config, CrashPreset,
                                DamageTarget, Drive, Family, FaultCell, Option, Peaks, WriteHoleCase)
from raidlab.errors import UsageError

# In the order `raidlab archs` and `raidlab create --help` list them.
FAMILIES = (layouts, dcd, vcraid, tss, md, kcache, disk)

REGISTRY: dict[str, Architecture] = {}
for _family in FAMILIES:
    for _arch in _family.ARCHITECTURES:
        if _arch.name in REGISTRY:
            raise RuntimeError(f"architecture {_arch.name!r} is declared twice ({_family.__name__})")
        REGISTRY[_arch.name] = _arch

FAMILY_OF: dict[str, Family] = {_family.FAMILY.name: _family.FAMILY for _family in FAMILIES}


def check_declarations(registry: dict[str, Architecture], families: dict[str, Family]) -> None:
    """Refuse (RuntimeError), naming it, an architecture whose family is not declared, a live
    runner its family has no doctor runner for, a live architecture whose family names no
    host, a live architecture silent on the crash and fault campaigns, and a campaign entry
    declared twice."""
    for arch in registry.values():
        family = families.get(arch.family)
        if family is None:
            raise RuntimeError(f"architecture {arch.name!r} is of the family {arch.family!r}, which no module of "
                               f"raidlab.archs.FAMILIES declares")
        live = [runner for runner in arch.runners if runner != "sim"]
        missing = [runner for runner in live if runner not in family.doctor_runners]
        if missing:
            raise RuntimeError(f"architecture {arch.name!r} runs on {missing[0]}, for which its family "
                               f"{family.name!r} names no doctor runner")
        if live and family.host is None:
            raise RuntimeError(f"architecture {arch.name!r} runs live, and its family {family.name!r} names no "
                               f"host to serve it (raidlab.archs.base.Family)")
        if live and (arch.crash_presets is None or arch.fault_cells is None):
            what = "crash presets" if arch.crash_presets is None else "fault cells"
            raise RuntimeError(f"architecture {arch.name!r} runs live and declares no {what}: give them, or () "
                               f"to leave it out of the campaign (raidlab.archs.base.Architecture)")
    for field in ("crash_presets", "fault_cells", "damage_targets", "write_hole_cases"):
        seen: dict[str, str] = {}
        for arch in registry.values():
            for entry in getattr(arch, field) or ():
                if entry.name in seen:
                    raise RuntimeError(f"{field} entry {entry.name!r} is declared by {seen[entry.name]!r} and "
                                       f"{arch.name!r}")
                seen[entry.name] = arch.name


check_declarations(REGISTRY, FAMILY_OF)


def names(runner: str | None = None) -> list[str]:
    """Every architecture id, or those that run on `runner` (native, vm, sim)."""
    return [a.name for a in REGISTRY.values() if runner is None or runner in a.runners]


def get(name: str, runner: str | None = None) -> Architecture:
    """The architecture `name`, or a UsageError naming the known ids (for `runner`, if given),
    the closest ones first when the name looks like a misspelling of one."""
    arch = REGISTRY.get(name)
    if arch is None or (runner is not None and runner not in arch.runners):
        known = names(runner)
        where = "" if arch is None else f" on the {runner} runner"
        close = _close_to(name, known)
        listing = f"{f'the {runner} runner runs' if runner else 'architectures'}: {', '.join(known)}"
        raise UsageError(f"unknown architecture {name!r}{where}",
                         hint=f"did you mean {' or '.join(close)}? ({listing})" if close else listing,
                         arch=name, known=known, close=close)
    return arch


def family(name: str) -> Family:
    """The family `name` (every registered architecture's is declared)."""
    try:
        return FAMILY_OF[name]
    except KeyError:
        raise UsageError(f"unknown architecture family {name!r}", hint=f"families: {', '.join(FAMILY_OF)}") from None


def of_family(name: str) -> list[Architecture]:
    """The architectures of family `name`, in the registry's order."""
    return [arch for arch in REGISTRY.values() if arch.family == name]


def _close_to(name: str, known: list[str]) -> list[str]:
    """The ids `name` may be a misspelling of: difflib's closest, and any other nearly as close."""
    spelt = name.lower()
    close = difflib.get_close_matches(spelt, known, n=3, cutoff=0.5)
    if not close:
        return []
    best = difflib.SequenceMatcher(None, spelt, close[0]).ratio()
    return [c for c in close if difflib.SequenceMatcher(None, spelt, c).ratio() >= best - 0.1]


def validate(name: str, disks: int | None, disk_size: int | None, chunk: int | None, options: dict[str, Any],
             runner: str = "native", disk_model: str = "none", partitions: str | None = None) -> Architecture:
    """Refuse an impossible configuration for `runner` before anything is started. An id
    that is no architecture at all is refused with those that run on `runner`; one that
    exists but runs elsewhere says where it runs."""
    arch = REGISTRY.get(name) or get(name, runner)
    arch.validate(Config(name, disks, disk_size, chunk, dict(options), disk_model, partitions=partitions), runner)
    return arch


__all__ = ["FAMILIES", "FAMILY_OF", "LIVE", "REGISTRY", "RUNNERS", "VIRTUAL", "Architecture", "BuildContext", "Built",
           "Config", "CrashPreset", "DamageTarget", "Drive", "Family", "FaultCell", "Option", "Peaks", "WriteHoleCase",
           "family", "get", "names", "of_family", "validate"]
