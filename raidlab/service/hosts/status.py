"""`raidlab status` text for the caching architectures and every family's drive table (pure).

Each function turns statistics (the mechanisms' `statistics()`, the drives') into the lines
and tables the CLI prints, so the wording is tested without a running array.
"""

from __future__ import annotations

from typing import Any

from raidlab.archs.caching import PER_DISK

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
