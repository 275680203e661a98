"""`raidlab status` text every family's host shares, and the drive table (pure).

Each function turns statistics (the mechanisms' `statistics()`, the drives') into the lines
and tables the CLI prints, so the wording is tested without a running array. An
architecture's own lines are its declaration's (the caching architectures': their
`serving`, raidlab.archs.dcd and raidlab.archs.vcraid).

What an array survives is said for its state now, not for the healthy array (`survival`,
raidlab.archs.words, from a layout's failure groups); a layout added later is described
without a word of its own here. The other families say it from what they are: the caching
architectures as their declarations say (`cache_survival`), TSS (one column), md from the
level and the missing slots `mdadm --detail` shows.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from raidlab import archs
from raidlab.archs.words import kib as _kib
from raidlab.archs.words import survival
from raidlab.engine.layouts import create_layout
from raidlab.errors import RaidlabError


def placement_line(placement: list[dict[str, Any]]) -> str:
    """`raidlab status`: where each cache is, e.g. "cache drives: d4 (maxtor-91366u4, 100.0 MiB), ..."
    or "cache partitions: d0-cache on d0 (ibm-dnes-318350) at 1024.0 MiB, 100.0 MiB, ..."."""
    parts = []
    for p in placement:
        if p["whole_drive"]:
            parts.append(f"{p['drive']} ({p['model']}, {_kib(p['bytes'])})")
        else:
            parts.append(f"{p['cache']} on {p['drive']} ({p['model']}) at {_kib(p['offset'])}, {_kib(p['bytes'])}")
    whole = all(p["whole_drive"] for p in placement)
    return ("cache drives: " if whole else "cache partitions: ") + ", ".join(parts)


def write_cache_note(stats: list[dict[str, Any]]) -> str:
    """The drives' write cache in a few words, from their statistics: "write cache on" or
    "write cache off" when all agree, else which drives have it on and which off ("write
    cache on d4, off d0 d1 d2 d3"), and whether the host's flushes reach them at all
    (raidlab.disks.disk: "Flushes"); "" without drives."""
    states = [bool(st.get("write_cache")) for st in stats]
    if not states:
        return ""
    dropped = sum(st.get("flushes_dropped", 0) for st in stats), sum(st.get("fua_dropped", 0) for st in stats)
    world = (f"; flushes and FUA never sent (dropped so far: {dropped[0]} flushes, {dropped[1]} FUA)"
             if any(st.get("flushes_setting") == "dropped" for st in stats) else "")
    if all(states) or not any(states):
        return f"write cache {'on' if states[0] else 'off'}{world}"
    on = " ".join(st["name"] for st, state in zip(stats, states) if state)
    off = " ".join(st["name"] for st, state in zip(stats, states) if not state)
    return f"write cache on {on}, off {off}{world}"


def disks_table(drives: list) -> dict[str, Any]:
    """The drives as a table that fits 80 columns: a model column only when the models
    differ (else the model is in the title), and each drive's state."""
    stats = [d.statistics() for d in drives]
    models = list(dict.fromkeys(st["model"] for st in stats))
    mixed = len(models) > 1
    volatile = any("volatile_cache" in st for st in stats)  # created with --power-loss
    rows = []
    for d, st in zip(drives, stats):
        state = "failed" if getattr(d, "failed", False) or st.get("failed") else "ok"
        rows.append([st["name"], *([st["model"]] if mixed else []), state, st["size"] >> 20, st["reads"],
                     st["writes"], st["flushes"], st["bytes_read"] >> 10, st["bytes_written"] >> 10,
                     f"{st['busy_time']:.3f}",
                     *([st.get("volatile_cache", {}).get("pending_writes", "")] if volatile else [])])
    return {"title": "drives" + ("" if mixed or not models else f" ({models[0]})"),
            "columns": ["drive", *(["model"] if mixed else []), "state", "MiB", "reads", "writes", "flushes",
                        "KiB read", "KiB written", "busy s", *(["unflushed writes"] if volatile else [])],
            "rows": rows}


def tss_survival(columns: int, failed: Iterable[int]) -> str:
    """What a TSS device survives now: one column, whatever its stripes' personalities
    (a RAID1 stripe's two copies lie on physical stripes of opposite polarity, so no column
    holds both halves of a unit; RAID5 and cRAID5 stripes have parity, §3.3 and §3.7)."""
    pairs = [frozenset((a, b)) for a in range(columns) for b in range(a + 1, columns)]
    return survival(pairs, failed, columns, "survives any single column failure (RAID1 copies on stripes of "
                                            "opposite polarity, parity for RAID5 and cRAID5)")


def cache_survival(arch: str, stats: dict[str, Any], placement: list[dict[str, Any]], array: Any = None,
                   mirror_failed: Iterable[int] | None = None) -> str:
    """What the caching architecture `arch` survives now, in its declaration's words
    (raidlab.archs.caching.Serving.survival): from its statistics, where its caches are
    (`placement`), the engine array under it (or None) and the failed sides of its mirrored
    cache disk (None without one)."""
    return archs.get(arch).serving.survival(stats, placement, array, mirror_failed)


_MD_LAYOUT = {"near": "n", "far": "f", "offset": "o"}


def md_missing_slots(detail_text: str) -> set[int]:
    """The RaidDevice slots of `mdadm --detail`'s device table not in active sync: removed,
    faulty, or a spare still rebuilding into the slot."""
    missing = set()
    for line in detail_text.splitlines():
        cols = line.split()
        if len(cols) >= 5 and cols[3].isdigit() and (cols[0] == "-" or cols[0].isdigit()):
            state = " ".join(cols[4:])
            if "active sync" not in state or "rebuilding" in state:
                missing.add(int(cols[3]))
    return missing


def md_survival(fields: dict[str, str], detail_text: str) -> str:
    """What an md array survives now, from `mdadm --detail` (its fields and its device
    table): the level's groups (RAID 1: all members; RAID 4/5: any two; RAID 6: any three;
    RAID 10: md's own copies, which raidlab's raid10 layout places as md does) minus the
    slots that are not in active sync. "" when md's detail is not at hand."""
    name = fields.get("Raid Level", "")
    try:
        n = int(fields.get("Raid Devices", ""))
    except ValueError:
        return ""
    # md's level by number: "raid5" is 5 (the names are md's, RAID levels)
    level = int(name.removeprefix("raid")) if name.startswith("raid") and name[4:].isdigit() else None
    missing = md_missing_slots(detail_text)
    everyone = range(n)
    if level == 0:
        groups = [frozenset((d,)) for d in everyone]
        healthy = "none: any member's failure loses data (RAID 0)"
    elif level == 1:
        groups = [frozenset(everyone)]
        healthy = (f"survives any {n - 1} failures" if n > 2 else "survives any single failure") \
            + " (every member holds every block)"
    elif level in (4, 5, 6):
        size = 3 if level == 6 else 2
        groups = [frozenset(c) for c in itertools.combinations(everyone, size)]
        healthy = "survives any two failures" if level == 6 else "survives any single failure"
    elif level == 10:
        kind, _, copies = fields.get("Layout", "near=2").partition("=")
        try:
            layout = create_layout("raid10", n_disks=n, disk_size=64 * n * 4096, chunk_bytes=4096,
                                   layout=f"{_MD_LAYOUT.get(kind.strip(), 'n')}{copies.strip() or 2}")
        except RaidlabError:
            return ""
        groups, healthy = list(layout.failure_groups()), layout.redundancy.rule
    else:
        return ""
    return survival(groups, missing, n, healthy)
