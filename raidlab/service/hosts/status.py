"""`raidlab status` text for the caching architectures and every family's drive table (pure).

Each function turns statistics (the mechanisms' `statistics()`, the drives') into the lines
and tables the CLI prints, so the wording is tested without a running array.

What an array survives is said for its state now, not for the healthy array: `survival`
works from a layout's failure groups (the sets of members that together hold every copy of
some data, raidlab.engine.layouts) minus the members already failed, so a degraded RAID 5
says that its next failure loses data, a RAID 10 which members now hold a last copy, and a
layout added later is described without a word of its own here. The other families say it
from what they are: VC-RAID as its raid5 and its cache disks, DCD (no copy of anything),
TSS (one column), md from the level and the missing slots `mdadm --detail` shows.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from raidlab.archs.caching import PER_DISK
from raidlab.engine.layouts import create_layout
from raidlab.errors import RaidlabError

KiB, MiB = 1024, 1 << 20


def _kib(n: int) -> str:
    return f"{n / KiB:.0f} KiB" if n < 10 * MiB else f"{n / MiB:.1f} MiB"


def _pct(used: int, total: int) -> str:
    return f"{100 * used / total:.1f}%" if total else "-"


def dcd_report(s: dict[str, Any], opts: dict[str, Any]) -> list[str]:
    """`raidlab status` lines for a DCD (statistics of DCD.statistics())."""
    return [
        f"DCD ({opts['cache']}), report {s['report']}, {'[bold]bypass[/]' if s['bypass'] else 'caching'}; "
        f"idle threshold {opts['idle_threshold'] * 1000:g} ms, destage {opts['destage']}, large writes > {_kib(opts['large_write'])} go to the data disk",
        f"RAM buffer: {_kib(s['ram_used_bytes'])} of {_kib(s['ram_buffer_bytes'])} "
        f"({_pct(s['ram_used_bytes'], s['ram_buffer_bytes'])}); cache-disk log: {_kib(s['cache_disk_used_bytes'])} "
        f"of {_kib(s['cache_disk_bytes'])} ({_pct(s['cache_disk_used_bytes'], s['cache_disk_bytes'])}), "
        f"{s['log_records']} records, {s['cache_disk_blocks_mapped']} sectors mapped",
        f"reads {s['reads']} ({_kib(s['bytes_read'])}); sectors read from RAM {s['read_hits_ram_sectors']}, "
        f"cache-disk {s['read_hits_cache_disk_sectors']}, data disk {s['read_hits_data_disk_sectors']}",
        f"writes {s['writes']} ({_kib(s['bytes_written'])}), flushes {s['flushes']}; large writes to the data disk "
        f"{s['large_writes_to_data_disk']}; log writes {s['log_writes']} ({_kib(s['log_write_bytes'])}); "
        f"waited for a full RAM buffer {s['waited_for_full_buffer']}",
        f"destage (LWFD): {s['destages']} segments ({_kib(s['destaged_bytes'])}), holes dropped "
        f"{s['destage_holes_dropped']}, suspended {s['destages_suspended']}, forced {s['forced_destages']}; "
        f"idle periods found {s['idle_periods_found']}; tombstones {s['tombstones']}; "
        f"recovered at assemble {s['recovered_blocks']} blocks",
    ]


def vcraid_report(s: dict[str, Any], opts: dict[str, Any]) -> list[str]:
    """`raidlab status` lines for a VC-RAID (statistics of VCRAID.statistics())."""
    per_disk = ", ".join(_kib(u) for u in s["cache_disk_used_per_disk"])
    n_caches = len(s["cache_disk_used_per_disk"])
    if s["config"] in PER_DISK:  # the caches sit below the raid5: they count its member requests
        shape = (f"raid5 ({s['array']['state']}) over {n_caches} per-disk caches "
                 + ("sharing one RAM buffer" if s["config"] == "1c" else "with private RAM buffers")
                 + " (counts below are the raid5's requests to its members)")
    else:
        shape = f"raid5 ({s['array']['state']}) behind a RAM buffer and {n_caches} cache disk(s)"
    return [
        f"VC-RAID {s['config']}: {shape}; block {s['block_size']} B, "
        f"idle threshold {opts['idle_threshold'] * 1000:g} ms, destage {opts['destage']}, level-2 segment {_kib(opts['destage_segment'])}",
        f"RAM buffer: {_kib(s['ram_used_bytes'])} of {_kib(s['ram_buffer_bytes'])} "
        f"({_pct(s['ram_used_bytes'], s['ram_buffer_bytes'])}), {s['ram_dirty_blocks']} dirty blocks; "
        f"cache disks: {_kib(s['cache_disk_used_bytes'])} of {_kib(s['cache_disk_bytes'])} "
        f"({_pct(s['cache_disk_used_bytes'], s['cache_disk_bytes'])}; per disk {per_disk}), "
        f"{s['cache_disk_blocks_mapped']} blocks mapped",
        f"reads {s['reads']} ({_kib(s['bytes_read'])}); blocks read from RAM {s['read_hits_ram_blocks']}, "
        f"cache disk {s['read_hits_cache_disk_blocks']}, array {s['read_hits_array_blocks']}",
        f"writes {s['writes']} ({_kib(s['bytes_written'])}), synchronous {s['sync_writes']}, flushes "
        f"{s['flushes']}, partial-block {s['partial_block_writes']}; waited for a full RAM buffer "
        f"{s['waited_for_full_buffer']}",
        f"level-1 destage: {s['level1_destages']} log writes ({_kib(s['level1_bytes'])}), per cache disk "
        f"{'/'.join(str(n) for n in s['level1_per_disk'])}; level-2 destage: {s['level2_destages']} segments ({_kib(s['level2_bytes'])}), "
        f"holes dropped {s['level2_holes_dropped']}, suspended {s['level2_suspended']}, forced {s['level2_forced']}; "
        f"idle periods found {s['idle_periods_found']}; recovered at assemble {s['recovered_blocks']} blocks",
    ]


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


def _drives(indices: Iterable[int], word: str = "or") -> str:
    """"d2", "d0 or d2", "d0, d1 or d3" (or with `word` "and")."""
    names = [f"d{i}" for i in sorted(indices)]
    return f"{', '.join(names[:-1])} {word} {names[-1]}" if len(names) > 1 else "".join(names)


def survival(groups: Iterable[Iterable[int]], failed: Iterable[int], members: int, healthy: str = "") -> str:
    """What an array whose failure groups are `groups` survives with `failed` members gone,
    in words: `healthy` (the layout's own rule) when nothing has failed; past that, how many
    more failures any member may have while copies remain (a RAID 1 of three), which
    members now hold a last copy where only some do (RAID 10, chained), "none: the next
    failure loses data" where every member does (a RAID 5 with one member gone), and
    "none: data is lost" when some data had no member left."""
    failed_set = frozenset(failed)
    groups = [frozenset(g) for g in groups]
    remaining = [g - failed_set for g in groups]
    gone = f"{_drives(failed_set, 'and')} failed"
    if any(not rest for rest in remaining):
        them = "them" if len(failed_set) > 1 else "it"
        return f"none: data is lost ({gone}; some data cannot be read or rebuilt without {them})"
    if not failed_set:
        more = min((len(g) for g in groups), default=members + 1) - 1
        return healthy or (f"survives any {more} failure{'s' if more > 1 else ''}" if more else
                           "none: any failure loses data")
    more = min(len(rest) for rest in remaining) - 1
    if more >= 1:
        return f"survives any {'one' if more == 1 else more} more failure{'s' if more > 1 else ''} ({gone})"
    last = frozenset().union(*(rest for rest in remaining if len(rest) == 1))
    spare = frozenset(range(members)) - failed_set - last
    if not spare:
        return f"none: the next failure loses data ({gone})"
    holds = "holds the last copy" if len(last) == 1 else "hold the last copies"
    return (f"the next failure loses data if it is {_drives(last)}, not if it is {_drives(spare)} "
            f"({gone}: {_drives(last, 'and')} {holds} of some data)")


def tss_survival(columns: int, failed: Iterable[int]) -> str:
    """What a TSS device survives now: one column, whatever its stripes' personalities
    (a RAID1 stripe's two copies lie on physical stripes of opposite polarity, so no column
    holds both halves of a unit; RAID5 and cRAID5 stripes have parity, §3.3 and §3.7)."""
    pairs = [frozenset((a, b)) for a in range(columns) for b in range(a + 1, columns)]
    return survival(pairs, failed, columns, "survives any single column failure (RAID1 copies on stripes of "
                                            "opposite polarity, parity for RAID5 and cRAID5)")


def cache_survival(arch: str, stats: dict[str, Any], placement: list[dict[str, Any]], array: Any = None,
                   mirror_failed: Iterable[int] | None = None) -> str:
    """What a DCD or a VC-RAID survives now. A DCD keeps one copy of everything (its data
    disk, its cache-disk's log). A VC-RAID is its raid5 (`survival` of the raid5 `array`,
    state and all) and its cache disks: a mirrored cache disk (`mirror_failed`: the sides
    gone) survives one side; any other cache disk or partition is the only copy of what its
    log holds until level 2 takes it home (stats: the bytes in the logs now)."""
    logged = stats.get("cache_disk_used_bytes", 0)
    held = f"{_kib(logged)} in the log now"
    if arch == "dcd":
        if len(placement) == 1 and not placement[0]["whole_drive"]:
            return f"none: one drive holds the data and the cache-disk log ({held})"
        return f"none: the data disk and the cache-disk each hold the only copy of some data ({held})"
    parts = []
    if array is not None:
        layout = array.layout
        members = f"d0-d{layout.n_disks - 1}"
        parts.append(f"raid5 ({members}): " + survival(layout.failure_groups(), array.failed, layout.n_disks,
                                                      layout.redundancy.rule))
    if mirror_failed is not None:
        sides = [p["drive"] for p in placement[:2]]
        gone = sorted(set(mirror_failed))
        if not gone:
            parts.append(f"cache disk mirrored on {' and '.join(sides)}: survives one side's failure")
        elif len(gone) == 1:
            left = sides[1 - gone[0]] if len(sides) == 2 else "the other side"
            parts.append(f"cache disk: none left: {sides[gone[0]] if len(sides) == 2 else 'one side'} failed, "
                         f"a failure of {left} loses the writes not yet home ({held})")
        else:
            parts.append("cache disk: both sides failed: the writes not yet home are lost")
        return "; ".join(parts)
    whole = [p["drive"] for p in placement if p["whole_drive"]]
    on_members = [p["drive"] for p in placement if not p["whole_drive"]]
    if whole:
        parts.append(f"cache disk{'s' if len(whole) > 1 else ''} {', '.join(whole)}: no copy, "
                     f"{'each' if len(whole) > 1 else 'its'} failure loses the writes not yet home ({held})")
    if on_members:
        parts.append(f"cache partitions on {', '.join(on_members)}: no copy, a failure of their drive loses the "
                     f"writes its log holds that are not yet home ({held})")
    return "; ".join(parts)


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
    level = fields.get("Raid Level", "")
    try:
        n = int(fields.get("Raid Devices", ""))
    except ValueError:
        return ""
    missing = md_missing_slots(detail_text)
    everyone = range(n)
    if level == "raid0":
        groups = [frozenset((d,)) for d in everyone]
        healthy = "none: any member's failure loses data (RAID 0)"
    elif level == "raid1":
        groups = [frozenset(everyone)]
        healthy = (f"survives any {n - 1} failures" if n > 2 else "survives any single failure") \
            + " (every member holds every block)"
    elif level in ("raid4", "raid5", "raid6"):
        size = 3 if level == "raid6" else 2
        groups = [frozenset(c) for c in itertools.combinations(everyone, size)]
        healthy = "survives any two failures" if level == "raid6" else "survives any single failure"
    elif level == "raid10":
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
