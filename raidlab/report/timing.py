"""Where a run's time went, and what the caches did: the tables that explain a result.

Each live run document keeps the array's account before the workload and after the run
(`array_status_before`, `array_status`): the CPU time of the array's daemon on the host and
of the lab VM's QEMU, and each drive's busy time (the emulated mechanism's service time).
The difference is what the workload itself cost. Read against the run's wall time it says
where a slow repetition spent it: in the guest's emulated CPU (TCG), in the engine, or in
the drives. For the caching architectures (VC-RAID, DCD) the same difference of their
statistics gives the counters that explain a cached result: how many cache-disk reads a
block hit cost, how the log was destaged (idle periods, background batches at the high
watermark, forced in the write path), and what the cold start drained before the workload.

Means over the repetitions that succeeded, per architecture and case; a run without the
needed accounts (virtual time, or an older document) leaves its cell empty rather than 0.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from raidlab import archs
from raidlab.archs.caching import FAMILY as CACHE_FAMILY
from raidlab.runners import speed as speedmod

TIME_COLUMNS = ["case", "arch", "runs", "wall s", "guest CPU s", "engine CPU s", "busiest drive",
                "its busy s", "all drives busy s", "of it seek s", "of it rotation s"]
# A run during which the hypervisor took more than this share of the host's CPU time is named.
STEAL_FLAG = 0.10
SPEED_COLUMNS = ["run", "started", "host µs/loop", "runner µs/loop", "host steal %", "lab VM boot s"]
CACHE_COLUMNS = ["case", "arch", "runs", "cache-disk block hits", "cache-disk reads per hit",
                 "destages", "idle periods / watermark batches / forced destages", "forced share",
                 "MiB destaged", "cold start drained MiB"]


def _cpu(status: dict | None, who: str) -> float | None:
    cpu = (status or {}).get("cpu") or {}
    part = cpu.get(who)
    if not isinstance(part, dict):
        return None
    return float(part.get("user_s", 0.0)) + float(part.get("system_s", 0.0))


def _busy(status: dict | None) -> dict[str, float] | None:
    """Drive name -> busy seconds: from a table of the status with "drive" and "busy s"
    columns (md, the caches, TSS), or from its statistics' members (the engine's arrays)."""
    for table in (status or {}).get("tables") or []:
        cols = table.get("columns") or []
        if "drive" not in cols or "busy s" not in cols:
            continue
        i, j = cols.index("drive"), cols.index("busy s")
        out = {}
        for row in table.get("rows") or []:
            try:
                out[str(row[i])] = float(row[j])
            except (TypeError, ValueError, IndexError):
                continue
        return out
    members = ((status or {}).get("statistics") or {}).get("members")
    if isinstance(members, list) and members and all(isinstance(m, dict) and "busy_time" in m for m in members):
        return {str(m.get("name", k)): float(m["busy_time"]) for k, m in enumerate(members)}
    return None


def _split(status: dict | None) -> dict[str, dict[str, float]]:
    """Drive name -> its busy time by part (raidlab.disks: "seek", "rotation", ...), for
    every emulated drive in the status's statistics, wherever the architecture nests it
    (an array's members, a cache's cache disks); a partition has none of its own, its
    drive's is counted once."""
    found: dict[str, dict[str, float]] = {}

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            split = x.get("busy_split")
            if isinstance(split, dict) and "name" in x:
                found.setdefault(str(x["name"]), {k: float(v) for k, v in split.items()
                                                  if isinstance(v, (int, float))})
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(_stats(status))
    return found


def _delta(after: float | None, before: float | None) -> float | None:
    if after is None:
        return None
    return after - (before or 0.0)


def run_time(run: dict[str, Any]) -> dict[str, Any]:
    """The workload's account of one run: wall, guest and engine CPU, drive busy seconds."""
    after, before = run.get("array_status"), run.get("array_status_before")
    busy_after, busy_before = _busy(after), _busy(before) or {}
    busy = None if busy_after is None else {d: s - busy_before.get(d, 0.0) for d, s in busy_after.items()}
    split_after, split_before = _split(after), _split(before)

    def part(name: str) -> float | None:
        if not split_after:
            return None
        return sum(p.get(name, 0.0) - split_before.get(d, {}).get(name, 0.0) for d, p in split_after.items())

    return {
        "wall": run.get("seconds"),
        "guest_cpu": _delta(_cpu(after, "vm"), _cpu(before, "vm")),
        "engine_cpu": _delta(_cpu(after, "daemon"), _cpu(before, "daemon")),
        "busy": busy,
        "seek": part("seek"),
        "rotation": part("rotation"),
    }


def _stats(status: dict | None) -> dict[str, Any]:
    return ((status or {}).get("statistics") or {}) if isinstance((status or {}).get("statistics"), dict) else {}


def _counter(stats: dict, *keys: str) -> float | None:
    for key in keys:
        if isinstance(stats.get(key), (int, float)) and not isinstance(stats.get(key), bool):
            return float(stats[key])
    return None


def run_cache(run: dict[str, Any]) -> dict[str, Any] | None:
    """The cache counters of one run of a caching architecture, VC-RAID or DCD (None for the
    other families). Each counter is the first of its names the statistics hold: VC-RAID's
    (level-2 destage, blocks) or DCD's (destage, sectors)."""
    after, before = _stats(run.get("array_status")), _stats(run.get("array_status_before"))
    arch = archs.REGISTRY.get(after.get("arch"))
    if arch is None or arch.family != CACHE_FAMILY.name:
        return None

    def d(*keys: str) -> float | None:
        return _delta(_counter(after, *keys), _counter(before, *keys))

    bytes_key = ("level2_bytes", "destaged_bytes")
    cold = run.get("cold_start") or {}
    return {
        "hits": d("read_hits_cache_disk_blocks", "read_hits_cache_disk_sectors"),
        "reads": d("cache_disk_reads"),
        "idle": d("idle_periods_found"),
        "background": d("level2_watermark_batches", "watermark_batches"),
        "forced": d("level2_forced", "forced_destages"),
        "destages": d("level2_destages", "destages"),
        "destaged": d(*bytes_key),
        "drained": float(cold["drained_bytes"]) if isinstance(cold.get("drained_bytes"), (int, float)) else None,
    }


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


def _fmt(x: float | None, digits: int = 1) -> str:
    if x is None:
        return ""
    return f"{x:,.{digits}f}"


def _groups(runs: list[dict], scenario: Any) -> list[tuple[str, str, list[dict]]]:
    out = []
    for case in scenario.cases:
        for arch in scenario.archs:
            mine = [r for r in runs if r.get("arch") == arch.label and r.get("case") == case.name
                    and r.get("status") == "ok"]
            if mine:
                out.append((case.name, arch.label, mine))
    return out


def time_rows(runs: list[dict], scenario: Any) -> list[list[str]]:
    """One row per (case, arch) with live accounts: TIME_COLUMNS."""
    rows = []
    for case, label, mine in _groups(runs, scenario):
        times = [run_time(r) for r in mine]
        if all(t["guest_cpu"] is None and t["engine_cpu"] is None and t["busy"] is None for t in times):
            continue
        drives: dict[str, list[float]] = {}
        for t in times:
            for name, s in (t["busy"] or {}).items():
                drives.setdefault(name, []).append(s)
        means = {name: statistics.fmean(v) for name, v in drives.items()}
        busiest = max(means, key=means.get) if means else None
        rows.append([case, label, str(len(mine)), _fmt(_mean(t["wall"] for t in times)),
                     _fmt(_mean(t["guest_cpu"] for t in times)), _fmt(_mean(t["engine_cpu"] for t in times)),
                     busiest or "", _fmt(means.get(busiest)) if busiest else "",
                     _fmt(sum(means.values())) if means else "",
                     _fmt(_mean(t["seek"] for t in times)), _fmt(_mean(t["rotation"] for t in times))])
    return rows


def cache_rows(runs: list[dict], scenario: Any) -> list[list[str]]:
    """One row per (case, arch) of a caching architecture: CACHE_COLUMNS."""
    rows = []
    for case, label, mine in _groups(runs, scenario):
        counters = [c for c in (run_cache(r) for r in mine) if c is not None]
        if not counters:
            continue

        def m(key: str) -> float | None:
            return _mean(c[key] for c in counters)

        hits, reads = m("hits"), m("reads")
        per_hit = reads / hits if hits and reads is not None else None
        forced, destages = m("forced"), m("destages")
        share = forced / destages if destages and forced is not None else None
        mib = (lambda x: None if x is None else x / 2**20)
        rows.append([case, label, str(len(counters)), _fmt(hits, 0), _fmt(per_hit, 3), _fmt(destages, 0),
                     " / ".join(_fmt(m(k), 0) or "-" for k in ("idle", "background", "forced")),
                     _fmt(share, 3), _fmt(mib(m("destaged"))), _fmt(mib(m("drained")))])
    return rows


def _speed(run: dict[str, Any], key: str) -> float | None:
    return _counter(run.get("speed") or {}, key)


def _run_name(run: dict[str, Any]) -> str:
    return Path(str(run.get("_file", ""))).stem or f"{run.get('arch')}/{run.get('case')}"


def speed_rows(runs: list[dict]) -> list[list[str]]:
    """One row per run that succeeded, in the order they started: SPEED_COLUMNS. Empty when
    no run kept a speed record (documents older than the probe)."""
    mine = sorted((r for r in runs if r.get("status") == "ok"), key=lambda r: str(r.get("started")))
    if not any(r.get("speed") for r in mine):
        return []
    rows = []
    for r in mine:
        steal = _speed(r, "host_steal_share")
        rows.append([_run_name(r), str(r.get("started") or ""), _fmt(_speed(r, "host_us_per_loop"), 3),
                     _fmt(_speed(r, "runner_us_per_loop"), 2), _fmt(None if steal is None else 100 * steal, 1),
                     _fmt((r.get("vm") or {}).get("boot_seconds"), 1)])
    return rows


def speed_flags(runs: list[dict]) -> list[str]:
    """A sentence per probe whose slowest run took more than speedmod.SPREAD_FLAG times the
    fastest (the runs of this directory did not all get the same machine), and one naming the
    runs that lost more than STEAL_FLAG of the host's CPU time to steal."""
    mine = [r for r in runs if r.get("status") == "ok"]
    out = []
    for key, what in (("runner_us_per_loop", "the shell loop where the workload ran (the lab VM's guest "
                                             "under TCG, or this host)"),
                      ("host_us_per_loop", "the Python loop on the host")):
        found = speedmod.spread([_speed(r, key) for r in mine])
        if found is not None and found[2] > speedmod.SPREAD_FLAG:
            slow, fast, ratio = found
            out.append(f"The machine's speed changed between these runs: {what} took {fast:.3g} to "
                       f"{slow:.3g} µs per iteration ({ratio:.2f}x, above {speedmod.SPREAD_FLAG}x). "
                       f"Metrics bound by that CPU are not comparable across these runs; drive-bound "
                       f"ones are.")
    stolen = [(_run_name(r), share) for r in mine
              if (share := _speed(r, "host_steal_share")) is not None and share > STEAL_FLAG]
    if stolen:
        out.append(f"The hypervisor under this host took more than {STEAL_FLAG:.0%} of its CPU time during "
                   f"{len(stolen)} run(s): " + ", ".join(f"{name} {share:.0%}" for name, share in stolen) + ".")
    return out
